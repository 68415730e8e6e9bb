"""What the optimizers a call hands over hold, in the callee's terms (issue 45).

`agent = Agent(actor, critic, Adam(actor.parameters()), Adam(critic.parameters()))`, with
`self.actor = actor` and `self.actor_optim = actor_optim` in `Agent.__init__`: in Agent's
methods `self.actor_optim` holds `self.actor`. `train(net_a, net_c, ao, co)` with `ao` built
over `net_a`, for `def train(actor, critic, actor_optim, critic_optim)`: in `train`,
`actor_optim` holds `actor`. Each call is read where it is (the optimizer built inline, or a name
the calling scope built over known modules), and the modules it holds are named as the callee
names them: the parameter (or the attribute its constructor keeps it in) each handed module
arrives as. An optimizer over a module the callee is not handed stays unknown. Every
construction of a class adds what it hands (as attributes of one name already share their
links across the module); a function's parameter holds what every call of it hands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import libcst as cst

from ..analysis.keys import rebase, within
from .naming import bound_arguments, receiver_key

# The module sets of an optimizer a constructing scope hands over (built inline, or a name it
# built over known modules); none for anything else.
Held = Callable[[cst.BaseExpression], list[frozenset[str]]]


def handed(params: Sequence[str], kept: dict[str, str], call: cst.Call,
           held: Held) -> Iterator[tuple[str, frozenset[str]]]:
    """(the callee's key, the modules it holds) for each optimizer `call` hands a callee of
    positional parameters `params` that keeps them under `kept` (key -> parameter: `self.<field>`
    in a constructor, the parameter itself in a function)."""
    bound, _ = bound_arguments(call, params)  # what follows a `*args` stays unbound
    modules = {receiver_key(e): key for key, param in kept.items()
               if isinstance(e := bound.get(param), (cst.Name, cst.Attribute))}
    for key, param in kept.items():
        value = bound.get(param)
        for sets in held(value) if value is not None else ():
            named = [_as_callee(module, modules) for module in sets]
            if sets and all(named):
                yield key, frozenset(n for n in named if n)


def _as_callee(module: str, modules: dict[str, str]) -> Optional[str]:
    """`actor` (the caller's) as the callee names it (`self.actor`, `actor`), where it was handed over."""
    for given, key in modules.items():
        if within(module, given):
            return rebase(module, given, key)
    return None
