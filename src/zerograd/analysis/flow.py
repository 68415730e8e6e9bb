"""The dataflow of rules.md section 4 (v3): what one event or edge does to what `.grad` holds on a
path, and what the states reaching a step say (no LibCST, no codes).

For one optimizer at a time, a may-analysis propagates *sets* of path states over a scope's
graph (graph.py); keeping whole path states instead of one merged bit vector is what tells which
guard skipped a step or a clear. summaries.py runs it and applies calls.

A path state is the contents of the optimizer's parameter sets (a `Grad` per contribution: which
backward made it, whether a step applied it, and why it is still there), the last clear that
removed gradients no step had applied (`Removal`: the oracle's LOST and EMPTY), and what is known
of the conditions on the way (facts). Everything the verdicts read is read off these.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional

from .conditions import Facts, assume, counted, forget, shift
from .graph import ArmEffect, BackEffect, Chain, EnterEffect, ExitEffect, RaiseEffect, Summary
from .keys import ARGUMENT, HANDED, covers, related, shares, unit_window, unrelated, within
from .model import Event, Kind, Reach, Test

# Why gradients no step applied passed a step of their optimizer: nothing, a branch not taken, an
# accumulation condition, a partial window left by a loop, or a jump (`continue`, `return`) that
# skipped the rest of the iteration: only the last leaves gradients behind for the next step (ZG004).
NO_GUARD, OTHER_GUARD, ACCUM_GUARD, PARTIAL_WINDOW, SKIP_GUARD = 0, 1, 2, 3, 4
# ... or the caller's literal argument (`train_step(batch, update_params=False)`): kept for a later
# call's step when they survive to the caller's next iteration, else discarded on purpose.
CALLER_GUARD = 5
OUT = -1  # first link of a chain that leads out of a callee, back into its caller
HERE, BEFORE, DOUBTFUL = 0, 1, 2  # where gradients come from: this loop, before it, maybe cleared since
TWICE = 3  # applied: by another optimizer over the same parameters (its step updated these weights)
ALL = "*"  # the one set of an optimizer whose modules are not known
SELF = "="  # the analysed optimizer (as the one that stepped first after a backward)


class Grad(NamedTuple):
    """One contribution in the `.grad` of one of the optimizer's parameter sets."""

    part: str  # the set (ALL: every set of the optimizer)
    applied: bool  # a step of the optimizer applied it
    origin: int = HERE
    # The backward that made it, where its loss's reach is known (ZG006: one Grad per backward
    # otherwise would multiply the states for nothing), and the optimizer that stepped first after
    # it (SELF: this one; "": none yet; "?": one the analysis need not or cannot name).
    backward: Optional[Event] = None
    first: str = ""
    hold: int = NO_GUARD  # not applied: why it passed a step of this optimizer (a guard above)
    counter: Optional[str] = None  # ... the counter of that accumulation condition, when known
    # Applied: the clear it was kept from, skipped by an accumulation condition (() : another guard).
    kept: Optional[Chain] = None
    carried: bool = False  # applied, and carried round a loop's back edge since
    # From a loss that may be another optimizer's: of unknown reach (it reads values from outside
    # the scope) with none of this optimizer's modules known, or reaching another's modules.
    weak: bool = False
    # Weak and unapplied: the other optimizers that cleared since it was made, whose later steps
    # did not apply it (a GAN's discriminator clearing before its own loss).
    cleared: frozenset[str] = frozenset()


class Removal(NamedTuple):
    """A clear that removed gradients no step had applied, as far as a verdict reads it."""

    chain: Chain
    # The step after it applies nothing unless a backward comes first (EMPTY, ZG002): what was
    # removed was no batch a guard had already kept from its step.
    empties: bool
    lost: bool  # it removed an open accumulation window, not beside a reset of its counter (LOST, ZG003)
    zeroes: bool  # zeroed in place, not set to None
    # Not a removal (yet): a possible clear since the last backward, which may have left that
    # backward's gradients (guarded so) for the optimizer's own clear to remove.
    maybe: Optional[int] = None


def _removal(chain: Chain, guard: int, zeroes: bool, restarts: bool) -> Optional[Removal]:
    lost = guard == ACCUM_GUARD and not restarts
    empties = guard in (NO_GUARD, ACCUM_GUARD)
    return Removal(chain, empties, lost, zeroes) if lost or empties or zeroes else None


