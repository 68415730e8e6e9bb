"""What a function's return value reaches, for the modules of the project that call it (issue 45):
a loss computed by `generator_loss(D, fake)` in `losses.py` is traced there, once, each parameter
standing for itself (`-D(fake).mean()` reaches `D` and `fake`, `fake` feeding `D`); a caller in
another module puts what its arguments reach in their place (analysis/reach.instantiate).

A function with a branch on a parameter is summarised only when the branch does not change what
the value reaches (traced with every branch read, then with the parameter True and False): a
caller's literal argument would select it (`for_G=True`), and the union of both would say that a
discriminator's loss reaches the generator; GANLoss's `target_is_real` changes only a label.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional, Protocol

import libcst as cst

from ..analysis.model import Reach
from ..analysis.reach import CLEAN, instantiate, union
from ..knowledge.frameworks import Valued
from .naming import block_of
from .walk import calls_in, nodes_in

MAX_TESTED = 2  # parameters a function's branches test, each traced True and False


class Tracer(Protocol):
    """What summarise reads of provenance.Tracer (which imports this module)."""

    env: dict[str, Reach]
    returns: list[Reach]

    def block(self, body: Sequence[cst.CSTNode]) -> None: ...


def summarise(function: cst.FunctionDef,
              make: Callable[[frozenset[str], frozenset[str], dict[str, object]], Tracer]) -> Optional[Valued]:
    """The summary of a module-level function: its parameters in order (positional ones
    first, how many), and what its returns reach; `make` builds a Tracer in the function's
    module over the given modules and parameters, with the given literal parameters."""
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    names = (*positional, *(p.name.value for p in params.kwonly_params))
    tested = _tested(function, frozenset(names))
    if not names or len(tested) > MAX_TESTED:
        return None
    # The parameters it calls (`D(fake)`) are modules; the others values (`fake`): both stand
    # for themselves, as names only the caller's arguments give a meaning to.
    called = frozenset(c.func.value for c in calls_in(function.body) if isinstance(c.func, cst.Name))
    found = [_traced(function, make(frozenset(names) & called, frozenset(names), literals), names)
             for literals in _choices(sorted(tested))]
    if found[0] is None or any(other != found[0] for other in found[1:]):
        return None  # what it returns depends on a literal a caller may hand it
    return names, len(positional), found[0]


def _traced(function: cst.FunctionDef, tracer: Tracer, names: Sequence[str]) -> Optional[Reach]:
    tracer.env.update((name, Reach(frozenset({name}), frozenset(), False)) for name in names)
    tracer.block(block_of(function.body))
    return union(CLEAN, *tracer.returns) if tracer.returns else None


def _choices(tested: Sequence[str]) -> list[dict[str, object]]:
    """No literal (every branch read), then each parameter tested given True or False."""
    found: list[dict[str, object]] = [{}]
    for name in tested:
        found += [{**choice, name: value} for choice in found for value in (True, False)]
    return found


def _tested(function: cst.FunctionDef, names: frozenset[str]) -> set[str]:
    """The parameters a branch of the function tests."""
    found = set()
    for node in nodes_in(function.body):
        test = node.test if isinstance(node, (cst.If, cst.IfExp, cst.While)) else None
        if test is not None:
            found |= {n.value for n in nodes_in(test) if isinstance(n, cst.Name) and n.value in names}
    return found


def applied(valued: Valued, args: Sequence[cst.Arg], reaches: Sequence[Reach],
            module: Callable[[cst.BaseExpression], Optional[str]], receiver: Optional[str] = None) -> Optional[Reach]:
    """What a call's value reaches: the summary with each parameter replaced by what the caller
    hands it (`module`: the held module an argument names, if it names one; a method's `self`
    is the `receiver`); None when the call cannot be bound (a star argument, an unknown
    keyword, too many arguments)."""
    names, count, summary = valued
    bound = dict.fromkeys(names, CLEAN)  # a parameter left to its default: a literal, mostly
    renamed: dict[str, str] = {}
    if receiver is not None:
        if not names:
            return None
        renamed[names[0]] = receiver
        names, count = names[1:], count - 1
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
