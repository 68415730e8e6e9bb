"""What an object's optimizers hold when its constructor was handed them (issue 45).

`agent = Agent(actor, critic, Adam(actor.parameters()), Adam(critic.parameters()))`, with
`self.actor = actor` and `self.actor_optim = actor_optim` in `Agent.__init__`: in Agent's
methods `self.actor_optim` holds `self.actor`. Each construction of a class of this module is
read where it is (the optimizer built inline, or a name the calling scope built over known
modules), and the modules it holds are named as the object names them: the attribute its
constructor keeps each handed module in. An optimizer over a module the object is not handed
stays unknown; every construction of the class adds what it hands (as attributes of one name
already share their links across the module).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..analysis.keys import rebase, within
from ..knowledge.optimizers import is_optimizer_callee
from .naming import receiver_key

if TYPE_CHECKING:
    from .facts import ClassInfo, ModuleInfo
    from .holdings import Holdings


def handed_links(info: ModuleInfo, holdings: Holdings) -> Iterator[tuple[str, frozenset[str]]]:
    """(`self.<attribute>`, the modules it holds) for each optimizer a construction hands over."""
    scopes = [(0, info.module), *info.facts.items()]
    for scope, facts in scopes:
        for key, qualified in facts.instances.items():
            cls = info.classes.get(qualified)
            call = facts.built.get(key)
            if cls is not None and call is not None:
                yield from _handed(info, holdings, scope, cls, call)


def _handed(info: ModuleInfo, holdings: Holdings, scope: int, cls: ClassInfo,
            call: cst.Call) -> Iterator[tuple[str, frozenset[str]]]:
    init = info.method(cls, "__init__")
    owner = info.facts[id(init)].cls if init is not None else None
    if init is None or owner is None or not owner.fields:
        return
    params = [p.name.value for p in (*init.params.posonly_params, *init.params.params)][1:]
    handed = _bound(call, params)
    modules = {receiver_key(e): attr for attr, param in owner.fields.items()
               if isinstance(e := handed.get(param), (cst.Name, cst.Attribute))}
    for attr, param in owner.fields.items():
        value = handed.get(param)
        for held in _held(info, holdings, scope, value) if value is not None else ():
            named = [_as_object(module, modules) for module in held]
            if held and all(named):
                yield f"self.{attr}", frozenset(n for n in named if n)


def _held(info: ModuleInfo, holdings: Holdings, scope: int, value: cst.BaseExpression) -> list[frozenset[str]]:
    """The module sets of an optimizer the caller hands over: built inline, or a name it built."""
    if isinstance(value, cst.Call):
        if not is_optimizer_callee(info.qualify(value.func) or ""):
            return []
        owners = holdings.of_construction(scope, value)
        return [frozenset(owners)] if owners else []
    if isinstance(value, (cst.Name, cst.Attribute)):
        return [s for s in info.table.builds.get((scope, receiver_key(value)), ()) if s]
    return []


def _as_object(module: str, modules: dict[str, str]) -> Optional[str]:
    """`actor` (the caller's) as the object names it, `self.actor`, where it was handed over."""
    for handed, attr in modules.items():
        if within(module, handed):
            return rebase(module, handed, f"self.{attr}")
    return None


def _bound(call: cst.Call, params: list[str]) -> dict[str, cst.BaseExpression]:
    """What the call hands each named parameter (positions up to the first star)."""
    bound: dict[str, cst.BaseExpression] = {}
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        name = arg.keyword.value if arg.keyword else (params[position] if position < len(params) else None)
        if name is not None:
            bound[name] = arg.value
    return bound
