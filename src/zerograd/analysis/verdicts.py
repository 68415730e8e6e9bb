"""The verdicts of rules.md section 5, read off the states that reach a step (flow.py): STALE,
LEAK, EMPTY, LOST and FOREIGN in the dataflow's own words; rules.py gives them codes."""

from __future__ import annotations

from typing import NamedTuple, Optional

from .flow import SELF, State, Window
from .graph import Chain
from .keys import related, within
from .model import Event, Reach


class Verdict(NamedTuple):
    """A finding in the dataflow's own words; rules.py turns it into a coded message."""

    kind: str  # never_cleared, skipped_clear, cleared_before_step, zeroed_before_step, frequency_mismatch
    chain: Chain  # where it is reported, from the analysed scope down
    target: str
    label: str  # the optimizer as written
    note: Optional[int] = None  # a site the message names (the partial clear, the other loss's backward)
    other: str = ""  # the other optimizer the message names (ZG006)
    loss: str = ""  # the other loss as written (ZG006)


def judge_step(chain: Chain, label: str, incoming: set[State], target: str, has_clear: bool,
               partial: Optional[Chain] = None, part: Optional[Chain] = None, modules: str = "",
               looped: bool = False) -> list[Verdict]:
    """`partial`: a write of one parameter's .grad near the step; `part`: a clear of only some of
    the optimizer's sets, `modules` (both name the clear that leaves the rest stale); `looped`:
    the step is in a loop of its scope."""
    found = []
    removals = {s.removed for s in incoming if s.removed is not None}
    # LOST: a clear removed what an accumulation window held for this step (ZG003).
    wiped = sorted({r.chain for r in removals if r.lost})
    found += [Verdict("frequency_mismatch", c, target, label) for c in wiped]
    # Stale gradients reach the step with new ones, or another optimizer over the same
    # parameters applied them all already (TWICE: this step updates the same weights again).
    leaking = [(s, s.read) for s in incoming if s.stale and (s.pending or s.read.twice)]
    twice = sorted({read.twice for _, read in leaking if read.twice})
    if twice:
        found.append(Verdict("applied_twice", chain, target, label, other=twice[0]))
    leaking = [(s, read) for s, read in leaking if not read.twice]
    skipped = sorted({read.skip for _, read in leaking if read.skip})
    found += [Verdict("frequency_mismatch", c, target, label) for c in skipped]
    # Paths that leak without passing a skipped clear: the loop around the step never clears.
    unskipped = [read for _, read in leaking if not read.skip]
    if not unskipped and has_clear and any(s.leaks for s in incoming):
        # rules.md v3 LEAK: gradients a backward before the loop left reach this step, which
        # applies them with the loop's own (the loop clears only after its step).
        found.append(Verdict("leaked_in", chain, target, label))
    if unskipped:
        kind = "skipped_clear" if has_clear or any(read.skip == () for read in unskipped) else "never_cleared"
        if kind == "skipped_clear" and all(read.skip is None and read.recent for read in unskipped):
            # The loop clears, and no path skipped it: a step of this same pass applied these
            # gradients already (two steps, no clear between them).
            kind = "stepped_twice"
        if kind == "never_cleared" and part is not None:
            found.append(Verdict("part_cleared", chain, target, label, part[-1], other=modules))
        elif kind == "never_cleared" and partial is not None:
            found.append(Verdict("partially_cleared", chain, target, label, partial[0]))
        else:
            found.append(Verdict(kind, chain, target, label))
    # Every path brings only what an earlier step of this pass applied, and nothing new
    # (`opt.step(); opt.step()`): this step applies it again (the oracle's STALE). In a loop
    # only: an optimizer's test steps one gradient again on purpose (classy_vision's).
    if looped and incoming and not leaking and all(s.stale and not s.pending and s.read.recent and not s.read.twice
                                        for s in incoming):
        found.append(Verdict("stepped_twice", chain, target, label))
    # EMPTY: on every path the step applies nothing, and some path's clear removed what it would have.
    discards: list[Chain] = []
    if not any(s.pending for s in incoming):
        discards = sorted({r.chain for r in removals if r.empties})
        found += [Verdict("cleared_before_step", c, target, label) for c in discards]
    # Zeroed in place, a skipped update still moves the weights (momentum, weight decay); set to
    # None, the optimizer skips every parameter without a gradient (rules.md section 4).
    zeroed = sorted({r.chain for r in removals if r.zeroes} - set(discards))
    found += [Verdict("zeroed_before_step", c, target, label) for c in zeroed]
    return found



