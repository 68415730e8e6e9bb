"""A module (whole, or in chunks of top-level statements) -> a Program: every scope's IR.

Pass 1 (facts.py) reads definitions and receivers; pass 2 (scopes.py) builds the module body
and every function that can perform an event; then each function is told whether it is a step
function (rules.md section 3: no caller here, and positive evidence that it runs per batch).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Optional, Union

import libcst as cst

from ..analysis.model import Function, Program, Seq, Settings
from ..knowledge.frameworks import ALONE, Outside, Slot, Valued
from ..knowledge.optimizers import (
    NON_TORCH_NUMERIC,
    OTHER_AUTOGRAD_ROOTS,
    TORCH_FAMILY,
    Built,
    OptimizerTable,
    is_optimizer_callee,
)
from .calls import Context, Link
from .counters import stepped_counters
from .drivers import add_driver, add_registered, hooked, hooks, parameter
from .facts import Collector, mark_relevant
from .moduleinfo import ClassInfo, ModuleInfo
from .naming import assigned_names, block_of, positional, statements_of, suites
from .scopes import Builder
from .settle import settle
from .sites import Chunk, Sites
from .valued import summarise


@dataclass(frozen=True)
class Exports:
    """What other modules of a project may call: name (`f`, `Class.m`, inherited methods too) ->
    (position in Program.functions, positional parameters); and per class, its `__init__`'s
    positional parameters and the fields it keeps (`self.opt = optimizer`: opt -> optimizer)."""

    functions: dict[str, tuple[int, tuple[str, ...]]]
    fields: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]
    hooked: dict[str, str] = field(default_factory=dict)  # class -> the framework calling its hooks
    builders: dict[str, Built] = field(default_factory=dict)  # function -> what it returns (builders.py)
    # What its calls hand other modules' functions and classes (ModuleInfo.tells).
    tells: dict[str, dict[tuple[str, str], frozenset[str]]] = field(default_factory=dict)
    # Per class, the optimizers its methods (or its bases') build on `self` and the modules each
    # holds: what a subclass in another module steps (Outside.attributes).
    attributes: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    values: dict[str, Valued] = field(default_factory=dict)  # function -> what its return value reaches
    # Per class, the class of another module its constructor hands its parameters up to
    # (ClassInfo.up_origin): the fields that one keeps are told what a construction hands.
    up: dict[str, tuple[str, str]] = field(default_factory=dict)

# Names of per-batch update functions (rules.md section 3); `test_*` and `main` never are.
STEP_NAMES = re.compile(
    r"(?:^|_)(?:step|update|learn|optimi[sz]e(?:_model)?|train_?batch|train_on_batch|fit_batch|"
    r"train_iter(?:ation)?|iteration|train_one_batch)(?:_|$)|^training_step$",
    re.I,
)
_NOT_STEP = re.compile(r"^(?:test_?|main$)", re.I)


def build(module: Union[cst.Module, list[Chunk]], settings: Settings) -> tuple[Program, Sites]:
    program, sites, _ = build_module(module, settings)
    return program, sites


def build_module(module: Union[cst.Module, list[Chunk]], settings: Settings, link: Optional[Link] = None,
                 linked: frozenset[str] = frozenset(), outside: Outside = ALONE,
                 fields: Optional[dict[str, dict[str, str]]] = None,
                 values: frozenset[str] = frozenset()) -> tuple[Program, Sites, Exports]:
    """build, and the module's functions that other modules can call: name (`f`, `Class.m`)
    -> (position in Program.functions, positional parameters). `link` and `linked` (project.py)
    name the functions of other modules of the project; `values` those whose return values
    modules of the project trace (Exports.values)."""
    chunks = module if isinstance(module, list) else [Chunk(module)]
    info = ModuleInfo(table=OptimizerTable(settings))
    collector = Collector(info)
    for chunk in chunks:
        collector.statements(chunk.module.body)
    for name, kept in (fields or {}).items():  # the scan's: a constructor whose body was cut keeps them too
        found = info.classes.get(name)
        if found is not None:
            found.fields.update({a: p for a, p in kept.items() if a not in found.fields})
    settle(collector, outside)
    mark_relevant(info, linked)
    sites = Sites(chunks)
    if _other_autograd_only(info) or _not_pytorch(info, outside.pytorch):
        return Program([Function("<module>", _empty(), -1)], {}), sites, Exports({}, {})
    placed = [(f, cls, (number, top)) for number, chunk in enumerate(chunks)
              for top, statement in enumerate(chunk.module.body)
              for f, cls in _functions([statement], None, info) if id(f) in info.relevant]
    functions = [(f, cls) for f, cls, _ in placed]
    index = {id(f): position + 1 for position, (f, _) in enumerate(functions)}
    builder = Builder(info, sites, index, link)
    builder.exported = outside.value
    _hook_facts(builder, info, outside)
    scopes = [_module_scope(builder, chunks, info)]
    for function, cls, (sites.chunk, sites.top) in placed:
        scopes.append(_function_scope(builder, function, cls, info))
    # A parameter that callers pass an optimizer to is one (`def step(o): o.step()`): rebuild
    # the functions whose parameters were found so, until nothing new is learnt.
    for _ in range(3):
        known = set(builder.optimizer_params)
        stale = {f for f, _ in known & builder.doubted}
        builder.doubted = {(f, r) for f, r in builder.doubted if f not in stale}  # rebuilt afresh
        for position, (function, cls, (sites.chunk, sites.top)) in enumerate(placed, start=1):
            if id(function) in stale:
                scopes[position] = _function_scope(builder, function, cls, info)
        if builder.optimizer_params == known:
            break
    # What every call of a function in the module hands its parameters (a loader's batch, a
    # literal): rebuild the functions that learn it, as far as three calls down.
    for _ in range(3):
        entries = builder.entry_reaches()
        changed = {f for f in entries.keys() | builder.entries.keys() if entries.get(f) != builder.entries.get(f)}
        if not changed:
            break
        builder.entries = entries
        builder.doubted = {(f, r) for f, r in builder.doubted if f not in changed}
        for position, (function, cls, (sites.chunk, sites.top)) in enumerate(placed, start=1):
            if id(function) in changed:
                scopes[position] = _function_scope(builder, function, cls, info)
    for cls in {id(c): c for c in info.class_of.values()}.values():
        framework = builder.frameworks.get(id(cls))
        if framework is not None:
            add_driver(info, cls, framework, sites, index, scopes, chunks)
    for engine in info.engines.values():
        add_registered(engine, sites, index, scopes, chunks)
    counters = info.counters
    phases = {counters.key_of(name): start for name, start in counters.start.items()}
    program = Program(scopes, {k: frozenset(v) for k, v in info.table.links.items()}, phases=phases)
    for position, (function, cls) in enumerate(functions, start=1):
        if _is_step_function(function, cls, builder, info):
            program.functions[position] = _with_step(program.functions[position])
    hooks = {cls.name: f.name for cls in info.class_of.values() if (f := builder.frameworks.get(id(cls))) is not None}
    tells = {module: {key: frozenset(held) for key, held in keys.items()} for module, keys in info.tells.items()}
    return program, sites, replace(_exports(info, index), hooked=hooks, tells=tells,
                                   values=_values(builder, info, values, chunks))


def _values(builder: Builder, info: ModuleInfo, names: frozenset[str], chunks: list[Chunk]) -> dict[str, Valued]:
    """What the return values of its functions `names` reach, for other modules (valued.py).
    A global of the module the function calls (`DISC(fake)`) may be any module: opaque."""
    found: dict[str, Valued] = {}
    if not names:
        return found
    ours = frozenset(info.functions) | frozenset(info.classes) | frozenset(
        assigned_names([s for chunk in chunks for s in chunk.module.body]))
    for name in sorted(names):
        head, _, method = name.partition(".")
        cls = info.classes.get(head) if method else None
        function = info.method(cls, method) if cls is not None else info.functions.get(name)
        valued = summarise(function, partial(builder.tracer, function, ours=ours)) if function is not None else None
        if valued is not None:
            found[name] = valued
    return found


def _hook_facts(builder: Builder, info: ModuleInfo, outside: Outside) -> None:
    """rules.md section 7: the classes whose hooks a framework calls. Their hooks have a caller
    (no step functions), the framework's optimizer is one, and a hook's optimizer and closure
    parameters are the framework's; the modules linked with this one may set its accumulation."""
    for keyword, value in outside.accumulation.items():
        info.accumulation[keyword] = value if info.accumulation.get(keyword, value) == value else None
    builder.frameworks = hooked(info, outside)
    for key, event, handler in info.handlers:
        found = handler if isinstance(handler, cst.FunctionDef) else _function_named(info, handler)
        if key in info.engines and found is not None:
            info.engines[key].handlers.append((event, found))
            builder.called.add(id(found))
    for cls in {id(c): c for c in info.class_of.values()}.values():
        framework = builder.frameworks.get(id(cls))
        if framework is None:
            continue
        info.table.built.add(framework.optimizer)
        for name, hook in hooks(info, cls, framework).items():
            builder.called.add(id(hook))
            slot = framework.slot(name) or Slot()
            for position, role in ((slot.optimizer, builder.hook_optimizers), (slot.closure, builder.closures)):
                param = parameter(hook, position)
                if param is not None:
                    role[id(hook)] = param