def _refilled(removed: Optional[Removal]) -> Optional[Removal]:
    """A backward (or a possible clear) since the clear: the next step need not be empty; only a
    lost window still counts (and what a possible clear may have left is this backward's now)."""
    if removed is None or not (removed.empties or removed.zeroes or removed.maybe is not None):
        return removed
    return removed._replace(empties=False, zeroes=False, maybe=None) if removed.lost else None


Held = frozenset[Grad]
Window = frozenset[tuple[Event, str]]


class Reading(NamedTuple):
    """What the verdicts and the edges read off some contents."""

    stale: bool  # gradients a step already applied are still in some set
    pending: bool  # a backward added gradients to some set that no step has applied yet
    leaks: bool  # gradients made before the loop and this iteration's, none applied yet
    guard: int  # the guard the unapplied gradients passed
    counter: Optional[str]
    foreign: bool  # another optimizer stepped first on all of them (TD3's critic: its loss's)
    skip: Optional[Chain]  # the clear the applied gradients were kept from
    window: Window  # the backwards (with reach) in .grad, each with who stepped first after it
    twice: Optional[str]  # all that is stale was applied by this other optimizer over the same parameters
    recent: bool  # all that is stale was applied in this pass (no back edge since its step)
    # Some unapplied gradient held back by the latest guard may be this optimizer's own loss's:
    # not all are weak ones another optimizer stepped first on (REDQ's Q-ensemble loss, pending
    # past the policy's delayed update, is no window of the entropy optimizer's).
    owned: bool


class State(NamedTuple):
    held: Held
    removed: Optional[Removal]
    facts: Facts
    # Cleared by this optimizer's own clear, nothing added since: `.grad` is known to hold
    # nothing (an empty `held` at a scope's start is unknown: its first step leaves it stale).
    clean: bool = False
    # The backwards (reach known) whose unapplied gradients this optimizer's own clear removed
    # since its last step: its own loss of this update, even where another loss refilled .grad.
    wiped: frozenset[Event] = frozenset()

    @property
    def read(self) -> Reading:
        return _read(self.held)

    @property
    def stale(self) -> bool:
        return _read(self.held).stale

    @property
    def pending(self) -> bool:
        return _read(self.held).pending

    @property
    def leaks(self) -> bool:
        return _read(self.held).leaks


# Contents are few and small, states many: what is read off them, and what each event makes of
# them, is computed once per distinct contents (pure functions of `held`).
CACHED = 4096


@lru_cache(maxsize=CACHED)
def _read(held: Held) -> Reading:
    unapplied = [c for c in held if not c.applied]
    origins = {c.origin for c in unapplied}
    guard = max((c.hold for c in unapplied), default=NO_GUARD)
    counter = next((c.counter for c in unapplied if c.counter is not None), None)
    skips = {c.kept for c in held if c.applied and c.kept is not None}
    skip = max(skips, key=len) if skips else None  # a chain before (): the condition's clear
    window = frozenset((c.backward, c.first) for c in held if c.backward is not None and c.backward.reach is not None)
    applied = [c for c in held if c.applied]
    twice = min(c.first for c in applied) if applied and all(c.origin == TWICE for c in applied) else None
    return Reading(bool(applied), bool(unapplied), {BEFORE, HERE} <= origins, guard, counter,
                   bool(unapplied) and all(c.first for c in unapplied), skip, window, twice,
                   bool(applied) and not any(c.carried for c in applied),
                   any(c.hold == guard and not (c.first and c.weak and c.first not in c.cleared) for c in unapplied))


START = State(frozenset(), None, frozenset())
EMPTY: Held = frozenset()


# --- what one node and one edge do ---------------------------------------------------------


