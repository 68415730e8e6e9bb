"""Optimizers read where they are built (issue 45): a name assigned what a function of this
module returns holds what that function's optimizer holds.

`self.optimizer = self._build_optimizer()`, `opt, sched = make_optimizer(model)` and Lightning's
`opt_g, opt_d = self.optimizers()` (what `configure_optimizers` returns) were optimizers by the
callee's name only, over unknown sets, and every target of an unpacking was one, the scheduler
included. The builder's return statements say, position by position, which value is an
optimizer and over which modules (in the builder's terms: its parameters are rebound to the
caller's arguments, `self` is the caller's object); a position the builder visibly fills with
something else (a scheduler, `None`) is no optimizer. What cannot be read (a value of unknown
origin, returns of different shapes) leaves the name rule as it was. A module of a linked group
exports what its builders return (settle.py), for the modules that import them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Optional

import libcst as cst

from ..analysis.keys import rebase, root_of
from ..knowledge.optimizers import Signature, Slot, is_optimizer_callee
from .naming import block_of, bound_arguments, positional, receiver_key, suites

LIGHTNING_OPTIMIZERS = "optimizers"  # `self.optimizers()` hands back what this hook returns:
LIGHTNING_HOOK = "configure_optimizers"

# A position of a builder's result: the module sets of an optimizer, NOT (a visible non-optimizer)
# or None (unknown).
NOT: frozenset[frozenset[str]] = frozenset()
Construction = Callable[[cst.Call], Slot]  # what a call the builder returns is
Qualify = Callable[[cst.BaseExpression], Optional[str]]


def returns_of(function: cst.FunctionDef) -> Iterator[cst.BaseExpression]:
    """The values its return statements give (not those of nested functions)."""
    for statement in _statements(function):
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Return) and small.value is not None:
                yield small.value


def _statements(function: cst.FunctionDef) -> Iterator[cst.BaseStatement]:
    """Its statements, those of nested blocks included (not of nested functions or classes)."""
    pending: list[cst.BaseStatement] = list(block_of(function.body))  # type: ignore[arg-type]
    while pending:
        statement = pending.pop()
        yield statement
        for suite in suites(statement):
            pending.extend(block_of(suite))  # type: ignore[arg-type]


def slots(function: cst.FunctionDef, lightning: bool, read: Reader) -> Optional[list[Slot]]:
    """Per position of what `function` returns, what it is; None when the returns differ in
    shape or there are none. `lightning`: Lightning's `([optimizers], [schedulers])` form."""
    found: Optional[list[Slot]] = None
    for value in returns_of(function):
        shape = _shape(value, lightning, read)
        if shape is None or (found is not None and len(found) != len(shape)):
            return None
        found = shape if found is None else [_merge(a, b) for a, b in zip(found, shape)]
    return found


def _shape(value: cst.BaseExpression, lightning: bool, read: Reader) -> Optional[list[Slot]]:
    elements = _elements(value)
    if elements is None:
        return [read.slot(value)]
    if lightning and len(elements) == 2 and all(_elements(e) is not None for e in elements):
        elements = _elements(elements[0]) or []  # ([opt_g, opt_d], [sched_g, sched_d])
    if any(isinstance(e, cst.StarredElement) for e in elements):
        return None
    return [read.slot(e) for e in elements]


def _elements(value: cst.BaseExpression) -> Optional[list[cst.BaseExpression]]:
    if isinstance(value, (cst.Tuple, cst.List)):
        return [e if isinstance(e, cst.StarredElement) else e.value for e in value.elements]
    return None


def _merge(a: Slot, b: Slot) -> Slot:
    if a is None or b is None:
        return None
    if a == NOT or b == NOT:
        return NOT if a == b else None
    return a | b


class Reader:
    """What one builder's returned values are, from what the module's pass recorded of its scope."""

    def __init__(self, scope: int, builds: dict[tuple[int, str], set[frozenset[str]]],
                 assigned: dict[str, list[Optional[str]]], construction: Construction) -> None:
        self.scope = scope
        self.builds = builds
        self.assigned = assigned  # key -> the qualified callees assigned to it in the builder
        self.construction = construction

    def slot(self, value: cst.BaseExpression) -> Slot:
        if isinstance(value, cst.Dict):  # Lightning's {"optimizer": opt, "lr_scheduler": ...}
            entry = next((e.value for e in value.elements if isinstance(e, cst.DictElement)
                          and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == "optimizer"), None)
            return self.slot(entry) if entry is not None else None
        if isinstance(value, cst.Name) and value.value == "None":
            return NOT
        if isinstance(value, cst.Call):
            return self.construction(value)
        if isinstance(value, (cst.Name, cst.Attribute)):
            key = receiver_key(value)
            sets = self.builds.get((self.scope, key))
            if sets:
                return frozenset(s for s in sets if s) or None
            callees = self.assigned.get(key)
            if callees and all(c is not None and not is_optimizer_callee(c) for c in callees):
                return NOT  # `scheduler = LambdaLR(...)`: a value of another kind
        return None


def signature(function: cst.FunctionDef, method: bool) -> Signature:
    """Its positional parameters (without `self` for a method) and all its parameters' names."""
    params = list(positional(function))
    names = {p.name.value for p in (*function.params.posonly_params, *function.params.params,
                                    *function.params.kwonly_params)}
    if method and params:
        return tuple(params[1:]), frozenset(names - {params[0]})
    return tuple(params), frozenset(names)


def rebound(sets: frozenset[frozenset[str]], params: Signature, call: cst.Call, only_params: bool = False) -> Slot:
    """The builder's sets in the caller's terms: a parameter is the argument the call binds to it
    (a module named by a name or an attribute); a parameter left to its default is unknown, and
    so is any other name where `only_params` (a builder of another module: its globals are not
    the caller's)."""
    if sets == NOT:
        return NOT
    positional, names = params
    bound, starred = bound_arguments(call, positional)
    if starred:
        return None
    moved = set()
    for modules in sets:
        keys = set()
        for module in modules:
            root = root_of(module)
            if root not in names:
                if only_params:
                    return None
                keys.add(module)
                continue
            given = bound.get(root)
            if not isinstance(given, (cst.Name, cst.Attribute)):
                return None
            keys.add(rebase(module, root, receiver_key(given)) or module)
        moved.add(frozenset(keys))
    return frozenset(moved)


def assigned_in(function: cst.FunctionDef, qualify: Qualify) -> dict[str, list[Optional[str]]]:
    """Key -> the qualified callees of the calls assigned to it in `function` (None: not a call)."""
    found: dict[str, list[Optional[str]]] = {}
    for statement in _statements(function):
        for node in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    if isinstance(target.target, (cst.Name, cst.Attribute)):
                        callee = qualify(node.value.func) if isinstance(node.value, cst.Call) else None
                        found.setdefault(receiver_key(target.target), []).append(callee)
    return found