def _function_named(info: ModuleInfo, name: str) -> Optional[cst.FunctionDef]:
    """The one function of this name (a handler handed over by name), if there is one."""
    found = [f for f in info.every_function if f.name.value == name]
    return found[0] if len(found) == 1 else None


def _exports(info: ModuleInfo, index: dict[int, int]) -> Exports:
    named = list(info.functions.items())
    fields = {}
    for cls in info.classes.values():
        names = {name for c in info.lineage(cls) for name in c.methods}
        named += [(f"{cls.name}.{name}", found) for name in names if (found := info.method(cls, name)) is not None]
        init = info.method(cls, "__init__")
        owner = info.facts[id(init)].cls if init is not None else None
        if init is not None and owner is not None and owner.fields:
            fields[cls.name] = (positional(init), tuple(owner.fields.items()))
    up = {cls.name: cls.up_origin for cls in info.classes.values() if cls.up_origin is not None}
    return Exports({name: (index[id(f)], positional(f)) for name, f in named if id(f) in index}, fields,
                   builders=info.builders, attributes=_attributes(info), up=up)


def _attributes(info: ModuleInfo) -> dict[str, dict[str, frozenset[str]]]:
    """Per class, the optimizers on `self` that it or its bases build, with what each holds; only
    those holding nothing but modules on `self` (the subclass's `self` is the same object)."""
    table = info.table
    found = {}
    for cls in info.classes.values():
        held = {}
        for c in info.lineage(cls):
            held.update(c.received)
            for key in c.assigned:
                modules = table.links.get(key)
                if key in table.built and modules and all(m.startswith("self.") for m in modules):
                    held[key] = frozenset(modules)
        if held:
            found[cls.name] = held
    return found