def transfer(event: Event, s: State, target: str, links: dict[str, frozenset[str]],
             trained: frozenset[str] = frozenset()) -> State:
    """`trained`: the optimizers the scope steps."""
    kind = event.kind
    if target.endswith(HANDED) and kind is not Kind.BACKWARD and event.target != target:
        return _handed(event, s, target, links)
    if kind is Kind.STEP and event.target is not None and event.target != target and event.target.endswith(HANDED):
        return _handed_in(event, s)
    if kind is Kind.CLEAR and event.target is not None and event.target != target and event.target.endswith(HANDED):
        return s  # a local module's own clear after its hand-over
    if kind is Kind.BACKWARD:
        if _misses(event.reach, target, links, trained):
            # The loss reaches none of this optimizer's parameters: their .grad is as it was (a
            # discriminator's loss accumulated across batches is nothing the generator's clear loses),
            # and a clear that emptied them before this backward still did (EMPTY stands).
            return s
        # Earlier gradients keep the guard they passed: another loss's backward (a GAN's) does
        # not undo a skipped step. A loss backpropagated right after this optimizer's own clear
        # is one it cleared for (`actor.zero_grad(); critic.zero_grad(); loss.backward()`): never weak.
        weak = not s.clean and _weak(event.reach, target, links, trained)
        return State(_added(s.held, event if event.reach is not None else None, weak), _refilled(s.removed), s.facts,
                     wiped=s.wiped)
    if kind is Kind.STEP and event.target == target:
        if s.clean and not s.held:  # a warm-up step after a clear applies nothing, leaves nothing
            return s._replace(removed=None)
        return State(_applied(s.held), None, s.facts)
    if kind is Kind.STEP and event.target is not None and _same_sets(event.target, target, links):
        # Another optimizer over the very same parameters: its step applied these gradients to
        # the weights this one's step updates again (the oracle's STALE).
        return s._replace(held=_applied_by(s.held, event.target))
    if kind is Kind.STEP:
        # Another optimizer stepped on these gradients: they were its loss's (TD3's critic), so
        # skipping this optimizer's step afterwards is no accumulation.
        return s._replace(held=_first(s.held, event.target or "?")) if s.held else s
    if kind is Kind.CLEAR and event.target == target and event.sets is not None:
        return s._replace(held=_part_cleared(s.held, event.sets, event.keeps))
    if kind is Kind.CLEAR and event.target is not None and covers(event.target, target):
        return _cleared(s, (event.site,), event.zeroes, event.restarts, links.get(target))
    if kind is Kind.CLEAR and event.target is not None and target not in event.spares and shares(event.target, target, links):
        # Another optimizer over some of the same parameters, or a holder of this one (a container
        # of optimizers): a possible clear of this one.
        return _maybe_cleared(s)
    if kind is Kind.CLEAR and event.target is not None and not _disjoint(event.target, target, links):
        # Another optimizer that may hold some of the same parameters (`optim` and
        # `self.optimizer` over one model, built apart): a possible clear of what came from
        # before the loop, which proves no leak.
        return s._replace(held=_doubted(s.held))
    if kind is Kind.CLEAR and event.target is not None and event.target != target and s.held:
        return s._replace(held=_spared(s.held, event.target))  # an optimizer apart from this one
    if kind in (Kind.MOVE, Kind.SET) and event.target is not None:
        return s._replace(facts=counted(s.facts, event, kind is Kind.SET))
    if kind is Kind.BUILD and event.target == target:
        return s._replace(held=_unapplied(s.held))
    if kind is Kind.MAYBE_CLEAR and target not in event.spares and not unrelated(event.target, target, links):
        return _maybe_cleared(s)
    return s


def _handed(event: Event, s: State, target: str, links: dict[str, frozenset[str]]) -> State:
    """What clears a module's gradients that are handed to another module's parameters: its own
    clear (`local.zero_grad()`, a clear of an optimizer over it), and possibly a clear that zeroes
    in place the shared tensors they are bound to. A shared optimizer's clear that sets the
    shared .grad to None (PyTorch 2's default) unbinds them and leaves the module's own."""
    module = target[:-len(HANDED)]
    kind = event.kind
    if kind not in (Kind.CLEAR, Kind.MAYBE_CLEAR):
        return s
    held = links.get(event.target or "") if kind is Kind.CLEAR else None
    if event.target is not None and (within(event.target, module) if kind is Kind.MAYBE_CLEAR
                                     else any(within(m, module) for m in held or ())):
        return _cleared(s, (event.site,), event.zeroes, event.restarts)
    # An optimizer whose modules are not known here may hold the local module (silent).
    if event.zeroes or kind is Kind.CLEAR and not held or kind is Kind.MAYBE_CLEAR and (
            event.target is None or "[" in event.target):
        return _maybe_cleared(s)
    return s


