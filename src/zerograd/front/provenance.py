"""Which modules' parameters a loss reaches (rules.md section 5, ZG006; issue 16).

One pass over a scope's statements in source order keeps, per assigned name, the modules whose
calls its value came from: `fake = G(z)` carries G, `d_loss = bce(D(fake), y)` carries D and G.
`.detach()`, `.data`, `.item()` and a `with torch.no_grad():` block cut what they touch (the
modules are remembered as cut, which is evidence that a loss leaves them out on purpose); a
module frozen with `requires_grad_(False)`, a `p.requires_grad = False` loop over its
parameters, or a `set_requires_grad(nets, False)` helper is left out of every backward until it
is unfrozen. A value read from outside the scope (a parameter, an attribute, a call of a
method of ours) may carry anything: it is *opaque*, which never proves that a loss reaches only
some modules (a parameter holds what every call of its function hands it, where the module's
calls say: `trace`'s `entry`, scopes.Builder.entry_reaches);
but what a loop that calls a backward iterates (a loader handed in) is data, which
no module made. Branches are read one after the other (a may-analysis: later definitions win),
unless a call's literal arguments decide them. Calling a module of a class of ours runs its
`forward`; a method of another object is read in that object's terms (analysis/keys.py `inward`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Optional, Union

import libcst as cst

from ..analysis.keys import inward, rebase, related, root_of, within
from ..analysis.model import Reach
from ..analysis.reach import CLEAN, OPAQUE, coupled, cut, inward_reach, outward_reach, union
from ..knowledge.frameworks import Valued
from ..knowledge.values import NEW_TENSOR_METHODS, RECEIVER_ONLY, SCALER_PASS, makes_leaf, runs_only_itself
from .displays import Shape, collects, displayed, elements, shape_of, tuple_pairs
from .freezing import Freezes, comprehension_freezes, flag, gathered_freezes, gathers_parameters, loop_freezes
from .literals import decided, literals_of
from .naming import binds_self, block_of, bound_parameters, dotted, loss_of, receiver_key, suites
from .valued import applied

# Methods whose result carries no autograd graph: what they are called on is cut off.
_DETACHING = frozenset({"detach", "detach_", "item", "tolist", "numpy", "data"})
_BACKWARD = ("backward", "manual_backward")  # methods that backpropagate a loss
_TOGGLES = ("toggle_optimizer", "untoggle_optimizer")  # Lightning's: freeze what others hold, and undo it
_TOGGLING = "toggle_model"  # a Lightning optimizer's context manager doing both
NO_GRAD = frozenset({"no_grad", "inference_mode"})  # context managers under which nothing is recorded
# What a tensor tells of itself (its size, type, place) is no graph.
_DESCRIBING = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "size", "dim", "numel",
                         "nelement", "element_size", "get_device", "is_contiguous", "is_floating_point"})

Key = Callable[[cst.BaseExpression], str]
# A function of this module a call names, and the receiver bound to its `self` (None: a plain
# function), with what resolves the calls inside it.
Callee = tuple[cst.FunctionDef, Optional[str], "Resolver"]
Resolver = Callable[[cst.BaseExpression], Optional[Callee]]
DEPTH = 4  # calls followed into, one inside another: deeper ones are opaque
SUMMARIES = 256  # distinct (function, arguments) traced in a module, plus 4 per function
# A summary's key: the function, what its arguments reach, the modules handed over, the
# caller's values of the object's fields, the held modules as it names them, the literal arguments.
Summary = tuple[int, tuple[Reach, ...], tuple[tuple[str, str], ...], tuple[tuple[str, Reach], ...],
                frozenset[str], tuple[tuple[str, object], ...]]
Summaries = dict[Summary, Reach]
# A call of a function of this module, as a scope's own trace reads it: the function's id, what
# each argument reaches per parameter it binds (in the callee's terms), the parameters handed a
# module (named, not valued).
Call = tuple[int, dict[str, Reach], frozenset[str]]
_WHOLE = frozenset({"self"})
FROZEN = "*frozen"  # a recorded call's entry: the modules frozen at the call (Reach.modules)
# A recorded call's entry `criterion()`: the parameter is handed an instance of a class that, called,
# runs only itself (`nn.CrossEntropyLoss()`, knowledge/values.runs_only_itself) at every call.
CALLED = "()"
_SUMS = (cst.Add, cst.Subtract)  # operators whose operands' gradients are independent


class Names(NamedTuple):
    """What the module's imports and optimizer table say of a name (facts.py)."""

    qualify: Callable[[cst.BaseExpression], Optional[str]]  # a callee as imported (`F.mse_loss` -> torch...)
    imported: Callable[[str], bool]  # the head of a dotted name is an import (a module, not a value)
    is_scaler: Callable[[str], bool]  # a receiver key is an AMP gradient scaler
    tensors: set[str]  # held sets that are tensors of their own (holdings.py), not modules
    # The instances a function's object holds, built in its class (`self.bce` -> `torch.nn.BCELoss`).
    instances: Callable[[Optional[cst.FunctionDef]], dict[str, str]]
    # The functions its attributes are (`self.gen_loss` -> `hinge_gen_loss`, ClassInfo.callables).
    callables: Callable[[Optional[cst.FunctionDef]], dict[str, str]]
    # Its attributes that hold no graph (`self.gamma = 0.99`, plain.py).
    plain: Callable[[Optional[cst.FunctionDef]], frozenset[str]]
    # What a function of another module of the project returns (Outside.value, valued.py).
    exported: Callable[[str], Optional[Valued]] = lambda qualified: None
    # A context manager class of ours (as called) that freezes what its constructor is handed:
    # its constructor, the parameter, and whether it is trainable inside (freezing.context_freezer).
    contexts: Callable[[str], Optional[tuple[cst.FunctionDef, str, bool]]] = lambda name: None
    # Its attributes assigned one list of names and nothing else (`self.model_modules =
    # [self.encoder, self.decoder]`): what freezing the list freezes.
    lists: Callable[[Optional[cst.FunctionDef]], dict[str, cst.List]] = lambda function: {}