def _module_scope(builder: Builder, chunks: list[Chunk], info: ModuleInfo) -> Function:
    items = []
    body = [s for chunk in chunks for s in chunk.module.body]
    ctx = builder.aliases(body, Context(evidence=frozenset(info.module.stepped & info.module.cleared),
                                        counts=stepped_counters(body, info.counters.key)))
    builder.reaches = builder.provenance(body, ctx)
    for number, chunk in enumerate(chunks):
        for top, statement in enumerate(chunk.module.body):
            builder.sites.chunk, builder.sites.top = number, top
            items.extend(builder.statement(statement, ctx))
    return Function("<module>", Seq(tuple(items)), -1, local=assigned_names(body))


def _function_scope(builder: Builder, function: cst.FunctionDef, cls: Optional[ClassInfo], info: ModuleInfo) -> Function:
    facts = info.facts[id(function)]
    evidence = facts.stepped & facts.cleared
    if cls is not None:  # a receiver stepped in one method and cleared in another is one optimizer
        methods = [info.facts[id(m)] for m in cls.methods.values()]
        evidence = frozenset().union(*(m.stepped for m in methods)) & frozenset().union(*(m.cleared for m in methods))
    ctx = Context(function=function, cls=cls, evidence=frozenset(evidence))
    framework = builder.framework(ctx)
    if framework is not None and id(function) in builder.hook_optimizers:
        ctx = replace(ctx, aliases=((builder.hook_optimizers[id(function)], framework.optimizer),))
    body = builder.scope(block_of(function.body), ctx)
    params = builder.shared(frozenset(facts.parameters))
    site = builder.sites.site(function)
    local = builder.shared(assigned_names(block_of(function.body)) - params)
    return Function(function.name.value, body, site, params=params, local=local,
                    links=_own_links(info, id(function), local | params))