def _handed_in(event: Event, s: State) -> State:
    """A hand-over is no step of an optimizer; it replaces the .grad of the destination's
    parameters with fresh gradients: what the optimizer over them held is gone, and its next step
    is not empty. The destination is named in the words of the function that hands over (a
    parameter, often), so any optimizer may be the one over it: a possible clear, then a gradient."""
    refilled = _refilled(s.removed)
    return State(_added(frozenset(), None), None if refilled is None else refilled._replace(maybe=None), s.facts,
                 wiped=s.wiped)


def _same_sets(other: str, target: str, links: dict[str, frozenset[str]]) -> bool:
    """Two optimizers known to be built over the same modules, neither holding the other (a
    wrapper's inner optimizer) nor an entry of a collection."""
    mine = links.get(target)
    if not mine or links.get(other) != mine or "[" in other + target:
        return False
    return not (within(other, target) or within(target, other))


@lru_cache(maxsize=CACHED)
def _applied_by(held: Held, other: str) -> Held:
    return frozenset(c if c.applied else Grad(c.part, True, TWICE, c.backward if _named(c) else None, c.first or other)
                     for c in held)


def _misses(reach: Optional[Reach], target: str, links: dict[str, frozenset[str]], trained: frozenset[str]) -> bool:
    """A loss that is other optimizers' only: traced to known modules (nothing read from outside
    the scope), each held by another optimizer the scope steps (`trained`), none within or
    around one this optimizer holds. A module no such optimizer holds may be this one's under
    another name (`model` for `self.model`), or another class's (a module's keys are its words)."""
    held = links.get(target)
    if reach is None or reach.opaque or not reach.modules or not held:
        return False
    others = _others(target, links, trained)
    return all(not related(m, held) and any(related(m, theirs) for theirs in others) for m in reach.modules)


def _others(target: str, links: dict[str, frozenset[str]], trained: frozenset[str]) -> list[frozenset[str]]:
    """What each other optimizer the scope steps holds, where known."""
    return [links[other] for other in trained if other != target and links.get(other)]


def _disjoint(other: str, target: str, links: dict[str, frozenset[str]]) -> bool:
    """Two optimizers known to hold modules apart (a GAN's generator and discriminator)."""
    mine, theirs = links.get(target, frozenset()), links.get(other, frozenset())
    return bool(mine and theirs) and not any(related(m, theirs) for m in mine)


def _cleared(s: State, chain: Chain, zeroes: bool, restarts: bool, mine: Optional[frozenset[str]] = None) -> State:
    """The optimizer's clear: what no step applied is lost (rules.md v3 EMPTY, LOST), unless
    nothing was (the earlier loss stands). Outside a window, gradients of losses that another
    optimizer stepped first on and whose known reach (nothing unknown in it) touches none of
    `mine` (this optimizer's modules) were that optimizer's losses (an actor's, pending for the encoder's optimizer):
    clearing them before this one's own loss is what the clear is for, and proves no removal,
    whatever the next backward reaches."""
    read = s.read
    removed = s.removed
    if read.pending:
        if not (mine and read.guard == NO_GUARD and all(c.applied or _others_loss(c, mine) for c in s.held)):
            # By the manifest rule a loss of unknown reach proves no window lost (read.owned).
            removed = _removal(chain, read.guard, zeroes, restarts or not read.owned)
    elif removed is not None and removed.maybe is not None:  # what a possible clear may have left
        removed = _removal(chain, removed.maybe, zeroes, restarts) or removed._replace(maybe=None)
    unapplied = frozenset(c.backward for c in s.held
                          if c.backward is not None and c.backward.reach is not None and not (c.applied or c.first))
    return State(EMPTY, removed, s.facts, True, s.wiped | unapplied if unapplied else s.wiped)


def _others_loss(c: Grad, mine: frozenset[str]) -> bool:
    reach = c.backward.reach if c.first and c.backward is not None else None
    return reach is not None and not reach.opaque and not any(related(m, mine) for m in reach.modules)


def _maybe_cleared(s: State) -> State:
    """A possible clear ends stale gradients but never proves a misplaced clear. What no step
    applied may still be there, though: the optimizer's own clear after it removes that whatever
    the possible clear did (`model.zero_grad(); opt.zero_grad()` between backward and step)."""
    removed = _refilled(s.removed)
    read = s.read
    if read.pending:
        removed = (removed or Removal((), False, False, False))._replace(maybe=read.guard)
    return State(EMPTY, removed, s.facts, wiped=s.wiped)


