"""What a function's return value reaches, for the modules of the project that call it (issue 45):
a loss computed by `generator_loss(D, fake)` in `losses.py` is traced there, once, each parameter
standing for itself (`-D(fake).mean()` reaches `D` and `fake`, `fake` feeding `D`); a caller in
another module puts what its arguments reach in their place (analysis/reach.instantiate).

A function with a branch on a parameter is not summarised: a caller's literal argument would
select the branch (`for_G=True`), and the union of both would say that a discriminator's loss
reaches the generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..analysis.model import Reach
from ..analysis.reach import CLEAN, instantiate, union
from ..knowledge.frameworks import Valued
from .naming import block_of
from .walk import calls_in, nodes_in

if TYPE_CHECKING:
    from .provenance import Tracer


def summarise(function: cst.FunctionDef,
              make: Callable[[frozenset[str], frozenset[str]], Tracer]) -> Optional[Valued]:
    """The summary of a module-level function: its parameters in order (positional ones
    first, how many), and what its returns reach; `make` builds a Tracer in the function's
    module over the given modules and parameters."""
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    names = (*positional, *(p.name.value for p in params.kwonly_params))
    if not names or _branches_on(function, frozenset(names)):
        return None
    # The parameters it calls (`D(fake)`) are modules; the others values (`fake`): both stand
    # for themselves, as names only the caller's arguments give a meaning to.
    called = {c.func.value for c in calls_in(function.body) if isinstance(c.func, cst.Name)}
    tracer = make(frozenset(names) & called, frozenset(names))
    tracer.env.update((name, Reach(frozenset({name}), frozenset(), False)) for name in names)
    tracer.block(block_of(function.body))
    if not tracer.returns:
        return None
    return names, len(positional), union(CLEAN, *tracer.returns)


def _branches_on(function: cst.FunctionDef, names: frozenset[str]) -> bool:
    for node in nodes_in(function.body):
        test = node.test if isinstance(node, (cst.If, cst.IfExp, cst.While)) else None
        if test is not None and any(isinstance(n, cst.Name) and n.value in names for n in nodes_in(test)):
            return True
    return False


def applied(valued: Valued, args: Sequence[cst.Arg], reaches: Sequence[Reach],
            module: Callable[[cst.BaseExpression], Optional[str]]) -> Optional[Reach]:
    """What a call's value reaches: the summary with each parameter replaced by what the caller
    hands it (`module`: the held module an argument names, if it names one); None when the
    call cannot be bound (a star argument, an unknown keyword, too many arguments)."""
    names, count, summary = valued
    bound = dict.fromkeys(names, CLEAN)  # a parameter left to its default: a literal, mostly
    renamed: dict[str, str] = {}
    for position, (arg, reach) in enumerate(zip(args, reaches)):
        if arg.star:
            return None
        name = arg.keyword.value if arg.keyword is not None else (names[position] if position < count else None)
        if name is None or name not in bound:
            return None
        held = module(arg.value)
        if held is not None:
            renamed[name] = held
        bound[name] = reach
    return instantiate(summary, bound, renamed)
