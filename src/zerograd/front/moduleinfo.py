"""The data a module's first pass (facts.py) fills: what each class, function and the module
know, and the queries the later passes ask of them (qualified names, methods through bases, the
class a parameter is always handed)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Union

import libcst as cst

from ..knowledge.frameworks import Framework
from ..knowledge.optimizers import Built, OptimizerTable
from .counters import Counters
from .naming import assigned_names, block_of, dotted, positional
from .walk import calls_in


@dataclass
class ClassInfo:
    name: str
    methods: dict[str, cst.FunctionDef] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)  # `self.agent` -> class name (as instances)
    built: dict[str, cst.Call] = field(default_factory=dict)  # `self.agent` -> the call that built it
    fields: dict[str, str] = field(default_factory=dict)  # `self.opt = optimizer` in __init__: opt -> optimizer
    # `self.gen_loss = hinge_gen_loss`, `self.recon = F.l1_loss`: a function (None: assigned
    # anything else somewhere in the class): calling it runs that function, no module.
    callables: dict[str, Optional[str]] = field(default_factory=dict)
    plain: dict[str, bool] = field(default_factory=dict)  # `self.gamma`: every assignment of it holds no graph
    node: Optional[cst.ClassDef] = None
    # `super().__init__(actor, actor_optim)` in its `__init__`: what it hands its first base's
    # constructor, which may keep it as fields (settle._inherited_fields).
    up: Optional[cst.Call] = None
    assigned: set[str] = field(default_factory=set)  # `self.x` its methods assign
    # What its bases in other modules of the project build as optimizers (`self.optimizer` ->
    # the modules it holds): Outside.attributes, handed on to its own subclasses there.
    received: dict[str, frozenset[str]] = field(default_factory=dict)
    # The class of another module of the project whose constructor `up` hands its parameters to
    # (module, class): what a construction of this class hands its fields, that one keeps too.
    up_origin: Optional[tuple[str, str]] = None


@dataclass
class FunctionFacts:
    # Frozen sets, rebound when they grow: most functions leave them empty, and an empty set
    # takes 216 bytes (a generated file of 30k functions held 25 MB of them).
    events: bool = False
    callees: set[str] = field(default_factory=set)  # names it calls or hands over (for pruning)
    stepped: frozenset[str] = frozenset()
    cleared: frozenset[str] = frozenset()
    fed: frozenset[str] = frozenset()  # receivers handed a loss (`engine.backward(loss)`)
    parameters: set[str] = field(default_factory=set)
    instances: dict[str, str] = field(default_factory=dict)  # `t` -> class name (qualified if imported)
    built: dict[str, cst.Call] = field(default_factory=dict)  # `t` -> the call that built it
    partials: dict[str, cst.Call] = field(default_factory=dict)  # `step = partial(f, model, opt)`
    nested: dict[str, cst.FunctionDef] = field(default_factory=dict)  # defs in its body
    parent: Optional[cst.FunctionDef] = None  # the enclosing function (lexical scope)
    increments: frozenset[str] = frozenset()  # local names it adds to (`micro += 1`)
    compared: frozenset[str] = frozenset()  # local names an `if`/`while` test compares
    cls: Optional[ClassInfo] = None  # the class it is a method of


@dataclass
class Pending:
    """An assignment from a call that may be a builder of this module, read once every function
    is (settle.py)."""

    scope: int  # id of the function assigning (0: the module body)
    targets: list[Optional[str]]  # the keys assigned, in order (one, or an unpacking's)
    unpacked: bool
    callee: str  # a module-level function's name, or a method's
    method: bool  # `self.<callee>(...)`
    cls: Optional[ClassInfo]  # the caller's object's class, for methods
    call: cst.Call
    imported: bool = False  # `callee` is the qualified name of another module's function


@dataclass
class Registered:
    """An engine a framework's factory built (`trainer = create_supervised_trainer(model, opt,
    loss, gradient_accumulation_steps=4)`), and the handlers registered on it per iteration."""

    framework: Framework
    call: cst.Call
    optimizer: str  # the key of the optimizer it was handed
    accumulation: Optional[int]  # None: computed
    handlers: list[tuple[str, cst.FunctionDef]] = field(default_factory=list)  # (event, handler)


@dataclass
class ModuleInfo:
    aliases: dict[str, str] = field(default_factory=dict)
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    table: OptimizerTable = field(default_factory=OptimizerTable)
    facts: dict[int, FunctionFacts] = field(default_factory=dict)  # id(FunctionDef) -> facts
    module: FunctionFacts = field(default_factory=FunctionFacts)  # the module body's own
    every_function: list[cst.FunctionDef] = field(default_factory=list)
    class_of: dict[int, ClassInfo] = field(default_factory=dict)  # id(ClassDef) -> its info
    relevant: set[int] = field(default_factory=set)  # functions that can perform an event
    registered: set[str] = field(default_factory=set)  # names handed to a framework per batch
    stars: list[str] = field(default_factory=list)  # modules imported with `from m import *`
    # (id of the function, 0 for the module body; engine key) -> what built it, and the handlers
    # registered on it there: (that engine, event, the handler or its name).
    engines: dict[tuple[int, str], Registered] = field(default_factory=dict)
    handlers: list[tuple[tuple[int, str], str, Union[str, cst.FunctionDef]]] = field(default_factory=list)
    # A framework's accumulation keyword -> its literal value wherever this module sets it (None:
    # computed somewhere, or set to different values): frameworks.py
    accumulation: dict[str, Optional[int]] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    # Calls by a plain name (`train(args, trainer)`): how many per name, and those that hand an
    # instance of a class of this module over (`trainer = Trainer()`): (name, {arg: class}).
    name_calls: Counter[str] = field(default_factory=Counter)
    method_calls: Counter[str] = field(default_factory=Counter)  # calls `x.m(a, b, ...)` per method name, whatever `x`
    attribute_calls: Counter[str] = field(default_factory=Counter)  # calls `x.m(...)` per method name, whatever `x`
    passed: set[str] = field(default_factory=set)  # names (or attributes' names) handed to a call as arguments
    hands: bool = False  # some `.grad` is assigned another's (a hand-over: clears.Clears._handed)
    instance_args: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    # Calls by name that hand one value to several parameters (`apply(opt, boundary, boundary)`):
    # (name, the groups of argument places given one value).
    shared_args: list[tuple[str, frozenset[frozenset[str]]]] = field(default_factory=list)
    # Calls by name of two or more arguments, where they are (scope): (scope, name, call).
    handing: list[tuple[int, str, cst.Call]] = field(default_factory=list)
    # What this module's calls hand another module's functions and classes (settle.py): that
    # module -> (its function, or "" for a class's field; key as the callee names it) -> the
    # modules it holds.
    tells: dict[str, dict[tuple[str, str], set[str]]] = field(default_factory=dict)
    builders: dict[str, Built] = field(default_factory=dict)  # functions returning optimizers (settle.py)
    set_from_outside: set[str] = field(default_factory=set)  # attribute names assigned on other objects (`agent.alpha = ...`)
    _calls: dict[int, list[cst.Call]] = field(default_factory=dict)
    _typed: Optional[dict[tuple[int, str], str]] = None
    _twins: Optional[dict[int, dict[str, str]]] = None
    _by_id: Optional[dict[int, cst.FunctionDef]] = None
    _binds: dict[int, frozenset[str]] = field(default_factory=dict)

    def parameter_class(self, function: cst.FunctionDef, name: str) -> Optional[str]:
        """The class of this module whose instance every call of `function` (a module-level
        function, called by its name) hands over as parameter `name`."""
        if self._typed is None:
            self._typed = _typed_parameters(self)
        return self._typed.get((id(function), name))

    def function_of(self, scope: int) -> Optional[cst.FunctionDef]:
        """The function whose id is `scope` (0, the module body: none)."""
        if self._by_id is None or len(self._by_id) != len(self.every_function):
            self._by_id = {id(f): f for f in self.every_function}
        return self._by_id.get(scope)

    def binds(self, function: cst.FunctionDef) -> frozenset[str]:
        """The names `function` binds itself: its positional parameters and what it assigns
        (read once: settle.py asks it once per name a call in it hands over)."""
        if id(function) not in self._binds:
            self._binds[id(function)] = frozenset(positional(function)) | assigned_names(block_of(function.body))
        return self._binds[id(function)]

    def called(self, name: str) -> Optional[tuple[cst.FunctionDef, bool]]:
        """What a call by `name` runs (`f`, or `Class.m` for `self.m(...)`), and whether it takes
        `self` first."""
        return _by_name(self, name)

    def twin_parameters(self, function: cst.FunctionDef) -> dict[str, str]:
        """Parameters of a module-level function (or a method called as `self.m(...)`) that
        every such call in the module hands one value (`apply(opt, boundary, boundary)`): each
        -> the first of its group. Tests of them are one test (issue 47: one window decision
        passed as two flags)."""
        if self._twins is None:
            self._twins = _twin_parameters(self)
        return self._twins.get(id(function), {})

    def call_sites(self, function: cst.FunctionDef) -> Optional[int]:
        """How many calls in the module may run `function`: by its name, or for a method every
        `x.m(...)` whatever `x`; None when its name is handed to a call (a callback, a thread's
        target), which may run it with anything."""
        name = function.name.value
        if name in self.passed:
            return None
        facts = self.facts.get(id(function))
        return self.attribute_calls[name] if facts is not None and facts.cls is not None else self.name_calls[name]

    def calls_of(self, node: cst.CSTNode) -> list[cst.Call]:
        """calls_in, computed once per node: two passes walk the same statements."""
        found = self._calls.get(id(node))
        if found is None:
            found = self._calls[id(node)] = calls_in(node)
        return found

    def qualify(self, node: cst.BaseExpression) -> Optional[str]:
        name = dotted(node)
        return None if name is None else self.qualify_name(name)

    def qualify_name(self, name: str) -> str:
        """A dotted name as imported (`optim.Optimizer` -> `torch.optim.Optimizer`)."""
        head, _, rest = name.partition(".")
        head = self.aliases.get(head, head)
        return f"{head}.{rest}" if rest else head

    def facts_of(self, function: Optional[cst.FunctionDef]) -> FunctionFacts:
        return self.module if function is None else self.facts[id(function)]

    def method(self, cls: ClassInfo, name: str, depth: int = 0) -> Optional[cst.FunctionDef]:
        """Method `name` of `cls` or of its bases defined in this module."""
        if name in cls.methods:
            return cls.methods[name]
        for base in cls.bases if depth < 5 else ():
            info = self.classes.get(base.rsplit(".", 1)[-1])
            found = self.method(info, name, depth + 1) if info is not None and info is not cls else None
            if found is not None:
                return found
        return None

    def lineage(self, cls: ClassInfo) -> list[ClassInfo]:
        """`cls` and its bases defined in this module."""
        found: list[ClassInfo] = []
        pending = [cls]
        while pending and len(found) < 6:
            current = pending.pop()
            if all(current is not c for c in found):
                found.append(current)
                pending.extend(c for b in current.bases if (c := self.classes.get(b.rsplit(".", 1)[-1])) is not None)
        return found

    def inherited(self, cls: ClassInfo, name: str, depth: int = 0) -> Optional[str]:
        """The qualified name of method `name` when `cls` takes it from an imported base
        (`class MyTrainer(trainlib.Trainer)` -> `trainlib.Trainer.train_step`)."""
        if name in cls.methods:
            return None
        for base in cls.bases if depth < 5 else ():
            info = self.classes.get(base.rsplit(".", 1)[-1])
            if info is not None and info is not cls:
                found = self.inherited(info, name, depth + 1)
            elif base.split(".", 1)[0] in self.aliases:
                found = f"{self.qualify_name(base)}.{name}"
            else:
                found = None
            if found is not None:
                return found
        return None


def _typed_parameters(info: ModuleInfo) -> dict[tuple[int, str], str]:
    """Parameters of module-level functions and constructors that every call by name hands an
    instance of one class of this module (issue 45: a `train(args, trainer)` that calls
    `trainer.train_step()`; `Trainer(vae)` whose `self.vae(img)` runs the VAE's forward)."""
    seen: dict[tuple[str, str], Counter[str]] = {}
    for name, handed in info.instance_args:
        function = _called(info, name)
        if function is None:
            continue
        params = list(positional(function))
        params = params[1:] if function is not info.functions.get(name) else params  # a constructor's `self`
        for where, cls in handed.items():
            param = params[int(where[1:])] if where.startswith("#") and int(where[1:]) < len(params) else where
            seen.setdefault((name, param), Counter())[cls] += 1
    typed = {}
    for (name, param), classes in seen.items():
        (cls, count), = classes.most_common(1)
        function = _called(info, name)
        if len(classes) == 1 and count == info.name_calls[name] and cls in info.classes and function is not None:
            typed[(id(function), param)] = cls
    return typed


def _twin_parameters(info: ModuleInfo) -> dict[int, dict[str, str]]:
    """Per function: the calls of it counted (by every name it is called by) and the places each
    hands one value to; twins where every call agrees."""
    calls: Counter[int] = Counter()
    seen: dict[int, Counter[frozenset[frozenset[str]]]] = {}
    functions: dict[int, tuple[cst.FunctionDef, bool]] = {}
    for name, count in info.name_calls.items():
        found = _by_name(info, name)
        if found is not None:
            calls[id(found[0])] += count
            functions[id(found[0])] = found
    for name, groups in info.shared_args:
        found = _by_name(info, name)
        if found is not None:
            seen.setdefault(id(found[0]), Counter())[groups] += 1
    twins: dict[int, dict[str, str]] = {}
    for key, counted in seen.items():
        (groups, count), = counted.most_common(1)
        if len(counted) != 1 or count != calls[key]:
            continue
        function, method = functions[key]
        params = list(positional(function))[int(method):]
        named = [{params[int(w[1:])] if w.startswith("#") and int(w[1:]) < len(params) else w for w in group}
                 for group in groups]
        twins[key] = {p: min(group) for group in named for p in group if p != min(group)}
    return twins


def _by_name(info: ModuleInfo, name: str) -> Optional[tuple[cst.FunctionDef, bool]]:
    """A module-level function called by name, or `Class.m`: the method `self.m` runs (and
    whether it takes `self` first)."""
    owner, _, method = name.rpartition(".")
    if not owner:
        function = info.functions.get(name)
        return (function, False) if function is not None else None
    cls = info.classes.get(owner)
    found = info.method(cls, method) if cls is not None else None
    return (found, True) if found is not None else None


def _called(info: ModuleInfo, name: str) -> Optional[cst.FunctionDef]:
    """What a call by `name` runs: a module-level function, or a class's constructor
    (`Trainer(vae)` hands `vae` to `Trainer.__init__`)."""
    cls = info.classes.get(name)
    if cls is not None:
        return info.method(cls, "__init__")
    return info.functions.get(name)