@lru_cache(maxsize=CACHED)
def _added(held: Held, backward: Optional[Event], weak: bool = False) -> Held:
    return held | {Grad(ALL, False, HERE, backward, weak=weak)}


def _weak(reach: Optional[Reach], target: str, links: dict[str, frozenset[str]], trained: frozenset[str]) -> bool:
    """A loss that may be another optimizer's: of unknown reach with none of this one's modules
    known (REDQ's ensemble loss), or reaching modules another optimizer of the scope holds (a
    discriminator's loss through an undetached fake)."""
    held = links.get(target)
    if reach is None or not held:
        return False
    if reach.opaque and not any(related(m, held) for m in reach.modules):
        return True
    return any(related(m, theirs) for m in reach.modules for theirs in _others(target, links, trained))


@lru_cache(maxsize=CACHED)
def _spared(held: Held, other: str) -> Held:
    """Another optimizer's clear: its later step applies none of what is here now."""
    def spares(c: Grad) -> bool:  # weak, unapplied, and no step yet
        return c.weak and not c.applied and not c.first
    if not any(spares(c) and other not in c.cleared for c in held):
        return held
    return frozenset(c._replace(cleared=c.cleared | {other}) if spares(c) else c for c in held)


@lru_cache(maxsize=CACHED)
def _first(held: Held, by: str) -> Held:
    """A step of another optimizer (`by`): the backwards no step has followed yet ran for it.
    Only a backward whose reach is known needs the name (ZG006); of the others, only that some
    optimizer stepped on them while they are unapplied (fewer distinct states)."""
    if all(c.first or (c.applied and not _named(c)) for c in held):
        return held
    return frozenset(c if c.first or (c.applied and not _named(c)) else c._replace(first=by if _named(c) else "?")
                     for c in held)


def _named(c: Grad) -> bool:
    return c.backward is not None and c.backward.reach is not None


def _spent(c: Grad, first: str) -> Grad:
    """A contribution applied by a step: only what ZG006 reads of it stays."""
    if _named(c):
        return Grad(c.part, True, HERE, c.backward, first)
    return Grad(c.part, True)


@lru_cache(maxsize=CACHED)
def _entered(held: Held) -> Held:
    """Entering a loop: what no step has applied yet was made before it. Not what another
    optimizer stepped first: that was its loss's, which ZG006 judges (a GAN's generator loss left in
    the discriminator when an epoch's inner loop starts again)."""
    return frozenset(c._replace(origin=BEFORE) if c.origin == HERE and not c.applied and not c.first else c
                     for c in held)


@lru_cache(maxsize=CACHED)
def _carried(held: Held) -> Held:
    """Round a back edge: what a step applied was applied in an earlier pass."""
    if all(c.carried or not c.applied for c in held):
        return held
    return frozenset(c._replace(carried=True) if c.applied else c for c in held)


@lru_cache(maxsize=CACHED)
def _doubted(held: Held) -> Held:
    return frozenset(c if c.applied else c._replace(origin=DOUBTFUL) for c in held)


@lru_cache(maxsize=CACHED)
def _applied(held: Held) -> Held:
    """A step applies every set's gradients (with none yet, the sets it holds start stale: a
    step with nothing to apply still leaves the old gradients the next one must not see)."""
    if not held:
        return frozenset({Grad(ALL, True)})
    return frozenset(_spent(c, c.first or SELF) for c in held)


def _part_cleared(held: Held, sets: frozenset[str], keeps: frozenset[str]) -> Held:
    """A module's clear that reaches only some of the optimizer's sets: gradients held by all of
    them stay in the others (`keeps`), those of a set it reaches go."""
    out = set()
    for c in held:
        if c.part == ALL:
            out |= {c._replace(part=kept) for kept in keeps}
        elif not any(within(c.part, m) for m in sets):
            out.add(c)
    return frozenset(out)


@lru_cache(maxsize=CACHED)
def _unapplied(held: Held) -> Held:
    return frozenset(c for c in held if not c.applied)


@lru_cache(maxsize=CACHED)
def _reapplied(held: Held) -> Held:
    """Gradients a step already used stay for the next one (a closure evaluated again)."""
    return held | {_spent(c, c.first) for c in held if not c.applied}


