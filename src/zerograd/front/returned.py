"""What a function of this module returns, in parameter sets (issue 45: "methods that return
parameters"): `Adam(self.actor_parameters())` with `return list(self.actor.parameters())` holds
`self.actor`; `Adam(params_of(self.encoder))` with `def params_of(m): return m.parameters()`
holds `self.encoder`; `self.get_params("critic")` reads only the branch its literal argument
takes (literals.py). Every return the call can reach must hold known sets, else none is known.
Read once every function of the module is (settle.py), a few calls deep.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ..analysis.keys import rebase, root_of
from .holdings import Holdings
from .literals import literals_of, returns_taken
from .moduleinfo import ModuleInfo
from .naming import bound_arguments, positional, receiver_key

DEPTH = 3  # calls followed one inside another


class Returned:
    """Called with (scope, call): the sets the call's return value holds, in the scope's terms
    (empty: unknown)."""

    def __init__(self, info: ModuleInfo, holdings: Holdings, depth: int = 0) -> None:
        self.info, self.holdings, self.depth = info, holdings, depth

    def __call__(self, scope: int, call: cst.Call) -> tuple[str, ...]:
        found = self._callee(scope, call.func) if self.depth < DEPTH else None
        if found is None:
            return ()
        function, method = found
        params = list(positional(function))
        params = params[1:] if method else params
        bound, starred = bound_arguments(call, params)
        if starred:
            return ()
        facts = self.info.facts[id(function)]
        shared = id(facts.cls) if facts.cls is not None else None
        inner = Returned(self.info, self.holdings, self.depth + 1)
        owners: list[str] = []
        for returned in returns_taken(function, literals_of(function, bound, method)):
            held = self.holdings.owners(id(function), returned.value, shared, inner) if returned.value else ()
            if not held:
                return ()
            owners += held
        return self._in_caller(scope, owners, bound, facts.parameters)

    def _callee(self, scope: int, func: cst.BaseExpression) -> Optional[tuple[cst.FunctionDef, bool]]:
        """A module-level function called by name, or a method of the scope's own object."""
        if isinstance(func, cst.Name):
            function = self.info.functions.get(func.value)
            return (function, False) if function is not None else None
        facts = self.info.facts.get(scope)
        if (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"
                and facts is not None and facts.cls is not None):
            method = self.info.method(facts.cls, func.attr.value)
            return (method, True) if method is not None else None
        return None

    def _in_caller(self, scope: int, owners: list[str], bound: dict[str, cst.BaseExpression],
                   params: set[str]) -> tuple[str, ...]:
        """The callee's sets in the caller's terms: a parameter is the module (or the sets) the
        call hands it; `self` is the caller's own object."""
        found: list[str] = []
        for owner in owners:
            root = root_of(owner)
            if root not in params or root == "self":
                found.append(owner)
                continue
            given = bound.get(root)
            if given is None:
                return ()
            caller = self.info.facts.get(scope)
            shared = id(caller.cls) if caller is not None and caller.cls is not None else None
            held = self.holdings.owners(scope, given, shared, self) if owner == root else ()
            if held:
                found += held
            elif isinstance(given, (cst.Name, cst.Attribute)):
                found.append(rebase(owner, root, receiver_key(given)) or owner)
            else:
                return ()
        return tuple(found)
