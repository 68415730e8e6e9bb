"""A scope (the module body, a function, a method, a closure) -> its event IR (model.py).

Statements become events, branches, loops and jumps; a call of a function of this module becomes
a `Call` node whose summary the dataflow applies (nothing is inlined). Receivers are keyed with
naming.py and judged with the optimizer table the first pass (facts.py) filled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Optional, Union

import libcst as cst

from ..analysis.keys import FLAG, HANDED, INVARIANT, related, root_of
from ..analysis.model import Branch, Event, Jump, Kind, Loop, Node, Reach, Seq, Test, Try
from ..analysis.reach import CLEAN, OPAQUE, union
from ..knowledge.frameworks import ACCELERATE_BLOCK, ACCELERATE_SYNC, Framework, Valued
from ..knowledge.optimizers import BACKWARD_METHODS, is_optimizer_callee
from .calls import Context, Link
from .conditions import (
    PURE,
    classify,
    classify_flag,
    counter_from_zero,
    first_turn,
    given_of,
    literal_flags,
    names_of,
    peeled_counter,
    settings_of,
    substituted,
)
from .counters import stepped_counters
from .exceptions import catches_torch
from .freezing import context_freezer
from .moduleinfo import ModuleInfo
from .naming import (
    assigned_names,
    block_of,
    bound_names,
    collection_key,
    dotted,
    element_name,
    loss_of,
    statements_of,
    text_of,
    written,
)
from .plain import data_parameters, plain_parameters
from .provenance import CALLED, FROZEN, SUMMARIES, Call, Callee, Names, Resolver, Summaries, Tracer, constant, trace
from .receivers import Receivers
from .sites import Sites
from .walk import nodes_in
from .windows import Windows

# Conditions that hold wherever training code runs them (optimizer.step() enables grad for
# the closure it calls).
ALWAYS_TRUE = frozenset({"torch.is_grad_enabled"})
DIST_AUTOGRAD = "torch.distributed.autograd"
EVENT_NAMES = frozenset({"backward", "zero_grad", "clear_grad", "clear_gradients", "step"})
MAX_UNROLLED = 8  # entries of a literal list a loop over it is unrolled for


class Builder(Receivers, Windows):
    def __init__(self, info: ModuleInfo, sites: Sites, index: dict[int, int], link: Optional[Link] = None) -> None:
        self.info = info
        self.sites = sites
        self.index = index  # id(FunctionDef) -> position in Program.functions
        self.link = link  # qualified name -> a function of another module of the project
        self.unresolved: dict[str, bool] = {}  # method names called on unknown receivers -> scope clears
        # The scopes (id of the function, 0: the module body) that clear and call a function value
        # they cannot name.
        self.unknown_clears: set[int] = set()
        self.called: set[int] = set()  # functions with a resolved caller
        # Parameters some caller passes an optimizer to: `def step(o): o.step()` steps it.
        self.optimizer_params: set[tuple[int, str]] = set()
        self.doubted: set[tuple[int, str]] = set()  # receivers judged no optimizer, per function
        self.reaches: dict[int, Reach] = {}  # id(backward call) -> what its loss reaches (this scope's)
        self.returns: Summaries = {}  # what functions of the module return, for provenance.trace
        # Per scope (id of the function; id(None): the module body), the calls of ours its trace
        # read; per function, what every such call hands its parameters (`entry_reaches`).
        self.calls: dict[int, list[Call]] = {}
        self.entries: dict[int, dict[str, Reach]] = {}
        # rules.md section 7 (program.py fills these): id(ClassInfo) -> the framework calling its
        # hooks; id(hook) -> its parameter that is the framework's optimizer, or its closure.
        self.frameworks: dict[int, Framework] = {}
        self.hook_optimizers: dict[int, str] = {}
        self.closures: dict[int, str] = {}
        self._sets: dict[frozenset[str], frozenset[str]] = {}
        self.exported: Callable[[str], Optional[Valued]] = lambda qualified: None  # Outside.value
        # Per class (id of its ClassInfo): the freezing context manager it is, its list attributes.
        self._contexts: dict[int, Optional[tuple[cst.FunctionDef, str, bool]]] = {}
        self._listed: dict[int, dict[str, cst.List]] = {}

    def shared(self, names: frozenset[str]) -> frozenset[str]:
        """One object per distinct set of names in the IR (parameters, locals, loop targets):
        generated and real code repeat the same few, and each costs 216 bytes or more."""
        return self._sets.setdefault(names, names)

    # --- statements -------------------------------------------------------------------------

    def scope(self, body: Sequence[cst.CSTNode], ctx: Context) -> Seq:
        # Aliases and flags are read from the whole body first: a name is used before (in the
        # source) the loop that binds it comes round again.
        ctx = self.aliases(body, ctx)
        if ctx.function is not None:
            settings = settings_of(body, self._facts(ctx).parameters)
            twins = self.info.twin_parameters(ctx.function)
            assigned = assigned_names(body) if twins else frozenset()
            settings.update((param, cst.Name(twin)) for param, twin in twins.items()
                            if param not in assigned and twin not in assigned)
            ctx = replace(ctx, settings=tuple(settings.items()))
        ctx = replace(ctx, flags=literal_flags(body), counts=stepped_counters(body, self.info.counters.key))
        self.reaches = self.provenance(body, ctx)
        return self.block(body, ctx)

    def provenance(self, body: Sequence[cst.CSTNode], ctx: Context) -> dict[int, Reach]:
        """What each backward's loss reaches, where two or more optimizers hold known modules
        (the only place ZG006 can say anything)."""
        table = self.info.table
        params = frozenset(self._facts(ctx).parameters) if ctx.function is not None else frozenset()
        scope = id(ctx.function)  # what callers hand its parameters (settle._handed_parameters)
        held = {**table.links, **{key: set(modules) for (to, key), modules in table.handed.items()
                                  if to == scope and key in params}}
        modules = [found for found in held.values() if found]
        if len(modules) < 2:
            return {}
        # A parameter declared a number (`gamma=0.99`, `tau: float`) holds no graph, as an
        # object's constructor parameter does (plain.py). One the function only reads (`batch`,
        # `replay_buffer.sample(n)`) holds data, as what a training loop iterates does: tensors
        # no module made. The others (`model`) may be anything, unless every call of the
        # function in the module says what (`entry_reaches`, which wins over both).
        every = frozenset().union(*modules)
        read = params
        if ctx.function is not None:
            data = {p for p in data_parameters(ctx.function) if not related(self.key(cst.Name(p), ctx), every)}
            read = params - plain_parameters(ctx.function) - data
        calls = self.calls[scope] = []
        return trace(body, every, lambda node: self.key(node, ctx), read,
                     frozenset(self.info.functions), self._names(), self._resolver(ctx), self.returns,
                     SUMMARIES + 4 * len(self.info.every_function), ctx.function, self.entries.get(scope), calls,
                     {key: frozenset(found) for key, found in held.items() if found})

    def entry_reaches(self) -> dict[int, dict[str, Reach]]:
        """What each function's parameters hold on entry where every call of it in the module
        (ModuleInfo.call_sites) was read by a trace: the union of what the calls hand each one
        (a default left: a constant holds no graph). A parameter some call hands a module stays
        a name; one that holds nothing known (opaque, no module) is left out."""
        per_callee: dict[int, list[tuple[dict[str, Reach], frozenset[str]]]] = {}
        for records in self.calls.values():
            for callee, bound, handed in records:
                per_callee.setdefault(callee, []).append((bound, handed))
        entries = {}
        for callee, calls in per_callee.items():
            function = self.info.function_of(callee)
            if function is None or self.info.call_sites(function) != len(calls):
                continue
            found = {}
            for param in _parameters(function, self.info.facts[callee].cls is not None):
                if any(param.name.value in handed for _, handed in calls):
                    continue
                default = CLEAN if param.default is not None and constant(param.default) else OPAQUE
                value = union(*(bound.get(param.name.value, default) for bound, _ in calls))
                if value.modules or value.cut or not value.opaque:
                    found[param.name.value] = value
            # The object's attributes every call finds set (`self.fake = self.G(z)` before
            # `self.backward_G()`), unless the method assigns them itself before reading.
            for field in set.intersection(*({k for k in bound if "." in k} for bound, _ in calls)):
                value = union(*(bound[field] for bound, _ in calls))
                if value.modules or value.cut:
                    found[field] = value
            # The modules frozen at every call (`set_requires_grad(self.netD, False)` before
            # `self.backward_G()`).
            frozen = frozenset.intersection(*(bound[FROZEN].modules if FROZEN in bound else frozenset()
                                              for bound, _ in calls))
            # The parameters every call hands a torch.nn loss or layer (`criterion`): calling
            # them runs nothing else.
            found.update((key, CLEAN) for key in set.intersection(*({k for k in bound if k.endswith(CALLED)}
                                                                      for bound, _ in calls)))
            if frozen:
                found[FROZEN] = Reach(frozen, frozenset(), False)
            if found:
                entries[callee] = found
        return entries

    def tracer(self, function: cst.FunctionDef, modules: frozenset[str], params: frozenset[str],
               literals: dict[str, object], ours: frozenset[str]) -> Tracer:
        """A Tracer of `function` (a module's, or a method) over `modules` (valued.summarise);
        calling a name in `ours` may run any module."""
        ctx = Context(function=function, cls=self.info.facts[id(function)].cls)
        return Tracer(modules, lambda node: self.key(node, ctx), params, ours, self._names(),
                      self._resolver(ctx), 0, self.returns, SUMMARIES + 4 * len(self.info.every_function), function,
                      literals)

    def _names(self) -> Names:
        table = self.info.table
        return Names(self.info.qualify, self.info.aliases.__contains__, table.is_scaler, table.tensors, self._instances,
                     self._callables, self._plain, self.exported, self._context, self._lists)

    def _context(self, name: str) -> Optional[tuple[cst.FunctionDef, str, bool]]:
        """A class of this module used as a context manager that freezes what it is handed."""
        cls = self.info.classes.get(name)
        if cls is None:
            return None
        if id(cls) not in self._contexts:
            init, enter = self.info.method(cls, "__init__"), self.info.method(cls, "__enter__")
            found = context_freezer(init, enter)
            self._contexts[id(cls)] = (init, *found) if init is not None and found is not None else None
        return self._contexts[id(cls)]

    def _instances(self, function: Optional[cst.FunctionDef]) -> dict[str, str]:
        """`self.X` -> the class it was built from, in the class of method `function` and its bases;
        and the function's own locals built from a class (`criterion = GANLoss()`); the module
        body's, for its statements."""
        facts = self.info.facts.get(id(function)) if function is not None else self.info.module
        if facts is None:
            return {}
        own = dict(facts.instances)
        if facts.cls is None:
            return own
        return {**{key: cls for info in reversed(self.info.lineage(facts.cls)) for key, cls in info.attributes.items()},
                **own}

    def _callables(self, function: Optional[cst.FunctionDef]) -> dict[str, str]:
        """`self.X` -> the function it is, in the class of method `function` and its bases."""
        facts = self.info.facts.get(id(function)) if function is not None else None
        if facts is None or facts.cls is None:
            return {}
        return {key: name for info in reversed(self.info.lineage(facts.cls)) for key, name in info.callables.items()
                if name is not None}

    def _lists(self, function: Optional[cst.FunctionDef]) -> dict[str, cst.List]:
        """The attributes of method `function`'s object that its class (and bases) assign one list
        of names (`self.model_modules = [self.encoder, self.decoder]`) and nothing else."""
        facts = self.info.facts.get(id(function)) if function is not None else None
        if facts is None or facts.cls is None:
            return {}
        if id(facts.cls) not in self._listed:
            found: dict[str, cst.List] = {}
            spoilt: set[str] = set()
            for method in (m for info in self.info.lineage(facts.cls) for m in info.methods.values()):
                for small in statements_of(block_of(method.body)):
                    if not isinstance(small, cst.Assign):
                        continue
                    value = small.value if len(small.targets) == 1 else None
                    for key in (dotted(t.target) or "" for t in small.targets):
                        if isinstance(value, cst.List) and key not in found and all(dotted(e.value) for e in value.elements):
                            found[key] = value
                        elif key.startswith("self."):
                            spoilt.add(key)
            self._listed[id(facts.cls)] = {k: v for k, v in found.items() if k.startswith("self.") and k not in spoilt}
        return self._listed[id(facts.cls)]

    def _plain(self, function: Optional[cst.FunctionDef]) -> frozenset[str]:
        """The attributes of method `function`'s object that hold no graph (plain.py)."""
        facts = self.info.facts.get(id(function)) if function is not None else None
        if facts is None or facts.cls is None:
            return frozenset()
        lineage = self.info.lineage(facts.cls)
        keys = {key for info in lineage for key in info.plain}
        outside = self.info.set_from_outside
        return frozenset(k for k in keys if all(info.plain.get(k, True) for info in lineage)
                         and k.rpartition(".")[2] not in outside)

    def _resolver(self, ctx: Context) -> Resolver:
        """Functions of this module a call in `ctx` names, each with the resolver of its own body."""
        def resolve(func: cst.BaseExpression) -> Optional[Callee]:
            found = self.resolve(func, ctx) or self._forward(func, ctx) if isinstance(func, (cst.Name, cst.Attribute)) \
                else None
            if found is None:
                return None
            function, receiver = found
            inner = Context(function=function, cls=self.info.facts[id(function)].cls)
            return function, receiver, self._resolver(inner)
        return resolve

    def _forward(self, func: cst.BaseExpression, ctx: Context) -> Optional[tuple[cst.FunctionDef, Optional[str]]]:
        """Calling an instance of a module class of ours runs its `forward` (provenance only: a
        forward that performs events is not followed as a call)."""
        receiver = self.key(func, ctx)
        cls = self._instance_class(receiver, ctx)
        method = self.info.method(cls, "forward") if cls is not None else None
        return (method, receiver) if method is not None else None

    def block(self, body: Sequence[cst.CSTNode], ctx: Context) -> Seq:
        items: list[Node] = []
        for statement in body:
            items.extend(self.statement(statement, ctx))
        if any(isinstance(i, Event) and i.kind is Kind.CLEAR for i in items) and self._resets(body, ctx):
            # A clear beside `micro = 0` (a NaN or out-of-memory recovery): the window restarts
            # on purpose, nothing accumulated is lost by mistake (rules.md v3, intended discards).
            items = [replace(i, restarts=True) if isinstance(i, Event) and i.kind is Kind.CLEAR else i for i in items]
        return Seq(tuple(items))

    def statement(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        if type(node) is cst.SimpleStatementLine:
            return [item for small in node.body for item in self.small(small, ctx)]
        if isinstance(node, cst.BaseSmallStatement):  # in a one-line suite: `if x: a; b`
            return self.small(node, ctx)
        if isinstance(node, cst.If):
            return self._if(node, ctx)
        if isinstance(node, (cst.For, cst.While)):
            return self._loop(node, ctx)
        if isinstance(node, (cst.Try, cst.TryStar)):
            handlers = tuple(self.block(block_of(h.body), ctx) for h in node.handlers)
            orelse = self.block(block_of(node.orelse.body), ctx) if node.orelse else Seq()
            final = self.block(block_of(node.finalbody.body), ctx) if node.finalbody else Seq()
            catches = tuple(catches_torch(h.type, self.info) for h in node.handlers)
            return [Try(self.block(block_of(node.body), ctx), handlers, orelse, final, () if all(catches) else catches)]
        if isinstance(node, cst.With):
            return self._with(node, ctx)
        if isinstance(node, cst.Match):
            arms = [self.block(block_of(case.body), ctx) for case in node.cases]
            if not any(_is_wildcard(case) for case in node.cases):
                arms.append(Seq())
            return [Branch(tuple(arms))]
        return []  # definitions run nothing here; they are scopes of their own

    def small(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        if type(node) is cst.Break:
            return [Jump("break")]
        if type(node) is cst.Continue:
            return [Jump("continue")]
        items = self.expression_events(node, ctx)
        items.extend(self._builds(node, ctx))
        items.extend(self._counts(node, ctx))
        items.extend(self._grad_write(node, ctx))
        if type(node) is cst.Return:
            items.append(Jump("return"))
        elif type(node) is cst.Raise:
            items.append(Jump("raise"))
        return items

    def _builds(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        """`opt = SGD([x_in])` inside a loop: a fresh optimizer (of fresh tensors, usually) each
        iteration, so nothing an earlier step applied lingers for it. So is a module built here
        whose gradients a module of ours hands over (`local = Net()`: its .grad starts empty)."""
        if not isinstance(node, cst.Assign) or len(node.targets) != 1 or not isinstance(node.value, cst.Call):
            return []
        target = node.targets[0].target
        if self.info.hands and isinstance(target, cst.Name) and self._fresh(ctx, target.value):
            return [self.event(Kind.BUILD, node, replace(ctx, gate=None), target.value + HANDED, target.value)]
        qualified = self.info.qualify(node.value.func) or ""
        if not (is_optimizer_callee(qualified) and qualified.rsplit(".", 1)[-1][:1].isupper()):
            return []  # a constructor, not a getter such as Lightning's self.optimizers()
        target = node.targets[0].target
        if not isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)) or not _fresh(node.value, ctx.moves):
            return []
        return [self.event(Kind.BUILD, node, replace(ctx, gate=None), self.key(target, ctx), text_of(target))]

    def _unrolled(self, node: Union[cst.For, cst.While], ctx: Context) -> Optional[list[Node]]:
        """`for opt in [opt_g, opt_d]: opt.zero_grad()`: a loop over a literal list of names runs
        its body once for each, in order, with the loop variable standing for that name (issue 47:
        one name bound in turn to several optimizers is each of them). Not with a jump in the
        body, which would leave the loop, nor an `else`."""
        if not isinstance(node, cst.For) or not isinstance(node.target, cst.Name) or node.orelse is not None:
            return None
        elements = node.iter.elements if isinstance(node.iter, (cst.List, cst.Tuple)) else ()
        if not 0 < len(elements) <= MAX_UNROLLED or not all(
                isinstance(e, cst.Element) and isinstance(e.value, (cst.Name, cst.Attribute)) for e in elements):
            return None
        body = block_of(node.body)
        if any(isinstance(s, (cst.Break, cst.Continue, cst.Return)) for s in statements_of(body)):
            return None
        items: list[Node] = []
        for element in elements:
            bound = replace(ctx, aliases=((node.target.value, self.key(element.value, ctx)),) + ctx.aliases)
            items.extend(self.block(body, bound).items)
        return items

    def _if(self, node: cst.If, ctx: Context, chain: Optional[str] = None) -> list[Node]:
        body = self.block(block_of(node.body), ctx)
        if isinstance(node.orelse, cst.If):
            orelse = Seq(tuple(self._if(node.orelse, ctx, _dispatched(node.test, self._facts(ctx).parameters))))
        elif node.orelse is not None:
            orelse = self.block(block_of(node.orelse.body), ctx)
        else:
            orelse = Seq()
        if self.info.qualify(_call_target(node.test)) in ALWAYS_TRUE:
            return list(body.items)  # e.g. an LBFGS closure's `if torch.is_grad_enabled():`
        if ctx.first is not None and first_turn(node.test) == ctx.first[0]:
            return list((body if ctx.first[1] else orelse).items)  # a peeled loop's `if i == 0:`
        choice = self._choice(node.test, body, orelse, ctx)
        window = self._window_counter(node, body, ctx)
        if window is not None and isinstance(choice, Branch) and choice.test is not None and not choice.test.accumulation:
            # A step that waits for a counter the branch then resets (`left -= 1 ... if left == 0:
            # step; left = accum`, a count of samples against a target) is a window's end.
            choice = Branch(choice.arms, replace(choice.test, accumulation=True, counter=window))
        if node.orelse is None and chain is not None and chain == _dispatched(node.test, self._facts(ctx).parameters):
            assert isinstance(choice, Branch) and choice.test is not None
            choice = Branch(choice.arms, replace(choice.test, dispatch=True))
        return [*self.expression_events(node.test, ctx), choice]

    def _choice(self, test: cst.BaseExpression, body: Seq, orelse: Seq, ctx: Context) -> Node:
        """`if a and b:` is `if a: (if b: body else orelse) else orelse`, `or` likewise, so each
        part correlates on its own (rules.md v2 section 4). An accumulation test stays whole: its
        parts together say when the window ends (`i % k == 0 or i == last`)."""
        if isinstance(test, cst.BooleanOperation) and not classify(test).accumulation:
            if isinstance(test.operator, cst.And):
                inner = self._choice(test.right, body, orelse, ctx)
                return self._choice(test.left, Seq((inner,)), orelse, ctx)
            inner = self._choice(test.right, body, orelse, ctx)
            return self._choice(test.left, body, Seq((inner,)), ctx)
        return Branch((body, orelse), self._test(test, ctx))

    def _test(self, test: cst.BaseExpression, ctx: Context) -> Test:
        """A flag assigned once from a test (`do_step = i % k == 0; if do_step:`) is that test, and
        so is a call of a function of ours that returns one (`if should_step(i, accum):`)."""
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        name = test.expression if negated else test  # type: ignore[attr-defined]
        returned = self._returned_test(name, ctx) if isinstance(name, cst.Call) else None
        if returned is not None:
            wrapped = returned.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            test = cst.UnaryOperation(cst.Not(), wrapped) if negated else returned
            name = test
        if isinstance(name, cst.Name):
            held = dict(ctx.conditions).get(name.value)
            if name.value in ctx.flags and (held is None or not classify_flag(held).accumulation):
                # Its value on the path, which its assignments set; but a flag that stands for
                # an accumulation test (`do_step = True` under `if i % k == 0:`) is that test.
                return Test(False, FLAG + name.value, 1, not negated, tracked=True)
            if held is not None:
                found = classify_flag(held)
                return replace(found, positive=found.positive != negated)
        test = substituted(test, dict(ctx.settings)) if ctx.settings else test
        found = classify(test, self.info.counters.key)
        names = names_of(test)
        # A knob (`if self.clear_every_step:`) tested in a loop that never assigns it takes the
        # same arm in every iteration: its arms are configurations, not paths of iterations.
        roots = {root_of(n) for n in names} if names else set()
        knob = names is not None and not found.accumulation and (
            (ctx.moves is not None and (not (names & ctx.moves) or _records_grad(test)))
            # The object's own configuration (`isinstance(self.optimizer, LBFGS)`) is the same
            # in every call of its method.
            or (ctx.function is not None and ctx.moves is None and "self" in roots
                and roots <= {"self", "cls", *PURE, *self.info.aliases}))
        params = self._facts(ctx).parameters if ctx.function is not None else set()
        external = bool(roots) and roots <= params
        if knob and found.key is not None:
            # The same arm in every iteration: its outcome is remembered around the loop.
            found = replace(found, key=INVARIANT + found.key)
        given = given_of(test, params) if external and found.key is not None else None
        return replace(found, invariant=knob, external=external, given=given) if knob or external else found

    def _loop(self, node: Union[cst.For, cst.While], ctx: Context) -> list[Node]:
        body_nodes = block_of(node.body)
        unrolled = self._unrolled(node, ctx)
        if unrolled is not None:
            return unrolled
        if isinstance(node, cst.For):
            handed = self._handed(node, ctx)
            if handed is not None:
                return handed
            owner = self._owner_of(node.iter, ctx)
            inner = replace(ctx, moves=assigned_names(body_nodes) | frozenset(bound_names(node.target)))
            if owner is not None:
                name = element_name(node.target, node.iter)
                if name is not None:
                    inner = replace(inner, owners=((name, owner),) + ctx.owners)
            cleared = self._clear_idiom(node, owner, inner)
            if cleared is not None:
                return cleared
            name, collection = element_name(node.target, node.iter), collection_key(node.iter)
            if name is not None and collection is not None:
                # The loop variable is an entry of the collection, whatever it names elsewhere.
                inner = replace(inner, aliases=((name, self.key_text(collection, ctx)),) + inner.aliases)
            targets = self.shared(frozenset(bound_names(node.target)))
            infinite = False
        else:
            targets = frozenset()
            infinite = isinstance(node.test, (cst.Name, cst.Integer)) and text_of(node.test) in ("True", "1")
            inner = replace(ctx, moves=assigned_names(body_nodes))
        orelse = self.block(block_of(node.orelse.body), ctx) if node.orelse else Seq()
        counter = peeled_counter(node) if isinstance(node, cst.For) else None
        body = self.block(body_nodes, replace(inner, first=(counter, False)) if counter else inner)
        moves = self.shared((inner.moves or frozenset()) | targets)
        head = [] if isinstance(node, cst.For) else self.expression_events(node.test, ctx)
        # Peeled, the loop is entered at its second turn.
        start = counter_from_zero(node) if isinstance(node, cst.For) and counter is None else None
        loop = Loop(body, self.sites.site(node), infinite, targets, orelse, isinstance(node, cst.For), moves,
                    starts=frozenset((start,)) if start else frozenset())
        if counter is not None:
            # `if i == 0:` runs in the first turn only (a clear on the first micro-batch): the
            # first turn is built apart, before the loop over the others; the loop may be empty.
            first = self.block(body_nodes, replace(inner, first=(counter, True)))
            return [Branch((Seq((*first.items, loop)), orelse))]
        return [*head, loop]

    def _with(self, node: cst.With, ctx: Context) -> list[Node]:
        items: list[Node] = []
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == ACCELERATE_BLOCK:
                key = f"{text_of(call.func.value)}.{ACCELERATE_SYNC}"
                ctx = replace(ctx, gate=Test(accumulation=True, key=key))
            else:
                items.extend(self.expression_events(call, ctx))
        return [*items, *self.block(block_of(node.body), ctx).items]

    def event(self, kind: Kind, node: cst.CSTNode, ctx: Context, target: Optional[str] = None, label: str = "",
              zeroes: bool = False, sets: Optional[frozenset[str]] = None, keeps: frozenset[str] = frozenset(),
              spares: frozenset[str] = frozenset()) -> Node:
        event = Event(kind, self.sites.site(node), target, label or target or "", zeroes, sets=sets, keeps=keeps,
                      spares=spares)
        if ctx.gate is not None and kind in (Kind.STEP, Kind.CLEAR):
            return Branch((Seq((event,)), Seq()), ctx.gate)
        return event

    def _backward(self, call: cst.Call, loss: cst.BaseExpression) -> Event:
        """A BACKWARD, with what its loss reaches where ZG006 can use it (provenance.py); its
        label names the call as written (`g_loss.backward()`, `self.manual_backward(g_loss)`)."""
        func = call.func
        label = f"{written(func)}()" if isinstance(func, cst.Attribute) and func.value is loss else \
            f"{written(func)}({written(loss)})"
        return Event(Kind.BACKWARD, self.sites.site(call), label=label, reach=self.reaches.get(id(call)))

    def is_optimizer(self, receiver: str, ctx: Context) -> bool:
        if receiver == "self" and self.optimizer_class(ctx.cls):
            return True  # in a custom optimizer's methods (`self.param_groups`)
        if ctx.function is not None and (id(ctx.function), receiver) in self.optimizer_params:
            return not self.info.table.is_excluded(receiver, True)  # evidence from the callers
        found = self.info.table.is_optimizer(receiver, receiver in ctx.evidence)
        if not found and ctx.function is not None:
            self.doubted.add((id(ctx.function), receiver))  # a caller may show it is one
        return found

    # --- calls ------------------------------------------------------------------------------

    def expression_events(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        items: list[Node] = []
        for call in self.info.calls_of(node):
            items.extend(self.call_events(call, ctx))
        return items

    def call_events(self, call: cst.Call, ctx: Context) -> list[Node]:
        func = call.func
        inherited = self._framework_default(call, ctx)
        if inherited is not None:
            return inherited
        external = self._external_call(call, ctx) if self.link is not None else None
        if external is not None:
            return external
        if isinstance(func, cst.Attribute):
            found = self._own_method(call, func, ctx)
            found = found if found is not None else self._method_call(call, func, ctx)
            if found is None and self.link is not None:
                found = self._external_method(call, ctx)
            if found is not None:
                return found
        elif isinstance(func, cst.Name) and self.info.qualify(func) == "torch.autograd.backward":
            return [self._backward(call, call.args[0].value if call.args else call)]
        return self._resolved_call(call, ctx)

    def _own_method(self, call: cst.Call, func: cst.Attribute, ctx: Context) -> Optional[list[Node]]:
        """`self.backward(loss)`, `agent.zero_grad()` where the class defines the method itself
        (ParlAI's agents, a trainer's wrappers): that method, whatever its name says, unless
        the receiver is an optimizer (a class of ours that steps parameters)."""
        if func.attr.value not in EVENT_NAMES or self.info.table.is_optimizer(self.key(func.value, ctx), False):
            return None
        if self.resolve(func, ctx) is not None:
            return self._resolved_call(call, ctx)
        return self._external_method(call, ctx) if self.link is not None and text_of(func.value) == "self" else None

    def _method_call(self, call: cst.Call, func: cst.Attribute, ctx: Context) -> Optional[list[Node]]:
        name = func.attr.value
        if name in BACKWARD_METHODS:
            if (self.info.qualify(func.value) or "").startswith(DIST_AUTOGRAD):
                return []  # gradients go to the distributed autograd context, not to .grad
            foreign = self.info.table.foreign
            if foreign and isinstance(func.value, (cst.Name, cst.Attribute)) and self.key(func.value, ctx) in foreign:
                return []  # a Warp or TensorFlow tape
            return [self._backward(call, loss_of(call, func))]
        if name in ("zero_grad", "clear_grad", "clear_gradients"):  # Paddle says clear_grad
            zeroes = any(a.keyword is not None and a.keyword.value == "set_to_none" and text_of(a.value) == "False"
                         for a in call.args)
            receiver = self.key(func.value, ctx)
            delegate = self._delegate(call, receiver, ctx)
            if delegate is not None:
                return [self.event(Kind.CLEAR, call, ctx, self.key(delegate, ctx), zeroes=zeroes)]
            return self._clear(call, receiver, ctx, zeroes)
        if name == "step":
            return self._step(call, func.value, ctx)
        if name == "optimizer_step" and call.args:
            optimizer = call.args[0].value
            step = self.event(Kind.STEP, call, ctx, self.key(optimizer, ctx), text_of(optimizer))
            if (self.info.qualify(func.value) or "").startswith("torch_xla"):
                return [step]
            # Another wrapper's optimizer_step (OpenRLHF's DeepSpeed strategy) may clear as an
            # engine does: a step, then a possible clear.
            return [step, self.event(Kind.MAYBE_CLEAR, call, replace(ctx, gate=None))]
        if name in ("zero_", "fill_", "copy_") and text_of(func.value).endswith((".grad", ".grad.data")):
            return []  # judged as a statement: _grad_write
        return None


def _fresh(constructor: cst.Call, moves: Optional[frozenset[str]]) -> bool:
    """Whether a rebuilt optimizer's parameters are new in this iteration (`SGD([x_in])`), not
    the same module's that the loop never reassigns (`SGD(model.parameters())`): those keep
    whatever gradients the previous iteration left, whichever optimizer object steps them."""
    params = next((a.value for a in constructor.args if a.keyword is None or a.keyword.value == "params"), None)
    if moves is None or params is None:
        return True
    read = {text_of(n) for n in nodes_in(params) if isinstance(n, (cst.Name, cst.Attribute))}
    return bool(read & moves) or any(root_of(text) in moves for text in read)


def _call_target(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.func if isinstance(node, cst.Call) and not node.args else node


def _is_wildcard(case: cst.MatchCase) -> bool:
    pattern = case.pattern
    return case.guard is None and isinstance(pattern, cst.MatchAs) and pattern.pattern is None


def _records_grad(test: cst.BaseExpression) -> bool:
    """`if loss.requires_grad:` asks whether autograd records, which the grad mode and the
    model's trainable parameters decide outside the loop: the same answer in every turn."""
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    return isinstance(test, cst.Attribute) and test.attr.value == "requires_grad"


def _dispatched(test: cst.BaseExpression, parameters: set[str]) -> Optional[str]:
    """The parameter an `x == <literal>` test compares (a dispatch on its values), if any."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return None
    left, right = test.left, test.comparisons[0].comparator
    literal = (cst.SimpleString, cst.Integer, cst.Float)
    if isinstance(left, cst.Name) and left.value in parameters and isinstance(right, literal):
        return left.value
    return None


def _parameters(function: cst.FunctionDef, method: bool) -> list[cst.Param]:
    """The parameters a call can bind by name or place (a method's `self` left out)."""
    params = function.params
    positional = [*params.posonly_params, *params.params]
    return [*positional[int(method):], *params.kwonly_params]