class Tracer(Freezes):
    """One scope's values; `found` maps id(backward call) -> what its loss reaches."""

    names: Names
    resolve: Optional[Resolver]

    def __init__(self, modules: frozenset[str], key: Key, params: frozenset[str], ours: frozenset[str],
                 names: Names, resolve: Optional[Resolver] = None,
                 depth: int = 0, summaries: Optional[Summaries] = None, limit: int = SUMMARIES,
                 function: Optional[cst.FunctionDef] = None, literals: Optional[dict[str, object]] = None) -> None:
        self.modules = modules  # receivers some optimizer holds the parameters of
        self.key = key
        self.params = params
        self.ours = ours  # functions defined in this module: calling one may run any module
        self.names = names
        self.instances = names.instances(function)
        self.callables = names.callables(function)
        self.plain = names.plain(function)
        self.function = function
        # The held sets that are tensors of their own: read on every name's value, usually none.
        self.tensors = [m for m in modules if m in names.tensors]
        self.resolve = resolve
        self.depth = depth
        # What a function's return value reaches, per argument reaches and modules handed over
        # (shared by the module's tracers; OPAQUE while it is computed: a recursive call is).
        self.summaries: Summaries = {} if summaries is None else summaries
        self.limit = limit
        self.env: dict[str, Reach] = {}
        self.frozen: set[str] = set()
        self.found: dict[int, Reach] = {}
        self.returns: list[Reach] = []
        self.cutting = False  # inside `with torch.no_grad():`
        # The parameters a call gave a literal (`return_loss=True`, a default): they decide its
        # branches, as the caller's call runs them (issue 45: `for_G=True`, `mode="disc"`).
        self.literals = literals or {}
        self.done = False  # a `return` ended the path being read
        self.record: Optional[list[Call]] = None  # the calls of ours the scope makes (entry reach)
        self.optimizers: Mapping[str, frozenset[str]] = {}  # what each optimizer holds (a toggle's)
        self.toggled: set[str] = set()  # what the last `toggle_optimizer` froze
        # Names a loop or a comprehension binds to the entries of a collection (`for q in
        # self.q_nets` -> "self.q_nets[*]"): calling one calls an entry, which may be a module.
        self.entries: dict[str, str] = {}
        # Per summary (as `summaries` keys them), what the method left in `self.X`.
        self.effects: dict[Summary, tuple[tuple[str, Reach], ...]] = {}
        # Local names bound to the parameters of modules, unfiltered (`q_params =
        # list(critic.parameters())`): a loop over one that sets `requires_grad` freezes them.
        self.gathered: dict[str, cst.BaseExpression] = {}
        # Per summary, what each position of the tuple every return returns reaches; per return
        # here, the tuple's; and the shape of the last call of ours read (a tuple assigned from it
        # binds each name its own: `critic_loss, actor_loss = self.losses(batch)`).
        self.shapes: dict[Summary, Optional[Shape]] = {}
        self.elements: list[Optional[Shape]] = []
        self.shape: Optional[Shape] = None

    # --- statements -------------------------------------------------------------------------

    def block(self, body: Sequence[cst.CSTNode]) -> None:
        for statement in body:
            if self.done:
                return
            self.statement(statement)

    def statement(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self.small(small)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return  # a scope of its own
        elif isinstance(node, cst.For):
            batches = self.value(node.iter)
            if batches.opaque and not batches.modules and self._trains(node.body):
                # What a training loop iterates is data: a loader's batches are tensors that no
                # module made (issue 45; a collection of the scope's own outputs keeps its reach).
                batches = CLEAN
            self._bind(node.target, batches)
            self._entry(node.target, node.iter)
            self._freezes(loop_freezes(node))
            if isinstance(node.iter, cst.Name) and node.iter.value in self.gathered:
                self._freezes(gathered_freezes(node, self.gathered[node.iter.value]))
            if isinstance(node.iter, (cst.List, cst.Tuple)):  # `for net in [D_a, D_b]: for p in net.parameters(): ...`
                for inner in block_of(node.body):
                    if isinstance(inner, cst.For):
                        self._freezes(loop_freezes(inner, (node.target, node.iter)))
            self.block(block_of(node.body))
            self.done = False  # the loop may run no time
            if node.orelse is not None:
                self.block(block_of(node.orelse.body))
                self.done = False
        elif isinstance(node, cst.With):
            self._with(node)
        elif isinstance(node, cst.If):
            self._if(node)
        else:
            for suite in suites(node):
                self.block(block_of(suite))
                self.done = False  # a loop that may not run, a `try` that may raise

    def _trains(self, body: cst.CSTNode) -> bool:
        """Whether a loop body calls `.backward(`, or a function of ours that does (`for batch
        in loader: self.update(batch)`)."""
        if _trains(body):
            return True
        if self.resolve is None:
            return False
        for call in _calls_in(body, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            callee = self.resolve(call.func) if isinstance(call.func, (cst.Name, cst.Attribute)) else None
            if callee is not None and _trains(callee[0].body):
                return True
        return False

    def _if(self, node: cst.If) -> None:
        """A branch the literal arguments decide is the only one read; else both, one after the
        other, and the path ends only if both do."""
        taken = decided(node.test, self.literals) if self.literals else None
        if taken is not True:
            orelse = node.orelse
            if taken is False:
                if isinstance(orelse, cst.If):
                    self._if(orelse)
                elif orelse is not None:
                    self.block(block_of(orelse.body))
                return
        self.block(block_of(node.body))
        if taken is True:
            return
        ended, self.done = self.done, False
        if isinstance(node.orelse, cst.If):
            self._if(node.orelse)
        elif node.orelse is not None:
            self.block(block_of(node.orelse.body))
        else:
            return
        self.done = ended and self.done

    def _with(self, node: cst.With) -> None:
        saved = self.cutting
        toggled = None
        frozen: set[str] = set()
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and self._no_grad(call):
                self.cutting = True
            elif isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == _TOGGLING:
                toggled = self.key(call.func.value)  # `with opt_g.toggle_model():`, a toggle until the block ends
                self._toggle(toggled, True)
            elif item.asname is not None:
                self._bind(item.asname.name, self.value(call))
            elif isinstance(call, cst.Call):
                frozen |= self._context_freeze(call)
        self.block(block_of(node.body))
        self.cutting = saved
        if toggled is not None:
            self._toggle(toggled, False)
        self.frozen -= frozen  # its `__exit__` lets them train again

    def _no_grad(self, call: cst.Call) -> bool:
        """`torch.no_grad()`, `torch.inference_mode()`, `torch.set_grad_enabled(False)`."""
        name = (self.names.qualify(call.func) or "").rsplit(".", 1)[-1]
        if name == "set_grad_enabled":
            return bool(call.args) and flag(call.args[0].value, None) is False
        return name in NO_GRAD

    def small(self, node: cst.CSTNode) -> None:
        self._calls(node)
        if isinstance(node, cst.Return):
            if node.value is not None:
                shape = displayed(node.value)
                if shape is None:
                    self.returns.append(self.value(node.value))
                else:
                    values = tuple(self.value(element) for element in shape)
                    self.elements.append(values)
                    self.returns.append(union(CLEAN, *values))
            self.done = True
        elif isinstance(node, cst.Assign):
            pairs = tuple_pairs(node.targets[0].target, node.value) if len(node.targets) == 1 else None
            if pairs is not None:
                # `q1, q2 = self.critic_q1(s), self.critic_q2(s)`: each name holds its own value.
                reaches = [self.value(element) for _, element in pairs]
                for (name, _), reach in zip(pairs, reaches):
                    self._bind(name, reach)
                return
            self.shape = None
            value = self.value(node.value)
            names = displayed(node.targets[0].target) if len(node.targets) == 1 else None
            if names is not None and self.shape is not None and len(names) == len(self.shape):
                for name, reach in zip(names, self.shape):
                    self._bind(name, self._unfrozen(reach))
                return
            for target in node.targets:
                self._bind(target.target, value)
                if isinstance(target.target, cst.Name) and gathers_parameters(node.value):
                    self.gathered[target.target.value] = node.value
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self._bind(node.target, self.value(node.value))
        elif isinstance(node, cst.AugAssign):
            self._bind(node.target, union(self.value(node.target), self.value(node.value)))
        elif isinstance(node, cst.Expr) and isinstance(node.value, (cst.ListComp, cst.GeneratorExp)):
            self._freezes(comprehension_freezes(node.value))  # `[p.requires_grad_(False) for p in D.parameters()]`
        elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and collects(node.value, self.env, self.key):
            # `losses.append(q_net(x))`: the list holds what it is handed, beside what it held.
            func = node.value.func
            assert isinstance(func, cst.Attribute)
            self._bind(func.value, union(self.value(func.value), *(self.value(a.value) for a in node.value.args)))
        elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
            # `self.update(batch)`: what it hands over is recorded; its return is not used, but
            # what a method of the object leaves in its attributes is (`self.forward()`).
            callee = self.resolve(node.value.func) if self.resolve is not None else None
            if callee is not None and (self.record is not None or callee[1] == "self"):
                self._summary(node.value, [self.value(a.value) for a in node.value.args], callee,
                              follow=callee[1] == "self")
            elif callee is None and self.record is not None:
                # `metrics.update(self.update_critic(obs, ...))`: the calls of ours it is handed
                # record what their parameters receive, as they would in an assignment.
                for arg in node.value.args:
                    self.value(arg.value)

    def _bind(self, target: cst.BaseExpression, value: Reach) -> None:
        if self.cutting:
            value = cut(value)
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, value)
        elif isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)):
            self.env[self.key(target)] = value
            container = target.value if isinstance(target, cst.Subscript) else None
            if isinstance(container, (cst.Name, cst.Attribute)) and self.key(container) in self.env:
                # `losses["g"] = g_loss`: the dict holds it too (`sum(losses.values())`).
                self.env[self.key(container)] = union(self.env[self.key(container)], value)
            if isinstance(target, cst.Name):
                self.entries.pop(target.value, None)
                self.gathered.pop(target.value, None)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, value)

    def _calls(self, node: cst.CSTNode) -> None:
        """Backward calls record their loss; freezing helpers change what later ones reach."""
        for call in _calls_in(node):
            func = call.func
            name = func.attr.value if isinstance(func, cst.Attribute) else dotted(func) or ""
            # What was frozen when the loss was computed is cut at its calls; a freeze after the
            # forward (before the backward) leaves the graph as it was built.
            if isinstance(func, cst.Attribute) and name in _BACKWARD:
                self.found[id(call)] = self.value(loss_of(call, func))
            elif name.endswith("autograd.backward") and call.args:
                self.found[id(call)] = self.value(call.args[0].value)
            elif isinstance(func, cst.Attribute) and name == "detach_" and isinstance(func.value, (cst.Name, cst.Attribute)):
                self.env[self.key(func.value)] = cut(self.value(func.value))  # detached in place
            elif isinstance(func, cst.Attribute) and name in _TOGGLES and call.args:
                self._toggle(self.key(call.args[0].value), name == _TOGGLES[0])
            elif isinstance(func, cst.Attribute) and name == "requires_grad_":
                self._freeze([func.value], flag(call.args[0].value if call.args else None, True))
            elif isinstance(func, (cst.Name, cst.Attribute)) and call.args and self._helper_freeze(call):
                pass  # what a function of ours does, read in its body
            elif "requires_grad" in name and len(call.args) >= 2:
                # A helper out of view, by its name (`set_requires_grad(nets, False)`).
                self._freeze([call.args[0].value], flag(call.args[1].value, None))

    def _forms(self, node: cst.BaseExpression) -> set[str]:
        """A module as written and as its alias stands for (`netd = self.netd`): an optimizer's
        link names it as its constructor's argument was written."""
        forms = {self.key(node), receiver_key(node)}
        entry = self.entries.get(node.value) if isinstance(node, cst.Name) else None
        return forms | {entry} if entry is not None else forms

    def _entry(self, target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            if isinstance(iterable, (cst.Name, cst.Attribute)):
                self.entries[target.value] = self.key(iterable) + "[*]"
            else:
                self.entries.pop(target.value, None)

    def _of_modules(self, iterable: cst.BaseExpression) -> bool:
        return isinstance(iterable, (cst.Name, cst.Attribute)) and related(self.key(iterable) + "[*]", self.modules)

    def _comprehension(self, node: Union[cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp]) -> Reach:
        """`[q(x) for q in self.q_nets]`: the targets hold what the iterable holds, each an entry
        of it, for the element only (a comprehension is a scope of its own)."""
        saved_env, saved_entries = dict(self.env), dict(self.entries)
        parts = []
        clause: Optional[cst.CompFor] = node.for_in
        while clause is not None:
            iterated = self.value(clause.iter)
            self._bind(clause.target, iterated)
            self._entry(clause.target, clause.iter)
            # Entries of a collection of modules optimizers hold (`for q in self.q_nets`) are what
            # calling them reaches; the collection read as a value adds nothing unknown.
            parts.append(CLEAN if self._of_modules(clause.iter) else iterated)
            clause = clause.inner_for_in
        if isinstance(node, cst.DictComp):
            parts += [self.value(node.key), self.value(node.value)]
        else:
            parts.append(self.value(node.elt))
        self.env, self.entries = saved_env, saved_entries
        return union(CLEAN, *parts)

    # --- expressions ------------------------------------------------------------------------

    def value(self, node: cst.BaseExpression) -> Reach:
        if isinstance(node, cst.Name):
            key = self.key(node)  # an alias names what it stands for
            if key in self.env:
                return self._held(key, self.env[key])
            return self._held(key, OPAQUE if node.value in self.params or root_of(key) in self.params else CLEAN)
        if isinstance(node, (cst.Attribute, cst.Subscript)):
            key = self.key(node)
            if key in self.env:
                return self._held(key, self.env[key])
            if isinstance(node, cst.Attribute) and node.attr.value in _DETACHING:
                return cut(self.value(node.value))
            if isinstance(node, cst.Attribute) and node.attr.value in _DESCRIBING:
                return CLEAN
            held = self._held(key, CLEAN)
            if held.modules:
                return held
            if key in self.plain:
                return CLEAN  # a constant or a hyperparameter of the object
            read = self._property(node) if isinstance(node, cst.Attribute) else None
            return read if read is not None else self.value(node.value)
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, (cst.Lambda, cst.BaseString, cst.Integer, cst.Float, cst.Imaginary, cst.Ellipsis)):
            return CLEAN
        if isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            return self._comprehension(node)
        parts = [self.value(child) for child in node.children if isinstance(child, cst.BaseExpression)]
        parts += [self.value(e.value) for e in elements(node)]
        if isinstance(node, cst.BinaryOperation) and not isinstance(node.operator, _SUMS):
            return coupled(*parts)  # `alpha * log_prob`: each operand's gradient depends on the other
        return union(CLEAN, *parts)

    def _property(self, node: cst.Attribute) -> Optional[Reach]:
        """`self.alpha` where `alpha` is a property of ours (`return self.log_alpha.exp()`): what
        it returns."""
        callee = self.resolve(node) if self.resolve is not None else None
        if callee is None or not any(isinstance(d.decorator, cst.Name) and d.decorator.value == "property"
                                     for d in callee[0].decorators):
            return None
        return self._summary(cst.Call(func=node), [])

    def _held(self, key: str, value: Reach) -> Reach:
        """What reading `key` reaches: a tensor an optimizer holds by itself (`Adam([patch])`)
        is a parameter set of its own, whatever else the name's value carries. A module read,
        not called, is no loss's input (`deepcopy(model)`, `ema.update(model)`)."""
        if not any(within(key, m) for m in self.tensors):
            return value
        return union(Reach(frozenset({key}), frozenset(), False), value)

    def _call(self, node: cst.Call) -> Reach:
        func = node.func
        args = [self.value(a.value) for a in node.args]
        self.shape = None  # set by this call's summary, if it is one of ours
        function = self.callables.get(self.key(func)) if isinstance(func, cst.Attribute) and self.callables else None
        if function is not None:
            return self._function_attribute(node, function, args)
        if isinstance(func, cst.Attribute) and func.attr.value in _DETACHING:
            return cut(self.value(func.value))
        if isinstance(func, (cst.Name, cst.Attribute, cst.Subscript)):
            # A method of what a call returned (`self.D(x).mean()`) is no module of its own.
            forms = {c for c in self._forms(func) if "(" not in c}
            called = {c for c in forms if related(c, self.modules)}
            # An entry of a list of modules picked by a computed index (`self.q_nets[i](x)`) may
            # be any entry an optimizer holds (`nets[0](x)` is that entry).
            called |= {m for c in forms if c.endswith("[*]") for m in self.modules if m.startswith(c[:-2] + "[")}
            if called:
                # Frozen when called, a module records no graph for its parameters (the backward
                # may come after the freeze's block ends: `with FreezeParameters([critic]):`).
                return self._unfrozen(self._module_call(node, args, called))
        library = self._library(node)
        if library is not None:
            return library
        summary = self._summary(node, args)
        if summary is None and isinstance(func, (cst.Name, cst.Attribute)):
            summary = self._exported(node, args)
        if summary is not None:
            return self._unfrozen(summary)  # the modules it calls record no graph while frozen here
        if isinstance(func, cst.Name) and func.value + CALLED in self.env:
            return coupled(CLEAN, *args)  # a parameter every call hands a torch.nn loss or layer
        if isinstance(func, cst.Name):
            # A function of ours may run any module, and so may an entry of a collection or a
            # parameter of the scope no optimizer holds (`model(x)`, `criterion(y, t)`); a
            # library's (a loss, torch.cat) mixes its arguments.
            unknown = func.value in self.ours or func.value in self.entries or self.depth == 0 and func.value in self.params
            return coupled(OPAQUE if unknown else CLEAN, *args)
        if runs_only_itself(self.instances.get(self.key(func), "")):
            return coupled(CLEAN, *args)  # `self.bce(d_out, y)`: a torch.nn loss or layer of the object
        return coupled(self.value(func.value) if isinstance(func, cst.Attribute) else OPAQUE, *args)

    def _exported(self, node: cst.Call, args: list[Reach]) -> Optional[Reach]:
        """A call of a function of another module of the project: its summary (valued.py), with
        the modules handed over and what the other arguments reach in its parameters' place."""
        qualified = self.names.qualify(node.func)
        valued = self.names.exported(qualified) if qualified is not None else None
        receiver = None
        if valued is None:  # an instance of a class of another module: its `forward` runs
            built = self.instances.get(self.key(node.func), "")
            valued = self.names.exported(built + ".forward") if built else None
            receiver = self.key(node.func)
        if valued is None:
            return None

        def module(arg: cst.BaseExpression) -> Optional[str]:
            key = self.key(arg) if isinstance(arg, (cst.Name, cst.Attribute)) else ""
            return key if key and related(key, self.modules) else None
        return applied(valued, node.args, args, module, receiver)

    def _library(self, node: cst.Call) -> Optional[Reach]:
        """What a library call's result carries (knowledge/values.py): a new leaf carries no
        graph; a reshaped or moved tensor carries its own, not its shape's or its device's; a
        scaler's `scale(loss)` carries the loss's. None for any other call."""
        func = node.func
        if isinstance(func, cst.Attribute) and not self._module_or_self(func.value):
            method = func.attr.value
            if method in RECEIVER_ONLY:
                return self.value(func.value)
            if method in _DESCRIBING or method in NEW_TENSOR_METHODS:
                return CLEAN
            if method == SCALER_PASS and len(node.args) == 1 and self.names.is_scaler(self.key(func.value)):
                return self.value(node.args[0].value)
        if isinstance(func, cst.Name) and (func.value in self.ours or self.key(func) in self.env):
            return None
        qualified = self.names.qualify(func)
        return CLEAN if qualified is not None and makes_leaf(qualified) else None

    def _module_or_self(self, receiver: cst.BaseExpression) -> bool:
        """`torch.split(x)`, `self.view(x)`: a function of a module, or a method of ours, not a
        method of the value it is called on."""
        head = (dotted(receiver) or "").split(".", 1)[0]
        return head == "self" and isinstance(receiver, cst.Name) or (head not in self.env and self.names.imported(head))

    def _function_attribute(self, node: cst.Call, function: str, args: list[Reach]) -> Reach:
        """A call of an attribute that is a function: one of this module is followed, a torch
        function mixes its arguments' graphs."""
        if function.startswith("torch."):
            # `self.noise_like = torch.randn_like`: a factory's result is a new leaf.
            return CLEAN if makes_leaf(function) else union(CLEAN, *args)
        summary = self._summary(node.with_changes(func=cst.Name(function)), args) if function in self.ours else None
        return summary if summary is not None else union(OPAQUE, *args)

    def _module_call(self, node: cst.Call, args: list[Reach], called: set[str]) -> Reach:
        """A call of a module an optimizer holds, or of something within one. A method of a class
        of ours (`self.encode(x)` where `self` is held) is followed like any call of ours.
        Calling a module of a class of ours runs its `forward`: the parts of it that forward
        calls are reached for certain, besides the module as a whole (which may be, all of it)."""
        fed = union(CLEAN, *args).modules
        whole = union(Reach(frozenset(called), frozenset(), False, frozenset((m, c) for m in fed for c in called)), *args)
        callee = self.resolve(node.func) if self.resolve is not None and len(called) == 1 else None
        if callee is None:
            return whole
        inner = self._summary(node, args, callee)
        if inner is None:
            return whole
        (module,) = called
        if callee[1] != module:  # a method or a function, not the module's forward
            return inner
        self.shape = None
        return union(whole, Reach(frozenset(m for m in inner.modules if m != module and within(m, module)),
                                  frozenset(), False, inner.chained))

    def _summary(self, node: cst.Call, args: list[Reach], callee: Optional[Callee] = None,
                 follow: bool = True) -> Optional[Reach]:
        """A call of a function of this module (issue 45): what its return value reaches, its
        body traced with its parameters bound to what the arguments reach (`self.X` is the
        caller's `receiver.X`); None where it cannot be followed (too deep, recursive, `*args`).
        `callee`: what the call resolves to, when the caller has resolved it already; `follow`
        False: only record the call."""
        if self.depth >= DEPTH:
            return None
        if callee is None:
            callee = self.resolve(node.func) if self.resolve is not None else None
        if callee is None or any(arg.star for arg in node.args):
            return None
        function, receiver, resolve = callee
        bound = bound_parameters(function, node.args, binds_self(function, receiver))
        if bound is None:
            return None
        # A module handed over (`adversarial(D, fake)`) is that module where the callee calls it.
        handed = {param: self.key(arg) for param, arg in bound.items() if isinstance(arg, (cst.Name, cst.Attribute))}
        handed = {param: module for param, module in handed.items() if related(module, self.modules)}
        # What the caller assigned to the object's attributes before the call is what the method
        # reads of `self` (`self.fake = self.G(z)`, then `self.d_loss(real)` reading `self.fake`).
        fields = tuple(sorted(self._fields(receiver).items()))
        literals = literals_of(function, bound, binds_self(function, receiver))
        modules = self.modules
        if receiver not in (None, "self"):
            # In a method of another object, `self` is the receiver: every key moves to its terms
            # (`self.vae.discr` is its `self.discr`), and the caller's own are kept apart.
            args = [inward_reach(a, receiver) for a in args]
            handed = {param: inward(module, receiver) for param, module in handed.items()}
            fields = tuple((name, inward_reach(value, receiver)) for name, value in fields)
            inside = any(within(receiver, m) for m in modules)  # the whole object is held (`self`)
            modules = frozenset(inward(m, receiver) for m in modules) | (_WHOLE if inside else frozenset())
        if self.record is not None:
            recorded = {param: reach for param, reach in zip(bound, args) if param not in handed}
            recorded.update((param + CALLED, CLEAN) for param, arg in bound.items()
                            if param not in handed and isinstance(arg, (cst.Name, cst.Attribute))
                            and runs_only_itself(self.instances.get(self.key(arg), "")))
            if receiver == "self":  # and what the object's attributes hold at the call (`self.fake`)
                recorded.update(fields)
                recorded[FROZEN] = Reach(frozenset(self.frozen), frozenset(), False)  # and what is frozen
            self.record.append((id(function), recorded, frozenset(handed)))
        if not follow:
            return None
        if _elided(function):
            # Cut before LibCST read it (elision.py: it performs no event): what it returns is
            # not known, not nothing (`a, logp = self.actforward(obs)` under-reached the actor).
            return OPAQUE
        memo = (id(function), tuple(args), tuple(sorted(handed.items())), fields, modules,
                tuple(sorted(literals.items())))
        found = self.summaries.get(memo)
        if found is None or (receiver == "self" and memo not in self.effects and found is not OPAQUE):
            if len(self.summaries) >= self.limit:
                return None  # calls into a large web of functions: the module's cost stays linear
            self.summaries[memo] = OPAQUE  # while it is computed: a call back into it is opaque
            found = self.summaries[memo] = self._traced(function, resolve, bound, args, handed, dict(fields),
                                                        modules, literals, memo)
        if receiver == "self":
            # What the method leaves in the object's attributes is what the caller reads next
            # (`self.forward()` setting `self.fake_B`, then `self.backward_D()`).
            self.env.update(self.effects.get(memo, ()))
        shape = self.shapes.get(memo)
        self.shape = shape if shape is None or receiver in (None, "self") else tuple(
            outward_reach(r, receiver) for r in shape)
        return found if receiver in (None, "self") else outward_reach(found, receiver)

    def _fields(self, receiver: Optional[str]) -> dict[str, Reach]:
        """The caller's values of `receiver.X`, as the method names them (`self.X`)."""
        if receiver is None:
            return {}
        return {"self" + key[len(receiver):]: value for key, value in self.env.items()
                if key.startswith(receiver + ".") and "." not in key[len(receiver) + 1:]}

    def _traced(self, function: cst.FunctionDef, resolve: Resolver, bound: dict[str, cst.BaseExpression],
                args: list[Reach], handed: dict[str, str], fields: dict[str, Reach], modules: frozenset[str],
                literals: dict[str, object], memo: Summary) -> Reach:
        params = frozenset(p.name.value for p in (*function.params.posonly_params, *function.params.params,
                                                   *function.params.kwonly_params))

        def named(target: cst.BaseExpression) -> str:
            written = receiver_key(target)
            root = root_of(written)
            return rebase(written, root, handed[root]) or written if root in handed else written

        inner = Tracer(modules, named, params, self.ours, self.names, resolve, self.depth + 1, self.summaries,
                       self.limit, function, literals)
        inner.env.update(fields)
        inner.env.update((param, reach) for (param, _), reach in zip(bound.items(), args) if param not in handed)
        # A parameter the call leaves to a constant default (`C=1`, `clip_val=1e-5`) holds no graph.
        inner.env.update((p.name.value, CLEAN) for p in (*function.params.posonly_params, *function.params.params,
                                                         *function.params.kwonly_params)
                         if p.name.value not in bound and p.default is not None and constant(p.default))
        inner.effects = self.effects
        inner.shapes = self.shapes
        inner.block(block_of(function.body))
        self.effects[memo] = tuple((key, value) for key, value in inner.env.items()
                                   if key.startswith("self.") and fields.get(key) is not value)
        returned = union(CLEAN, *inner.returns)
        shape = shape_of(inner.elements) if len(inner.elements) == len(inner.returns) else None
        # `@torch.no_grad()` over the function: nothing it computes carries a graph.
        if any(self._no_grad_decorator(d.decorator) for d in function.decorators):
            returned, shape = cut(returned), None if shape is None else tuple(cut(r) for r in shape)
        self.shapes[memo] = shape
        return returned

    def _no_grad_decorator(self, decorator: cst.BaseExpression) -> bool:
        if isinstance(decorator, cst.Call):
            return self._no_grad(decorator)
        return self._no_grad(cst.Call(func=decorator))


