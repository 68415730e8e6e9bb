"""What the module's first pass (facts.py) can only settle once every function is read (issue 45).

A builder may be defined after its callers, a class after its constructions, and a name proves
an optimizer only by how the whole module uses it. So after the pass: names assigned what a
builder of this module returns take what it returns (builders.py), the optimizers handed to a
constructor hold what the object keeps (constructed.py; its base's constructor may keep them),
those handed to a function what every call of it hands (its own, not its name's), and one built
by a class we cannot see holds what the call handed it if the name proves an optimizer. What
this module's calls hand another module's functions and classes goes to that module's build
(ModuleInfo.tells, linking.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Optional

import libcst as cst

from ..knowledge.frameworks import ALONE, Callee, Outside
from ..knowledge.optimizers import Signature, Slot, is_optimizer_callee
from .builders import LIGHTNING_HOOK, LIGHTNING_OPTIMIZERS, NOT, Reader, assigned_in, rebound, returns_of, signature, slots
from .constructed import handed
from .facts import Collector
from .moduleinfo import ClassInfo, ModuleInfo, Pending
from .naming import bound_arguments, positional, receiver_key
from .returned import Returned


def settle(collector: Collector, outside: Outside = ALONE) -> None:
    """`outside`: what the other modules of the project say (linking.py): what their builders
    return, their functions and classes, what they hand this module's."""
    info = collector.info
    table = info.table
    table.tensors = collector.holdings.tensors
    read: dict[tuple[int, bool], Optional[list[Slot]]] = {}  # (builder, lightning) -> what it returns
    for pending in collector.pending:
        if pending.imported:
            built = outside.builder(pending.callee)
            if built is not None:
                _bind_all(collector, pending, list(built[1]), built[0], True)
            continue
        found = _builder(info, pending)
        if found is None:
            continue
        function, lightning = found
        returned = _read(collector, read, function, lightning)
        if returned is not None:
            _bind_all(collector, pending, returned, signature(function, pending.method), False)
    _export(collector, read)
    _handed_classes(collector)
    _inherited_fields(info, outside)
    for key, modules in _handed_links(collector):
        table.built.add(key)
        table.links.setdefault(key, set()).update(modules)
    # A parameter's holdings are its function's own (program._own_links): another function may
    # name another optimizer alike (identity by binding, not by name).
    for (name, key), modules in [*outside.incoming.items(), *_handed_parameters(collector, outside)]:
        found = info.called(name) if name else None
        callee = found[0] if found is not None else None
        if callee is not None:
            where = (id(callee), key)
            if where not in table.builds and where not in table.grown:  # else what it builds or grows decides
                table.handed[where] = table.handed.get(where, frozenset()) | modules
        elif not name:  # a class's field
            table.built.add(key)
            table.links.setdefault(key, set()).update(modules)
    _returned_links(collector)
    for scope, key, modules in collector.maybe:
        if table.is_optimizer(key) and not table.links.get(key):
            table.links.setdefault(key, set()).update(modules)
            table.builds.setdefault((scope, key), set()).add(modules)
    _inherited_attributes(info, outside)


def _inherited_attributes(info: ModuleInfo, outside: Outside) -> None:
    """The optimizers a base class in another module of the project builds on `self`
    (`self.optimizer = self.configure_optimizers()` in `BaseCoach.restart_training`) are what a
    subclass here steps as `self.optimizer`, holding what they hold there; unless this module
    builds one of that name itself."""
    table = info.table
    own = set(table.built)
    for cls in info.classes.values():
        for current in info.lineage(cls):
            for base in current.bases:
                if base.rsplit(".", 1)[-1] in info.classes or base.split(".", 1)[0] not in info.aliases:
                    continue
                for key, modules in outside.attributes(info.qualify_name(base)).items():
                    if key not in own:
                        cls.received[key] = modules
                        table.built.add(key)
                        table.links.setdefault(key, set()).update(modules)


def _read(collector: Collector, read: dict[tuple[int, bool], Optional[list[Slot]]], function: cst.FunctionDef,
          lightning: bool) -> Optional[list[Slot]]:
    """What `function` returns (builders.slots), read once."""
    if (id(function), lightning) not in read:
        info = collector.info
        reader = Reader(id(function), info.table.builds, assigned_in(function, info.qualify),
                        partial(_construction, collector, function=function))
        read[(id(function), lightning)] = slots(function, lightning, reader)
    return read[(id(function), lightning)]


def _bind_all(collector: Collector, pending: Pending, returned: list[Slot], params: Signature, imported: bool) -> None:
    """The pending assignment's targets, each what its position of the builder's result is."""
    if len(returned) != len(pending.targets) or (not pending.unpacked and len(returned) != 1):
        return
    for key, slot in zip(pending.targets, returned):
        if key is not None and slot is not None:
            _bind_built(collector, pending, params, key, slot, imported)