def _own_links(info: ModuleInfo, scope: int, names: frozenset[str]) -> tuple[tuple[str, frozenset[str]], ...]:
    """The modules each optimizer a scope builds under a local name is built over, there, and
    what its callers hand each of its parameters (settle._handed_parameters)."""
    found = {key: modules for (to, key), modules in info.table.handed.items() if to == scope and key in names}
    for (built_in, key), sets in info.table.builds.items():
        if built_in == scope and key in names:
            found[key] = frozenset().union(*sets)
    return tuple(sorted(found.items()))


def _is_step_function(function: cst.FunctionDef, cls: Optional[ClassInfo], builder: Builder, info: ModuleInfo) -> bool:
    name = function.name.value
    if id(function) in builder.called or _NOT_STEP.match(name):
        return False
    if cls is not None and any(is_optimizer_callee(info.qualify_name(base)) for base in cls.bases):
        return False  # an optimizer's own step (KFAC's), which its caller's loop runs and clears around
    # An unresolved `x.update(...)` in a scope that clears could be this method's caller, and a
    # call of a function value in another scope that clears the caller of a closure its factory
    # returns (the closure's own `model(batch)` is not).
    if cls is not None and builder.unresolved.get(name, False):
        return False
    parent = info.facts[id(function)].parent
    if parent is not None and builder.unknown_clears - {id(function)} and _returned(name, parent):
        return False
    return bool(STEP_NAMES.search(name)) or name in info.registered


def _returned(name: str, factory: cst.FunctionDef) -> bool:
    """`return name` in `factory`: the closure escapes to whoever calls the factory."""
    return any(isinstance(s, cst.Return) and isinstance(s.value, cst.Name) and s.value.value == name
               for s in statements_of(block_of(factory.body)))


def _with_step(function: Function) -> Function:
    return replace(function, step_function=True)


def _other_autograd_only(info: ModuleInfo) -> bool:
    """A module importing MXNet, Warp, JAX... and not torch: its backward is not PyTorch's."""
    roots = {name.lstrip(".").split(".")[0] for name in info.aliases.values()}
    return bool(roots & OTHER_AUTOGRAD_ROOTS) and "torch" not in roots


def _not_pytorch(info: ModuleInfo, linked_to_pytorch: bool = False) -> bool:
    """rules.md v2 section 2: a module with evidence of another system (NumPy, JAX, its own
    autograd class with a `backward` method) and none of PyTorch (an import of the torch family,
    or of the project's own modules, or a star import of anything but NumPy and its kin; in a
    project run, a module linked with it that imports PyTorch: BERT-pytorch's NumPy-only
    `ScheduledOptim` wraps a torch optimizer) is not PyTorch training code."""
    names = info.aliases.values()
    if any(name.startswith(".") or name.split(".")[0] in TORCH_FAMILY for name in names):
        return False
    own_autograd = any("backward" in cls.methods for cls in info.classes.values())
    # `from torch.nn import *`, or a project's `from modeling.deeplab import *`, may bring
    # PyTorch under names no import shows (deeplab-xception's trainer imports only NumPy by name).
    starred = any(star.lstrip(".").split(".")[0] not in NON_TORCH_NUMERIC for star in info.stars)
    return own_autograd or not (linked_to_pytorch or starred) and any(
        name.split(".")[0] in NON_TORCH_NUMERIC for name in names)


def _functions(body: Sequence[cst.CSTNode], cls: Optional[ClassInfo],
               info: ModuleInfo) -> Iterable[tuple[cst.FunctionDef, Optional[ClassInfo]]]:
    """Every function and method, nested ones included, with its enclosing class."""
    for statement in body:
        if type(statement) is cst.SimpleStatementLine:
            continue  # most statements: nothing defined in them
        if type(statement) is cst.FunctionDef:
            yield statement, cls
            yield from _functions(block_of(statement.body), None, info)
        elif type(statement) is cst.ClassDef:
            yield from _functions(block_of(statement.body), info.class_of[id(statement)], info)
        else:
            for suite in suites(statement):
                yield from _functions(block_of(suite), cls, info)


def _empty() -> Seq:
    return Seq()
