"""Which function of this module a call runs, and what the call hands it (rules.md v2 §3).

Plain names resolve lexically (nested definitions, then the module); `self.m()` and `cls.m()`
through the enclosing class and its bases defined here; `t.m()` through instances of this
module's classes (`t = Trainer()`, `self.agent = Agent()`). A call becomes a `Call` node with
the caller's receivers bound to the callee's parameters; anything else is an unknown call that
performs no event.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional

import libcst as cst

from ..analysis.model import Call, Event, Kind, Node, Test
from ..knowledge.frameworks import Framework
from ..knowledge.optimizers import CLEARING_FUNCTIONS, is_optimizer_callee
from .conditions import literal_text
from .counters import Counts
from .moduleinfo import ClassInfo, FunctionFacts, ModuleInfo
from .naming import assigned_names, block_of, dotted, positional
from .sites import Sites

Link = Callable[[str], Optional[str]]  # a qualified name -> the project function it names
Owner = tuple[str, str]  # ("module" | "optimizer" | "group", key): whose parameters a loop visits


@dataclass(frozen=True)
class Context:
    """Where the builder stands inside one scope."""

    function: Optional[cst.FunctionDef] = None  # None: the module body
    cls: Optional[ClassInfo] = None
    aliases: tuple[tuple[str, str], ...] = ()  # local name -> the receiver it stands for
    conditions: tuple[tuple[str, tuple[cst.BaseExpression, ...]], ...] = ()  # flag -> the tests it holds
    gate: Optional[Test] = None  # inside `with accelerator.accumulate(...)`
    moves: Optional[frozenset[str]] = None  # names the innermost loop assigns (None: no loop)
    owners: tuple[tuple[str, Owner], ...] = ()  # loop variable -> whose parameters it visits
    evidence: frozenset[str] = frozenset()  # receivers both stepped and cleared: optimizers
    first: Optional[tuple[str, bool]] = None  # the loop counter peeled, and whether this is its first turn
    settings: tuple[tuple[str, cst.BaseExpression], ...] = ()  # locals that name the object's configuration
    flags: frozenset[str] = frozenset()  # names assigned only True and False: their value is a path fact
    counts: Counts = ()  # stepped counters (counters.py): their assignments are events


BUILTINS = frozenset(dir(builtins))


class Calls:
    """Call resolution for the scope builder (scopes.py), which supplies `key` and `is_optimizer`."""

    info: ModuleInfo
    sites: Sites
    link: Optional[Link]
    index: dict[int, int]  # id(FunctionDef) -> position in Program.functions
    unresolved: dict[str, bool]  # method names called on unknown receivers -> that scope clears
    unknown_clears: set[int]  # the scopes (id(function), 0: module) that clear and call a function value they cannot name
    called: set[int]  # functions with a resolved caller
    optimizer_params: set[tuple[int, str]]  # parameters some caller passes an optimizer to
    doubted: set[tuple[int, str]]  # receivers judged no optimizer, per function

    frameworks: dict[int, Framework]  # id(ClassInfo) -> the framework calling its hooks
    closures: dict[int, str]  # id(hook) -> its parameter that is the framework's closure

    def key(self, node: cst.BaseExpression, ctx: Context) -> str:
        raise NotImplementedError

    def framework(self, ctx: Context) -> Optional[Framework]:
        """The framework that calls the hooks of the class being built, if any."""
        return self.frameworks.get(id(ctx.cls)) if ctx.cls is not None and self.frameworks else None


    def is_optimizer(self, receiver: str, ctx: Context) -> bool:
        raise NotImplementedError

    def _resolved_call(self, call: cst.Call, ctx: Context) -> list[Node]:
        resolved = self.resolve(call.func, ctx)
        if resolved is None:
            func = call.func
            if isinstance(func, cst.Name) and func.value in CLEARING_FUNCTIONS:
                return [Event(Kind.MAYBE_CLEAR, self.sites.site(call))]
            if isinstance(func, cst.Name) and ctx.function is not None and func.value in self._facts(ctx).parameters:
                return [Call(self.sites.site(call), -1, param=func.value)]
            clears = bool(self._facts(ctx).cleared)
            if isinstance(func, cst.Attribute):
                # Remembered for step functions: an unknown `x.update()` in a scope that clears
                # may be the caller of a method named `update` (program.py).
                self.unresolved[func.attr.value] = self.unresolved.get(func.attr.value, False) or clears
            elif (isinstance(func, cst.Name) and func.value not in self.info.aliases and func.value not in BUILTINS
                  and not self._enclosing_parameter(func.value, ctx)):
                # A function value bound at run time (`step = make_step(...)`, then `step(batch)`):
                # in a scope that clears, it may be a closure that a factory returned. Not a
                # factory's parameter its closure calls (`model(batch)`).
                if clears:
                    self.unknown_clears.add(id(ctx.function) if ctx.function is not None else 0)
            return []
        function, receiver = resolved
        self.called.add(id(function))
        if id(function) not in self.index:
            return []  # it performs no event, directly or through what it calls
        # A partial's bound arguments come first, as when Python calls it.
        partial = self._partial(call.func, ctx)
        args = [*partial.args[1:], *call.args] if partial is not None else list(call.args)
        return [self._call_node(call, function, receiver, ctx, args)]

    def _enclosing_parameter(self, name: str, ctx: Context) -> bool:
        """`name` is a parameter of a function enclosing the scope's."""
        parent = self._facts(ctx).parent if ctx.function is not None else None
        while parent is not None:
            facts = self.info.facts[id(parent)]
            if name in facts.parameters:
                return True
            parent = facts.parent
        return False

    def _external_call(self, call: cst.Call, ctx: Context) -> Optional[list[Node]]:
        """A function imported from another module of the project (`from .steps import update`,
        `steps.update(...)`): a Call bound to it when the modules are linked (project.py). The
        callee's parameters are not known here, so positions stand for them."""
        name = dotted(call.func)
        if name is None or self.link is None:
            return None
        head = name.split(".", 1)[0]
        if head not in self.info.aliases or head in self._facts(ctx).parameters or self.resolve(call.func, ctx):
            return None
        target = self.link(self.info.qualify(call.func) or "")
        if target is None:
            return None
        return [Call(self.sites.site(call), -1, tuple(self._positions(call.args, 0, ctx)), external=target)]

    def _external_method(self, call: cst.Call, ctx: Context) -> Optional[list[Node]]:
        """After the event methods (`t.zero_grad()` is a clear, as within a module):
        `t.train_step(b)` with `t = Trainer(model, opt)` of an imported class, or `self.m()` in a
        subclass of one: the receiver is the method's first parameter (`#0`), and what the
        constructor was handed is bound as `@parameter` (project.py turns those into fields)."""
        func = call.func
        if self.link is None or not isinstance(func, cst.Attribute):
            return None
        receiver, name = self.key(func.value, ctx), func.attr.value
        built, cls = None, None
        if receiver in ("self", "cls"):
            qualified = self.info.inherited(ctx.cls, name) if ctx.cls is not None else None
        else:
            built = self._instance(receiver, ctx)
            cls = self.info.classes.get(built[0]) if built is not None else None
            qualified = self.info.inherited(cls, name) if cls is not None else built and f"{built[0]}.{name}"
        target = self.link(qualified) if qualified else None
        if target is None:
            return None
        bindings = [("#0", receiver)]
        if built is not None and (cls is None or self.info.method(cls, "__init__") is None):
            # The imported class's own __init__ receives the arguments (no local one in between).
            handed = self._positions(built[1].args, 1, ctx, built[2])
            bindings += [("@" + param, key) for param, key in handed]
        bindings += self._positions(call.args, 1, ctx)
        return [Call(self.sites.site(call), -1, tuple(bindings), external=target)]

    def _positions(self, args: Sequence[cst.Arg], shift: int, ctx: Context,
                   where: str = "here") -> list[tuple[str, str]]:
        """(keyword or `#position`, caller's key) per argument, up to the first star."""
        bindings = []
        for position, arg in enumerate(args):
            if arg.star:
                break
            if isinstance(arg.value, (cst.Name, cst.Attribute, cst.Subscript)):
                key = self._handed_key(arg.value, where, ctx)
                if key is not None:
                    bindings.append((arg.keyword.value if arg.keyword else f"#{position + shift}", key))
        return bindings

    def _partial(self, func: cst.BaseExpression, ctx: Context) -> Optional[cst.Call]:
        """`step = functools.partial(train_step, model, opt)` for `step(batch)`: the bound call."""
        if not isinstance(func, cst.Name):
            return None
        scope = ctx.function
        while True:
            facts = self.info.facts_of(scope)
            if func.value in facts.partials:
                return facts.partials[func.value]
            if scope is None or func.value in facts.parameters:
                return None
            scope = facts.parent

    def _call_node(self, call: cst.Call, function: cst.FunctionDef, receiver: Optional[str], ctx: Context,
                   args: Optional[list[cst.Arg]] = None) -> Call:
        params = list(positional(function))
        bindings: list[tuple[str, str]] = []
        if receiver is not None and params and params[0] in ("self", "cls"):
            bindings.append((params[0], receiver))
            bindings.extend(self._field_bindings(receiver, params[0], ctx))
            params = params[1:]
        funcs: list[tuple[str, int, str]] = []
        for position, arg in enumerate(call.args if args is None else args):
            if arg.star:
                break
            name = arg.keyword.value if arg.keyword else (params[position] if position < len(params) else None)
            if name is None:
                continue
            handed = self.resolve(arg.value, ctx) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            if handed is not None and id(handed[0]) in self.index:
                self.called.add(id(handed[0]))
                funcs.append((name, self.index[id(handed[0])], handed[1] or ""))
            elif isinstance(arg.value, (cst.Name, cst.Attribute, cst.Subscript)):
                # Receivers are bound by name: the callee's `optimizer` is the caller's `self.opt`.
                key = self.key(arg.value, ctx)
                bindings.append((name, key))
                if self.is_optimizer(key, ctx):
                    self.optimizer_params.add((id(function), name))
        return Call(self.sites.site(call), self.index[id(function)], tuple(bindings), tuple(funcs),
                    values=_values(function, call.args if args is None else args, receiver is not None))

    def resolve(self, func: cst.BaseExpression, ctx: Context) -> Optional[tuple[cst.FunctionDef, Optional[str]]]:
        """The function of this module a callee names, and the receiver bound to its `self`:
        lexical names, `self`/`cls` methods (base classes of this module too), methods of
        instances of this module's classes (`t = Trainer()`, `self.agent = Agent()`)."""
        partial = self._partial(func, ctx)
        if partial is not None:
            inner = partial.args[0].value
            if isinstance(inner, cst.Name) and inner.value == getattr(func, "value", None):
                return None  # `step = partial(step, ...)`: not a function of ours we can name
            return self.resolve(inner, ctx) if isinstance(inner, (cst.Name, cst.Attribute)) else None
        if isinstance(func, cst.Name):
            scope = ctx.function
            while scope is not None:
                facts = self.info.facts[id(scope)]
                if func.value in facts.nested:
                    return facts.nested[func.value], None
                if func.value in facts.parameters:
                    return None  # a parameter shadows a function of the same name
                scope = facts.parent
            found = self.info.functions.get(func.value)
            return (found, None) if found is not None else None
        if not isinstance(func, cst.Attribute):
            return None
        receiver = self.key(func.value, ctx)
        if receiver in ("self", "cls") and ctx.cls is not None:
            method = self.info.method(ctx.cls, func.attr.value)
            return (method, receiver) if method is not None else None
        cls = self._instance_class(receiver, ctx)
        if cls is not None:
            method = self.info.method(cls, func.attr.value)
            return (method, receiver) if method is not None else None
        return None

    def optimizer_class(self, cls: Optional[ClassInfo]) -> bool:
        """A class of ours that derives from a torch optimizer (a custom optimizer)."""
        return cls is not None and any(is_optimizer_callee(self.info.qualify_name(base)) for base in cls.bases)

    def custom_method(self, call: cst.Call, node: cst.BaseExpression, name: str, ctx: Context) -> Optional[Call]:
        """A custom optimizer's own `step`/`zero_grad` (rules.md v3 section 4): applied through
        its summary, so what it clears, steps or delegates is seen."""
        if not isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)):
            return None
        receiver = self.key(node, ctx)
        cls = self._instance_class(receiver, ctx)
        method = self.info.method(cls, name) if cls is not None and self.optimizer_class(cls) else None
        if method is None or id(method) not in self.index:
            return None
        self.called.add(id(method))
        return self._call_node(call, method, receiver, ctx)

    def _instance_class(self, receiver: str, ctx: Context) -> Optional[ClassInfo]:
        built = self._instance(receiver, ctx)
        return self.info.classes.get(built[0]) if built is not None else None

    def _instance(self, receiver: str, ctx: Context) -> Optional[tuple[str, cst.Call, str]]:
        """The class `receiver` is an instance of, the call that built it, and where: "here" (this
        scope), "class" (a `self.x` built in a method of this class) or "outer"."""
        if receiver.startswith("self.") and ctx.cls is not None and receiver in ctx.cls.attributes:
            return ctx.cls.attributes[receiver], ctx.cls.built[receiver], "class"
        scope = ctx.function
        while True:
            facts = self.info.facts_of(scope)
            if receiver in facts.instances:
                return facts.instances[receiver], facts.built[receiver], "here" if scope is ctx.function else "outer"
            if scope is None:
                return None
            if receiver in facts.parameters:
                return self._handed_instance(scope, receiver)
            scope = facts.parent

    def _handed_instance(self, function: cst.FunctionDef, param: str) -> Optional[tuple[str, cst.Call, str]]:
        """A parameter every caller hands an instance of one class of ours (ModuleInfo.
        parameter_class): its methods are that class's. Its constructor's arguments are the
        callers', so none is bound here (an empty call)."""
        cls = self.info.parameter_class(function, param)
        if cls is None or param in _assigned(function):
            return None
        return cls, cst.Call(cst.Name(cls)), "caller"

    def _field_bindings(self, receiver: str, me: str, ctx: Context) -> list[tuple[str, str]]:
        """`t = Trainer(model, opt)` and `self.optimizer = optimizer` in Trainer.__init__: in
        `t.m()`, the method's `self.optimizer` is the caller's `opt` (one optimizer, not two)."""
        built = self._instance(receiver, ctx)
        cls = self.info.classes.get(built[0]) if built is not None else None
        init = self.info.method(cls, "__init__") if cls is not None else None
        owner = self.info.facts[id(init)].cls if init is not None else None
        if built is None or init is None or owner is None:
            return []
        params = list(positional(init))[1:]
        handed = _handed(built[1], params)
        found = []
        for attr, param in owner.fields.items():
            value = handed.get(param)
            key = self._handed_key(value, built[2], ctx) if value is not None else None
            if key is not None:
                found.append((f"{me}.{attr}", key))
        return found

    def _handed_key(self, value: cst.BaseExpression, where: str, ctx: Context) -> Optional[str]:
        """A constructor's argument in the words of the scope that calls the instance's method."""
        key = self.key(value, ctx)
        if where == "here" or (where == "class" and key.startswith("self.")):
            return key
        if where == "class" and ctx.cls is not None:
            # `self.trainer = Trainer(model, optimizer)` in an __init__ that keeps `self.opt = optimizer`.
            return next((f"self.{attr}" for attr, param in ctx.cls.fields.items() if param == key), None)
        return None

    def _facts(self, ctx: Context) -> FunctionFacts:
        return self.info.facts_of(ctx.function)


