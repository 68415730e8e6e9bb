"""What the module's first pass (facts.py) can only settle once every function is read (issue 45).

A builder may be defined after its callers, a class after its constructions, and a name proves
an optimizer only by how the whole module uses it. So after the pass: names assigned what a
builder of this module returns take what it returns (builders.py), the optimizers handed to a
constructor hold what the object keeps (constructed.py), and one built by a class we cannot
see holds what the call handed it if the name proves an optimizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Optional

import libcst as cst

from ..knowledge.optimizers import is_optimizer_callee
from .builders import LIGHTNING_HOOK, LIGHTNING_OPTIMIZERS, NOT, Reader, Slot, assigned_in, rebound, slots
from .constructed import handed
from .facts import Collector, ModuleInfo, Pending
from .naming import receiver_key


def settle(collector: Collector) -> None:
    info = collector.info
    table = info.table
    table.tensors = collector.holdings.tensors
    read: dict[tuple[int, bool], Optional[list[Slot]]] = {}  # (builder, lightning) -> what it returns
    for pending in collector.pending:
        found = _builder(info, pending)
        if found is None:
            continue
        function, lightning = found
        if (id(function), lightning) not in read:
            reader = Reader(id(function), table.builds, assigned_in(function, info.qualify),
                            partial(_construction, collector, function=function))
            read[(id(function), lightning)] = slots(function, lightning, reader)
        returned = read[(id(function), lightning)]
        if returned is None or len(returned) != len(pending.targets) or (not pending.unpacked and len(returned) != 1):
            continue
        for key, slot in zip(pending.targets, returned):
            if key is not None and slot is not None:
                _bind_built(info, pending, function, key, slot)
    for key, modules in _handed_links(collector):
        table.built.add(key)
        table.links.setdefault(key, set()).update(modules)
    for scope, key, modules in collector.maybe:
        if table.is_optimizer(key) and not table.links.get(key):
            table.links.setdefault(key, set()).update(modules)
            table.builds.setdefault((scope, key), set()).add(modules)


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


def _bind_built(info: ModuleInfo, pending: Pending, function: cst.FunctionDef, key: str,
                slot: frozenset[frozenset[str]]) -> None:
    table = info.table
    if slot == NOT:  # `opt, scheduler = make_optimizer(model)`: the scheduler is none
        if not any(built == key for _, built in table.builds):
            table.built.discard(key)
        return
    sets = rebound(slot, function, pending.call, pending.method)
    if not sets:
        return
    table.built.add(key)
    for modules in sets:
        table.links.setdefault(key, set()).update(modules)
        table.builds.setdefault((pending.scope, key), set()).add(modules)


def _handed_links(collector: Collector) -> Iterator[tuple[str, frozenset[str]]]:
    """What the optimizers handed to constructions of this module's classes hold (constructed.py)."""
    info = collector.info
    for scope, facts in [(0, info.module), *info.facts.items()]:
        for key, qualified in facts.instances.items():
            cls, call = info.classes.get(qualified), facts.built.get(key)
            init = info.method(cls, "__init__") if cls is not None else None
            owner = info.facts[id(init)].cls if init is not None else None
            if init is not None and owner is not None and owner.fields and call is not None:
                yield from handed(init, owner.fields, call, partial(_handed_held, collector, scope=scope))


def _handed_held(collector: Collector, value: cst.BaseExpression, *, scope: int) -> list[frozenset[str]]:
    info = collector.info
    if isinstance(value, cst.Call):
        if not is_optimizer_callee(info.qualify(value.func) or ""):
            return []
        owners = collector.holdings.of_construction(scope, value)
        return [frozenset(owners)] if owners else []
    if isinstance(value, (cst.Name, cst.Attribute)):
        return [s for s in info.table.builds.get((scope, receiver_key(value)), ()) if s]
    return []