@lru_cache(maxsize=CACHED)
def _held_back(held: Held, guard: int, counter: Optional[str]) -> Held:
    """The unapplied gradients passed a step for this reason (the latest says why). A loop's
    partial window, dropped on purpose, stays one past a later accumulation test: the remainder
    a flush after the loop leaves (`if len(loader) % k:`), or what the first test of the loop's
    next run sees (`if i % k == 0: opt.zero_grad()` inside an epoch loop)."""
    return frozenset(c._replace(hold=guard, counter=counter)
                     if not c.applied and not (guard == ACCUM_GUARD and c.hold == PARTIAL_WINDOW) else c for c in held)


@lru_cache(maxsize=CACHED)
def _kept_from(held: Held, skip: Optional[Chain]) -> Held:
    """The applied gradients were kept from a clear (`skip`)."""
    return frozenset(c._replace(kept=skip) if c.applied else c for c in held)


def _guarded(s: State, guard: int, counter: Optional[str]) -> State:
    read = s.read
    if read.guard == guard and read.counter == counter:
        return s
    return s._replace(held=_held_back(s.held, guard, counter))


def relinked(chain: Chain, site: int) -> Chain:
    """A chain seen from the caller through the call at `site`, or (OUT) from inside the callee."""
    if site == OUT:
        return (OUT,) + chain
    return chain[1:] if chain and chain[0] == OUT else (site,) + chain


@lru_cache(maxsize=CACHED)
def relink(held: Held, site: int) -> Held:
    if all(not c.kept for c in held):
        return held
    return frozenset(c._replace(kept=relinked(c.kept, site)) if c.kept else c for c in held)


def cross(effect: object, s: State, target: str) -> Optional[State]:
    if isinstance(effect, EnterEffect):
        if effect.targets and s.facts:
            s = s._replace(facts=forget(s.facts, effect.targets))
        if effect.starts:
            s = s._replace(facts=s.facts | {(key, 0, True) for key in effect.starts})
        if not effect.held or s.read.guard != NO_GUARD or not s.pending:
            return s  # a window held back on purpose (accumulation, a partial window) is no leak
        return s._replace(held=_entered(s.held))
    if isinstance(effect, ArmEffect):
        return _enter_arm(effect, s, target)
    if isinstance(effect, BackEffect):
        return _around(effect, s, _micro_for(effect.steps, target) or effect.micro)
    if isinstance(effect, ExitEffect):
        effect = ExitEffect(effect.targets, effect.micro or _micro_for(effect.steps, target))
        read = s.read
        if read.guard in (OTHER_GUARD, SKIP_GUARD):
            # A guard that left the loop (`break`, or its end) kept nothing for its next step.
            return _guarded(s, PARTIAL_WINDOW, read.counter)
        if read.guard == ACCUM_GUARD and (effect.micro or (read.counter is not None and read.counter in effect.targets)):
            # The counter restarts with the loop: what is left is a partial window, dropped on purpose.
            return _guarded(s, NO_GUARD if effect.micro else PARTIAL_WINDOW, None)
        return s
    if isinstance(effect, RaiseEffect) and s.pending:
        return _guarded(s, OTHER_GUARD, s.read.counter)
    return s


def _selected(s: State, here: Summary, stepped: bool, target: str) -> State:
    """The arm a caller's literal selects: gradients it takes past a step the other arm makes
    were kept from that step by the caller (`update_params=False`)."""
    read = s.read
    if s.pending and not read.foreign and stepped and target not in here.steps and read.guard == NO_GUARD:
        return _guarded(s, CALLER_GUARD, None)
    if s.pending and target in here.steps and read.guard in (ACCUM_GUARD, CALLER_GUARD):
        return _guarded(s, NO_GUARD, None)  # the caller's window ends in this arm (as above)
    return s


def _size_knob(test: Test) -> bool:
    """A knob on a window's size (`if accum == 1: opt.zero_grad()`): it chooses the window, not
    whether gradients are cleared; at the other sizes nothing clears them (issue 47)."""
    return test.key is not None and unit_window(test.key, True) is not None


def _micro_for(steps: frozenset[str], target: str) -> bool:
    """A loop that backpropagates and never steps `target` accumulates for it (a GAN loop that
    steps only the generator is a micro-batch loop for the discriminator's optimizer)."""
    return "*" not in steps and not any(covers(stepped, target) or covers(target, stepped) for stepped in steps)


