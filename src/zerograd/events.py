"""LibCST -> event IR: the only module that walks the CST.

One pass collects what the whole module knows (imports, function and class definitions,
optimizer assignments and their module links); a second pass turns each function body into the
IR of `model.py`, inlining calls to same-module functions, and picks the units the dataflow runs
on: the innermost loops holding a backward and a step, and step functions nobody here calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional, Sequence, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .flow import summarize
from .model import Branch, Event, Inline, Jump, Kind, Loop, Node, Seq, Settings, Span, Test, Try, Unit, children
from .walk import calls_in, nodes_in
from .optimizers import OptimizerTable, is_engine_callee, is_optimizer_callee, is_scaler_callee

MAX_INLINE_DEPTH = 8
MAX_INLINES = 3000  # per module: inlining is what could make the IR blow up, so it is budgeted
# Conditions that hold wherever training code runs them (optimizer.step() enables grad for
# the closure it calls).
ALWAYS_TRUE = frozenset({"torch.is_grad_enabled"})
DIST_AUTOGRAD = "torch.distributed.autograd"
# Frameworks whose backward() overwrites gradients instead of adding to them: nothing to clear.
OTHER_FRAMEWORKS = frozenset({"mxnet"})
# Name segments that speak of gradient accumulation when a counter is compared with them.
_ACCUMULATION_SEGMENT = re.compile(r"accum\w*|micro|microsteps?|microbatch(?:es)?", re.I)
_EMPTY_MODULE = cst.Module(body=[])
_ROOT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")



def text_of(node: cst.CSTNode) -> str:
    """Source text of an expression without any whitespace (a stable key)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute) and not node.lpar:
        return f"{text_of(node.value)}.{node.attr.value}"
    return "".join(_EMPTY_MODULE.code_for_node(node).split())


def receiver_key(node: cst.BaseExpression) -> str:
    """A receiver as the analysis names it: `self._opt` is `self.opt` (a private attribute and its
    property), and an entry picked by a computed index is any entry: `opts[name]` -> `opts[*]`."""
    if isinstance(node, cst.Attribute) and not node.lpar:
        base = receiver_key(node.value)
        attr = node.attr.value
        if base == "self":
            attr = attr.lstrip("_") or attr
        return f"{base}.{attr}"
    if isinstance(node, cst.Subscript) and not node.lpar and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index):
            literal = isinstance(index.value, (cst.Integer, cst.SimpleString))
            return f"{receiver_key(node.value)}[{text_of(index.value) if literal else '*'}]"
    return text_of(node)


def collection_key(node: cst.BaseExpression) -> Optional[str]:
    """What iterating `node` yields: `opts`, `opts.values()`, `enumerate(opts)` -> `opts[*]`."""
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("values", "items") and not node.args:
            return collection_key(func.value)
        if isinstance(func, cst.Name) and func.value in ("enumerate", "list", "tuple", "reversed") and node.args:
            return collection_key(node.args[0].value)
        return None
    if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)):
        return f"{receiver_key(node)}[*]"
    return None


def _element_name(target: cst.BaseExpression, iterator: cst.BaseExpression) -> Optional[str]:
    """The loop variable bound to the element: `opt` in `for opt in x`, `for i, opt in enumerate(x)`,
    `for name, opt in x.items()`."""
    if isinstance(target, cst.Name):
        return target.value
    wrapped = isinstance(iterator, cst.Call) and (
        (isinstance(iterator.func, cst.Name) and iterator.func.value == "enumerate")
        or (isinstance(iterator.func, cst.Attribute) and iterator.func.attr.value == "items")
    )
    if wrapped and isinstance(target, cst.Tuple) and len(target.elements) == 2:
        last = target.elements[1].value
        return last.value if isinstance(last, cst.Name) else None
    return None


