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

from collections.abc import Callable, Iterator
from typing import Optional

import libcst as cst

from ..analysis.keys import rebase, within
from .naming import bound_arguments, receiver_key

# The module sets of an optimizer a constructing scope hands over (built inline, or a name it
# built over known modules); none for anything else.
Held = Callable[[cst.BaseExpression], list[frozenset[str]]]


def handed(init: cst.FunctionDef, fields: dict[str, str], call: cst.Call,
           held: Held) -> Iterator[tuple[str, frozenset[str]]]:
    """(`self.<attribute>`, the modules it holds) for each optimizer `call` hands the constructor
    `init`, which keeps its parameters as `fields` (attribute -> parameter)."""
    params = [p.name.value for p in (*init.params.posonly_params, *init.params.params)][1:]
    bound, _ = bound_arguments(call, params)  # what follows a `*args` stays unbound
    modules = {receiver_key(e): attr for attr, param in fields.items()
               if isinstance(e := bound.get(param), (cst.Name, cst.Attribute))}
    for attr, param in fields.items():
        value = bound.get(param)
        for sets in held(value) if value is not None else ():
            named = [_as_object(module, modules) for module in sets]
            if sets and all(named):
                yield f"self.{attr}", frozenset(n for n in named if n)


def _as_object(module: str, modules: dict[str, str]) -> Optional[str]:
    """`actor` (the caller's) as the object names it, `self.actor`, where it was handed over."""
    for given, attr in modules.items():
        if within(module, given):
            return rebase(module, given, f"self.{attr}")
    return None