def _around(effect: BackEffect, s: State, micro: bool) -> State:
    s = s._replace(facts=shift(s.facts, effect), held=_carried(s.held))
    read = s.read
    if effect.closure and read.pending:
        # The step already used this evaluation's gradients; the next evaluation adds to them.
        return s._replace(held=_reapplied(s.held))
    if read.pending and read.guard == SKIP_GUARD and not read.foreign and not micro and effect.backward:
        # Gradients that a `continue` (or a handled error) kept from both the step and the
        # clear are left over for the next step: they leak into it (ZG004). Not in a loop that
        # never backpropagates (a `break` out of a scan over the parameters): the gradients it
        # found pending are the enclosing iteration's, which goes on to its step.
        held = _kept_from(_reapplied(_held_back(s.held, SKIP_GUARD, None)), ())
        return s._replace(held=held)
    if micro and read.pending and (not read.foreign or not effect.micro):
        return _guarded(s, ACCUM_GUARD, read.counter)
    if read.pending and read.guard == CALLER_GUARD:
        # Kept from the step by the caller's argument into its next iteration: its accumulation.
        return _guarded(s, ACCUM_GUARD, None)
    return s


def _enter_arm(effect: ArmEffect, s: State, target: str) -> Optional[State]:
    test, arm = effect.test, effect.arm
    # A call's literal argument answered the test: only one arm is a path, and no choice.
    decided = test is not None and effect.given is not None and (
        (ARGUMENT + effect.given, test.residue, (arm == 0) == test.positive) in s.facts)
    if not decided and test is not None and effect.given is not None and (
            (ARGUMENT + effect.given, test.residue, (arm == 0) != test.positive) in s.facts):
        return None
    if test is not None and test.key is not None:
        assumed = assume(s.facts, test, (arm == 0) == test.positive)
        if assumed is None:
            return None
        s = s._replace(facts=assumed)
    accumulation = test is not None and test.accumulation
    here = effect.summaries[arm]
    if decided:
        return _selected(s, here, any(target in sm.steps for sm in effect.summaries), target)
    elsewhere = [c for c in (sm.clear_of(target) for sm in effect.summaries) if c is not None]
    if (test is not None and (test.invariant or test.dispatch) and here.clear_of(target) is None and elsewhere
            and target not in here.steps and not _size_knob(test)):
        # A knob that turns the clear off does so in every iteration: the user's configuration,
        # not a path that skips it; nor is the fall-through of a dispatch on a parameter's values.
        # An arm that steps the optimizer itself is a whole training mode of its own (DANN's
        # `elif training_mode == "source":`): what it never clears stays.
        return s._replace(held=_unapplied(s.held))
    # This choice can skip the step when another arm steps and this one does not, or when this
    # arm jumps away; the latest such guard says why a step was skipped.
    by_branch = target not in here.steps and any(target in sm.steps for sm in effect.summaries)
    read = s.read
    # Gradients already held back on purpose (an accumulation window, a partial window, a step
    # another branch skipped) are no batch that a later `continue` skips.
    carried = read.guard != NO_GUARD and not by_branch
    jumps = here.jumps_past(target)
    if read.pending and not read.foreign and (jumps or by_branch) and not carried:
        # A jump on the caller's say-so (`if not should_step: return`) may be the caller's
        # accumulation: it proves no skipped batch.
        skipped = jumps and not (test is not None and test.external)
        # Accumulation skips the step in k - 1 of k iterations, by a branch or a `continue` (a
        # `return` out of the method of an object whose counter says so); a `break`, another
        # `return`, or a jump where the congruence holds (a checkpoint every n steps) is not.
        leaves = here.continues or (here.returns and test is not None and test.tracked)
        accumulation = accumulation and (by_branch or (leaves and not effect.congruent))
        guard = ACCUM_GUARD if accumulation else (SKIP_GUARD if skipped else OTHER_GUARD)
        s = _guarded(s, guard, effect.counter if accumulation else None)
    if read.stale and here.clear_of(target) is None and elsewhere:
        # The stale gradients are kept from the clear another arm makes.
        s = s._replace(held=_kept_from(s.held, elsewhere[0] if accumulation else ()))
    return s