def dotted(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def bound_names(target: cst.BaseExpression) -> Iterable[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from bound_names(element.value)


def block_of(suite: cst.BaseSuite) -> Sequence[Union[cst.BaseStatement, cst.BaseSmallStatement]]:
    return suite.body


@dataclass
class ClassInfo:
    methods: dict[str, cst.FunctionDef]
    bases: list[str]


# Calls that are events, or clear gradients by hand: a function without any (directly or through
# the functions it calls) is neither built into IR nor inlined.
EVENT_METHODS = frozenset({"backward", "manual_backward", "step", "zero_grad", "optimizer_step", "zero_"})


@dataclass
class FunctionFacts:
    events: bool = False
    callees: set[str] = field(default_factory=set)
    stepped: set[str] = field(default_factory=set)
    cleared: set[str] = field(default_factory=set)
    parameters: set[str] = field(default_factory=set)


@dataclass
class ModuleInfo:
    aliases: dict[str, str] = field(default_factory=dict)
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    called_names: set[str] = field(default_factory=set)  # f(...)
    called_attributes: set[str] = field(default_factory=set)  # x.f(...)
    table: OptimizerTable = field(default_factory=OptimizerTable)
    facts: dict[int, "FunctionFacts"] = field(default_factory=dict)  # id(FunctionDef) -> facts
    every_function: list[cst.FunctionDef] = field(default_factory=list)
    class_of: dict[int, ClassInfo] = field(default_factory=dict)  # id(ClassDef) -> its info
    relevant: set[int] = field(default_factory=set)  # functions that can perform an event
    _calls: dict[int, list[cst.Call]] = field(default_factory=dict)

    def calls_of(self, node: cst.CSTNode) -> list[cst.Call]:
        """calls_in, computed once per node: inlining walks the same statements many times."""
        found = self._calls.get(id(node))
        if found is None:
            found = self._calls[id(node)] = calls_in(node)
        return found

    def qualify(self, node: cst.BaseExpression) -> Optional[str]:
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        head = self.aliases.get(head, head)
        return f"{head}.{rest}" if rest else head


class _Collector:
    """Pass 1: imports, definitions, optimizer assignments and links, names that are called."""

    def __init__(self, info: ModuleInfo) -> None:
        self.info = info
        self.facts = FunctionFacts()  # of the function being read (the module's own at first)

    def statements(self, body: Sequence[cst.CSTNode], cls: Optional[ClassInfo] = None, top: bool = True) -> None:
        for statement in body:
            self.statement(statement, cls, top)

    def statement(self, node: cst.CSTNode, cls: Optional[ClassInfo], top: bool) -> None:
        if isinstance(node, cst.BaseSmallStatement):  # in a one-line suite: `try: a; b`
            self.small(node)
        elif isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self.small(small)
        elif isinstance(node, cst.FunctionDef):
            if cls is not None:
                cls.methods[node.name.value] = node
            elif top:
                self.info.functions.setdefault(node.name.value, node)
            self.info.every_function.append(node)
            facts = self.info.facts.setdefault(id(node), FunctionFacts())
            facts.parameters = {p.name.value for p in node.params.params}
            outer, self.facts = self.facts, facts
            self.statements(block_of(node.body), top=False)
            self.facts = outer
        elif isinstance(node, cst.ClassDef):
            bases = [b for b in (dotted(arg.value) for arg in node.bases) if b]
            info = ClassInfo({}, bases)
            self.info.classes[node.name.value] = info
            self.info.class_of[id(node)] = info
            self.statements(block_of(node.body), info, top=False)
        else:
            for suite in _suites(node):
                self.statements(block_of(suite), top=top)

    def small(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name) or ""
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else full.split(".")[0]
                self.info.aliases[local] = full if alias.asname else local
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            base = dotted(node.module) if node.module else ""
            for alias in node.names:
                name = dotted(alias.name) or ""
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
                self.info.aliases[local] = f"{base}.{name}" if base else name
        elif isinstance(node, (cst.Assign, cst.AnnAssign)) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            self.assignment(targets, node.value)
            if any(isinstance(t, cst.Attribute) and t.attr.value == "grad" for t in targets):
                self.facts.events = True  # `p.grad = None`
        for call in self.info.calls_of(node):
            self.call(call)

    def call(self, call: cst.Call) -> None:
        facts = self.facts
        func = call.func
        if isinstance(func, cst.Attribute):
            name = func.attr.value
            facts.events |= name in EVENT_METHODS
            if name == "step":
                facts.stepped.add(receiver_key(func.value))
            elif name == "zero_grad":
                facts.cleared.add(receiver_key(func.value))
        elif isinstance(func, cst.Name):
            # Calling a parameter (`f()` in fastai's _with_events) may run anything handed over.
            facts.events |= func.value == "backward" or func.value in facts.parameters
        # A function handed over as an argument (`step_fn=self.train_step`) has a caller too.
        for used in (func, *(arg.value for arg in call.args)):
            if isinstance(used, cst.Name):
                self.info.called_names.add(used.value)
                facts.callees.add(used.value)
            elif isinstance(used, cst.Attribute):
                self.info.called_attributes.add(used.attr.value)
                facts.callees.add(used.attr.value)

    def assignment(self, targets: list[cst.BaseExpression], value: cst.BaseExpression) -> None:
        if not isinstance(value, cst.Call):
            return
        qualified = self.info.qualify(value.func) or ""
        table = self.info.table
        for target in targets:
            if isinstance(target, (cst.Tuple, cst.List)):
                if qualified.startswith("deepspeed.") and target.elements:
                    table.engines.add(receiver_key(target.elements[0].value))
                elif is_optimizer_callee(qualified):  # opt_g, opt_d = self.optimizers()
                    table.built.update(receiver_key(e.value) for e in target.elements)
                continue
            key = receiver_key(target)
            if is_optimizer_callee(qualified):
                table.built.add(key)
                module = _parameters_owner(value)
                if module is not None:
                    table.links.setdefault(key, set()).add(module)
            elif is_scaler_callee(qualified):
                table.scalers.add(key)
            elif is_engine_callee(qualified):
                table.engines.add(key)


def _parameters_owner(call: cst.Call) -> Optional[str]:
    """`Adam(model.parameters(), ...)` -> "model" (the first `.parameters()` in the arguments)."""
    for inner in calls_in(call):
        func = inner.func
        if inner is not call and isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters"):
            return receiver_key(func.value)
    return None


def _suites(node: cst.CSTNode) -> list[cst.BaseSuite]:
    """The blocks directly nested in a compound statement, in source order."""
    suites: list[cst.BaseSuite] = []
    if isinstance(node, (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar)):
        suites.append(node.body)
    if isinstance(node, cst.If) and node.orelse is not None:
        if isinstance(node.orelse, cst.If):
            suites.extend(_suites(node.orelse))
        else:
            suites.append(node.orelse.body)
    elif isinstance(node, (cst.For, cst.While)) and node.orelse is not None:
        suites.append(node.orelse.body)
    elif isinstance(node, (cst.Try, cst.TryStar)):
        suites.extend(h.body for h in node.handlers)
        if node.orelse is not None:
            suites.append(node.orelse.body)
        if node.finalbody is not None:
            suites.append(node.finalbody.body)
    elif isinstance(node, cst.Match):
        suites.extend(case.body for case in node.cases)
    return suites


@dataclass(frozen=True)
class Context:
    """Where the IR builder stands: enclosing class, inlining state, accelerate gating."""

    cls: Optional[ClassInfo] = None
    local: tuple[tuple[str, cst.FunctionDef], ...] = ()  # nested defs visible by name
    subst: tuple[tuple[str, str], ...] = ()  # callee parameter -> caller argument key
    aliases: tuple[tuple[str, str], ...] = ()  # local name -> the receiver it stands for
    conditions: tuple[tuple[str, cst.BaseExpression], ...] = ()  # flag -> the test it holds
    anchor: Optional[int] = None  # site of the outermost inlined call
    stack: tuple[tuple[int, ...], ...] = ()  # functions being inlined, with what they were passed
    gate: Optional[Test] = None  # inside `with accelerator.accumulate(...)`
    own: bool = True  # False inside inlined code: its loops belong to another function
    stepped_and_cleared: frozenset[str] = frozenset()


@dataclass
class Analysis:
    """What the module holds for the dataflow: units with their optimizers, and site positions.

    The module may come in chunks of top-level statements parsed one by one, each with the
    number of lines before it and, when known, the first line of each of its top-level
    statements: a site is then located within its own top-level statement only, which keeps
    LibCST's recursive position pass away from deeply nested code elsewhere in the file.
    """

    chunks: list["Chunk"]
    units: list[tuple[Unit, list[str]]]
    sites: list[tuple[cst.CSTNode, int, int]]  # node, chunk index, top-level statement index
    _positions: dict[tuple[int, int], tuple[dict[cst.CSTNode, object], int]] = field(default_factory=dict)

    def locate(self, site: int) -> Span:
        node, chunk_index, top = self.sites[site]
        chunk = self.chunks[chunk_index]
        key = (chunk_index, top if chunk.starts else -1)
        if key not in self._positions:
            self._positions[key] = _positions_of(chunk, top)
        positions, shift = self._positions[key]
        where = positions[node]
        return Span(where.start.line + shift, where.start.column, where.end.line + shift, where.end.column)  # type: ignore[attr-defined]

    def node(self, site: int) -> cst.CSTNode:
        return self.sites[site][0]


@dataclass(frozen=True)
class Chunk:
    module: cst.Module
    offset: int = 0  # lines of the file before it
    starts: tuple[int, ...] = ()  # first line (in the file) of each top-level statement


def _positions_of(chunk: Chunk, top: int) -> tuple[dict[cst.CSTNode, object], int]:
    if not chunk.starts or len(chunk.starts) != len(chunk.module.body):
        wrapper = MetadataWrapper(chunk.module, unsafe_skip_copy=True)
        return dict(wrapper.resolve(PositionProvider)), chunk.offset
    statement = chunk.module.body[top]
    alone = chunk.module.with_changes(body=[statement], header=[], footer=[])
    positions = dict(MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider))
    return positions, chunk.starts[top] - positions[statement].start.line  # type: ignore[attr-defined]


class _Builder:
    """Pass 2: statements -> IR, with same-module calls inlined."""

    def __init__(self, info: ModuleInfo) -> None:
        self.info = info
        self.sites: list[tuple[cst.CSTNode, int, int]] = []
        self.site_ids: dict[int, int] = {}
        self.chunk = 0  # the chunk whose statements are being built
        self.top = 0  # and the top-level statement
        self.inlines = 0

    def site(self, node: cst.CSTNode) -> int:
        known = self.site_ids.get(id(node))
        if known is None:
            known = self.site_ids[id(node)] = len(self.sites)
            self.sites.append((node, self.chunk, self.top))
        return known

    # --- statements -------------------------------------------------------------------------

    def block(self, body: Sequence[cst.CSTNode], ctx: Context) -> Seq:
        ctx = self._with_local_defs(body, ctx)
        items: list[Node] = []
        for statement in body:
            items.extend(self.statement(statement, ctx))
        return Seq(tuple(items))

    def _with_local_defs(self, body: Sequence[cst.CSTNode], ctx: Context) -> Context:
        defs = tuple((s.name.value, s) for s in body if isinstance(s, cst.FunctionDef))
        return replace(ctx, local=defs + ctx.local) if defs else ctx

    def statement(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        if isinstance(node, cst.BaseSmallStatement):  # in a one-line suite: `if x: a; b`
            return self.small(node, ctx)
        if isinstance(node, cst.SimpleStatementLine):
            return [item for small in node.body for item in self.small(small, ctx)]
        if isinstance(node, cst.If):
            return self._if(node, ctx)
        if isinstance(node, (cst.For, cst.While)):
            return self._loop(node, ctx)
        if isinstance(node, (cst.Try, cst.TryStar)):
            handlers = tuple(self.block(block_of(h.body), ctx) for h in node.handlers)
            orelse = self.block(block_of(node.orelse.body), ctx) if node.orelse else Seq()
            final = self.block(block_of(node.finalbody.body), ctx) if node.finalbody else Seq()
            return [Try(self.block(block_of(node.body), ctx), handlers, orelse, final)]
        if isinstance(node, cst.With):
            return self._with(node, ctx)
        if isinstance(node, cst.Match):
            arms = [self.block(block_of(case.body), ctx) for case in node.cases]
            if not any(_is_wildcard(case) for case in node.cases):
                arms.append(Seq())
            return [Branch(tuple(arms))]
        return []  # definitions and the rest run nothing here

    def small(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        if isinstance(node, cst.Break):
            return [Jump("break")]
        if isinstance(node, cst.Continue):
            return [Jump("continue")]
        items = self.expression_events(node, ctx)
        items.extend(self._builds(node, ctx))
        if isinstance(node, cst.Return):
            items.append(Jump("return"))
        elif isinstance(node, cst.Raise):
            items.append(Jump("raise"))
        return items

    def _builds(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        """`opt = SGD([x_in])` inside a loop: a fresh optimizer (of fresh tensors, usually) each
        iteration, so nothing an earlier step applied lingers for it."""
        if not isinstance(node, cst.Assign) or len(node.targets) != 1 or not isinstance(node.value, cst.Call):
            return []
        qualified = self.info.qualify(node.value.func) or ""
        if not (is_optimizer_callee(qualified) and qualified.rsplit(".", 1)[-1][:1].isupper()):
            return []  # a constructor, not a getter such as Lightning's self.optimizers()
        target = node.targets[0].target
        if not isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)):
            return []
        return [self.event(Kind.BUILD, node, replace(ctx, gate=None), self.key(target, ctx), self.label(target, ctx))]

    def _if(self, node: cst.If, ctx: Context) -> list[Node]:
        body = self.block(block_of(node.body), ctx)
        if isinstance(node.orelse, cst.If):
            orelse = Seq(tuple(self._if(node.orelse, ctx)))
        elif node.orelse is not None:
            orelse = self.block(block_of(node.orelse.body), ctx)
        else:
            orelse = Seq()
        if self.info.qualify(_call_target(node.test)) in ALWAYS_TRUE:
            return list(body.items)  # e.g. an LBFGS closure's `if torch.is_grad_enabled():`
        return [*self.expression_events(node.test, ctx), Branch((body, orelse), self._test(node.test, ctx))]

    def _test(self, test: cst.BaseExpression, ctx: Context) -> Test:
        """A flag assigned once from a test (`do_step = i % k == 0; if do_step:`) is that test."""
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        name = test.expression if negated else test  # type: ignore[attr-defined]
        if isinstance(name, cst.Name):
            held = dict(ctx.conditions).get(name.value)
            if held is not None:
                found = classify(held)
                return replace(found, positive=found.positive != negated)
        return classify(test)

    def _loop(self, node: Union[cst.For, cst.While], ctx: Context) -> list[Node]:
        anchor = ctx.anchor if ctx.anchor is not None else self.site(node)
        if isinstance(node, cst.For):
            cleared = self._clear_idiom(node, anchor, ctx)
            if cleared is not None:
                return cleared
            targets = frozenset(bound_names(node.target))
            infinite = False
        else:
            targets = frozenset()
            infinite = isinstance(node.test, (cst.Name, cst.Integer)) and text_of(node.test) in ("True", "1")
        orelse = self.block(block_of(node.orelse.body), ctx) if node.orelse else Seq()
        body = self.block(block_of(node.body), ctx)
        loop = Loop(body, anchor, infinite, targets, orelse, isinstance(node, cst.For), id(node), ctx.own)
        return [loop]

    def _with(self, node: cst.With, ctx: Context) -> list[Node]:
        items: list[Node] = []
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "accumulate":
                key = f"{text_of(call.func.value)}.sync_gradients"
                ctx = replace(ctx, gate=Test(accumulation=True, key=key))
            else:
                items.extend(self.expression_events(call, ctx))
        return [*items, *self.block(block_of(node.body), ctx).items]

    # --- expressions ------------------------------------------------------------------------

    def expression_events(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        items: list[Node] = []
        for call in self.info.calls_of(node):
            items.extend(self.call_events(call, ctx))
        return items

    def key(self, node: cst.BaseExpression, ctx: Context) -> str:
        return self._rooted(receiver_key(node), ctx)

    def aliases(self, body: Sequence[cst.CSTNode], ctx: Context) -> Context:
        """Names that stand for one receiver in this body: `opt = self.optimizers[k]` (assigned
        once), and loop variables over collections (`for opt in opts` -> `opts[*]`)."""
        found: dict[str, Optional[str]] = {}
        tests: dict[str, Optional[cst.BaseExpression]] = {}

        def bind(name: str, value: Optional[str]) -> None:
            found[name] = value if found.get(name, value) == value else None

        for statement in _statements_of(body):
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0].target, statement.value
                if isinstance(target, cst.Name):
                    simple = isinstance(value, (cst.Name, cst.Attribute, cst.Subscript))
                    bind(target.value, self.key(value, ctx) if simple else None)
                    is_test = isinstance(value, (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation))
                    tests[target.value] = value if is_test and target.value not in tests else None
            elif isinstance(statement, cst.For):
                name = _element_name(statement.target, statement.iter)
                collection = collection_key(statement.iter)
                if name is not None:
                    bind(name, None if collection is None else self._rooted(collection, ctx))
        pairs = tuple((n, v) for n, v in found.items() if v is not None and v != n)
        flags = tuple((n, t) for n, t in tests.items() if t is not None)
        return replace(ctx, aliases=pairs + ctx.aliases, conditions=flags) if pairs or flags else ctx

    def _rooted(self, key: str, ctx: Context) -> str:
        """Replace the leading name by what it stands for (a local alias or the caller's argument)."""
        root = _ROOT.match(key)
        if root is None:
            return key
        for table in (ctx.aliases, ctx.subst):
            for param, arg in table:
                if root.group(0) == param:
                    return arg + key[root.end():]
        return key

    def label(self, node: cst.BaseExpression, ctx: Context) -> str:
        """The optimizer as written, in the words of the analysed loop (callee parameters replaced)."""
        return self._rooted(text_of(node), replace(ctx, aliases=()))

    def event(self, kind: Kind, call: cst.CSTNode, ctx: Context, target: Optional[str] = None, label: str = "") -> Node:
        site = ctx.anchor if ctx.anchor is not None else self.site(call)
        event = Event(kind, site, target, label or target or "")
        if ctx.gate is not None and kind in (Kind.STEP, Kind.CLEAR):
            return Branch((Seq((event,)), Seq()), ctx.gate)
        return event

    def call_events(self, call: cst.Call, ctx: Context) -> list[Node]:
        func = call.func
        if isinstance(func, cst.Attribute):
            return self._method_call(call, func, ctx)
        if isinstance(func, cst.Name):
            if self.info.qualify(func) == "torch.autograd.backward":
                return [self.event(Kind.BACKWARD, call, ctx)]
            target = self._function_named(func, ctx)
            if target is not None:
                return self.inline(target, call, ctx)
        return []

    def _method_call(self, call: cst.Call, func: cst.Attribute, ctx: Context) -> list[Node]:
        name = func.attr.value
        if name in ("backward", "manual_backward"):
            if (self.info.qualify(func.value) or "").startswith(DIST_AUTOGRAD):
                return []  # gradients go to the distributed autograd context, not to .grad
            return [self.event(Kind.BACKWARD, call, ctx)]
        if name == "zero_grad":
            return self._clear(call, self.key(func.value, ctx), ctx)
        if name == "step":
            return self._step(call, func.value, ctx)
        if name == "optimizer_step" and call.args:
            optimizer = call.args[0].value
            return [self.event(Kind.STEP, call, ctx, self.key(optimizer, ctx), self.label(optimizer, ctx))]
        if isinstance(func.value, cst.Name) and func.value.value == "self" and ctx.cls is not None:
            method = self._method(ctx.cls, name)
            if method is not None:
                return self.inline(method, call, ctx)
        return []

    def _method(self, cls: ClassInfo, name: str, depth: int = 0) -> Optional[cst.FunctionDef]:
        if name in cls.methods:
            return cls.methods[name]
        for base in cls.bases if depth < 5 else ():
            info = self.info.classes.get(base.rsplit(".", 1)[-1])
            found = self._method(info, name, depth + 1) if info is not None else None
            if found is not None:
                return found
        return None

    def _step(self, call: cst.Call, node: cst.BaseExpression, ctx: Context) -> list[Node]:
        table = self.info.table
        receiver = self.key(node, ctx)
        if table.is_scaler(receiver) and call.args:
            argument = call.args[0].value
            if isinstance(argument, (cst.Name, cst.Attribute, cst.Subscript)):
                return [self.event(Kind.STEP, call, ctx, self.key(argument, ctx), self.label(argument, ctx))]
            return []
        if not table.is_optimizer(receiver, receiver in ctx.stepped_and_cleared):
            return []
        items: list[Node] = []
        closure = self._closure(call, ctx)
        if closure is not None:
            items.extend(self.inline(closure, call, ctx))
        items.append(self.event(Kind.STEP, call, ctx, receiver, self.label(node, ctx)))
        return items

    def _closure(self, call: cst.Call, ctx: Context) -> Optional[cst.FunctionDef]:
        for arg in call.args:
            if arg.keyword is None or arg.keyword.value == "closure":
                found = self._function_named(arg.value, ctx)
                if found is not None:
                    return found
        return None

    def _clear(self, call: cst.CSTNode, receiver: str, ctx: Context) -> list[Node]:
        table = self.info.table
        if table.is_optimizer(receiver, receiver in ctx.stepped_and_cleared):
            return [self.event(Kind.CLEAR, call, ctx, receiver)]
        linked = table.optimizers_of_module(receiver)
        if not linked:
            return [self.event(Kind.MAYBE_CLEAR, call, replace(ctx, gate=None))]
        # A module's own zero_grad() is not gated by accelerate: it runs every iteration.
        ungated = replace(ctx, gate=None)
        return [self.event(Kind.CLEAR, call, ungated, target) for target in linked]

    def _clear_idiom(self, node: cst.For, anchor: int, ctx: Context) -> Optional[list[Node]]:
        """`for p in m.parameters(): p.grad = None` (and friends) is one clear, not a loop."""
        if not _clears_grads(node.body):
            return None
        iterator = node.iter
        if isinstance(iterator, cst.Call) and isinstance(iterator.func, cst.Attribute):
            owner = self.key(iterator.func.value, ctx)
            if iterator.func.attr.value in ("parameters", "named_parameters"):
                return self._clear(node, owner, replace(ctx, anchor=anchor))
        if isinstance(iterator, cst.Attribute) and iterator.attr.value == "param_groups":
            return [self.event(Kind.CLEAR, node, replace(ctx, anchor=anchor), self.key(iterator.value, ctx))]
        return [self.event(Kind.MAYBE_CLEAR, node, replace(ctx, anchor=anchor, gate=None))]

    def inline(self, function: cst.FunctionDef, call: cst.Call, ctx: Context) -> list[Node]:
        if id(function) not in self.info.relevant:
            return []  # it performs no event, directly or through what it calls
        if len(ctx.stack) >= MAX_INLINE_DEPTH or self.inlines >= MAX_INLINES:
            return []
        params = [p.name.value for p in function.params.params]
        if params and params[0] in ("self", "cls"):
            params = params[1:]  # a method, called on self or handed over bound
        subst: dict[str, str] = {}
        passed: list[tuple[str, cst.FunctionDef]] = []  # functions handed over as arguments
        for index, arg in enumerate(call.args):
            if arg.star:
                break
            name = arg.keyword.value if arg.keyword else (params[index] if index < len(params) else None)
            if name is None:
                continue
            function_arg = self._function_named(arg.value, ctx)
            if function_arg is not None:
                passed.append((name, function_arg))
            elif isinstance(arg.value, (cst.Name, cst.Attribute, cst.Subscript)):
                value = self.key(arg.value, ctx)
                if value != name:
                    subst[name] = value
        # The same function may be inlined inside itself when handed other functions
        # (fastai's _with_events(self._backward) inside _with_events(self._do_one_batch)).
        frame = (id(function), *(id(f) for _, f in passed))
        if frame in ctx.stack:
            return []
        self.inlines += 1
        inner = replace(
            ctx,
            local=tuple(passed),
            aliases=(),
            conditions=(),
            subst=tuple(subst.items()),
            anchor=ctx.anchor if ctx.anchor is not None else self.site(call),
            stack=ctx.stack + (frame,),
            own=False,
            stepped_and_cleared=ctx.stepped_and_cleared | self.scope_receivers(function),
        )
        inner = self.aliases(block_of(function.body), inner)
        return [Inline(self.block(block_of(function.body), inner))]

    def _function_named(self, node: cst.BaseExpression, ctx: Context) -> Optional[cst.FunctionDef]:
        """A same-module function named by `node`: a local or module function, or `self.method`."""
        if isinstance(node, cst.Name):
            return dict(ctx.local).get(node.value) or self.info.functions.get(node.value)
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
            return self._method(ctx.cls, node.attr.value) if ctx.cls is not None else None
        return None

    def scope_receivers(self, function: cst.FunctionDef) -> frozenset[str]:
        """Receivers both `.step()`-ed and `.zero_grad()`-ed in one function: optimizers."""
        facts = self.info.facts.get(id(function))
        return frozenset(facts.stepped & facts.cleared) if facts is not None else frozenset()


def _call_target(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.func if isinstance(node, cst.Call) and not node.args else node


def _statements_of(body: Sequence[cst.CSTNode]) -> Iterable[cst.CSTNode]:
    """Small statements and loops of a body, nested blocks included, definitions excluded."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            yield statement
            for suite in _suites(statement):
                yield from _statements_of(block_of(suite))


def _is_wildcard(case: cst.MatchCase) -> bool:
    pattern = case.pattern
    return case.guard is None and isinstance(pattern, cst.MatchAs) and pattern.pattern is None


def _clears_grads(suite: cst.BaseSuite) -> bool:
    for statement in block_of(suite):
        if isinstance(statement, cst.For) and _clears_grads(statement.body):
            return True
        if isinstance(statement, cst.If) and _clears_grads(statement.body):
            return True
        smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
        for small in smalls:
            if isinstance(small, cst.Assign) and isinstance(small.value, cst.Name) and small.value.value == "None":
                if any(text_of(t.target).endswith(".grad") for t in small.targets):
                    return True
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                func = small.value.func
                if isinstance(func, cst.Attribute) and func.attr.value in ("zero_", "detach_", "requires_grad_"):
                    if text_of(func.value).endswith((".grad", ".grad.data")):
                        return True
    return False


# --- conditions ---------------------------------------------------------------------------


def classify(test: cst.BaseExpression) -> Test:
    positive = True
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        positive = not positive
        test = test.expression
    modular = _modular(test)
    if modular is not None:
        key, residue, when_true = modular
        return Test(True, key, residue, positive == when_true)
    accumulation = any(_accumulation_node(node) for node in nodes_in(test))
    return Test(accumulation, text_of(test), 0, positive)


def _accumulation_node(node: cst.CSTNode) -> bool:
    """rules.md section 4: `%`, `sync_gradients`, a counter compared with an accumulation size
    (`micro >= grad_accum`), not a flag against a constant (`microbatch_size == 1`)."""
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, cst.Modulo) and not isinstance(node.left, (cst.SimpleString, cst.FormattedString))
    if isinstance(node, cst.Attribute):
        return node.attr.value == "sync_gradients"
    if isinstance(node, cst.Comparison):
        left = node.left
        for target in node.comparisons:
            right = target.comparator
            if not (_literal(left) or _literal(right)) and (_about_accumulation(left) or _about_accumulation(right)):
                return True
            left = right
    return False


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)) or (
        isinstance(node, cst.Name) and node.value in ("None", "True", "False")
    )


def _about_accumulation(node: cst.BaseExpression) -> bool:
    text = text_of(node)
    return "update_freq" in text or any(_ACCUMULATION_SEGMENT.fullmatch(n) for n in re.split(r"[^A-Za-z0-9]", text))


def _modular(test: cst.BaseExpression) -> Optional[tuple[str, int, bool]]:
    """`(i + c) % k == d` -> ("mod:i%k", d - c, True); `!=` and bare `x % k` are the negation."""
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
        found = _phase(test, 0)
        return None if found is None else (found[0], found[1], False)
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    left, right = test.left, target.comparator
    if not (isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo)):
        left, right = right, left
    if not (isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo)):
        return None
    value = _offset_against(right, text_of(left.right))
    found = None if value is None else _phase(left, value)
    if found is None:
        return None
    return found[0], found[1], isinstance(target.operator, cst.Equal)


def _offset_against(node: cst.BaseExpression, modulus: str) -> Optional[int]:
    """An int literal, or `modulus - n` (which is -n modulo the modulus)."""
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.right, cst.Integer):
        if text_of(node.left) == modulus and isinstance(node.operator, cst.Subtract):
            return -int(node.right.value, 0)
    return None


def _phase(modulo: cst.BinaryOperation, equals: int) -> Optional[tuple[str, int]]:
    counter = modulo.left
    offset = 0
    if isinstance(counter, cst.BinaryOperation) and isinstance(counter.right, cst.Integer):
        sign = {cst.Add: 1, cst.Subtract: -1}.get(type(counter.operator))
        if sign is None:
            return None
        offset = sign * int(counter.right.value, 0)
        counter = counter.left
    if not isinstance(counter, (cst.Name, cst.Attribute)):
        return None
    return f"mod:{text_of(counter)}%{text_of(modulo.right)}", equals - offset


# --- units --------------------------------------------------------------------------------


def extract(module: Union[cst.Module, list[Chunk]], settings: Settings) -> Analysis:
    """Find the training loops and step functions of a module (whole, or in chunks), as IR units."""
    chunks = module if isinstance(module, list) else [Chunk(module)]
    info = ModuleInfo(table=OptimizerTable(settings))
    collector = _Collector(info)
    for chunk in chunks:
        collector.statements(chunk.module.body)
    _mark_relevant(info)
    if any(name.split(".")[0] in OTHER_FRAMEWORKS for name in info.aliases.values()):
        return Analysis(chunks, [], [])
    builder = _Builder(info)
    bodies = []
    step_candidates: list[tuple[Seq, int]] = []
    for index, chunk in enumerate(chunks):
        builder.chunk = index
        module_ctx = builder.aliases(chunk.module.body, Context())
        for top, statement in enumerate(chunk.module.body):
            builder.top = top
            bodies.append(builder.block([statement], module_ctx))
            for function, cls in _functions([statement], None, info):
                if id(function) not in info.relevant:
                    continue
                ctx = Context(cls=cls, stepped_and_cleared=builder.scope_receivers(function))
                body = builder.block(block_of(function.body), builder.aliases(block_of(function.body), ctx))
                bodies.append(body)
                called = info.called_attributes if cls is not None else info.called_names
                if function.name.value not in called:
                    step_candidates.append((body, builder.site(function)))
    cache: dict = {}  # type: ignore[type-arg]  # keyed by id(): every body stays alive until the end
    units = _loop_units(bodies, cache)
    for body, site in step_candidates:
        targets = _innermost_targets(body, cache)
        if targets:
            units.append((Unit(body, site, is_function=True), targets))
    return Analysis(chunks, units, builder.sites)


def _mark_relevant(info: ModuleInfo) -> None:
    """Functions that can perform an event, directly or through a function they call (by name)."""
    names: dict[str, list[int]] = {}
    for function in info.every_function:
        names.setdefault(function.name.value, []).append(id(function))
    relevant = {key for key, facts in info.facts.items() if facts.events}
    changed = True
    while changed:
        relevant_names = {name for name, keys in names.items() if any(k in relevant for k in keys)}
        grown = {key for key, facts in info.facts.items() if facts.callees & relevant_names}
        changed = not grown <= relevant
        relevant |= grown
    info.relevant = relevant


def _functions(body: Sequence[cst.CSTNode], cls: Optional[ClassInfo], info: ModuleInfo) -> Iterable[tuple[cst.FunctionDef, Optional[ClassInfo]]]:
    """Every function and method, nested ones included, with its enclosing class."""
    for statement in body:
        if isinstance(statement, cst.FunctionDef):
            yield statement, cls
            yield from _functions(block_of(statement.body), None, info)
        elif isinstance(statement, cst.ClassDef):
            yield from _functions(block_of(statement.body), info.class_of[id(statement)], info)
        else:
            for suite in _suites(statement):
                yield from _functions(block_of(suite), cls, info)


def _loop_units(bodies: list[Seq], cache: dict) -> list[tuple[Unit, list[str]]]:  # type: ignore[type-arg]
    """Training loops: each loop is analysed for the optimizers it is the innermost loop of.

    A loop of an inlined function is analysed in the caller only for what the caller gives it
    (a step function handed over as an argument); the rest is found in the function itself.
    """
    loops = [loop for body in bodies for loop in _nested_loops(body)]
    standalone: dict[int, set[str]] = {}
    for loop in loops:
        if loop.own:
            standalone.setdefault(loop.origin, set()).update(_innermost_targets(loop.body, cache))
    units = []
    seen: set[tuple[int, int]] = set()
    for loop in loops:
        if (loop.origin, loop.site) in seen:
            continue
        seen.add((loop.origin, loop.site))
        targets = _innermost_targets(loop.body, cache)
        if not loop.own:
            targets = [t for t in targets if t not in standalone.get(loop.origin, set())]
        if targets:
            units.append((Unit(loop.body, loop.site, is_function=False, targets=loop.targets), targets))
    return units


def _innermost_targets(body: Seq, cache: dict) -> list[str]:  # type: ignore[type-arg]
    """Optimizers that `body` backpropagates for and steps, with no loop inside doing both."""
    summary = summarize(body, cache)
    if not summary.backward:
        return []
    nested = _nested_loops(body)
    return [t for t in sorted(summary.steps) if not any(_holds(inner, t, cache) for inner in nested)]


def _nested_loops(node: Node) -> list[Loop]:
    found: list[Loop] = []
    stack: list[Node] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Loop):
            found.append(current)
        stack.extend(children(current))
    return found


def _holds(loop: Loop, target: str, cache: dict) -> bool:  # type: ignore[type-arg]
    summary = summarize(loop.body, cache)
    return summary.backward and target in summary.steps
