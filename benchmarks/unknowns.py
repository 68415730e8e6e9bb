"""What the analysis leaves unknown (issue 45): per module, in the scopes that step two or more
optimizers, the share of backward events whose loss reach is resolved, and of every optimizer
stepped anywhere, the share whose parameter sets are resolved; with the commonest reasons for the
rest. `benchmarks/realcode.py --unknowns` prints it over the corpus; the count, not a list of
sites, is the guide to what to resolve next.

A module is read as the analysis reads it: alone (its front end's program, the IR the dataflow
runs on) when it links with no other, else in its group's linked program (count_program), where
what the other modules tell of it is counted too.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from zerograd.analysis.model import Event, Function, Kind, Node, Program, Settings, children
from zerograd.engine import PREFILTER, front_end

# Why a reach or a set is not known, as the counts name them.
NO_REACH = "no reach traced: fewer than two optimizers of the module with known modules"
OPAQUE = "opaque: the loss reads a parameter, an attribute or a call's result from outside the scope"
PARAMETER = "handed in: the optimizer is a parameter of the scope"
ATTRIBUTE = "an attribute built nowhere in the module (a constructor argument, a framework's)"
UNKNOWN_VALUES = "built over values of unknown origin (a list, a helper's result, a bare tensor)"
OTHER = "bound to something else (a builder's result, a collection entry)"


@dataclass
class Tally:
    backwards: int = 0  # in scopes that step two or more optimizers
    resolved_backwards: int = 0
    optimizers: int = 0  # (module, scope, optimizer) stepped
    resolved_optimizers: int = 0
    why_reach: Counter[str] = field(default_factory=Counter)
    why_sets: Counter[str] = field(default_factory=Counter)

    def report(self) -> str:
        lines = [f"backward events in scopes stepping two or more optimizers: {self.backwards}, reach resolved "
                 f"{self.resolved_backwards} ({_share(self.resolved_backwards, self.backwards)})"]
        lines += [f"  {count:>6}  {why}" for why, count in self.why_reach.most_common()]
        lines.append(f"optimizers stepped: {self.optimizers}, parameter sets resolved {self.resolved_optimizers} "
                     f"({_share(self.resolved_optimizers, self.optimizers)})")
        lines += [f"  {count:>6}  {why}" for why, count in self.why_sets.most_common()]
        return "\n".join(lines)


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def count(source: str, tally: Tally) -> None:
    """Add one module's counts (a module that cannot be parsed adds nothing)."""
    if PREFILTER not in source:
        return
    try:
        front = front_end(source, Settings())
    except (RecursionError, MemoryError, ValueError):
        return
    program = getattr(front, "program", None)
    if isinstance(program, Program):  # else a syntax error or a file too large: a report
        count_program(program, tally)


def count_program(program: Program, tally: Tally) -> None:
    """Add the counts of one program: a module's, or a linked group's."""
    for fid, function in enumerate(program.functions):
        events = list(_events(function.body))
        stepped = {e.target for e in events if e.kind is Kind.STEP and e.target}
        links = program.links_of(fid)
        for target in sorted(stepped):
            tally.optimizers += 1
            if links.get(target):
                tally.resolved_optimizers += 1
            else:
                tally.why_sets[_why_not_held(target, function, links)] += 1
        if len(stepped) < 2:
            continue
        for event in (e for e in events if e.kind is Kind.BACKWARD):
            tally.backwards += 1
            if event.reach is None:
                tally.why_reach[NO_REACH] += 1
            elif event.reach.opaque:
                tally.why_reach[OPAQUE] += 1
            else:
                tally.resolved_backwards += 1


def _events(body: Node) -> Iterator[Event]:
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, Event):
            yield node
        stack.extend(children(node))


def _why_not_held(target: str, function: Function, links: dict[str, frozenset[str]]) -> str:
    root = target.split(".")[0].split("[")[0]
    if target in links:
        return UNKNOWN_VALUES
    if root in function.params and root != "self":
        return PARAMETER
    if target.startswith("self."):
        return ATTRIBUTE
    return OTHER