def _export(collector: Collector, read: dict[tuple[int, bool], Optional[list[Slot]]]) -> None:
    """The module-level functions that build an optimizer, for the modules importing them."""
    info = collector.info
    building = {scope for scope, _ in info.table.builds}
    for name, function in info.functions.items():
        calls = any(isinstance(value, cst.Call) for value in returns_of(function))
        if id(function) not in building and not calls:
            continue
        returned = _read(collector, read, function, False)
        if returned and any(slot for slot in returned):
            info.builders[name] = (signature(function, False), tuple(returned))


def _builder(info: ModuleInfo, pending: Pending) -> Optional[tuple[cst.FunctionDef, bool]]:
    """The function the call names, and whether it is Lightning's `configure_optimizers`."""
    if not pending.method:
        found = info.functions.get(pending.callee)
        return (found, False) if found is not None else None
    if pending.cls is None:
        return None
    method = info.method(pending.cls, pending.callee)
    if method is None and pending.callee == LIGHTNING_OPTIMIZERS:
        method = info.method(pending.cls, LIGHTNING_HOOK)
        return (method, True) if method is not None else None
    return (method, False) if method is not None else None


def _construction(collector: Collector, call: cst.Call, *, function: cst.FunctionDef) -> Slot:
    """What a call a builder returns is: an optimizer over what it is handed, a scheduler, or unknown."""
    info = collector.info
    qualified = info.qualify(call.func) or ""
    if is_optimizer_callee(qualified) and qualified not in info.functions:
        facts = info.facts.get(id(function))
        shared = id(facts.cls) if facts is not None and facts.cls is not None else None
        owners = collector.holdings.of_construction(id(function), call, shared)
        return frozenset({frozenset(owners)}) if owners else None
    if qualified.startswith("torch.optim.lr_scheduler."):
        return NOT
    return None


def _bind_built(collector: Collector, pending: Pending, params: Signature, key: str,
                slot: frozenset[frozenset[str]], imported: bool) -> None:
    table = collector.info.table
    if slot == NOT:  # `opt, scheduler = make_optimizer(model)`: the scheduler is none
        if not any(built == key for _, built in table.builds):
            table.built.discard(key)
        return
    sets = rebound(slot, params, pending.call, imported)
    if not sets:
        return
    sets = frozenset(frozenset(collector.holdings.rooted(pending.scope, list(s))) for s in sets)
    table.built.add(key)
    for modules in sets:
        table.links.setdefault(key, set()).update(modules)
        table.builds.setdefault((pending.scope, key), set()).add(modules)


def _returned_links(collector: Collector) -> None:
    """Optimizers built over what a function of ours returns (`Adam(self.actor_parameters())`)."""
    table = collector.info.table
    returned = Returned(collector.info, collector.holdings)
    for scope, key, call, shared in collector.unheld:
        owners = collector.holdings.of_construction(scope, call, shared, returned)
        if owners:
            table.links.setdefault(key, set()).update(owners)
            table.builds.setdefault((scope, key), set()).add(frozenset(owners))


def _handed_classes(collector: Collector) -> None:
    """`self.vae = vae` in a constructor that every construction of the class in this module
    hands an instance of one class of ours: `self.vae` is that class's instance, whose methods
    and `forward` resolve (issue 45: "behind self.D set from a constructor argument")."""
    info = collector.info
    for cls in info.classes.values():
        init = cls.methods.get("__init__")
        for param, attribute in collector.holdings.stored.get(id(init), {}).items() if init is not None else ():
            handed_class = info.parameter_class(init, param) if init is not None else None
            if handed_class is not None and attribute not in cls.attributes:
                cls.attributes[attribute] = handed_class
                cls.built[attribute] = cst.Call(cst.Name(handed_class))


def _handed_links(collector: Collector) -> Iterator[tuple[str, frozenset[str]]]:
    """What the optimizers handed to constructions of this module's classes hold (constructed.py)."""
    info = collector.info
    for scope, facts in [(0, info.module), *info.facts.items()]:
        for key, qualified in facts.instances.items():
            cls, call = info.classes.get(qualified), facts.built.get(key)
            init = info.method(cls, "__init__") if cls is not None else None
            owner = info.facts[id(init)].cls if init is not None else None
            if init is not None and owner is not None and owner.fields and call is not None:
                kept = {f"self.{attribute}": param for attribute, param in owner.fields.items()}
                yield from handed(positional(init)[1:], kept, call, partial(_handed_held, collector, scope=scope))