def _handed(call: cst.Call, params: list[str]) -> dict[str, cst.BaseExpression]:
    """The receivers a call hands each named parameter (positions up to the first star)."""
    handed: dict[str, cst.BaseExpression] = {}
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        name = arg.keyword.value if arg.keyword else (params[position] if position < len(params) else None)
        if name is not None and isinstance(arg.value, (cst.Name, cst.Attribute, cst.Subscript)):
            handed[name] = arg.value
    return handed


def _values(function: cst.FunctionDef, args: Sequence[cst.Arg], bound: bool) -> tuple[tuple[str, str], ...]:
    """The callee's parameters this call gives a literal: passed (`update_params=False`), or a
    literal default left alone where no `*args`/`**kwargs` could pass it. A parameter the callee
    assigns is not its caller's value any more."""
    params = [*function.params.posonly_params, *function.params.params]
    if bound and params and params[0].name.value in ("self", "cls"):
        params = params[1:]
    named = {p.name.value: p for p in (*params, *function.params.kwonly_params)}
    found: dict[str, Optional[str]] = {}
    starred = False
    for position, arg in enumerate(args):
        if arg.star:
            starred = True
            continue
        positional = position < len(params) and not starred
        name = arg.keyword.value if arg.keyword else (params[position].name.value if positional else None)
        if name is not None:
            found[name] = literal_text(arg.value)
    if not starred:
        for name, param in named.items():
            if name not in found and param.default is not None:
                found[name] = literal_text(param.default)
    values = {name: text for name, text in found.items() if text is not None and name in named}
    if values:
        values = {name: text for name, text in values.items() if name not in _assigned(function)}
    return tuple(sorted(values.items()))


def _assigned(function: cst.FunctionDef) -> frozenset[str]:
    return assigned_names(block_of(function.body))