def constant(node: cst.BaseExpression) -> bool:
    """A number, a string, True, False or None, negated or not."""
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return (isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.BaseString))
            or isinstance(node, cst.Name) and node.value in ("True", "False", "None"))


def _calls_in(node: cst.CSTNode, elsewhere: tuple[type[cst.CSTNode], ...] = (cst.Lambda,)) -> list[cst.Call]:
    """Calls in `node`, not inside lambdas (or the other `elsewhere` nodes): their bodies run
    elsewhere."""
    found: list[cst.Call] = []
    pending: list[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, elsewhere):
            continue
        if isinstance(current, cst.Call):
            found.append(current)
        pending.extend(current.children)
    return found


def _trains(body: cst.CSTNode) -> bool:
    """Whether a loop body calls `.backward(` (not in a def or class of its own)."""
    return any(isinstance(call.func, cst.Attribute) and call.func.attr.value in _BACKWARD
               for call in _calls_in(body, (cst.Lambda, cst.FunctionDef, cst.ClassDef)))


def _elided(function: cst.FunctionDef) -> bool:
    """A body of one `pass` on the `def` line, as elision.py leaves a function it cut."""
    body = function.body
    return isinstance(body, cst.SimpleStatementSuite) and all(isinstance(s, cst.Pass) for s in body.body)


def trace(body: Sequence[cst.CSTNode], modules: frozenset[str], key: Key, params: frozenset[str],
          ours: frozenset[str], names: Names,
          resolve: Optional[Resolver] = None, summaries: Optional[Summaries] = None,
          limit: int = SUMMARIES, function: Optional[cst.FunctionDef] = None,
          entry: Optional[Mapping[str, Reach]] = None, record: Optional[list[Call]] = None,
          optimizers: Optional[Mapping[str, frozenset[str]]] = None) -> dict[int, Reach]:
    """What the loss of each backward call in `body` reaches (id(call) -> Reach); `summaries`:
    the module's function summaries so far, at most `limit`; `entry`: what some parameters hold
    on entry (what every call of the function hands them); `record` gathers the scope's calls."""
    tracer = Tracer(modules, key, params, ours, names, resolve, 0, summaries, limit, function)
    tracer.env.update((name if "." in name or name.endswith(CALLED) else key(cst.Name(name)), reach)
                      for name, reach in (entry or {}).items() if name != FROZEN)
    tracer.frozen = set(entry[FROZEN].modules) if entry and FROZEN in entry else set()
    tracer.record = record
    tracer.optimizers = optimizers or {}
    tracer.block(body)
    return tracer.found