def _inherited_fields(info: ModuleInfo, outside: Outside) -> None:
    """A constructor's parameters that it hands its base's constructor (`super().__init__(actor,
    actor_optim)`), which keeps them (`self.actor_optim = actor_optim`), are fields of its class
    too: a base of this module, or of another module of the project (Outside.callee)."""
    done: set[int] = set()

    def inherit(cls: ClassInfo, depth: int) -> None:
        init = cls.methods.get("__init__")
        if id(cls) in done or cls.up is None or init is None or not cls.bases or depth > 5:
            return
        done.add(id(cls))
        base = info.classes.get(cls.bases[0])
        if base is not None:
            inherit(base, depth + 1)
            base_init = base.methods.get("__init__")
            params = positional(base_init)[1:] if base_init is not None else ()
            kept = [(f"self.{attribute}", param) for attribute, param in base.fields.items()]
        else:
            found = outside.callee(info.qualify_name(cls.bases[0]))
            params, kept = (found[2], list(found[3])) if found is not None else ((), [])
            cls.up_origin = (found[0], found[1]) if found is not None and found[0] else None
        bound, _ = bound_arguments(cls.up, params)
        own = set(positional(init)[1:])
        for key, param in kept:
            value = bound.get(param)
            if isinstance(value, cst.Name) and value.value in own and key.startswith("self."):
                cls.fields.setdefault(key[len("self."):], value.value)

    for cls in list(info.classes.values()):
        inherit(cls, 0)


def _handed_parameters(collector: Collector, outside: Outside) -> Iterator[tuple[tuple[str, str], frozenset[str]]]:
    """What the optimizers handed to functions hold where every call of the function by its name
    tells (constructed.py): for this module's functions, ((function, parameter), modules); those
    handed to another module's functions (or classes: function "") go to `info.tells`, for that
    module's build."""
    info = collector.info
    told: dict[tuple[str, str, str], dict[str, list[frozenset[str]]]] = {}  # (module, function, name called) -> key -> per call
    for scope, name, call in info.handing:
        callee = _callee(info, name, call, outside)
        if callee is not None:
            module, function, params, kept = callee
            per_key = told.setdefault((module, function, name), {})
            for key, modules in handed(params, dict(kept), call, partial(_handed_held, collector, scope=scope)):
                per_key.setdefault(key, []).append(modules)
    for (module, function, name), per_key in told.items():
        for key, sets in per_key.items():
            if len(sets) != info.name_calls[name] or "." in name and len(sets) != info.method_calls[name.rpartition(".")[2]]:
                continue  # a call that does not tell: what the parameter holds is not known
            modules = frozenset().union(*sets)
            where = (function if not key.startswith("self.") else "", key)
            if module:
                info.tells.setdefault(module, {}).setdefault(where, set()).update(modules)
            else:
                yield where, modules


def _callee(info: ModuleInfo, name: str, call: cst.Call, outside: Outside) -> Optional[Callee]:
    """The function a call by `name` runs, as _handed_parameters reads it ("": of this module):
    a function, or a method (`Class.m`) of an instance whose class is known; a class of this
    module is _handed_links's."""
    found = info.called(name)
    if found is not None:  # a function of this module, or a method of its class
        params = positional(found[0])[int(found[1]):]
        return "", name, params, tuple((p, p) for p in params)
    if "." in name and type(call.func) is cst.Attribute:  # a method of an imported class
        return outside.callee(name)
    qualified = info.qualify(call.func) if name not in info.classes else None
    return outside.callee(qualified) if qualified else None


def _handed_held(collector: Collector, value: cst.BaseExpression, *, scope: int) -> list[frozenset[str]]:
    info = collector.info
    if isinstance(value, cst.Call):
        if not is_optimizer_callee(info.qualify(value.func) or ""):
            return []
        owners = collector.holdings.of_construction(scope, value)
        return [frozenset(owners)] if owners else []
    if isinstance(value, (cst.Name, cst.Attribute)):
        key = receiver_key(value)
        here = [s for s in info.table.builds.get((scope, key), ()) if s]
        if not here and key.startswith("self.") and info.table.links.get(key):
            return [frozenset(info.table.links[key])]  # an object's optimizer: one link across its methods
        if not here and scope and isinstance(value, cst.Name) and not _local(info, scope, key):
            return [s for s in info.table.builds.get((0, key), ()) if s]  # a global the module body builds
        return here
    return []


def _local(info: ModuleInfo, scope: int, name: str) -> bool:
    """Whether function `scope` (an id) binds `name` itself: a parameter or an assignment."""
    function = info.function_of(scope)
    return function is None or name in info.binds(function)