def stepped(window: Window, by: str) -> Window:
    """A step: the backwards no step has followed yet ran for `by`."""
    if all(first for _, first in window):
        return window
    return frozenset((event, first or by) for event, first in window)


# --- ZG006: another optimizer's loss in this one's parameters ---------------------------------


def judge_contamination(chain: Chain, label: str, incoming: set[State], target: str,
                        links: dict[str, frozenset[str]]) -> list[Verdict]:
    """rules.md section 5, ZG006: a backward in the window of this step reaches modules of
    `target` that the optimizer it ran for does not hold, and `target` has a loss of its own
    here. "Ran for" needs evidence: (a) another optimizer stepped first after it, or (b) it is
    the only loss that reaches that optimizer's modules, and `target`'s own loss leaves those out
    on purpose (`.detach()`, `torch.no_grad()`)."""
    mine = links.get(target)
    if not mine:
        return []
    found: dict[int, Verdict] = {}
    for s in incoming:
        for event, other, kind in _contaminations(stepped(s.read.window, SELF), target, mine, links, s.wiped):
            found.setdefault(event.site, Verdict(kind, chain, target, label, event.site, other, event.label))
    return [found[site] for site in sorted(found)]


def _contaminations(window: Window, target: str, mine: frozenset[str], links: dict[str, frozenset[str]],
                    wiped: frozenset[Event] = frozenset()) -> list[tuple[Event, str, str]]:
    """Each foreign backward of the window, the optimizer it was meant for, and the verdict's
    kind: `contaminated` (that optimizer stepped first on it), `contaminated_instead` (and this
    one's own loss was cleared), `contaminated_meant` (this one stepped first: rule (b))."""
    # `target`'s own losses: those it stepped first after, and those that reach only its sets,
    # whoever stepped first (clear all, backpropagate all, step all: issue 47). `wiped`: those its
    # own clear removed before this step (a module-wide clear between its backward and its step),
    # which the other loss's gradients stand in for (`instead`: the step applies no loss of its own).
    held = {event for event, first in window if first == SELF or _mine_only(event, mine, links.get(first))}
    own = held | {event for event in wiped if any(_mine_only(event, mine, links.get(first)) for _, first in window)}
    instead = not held
    found = []
    for event, first in window:
        reach = event.reach
        if reach is None:
            continue
        if first != SELF:  # (a)
            theirs = links.get(first)
            if theirs and _foreign(reach, mine, theirs) and own:
                found.append((event, first, "contaminated_instead" if instead else "contaminated"))
            continue
        for other, theirs in links.items():  # (b)
            if other == target or not theirs or not _foreign(reach, mine, theirs):
                continue
            alone = all(e is event or e.reach is None or not _touches(e.reach.modules, theirs) for e, _ in window)
            if alone and any(_own_loss(e, mine, theirs) for e in own - {event}):
                found.append((event, other, "contaminated_meant"))
                break
    return found


def _mine_only(event: Event, mine: frozenset[str], theirs: Optional[frozenset[str]]) -> bool:
    """A loss that reaches only `mine`, none of what the optimizer that stepped first holds."""
    return bool(theirs) and _own_loss(event, mine, theirs or frozenset())


def _touches(modules: frozenset[str], held: frozenset[str]) -> bool:
    return any(related(m, held) for m in modules)


def _foreign(reach: Reach, mine: frozenset[str], theirs: frozenset[str]) -> bool:
    """The loss reaches modules of mine that the other optimizer does not hold, and the other's,
    one feeding the other (`D(G(z))`, `actor(world(s))`): a module of mine that is only a term
    beside the other's (`model2(x) + model1(x)`) is meant to learn from that loss."""
    return (_touches(reach.modules, theirs)
            and any(related(m, mine) and not related(m, theirs) and _fed(m, theirs, reach.chained)
                    for m in reach.modules))


def _fed(module: str, theirs: frozenset[str], chained: frozenset[tuple[str, str]]) -> bool:
    """`module` feeds one of `theirs`, or is fed by one, in the loss's computation."""
    return any((within(a, module) or within(module, a)) and related(b, theirs)
               or (within(b, module) or within(module, b)) and related(a, theirs) for a, b in chained)


def _own_loss(event: Event, mine: frozenset[str], theirs: frozenset[str]) -> bool:
    """A loss that reaches only `mine` and is known to leave `theirs` out."""
    reach = event.reach
    if reach is None or not reach.modules or _touches(reach.modules, theirs):
        return False
    if not all(related(m, mine) for m in reach.modules):
        return False
    return not reach.opaque or _touches(reach.cut, theirs)
