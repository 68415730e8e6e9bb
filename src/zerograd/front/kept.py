"""Which function bodies LibCST reads, decided on a module's Scan (relevance.py) before the cut
(elision.py): the bodies that can perform an event, those read for their facts (only the
statements holding them), and every body where a loss's reach may follow calls (two optimizers).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Optional

from ..knowledge.optimizers import (
    NON_TORCH_ROOTS,
    is_engine_callee,
    is_foreign_autograd,
    is_optimizer_callee,
    is_scaler_callee,
)
from .pytree import qualify
from .relevance import Lines, Scan


def parts(scan: Scan, linked: frozenset[str] = frozenset(),
          values: frozenset[str] = frozenset()) -> tuple[set[int], dict[int, list[Lines]]]:
    """The functions whose bodies matter, and of those read only for their facts (they
    cannot perform an event), the statements of their bodies that hold the facts: a
    function whose statements all stay, or that encloses one that matters, is kept whole.
    `values`: functions whose return values other modules trace (valued.py), kept whole."""
    if scan.optimizers() >= 2:
        # Two optimizers: a loss's reach (ZG006) follows calls into any function of the
        # module (provenance.py), so every body is read.
        return set(range(1, len(scan.functions) + 1)), {}
    relevant = scan.relevant(linked)
    whole = relevant | _constructors(scan, relevant)
    whole |= _called_from(scan, {name.rsplit(".", 1)[-1] for name in values})
    kept = whole | scan.facts
    held = {k: list(v) for k, v in scan.held.items() if k not in whole}
    for (owner, callee), top in zip(scan.assigned, scan.assigned_in):
        if owner not in whole and _records(qualify(callee, scan.aliases), scan.classes):
            kept.add(owner)
            if top is None:
                whole.add(owner)
            else:
                held.setdefault(owner, []).append(top)
    for owner, top in _builders_returns(scan):
        if owner not in whole:
            kept.add(owner)
            held.setdefault(owner, []).append(top)
    # What an optimizer is built over (holdings.py): a local of the function that builds it
    # (kept whole), an attribute wherever a method assigns it (`self.w = w.clone()`).
    over: set[str] = set()
    for (owner, callee), names in zip(scan.assigned, scan.assigned_over):
        if names and is_optimizer_callee(qualify(callee, scan.aliases) or ""):
            over |= names
            if owner and any("." not in name for name in names):
                kept.add(owner)
                whole.add(owner)
    for (owner, name), top in zip(scan.counts, scan.counted_in):
        if name in over and owner and owner not in whole:
            kept.add(owner)
            if top is None:
                whole.add(owner)
            else:
                held.setdefault(owner, []).append(top)
    whole |= scan.loose & kept
    # A function that encloses another kept one is its environment: kept whole.
    inner = sorted(scan.functions[k - 1].line for k in kept if 0 < k <= len(scan.functions))
    for key in list(held):
        if 0 < key <= len(scan.functions):
            outer = scan.functions[key - 1]
            at = bisect_left(inner, outer.first)
            if at < len(inner) and inner[at] <= outer.last:
                whole.add(key)
    return kept, {k: v for k, v in held.items() if k not in whole and 0 < k <= len(scan.functions)}


def _called_from(scan: Scan, names: set[str]) -> set[int]:
    """The functions named `names` and those they call, by name, transitively: a body traced for
    another module (valued.py) reads the bodies of what it calls."""
    found: set[int] = set()
    while names:
        new = {k for k, d in enumerate(scan.functions, start=1) if d.name in names} - found
        found |= new
        names = set().union(*(scan.callees.get(k, set()) for k in new))
    return found


def _builders_returns(scan: Scan) -> list[tuple[int, Lines]]:
    """The return statements of functions that build an optimizer (builders.py reads what
    they return): those that assign one, or return a construction; and the assignments from a
    call of one of them (`self.optimizer = self.generator_solver()`), which settle.py binds."""
    def builds(callee: Optional[tuple[str, ...]]) -> bool:
        return is_optimizer_callee(qualify(callee, scan.aliases) or "")
    builders = {owner for owner, callee in scan.assigned if builds(callee)}
    found = [(owner, top) for owner, top, callees in scan.returns
             if owner in builders or any(builds(c) for c in callees)]
    names = {scan.functions[owner - 1].name for owner, _ in found if 0 < owner <= len(scan.functions)}
    found += [(owner, top) for (owner, callee), top in zip(scan.assigned, scan.assigned_in)
              if callee and callee[-1] in names and top is not None]
    return found


def _lineage(scan: Scan, name: str) -> list[tuple[list[int], list[str]]]:
    """The members of class `name` and of its bases defined in this module."""
    found, seen, pending = [], set(), [name]
    while pending:
        current = pending.pop()
        if current in seen or current not in scan.members:
            continue
        seen.add(current)
        found.append(scan.members[current])
        pending.extend(base.rsplit(".", 1)[-1] for base in scan.members[current][1])
    return found


def _constructors(scan: Scan, relevant: set[int]) -> set[int]:
    """The `__init__` of a class with a relevant method, and of its bases: the fields it sets
    (`self.opt = optimizer`) bind what a caller constructed it with (calls._field_bindings)."""
    active = [name for name, (methods, _) in scan.members.items() if any(m in relevant for m in methods)]
    return {m for name in active for methods, _ in _lineage(scan, name) for m in methods
            if scan.functions[m - 1].name == "__init__"}


def _records(qualified: Optional[str], classes: set[str]) -> bool:
    """An assignment from this callee is recorded by facts.py (Collector._assigned)."""
    if qualified is None:
        return False
    return (is_optimizer_callee(qualified) or is_scaler_callee(qualified) or is_engine_callee(qualified)
            or qualified.startswith("deepspeed.") or qualified.split(".", 1)[0] in NON_TORCH_ROOTS
            or is_foreign_autograd(qualified) or qualified in ("functools.partial", "partial") or qualified in classes)
