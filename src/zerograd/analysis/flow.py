"""The dataflow of rules.md section 4: what one event or edge does to a path state, and what
the states reaching a step say (no LibCST, no codes).

For one optimizer at a time, a may-analysis propagates *sets* of path states over a scope's
graph (graph.py); keeping whole path states instead of one merged bit vector is what tells which
guard skipped a step or a clear. summaries.py runs it and applies calls.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional

from .graph import ArmEffect, BackEffect, Chain, EnterEffect, ExitEffect, RaiseEffect, covers, shares, unrelated
from .keys import FLAG, INVARIANT, counter_of, related, within
from .model import Event, Kind, Reach, Test

# Why pending gradients may have skipped a step: nothing, a branch not taken, an accumulation
# condition, a partial window left by a loop, or a jump (`continue`, `return`) that skipped the
# rest of the iteration: only the last leaves gradients behind for the next step (ZG004).
NO_GUARD, OTHER_GUARD, ACCUM_GUARD, PARTIAL_WINDOW, SKIP_GUARD = 0, 1, 2, 3, 4
MAX_RESIDUE = 2  # modular facts further from the current phase than this are forgotten
OUT = -1  # first link of a chain that leads out of a callee, back into its caller


# (a parameter set of the optimizer, applied by its step, where the gradients come from: HERE in
# the loop being run, BEFORE it (LEAK), or DOUBTFUL: a possible clear may have removed them)
Held = frozenset[tuple[str, bool, int]]
HERE, BEFORE, DOUBTFUL = 0, 1, 2
ALL = "*"  # the one set of an optimizer whose modules are not known


class State(NamedTuple):
    # What the optimizer's .grad holds, per parameter set it was built over (rules.md v3 section
    # 4): gradients a backward added since the set's last clear, and whether its step applied them.
    held: Held
    guard: int  # strongest guard passed while gradients were pending that could skip a step
    discard: Optional[Chain]  # an unguarded clear that threw pending gradients away
    skip: Optional[Chain]  # a clear skipped through an accumulation condition (() : another guard)
    facts: frozenset[tuple[str, int, bool]]  # known outcomes of keyed conditions
    foreign: bool = False  # the pending gradients were used by another optimizer's step
    wiped: Optional[Chain] = None  # a clear that threw away accumulated gradients
    counter: Optional[str] = None  # the counter of the accumulation guard, when known
    zeroed: Optional[Chain] = None  # a clear that zeroed pending gradients in place, on some path
    # The backwards (with what their losses reach) whose gradients are in .grad since the last
    # clear, each with the optimizer that stepped first after it (SELF: this one; "": none yet).
    window: frozenset[tuple[Event, str]] = frozenset()

    @property
    def stale(self) -> bool:
        """Gradients a step already applied are still in some set."""
        return _read(self.held)[0]

    @property
    def pending(self) -> bool:
        """A backward added gradients to some set that no step has applied yet."""
        return _read(self.held)[1]

    @property
    def leaks(self) -> bool:
        """Gradients made before the loop and gradients of this iteration, none applied yet."""
        return _read(self.held)[2]


# Contents are few and small, states many: what is read off them, and what each event makes of
# them, is computed once per distinct contents (pure functions of `held`).
CACHED = 4096


@lru_cache(maxsize=CACHED)
def _read(held: Held) -> tuple[bool, bool, bool]:
    """(stale, pending, leaks) of some contents."""
    unapplied = {origin for _, applied, origin in held if not applied}
    return any(applied for _, applied, _ in held), bool(unapplied), {BEFORE, HERE} <= unapplied


START = State(frozenset(), NO_GUARD, None, None, frozenset())
EMPTY: Held = frozenset()
SELF = "="  # in a window: the analysed optimizer stepped first after that backward


# --- what one node and one edge do ---------------------------------------------------------


def transfer(event: Event, s: State, target: str, links: dict[str, frozenset[str]]) -> State:
    kind = event.kind
    if kind is Kind.BACKWARD:
        # The guard survives: another loss's backward (a GAN's) does not undo a skipped step.
        window = s.window | {(event, "")} if event.reach is not None else s.window
        held = _added(s.held)
        return s._replace(held=held, discard=None, foreign=False, zeroed=None, window=window)
    if s.window and kind is Kind.STEP and event.target is not None:
        s = s._replace(window=stepped(s.window, SELF if event.target == target else event.target))
    if kind is Kind.STEP and event.target == target:
        return s._replace(held=_applied(s.held), guard=NO_GUARD, discard=None, skip=None, wiped=None, counter=None,
                          zeroed=None)
    if kind is Kind.STEP and s.pending:
        # Another optimizer stepped on these gradients: they were its loss's (TD3's critic), so
        # skipping this optimizer's step afterwards is no accumulation.
        return s._replace(foreign=True)
    if kind is Kind.CLEAR and event.target == target and event.sets is not None:
        return s._replace(held=_part_cleared(s.held, event.sets, event.keeps))
    if kind is Kind.CLEAR and event.target is not None and covers(event.target, target):
        return _cleared(s, (event.site,), event.zeroes, event.restarts)
    if kind is Kind.CLEAR and event.target is not None and target not in event.spares and shares(event.target, target, links):
        # Another optimizer over some of the same parameters, or a holder of this one (a container
        # of optimizers): a possible clear of this one.
        return s._replace(held=EMPTY, guard=NO_GUARD, discard=None, skip=None, foreign=False, window=frozenset())
    if kind is Kind.CLEAR and event.target is not None and not _disjoint(event.target, target, links):
        # Another optimizer that may hold some of the same parameters (`optim` and
        # `self.optimizer` over one model, built apart): a possible clear of what came from
        # before the loop, which proves no leak.
        return s._replace(held=_doubted(s.held))
    if kind in (Kind.MOVE, Kind.SET) and event.target is not None:
        return s._replace(facts=_counted(s.facts, event, kind is Kind.SET))
    if kind is Kind.BUILD and event.target == target:
        return s._replace(held=_unapplied(s.held), skip=None, window=frozenset())
    if kind is Kind.MAYBE_CLEAR and target not in event.spares and not unrelated(event.target, target, links):
        # A possible clear ends stale gradients but never proves a misplaced clear.
        return s._replace(held=EMPTY, guard=NO_GUARD, discard=None, skip=None, foreign=False, window=frozenset())
    return s


def _disjoint(other: str, target: str, links: dict[str, frozenset[str]]) -> bool:
    """Two optimizers known to hold modules apart (a GAN's generator and discriminator)."""
    mine, theirs = links.get(target, frozenset()), links.get(other, frozenset())
    return bool(mine and theirs) and not any(related(m, theirs) for m in mine)


@lru_cache(maxsize=CACHED)
def _added(held: Held) -> Held:
    return held | {(ALL, False, HERE)}


@lru_cache(maxsize=CACHED)
def _entered(held: Held) -> Held:
    """Entering a loop: what no step has applied yet was made before it."""
    return frozenset((part, applied, BEFORE if origin == HERE and not applied else origin)
                     for part, applied, origin in held)


@lru_cache(maxsize=CACHED)
def _doubted(held: Held) -> Held:
    return frozenset((part, applied, DOUBTFUL if not applied else origin) for part, applied, origin in held)


@lru_cache(maxsize=CACHED)
def _applied(held: Held) -> Held:
    """A step applies every set's gradients (with none yet, the sets it holds start stale: a
    step with nothing to apply still leaves the old gradients the next one must not see)."""
    return frozenset((part, True, HERE) for part in ({c[0] for c in held} or {ALL}))


def _part_cleared(held: Held, sets: frozenset[str], keeps: frozenset[str]) -> Held:
    """A module's clear that reaches only some of the optimizer's sets: gradients held by all of
    them stay in the others (`keeps`), those of a set it reaches go."""
    out = set()
    for part, applied, origin in held:
        if part == ALL:
            out |= {(kept, applied, origin) for kept in keeps}
        elif not any(within(part, m) for m in sets):
            out.add((part, applied, origin))
    return frozenset(out)


@lru_cache(maxsize=CACHED)
def _unapplied(held: Held) -> Held:
    return frozenset(c for c in held if not c[1])


@lru_cache(maxsize=CACHED)
def _reapplied(held: Held) -> Held:
    """Gradients a step already used stay for the next one (a closure evaluated again)."""
    return held | {(part, True, HERE) for part, applied, _ in held if not applied}


def _cleared(s: State, chain: Chain, zeroes: bool = False, restarts: bool = False) -> State:
    # Accumulated gradients count too: with no backward before the step, the clear threw away the
    # window the step was for (ZG002, which says it better than ZG003).
    discard = chain if s.pending and s.guard in (NO_GUARD, ACCUM_GUARD) else s.discard
    # Zeroed in place, a skipped update still moves the weights (momentum, weight decay); set to
    # None, the optimizer skips every parameter without a gradient (rules.md section 4).
    zeroed = chain if s.pending and zeroes else s.zeroed
    # Wiping gradients whose step an accumulation condition skipped is ZG003 if a step follows;
    # a later clear of pending gradients makes the earlier wipe moot.
    wiped = s.wiped
    if s.pending:
        wiped = chain if s.guard == ACCUM_GUARD and not restarts else None
    return s._replace(held=EMPTY, guard=NO_GUARD, discard=discard, skip=None,
                      foreign=False, wiped=wiped, counter=None, zeroed=zeroed, window=frozenset())


def stepped(window: frozenset[tuple[Event, str]], by: str) -> frozenset[tuple[Event, str]]:
    """A step: the backwards no step has followed yet ran for `by`."""
    if all(first for _, first in window):
        return window
    return frozenset((event, first or by) for event, first in window)


def cross(effect: object, s: State, target: str) -> Optional[State]:
    if isinstance(effect, EnterEffect):
        if s.guard != NO_GUARD or not s.pending:
            return s  # a window held back on purpose (accumulation, a partial window) is no leak
        return s._replace(held=_entered(s.held))
    if isinstance(effect, ArmEffect):
        return _enter_arm(effect, s, target)
    if isinstance(effect, BackEffect):
        return _around(effect, s, _micro_for(effect.steps, target) or effect.micro)
    if isinstance(effect, ExitEffect):
        effect = ExitEffect(effect.targets, effect.micro or _micro_for(effect.steps, target))
        if s.guard in (OTHER_GUARD, SKIP_GUARD):
            # A guard that left the loop (`break`, or its end) kept nothing for its next step.
            return s._replace(guard=PARTIAL_WINDOW)
        if s.guard == ACCUM_GUARD and (effect.micro or (s.counter is not None and s.counter in effect.targets)):
            # The counter restarts with the loop: what is left is a partial window, dropped on purpose.
            return s._replace(guard=NO_GUARD if effect.micro else PARTIAL_WINDOW, counter=None)
        return s
    if isinstance(effect, RaiseEffect) and s.pending:
        return s._replace(guard=OTHER_GUARD)
    return s


def _micro_for(steps: frozenset[str], target: str) -> bool:
    """A loop that backpropagates and never steps `target` accumulates for it (a GAN loop that
    steps only the generator is a micro-batch loop for the discriminator's optimizer)."""
    return "*" not in steps and not any(covers(stepped, target) or covers(target, stepped) for stepped in steps)


def _around(effect: BackEffect, s: State, micro: bool) -> State:
    facts = _shift(s.facts, effect)
    if effect.closure and s.pending:
        # The step already used this evaluation's gradients; the next evaluation adds to them.
        return s._replace(facts=facts, held=_reapplied(s.held))
    guard, counter = s.guard, s.counter
    if micro and s.pending and (not s.foreign or not effect.micro):
        guard = ACCUM_GUARD
    if s.pending and s.guard == SKIP_GUARD and not s.foreign and not micro and effect.backward:
        # Gradients that a `continue` (or a handled error) kept from both the step and the
        # clear are left over for the next step: they leak into it (ZG004). Not in a loop that
        # never backpropagates (a `break` out of a scan over the parameters): the gradients it
        # found pending are the enclosing iteration's, which goes on to its step.
        return s._replace(facts=facts, held=_reapplied(s.held), skip=(), counter=None)
    return s._replace(facts=facts, guard=guard, counter=counter)


def _enter_arm(effect: ArmEffect, s: State, target: str) -> Optional[State]:
    test, arm = effect.test, effect.arm
    facts = s.facts
    if test is not None and test.key is not None:
        assumed = _assume(facts, test, (arm == 0) == test.positive)
        if assumed is None:
            return None
        facts = assumed
    accumulation = test is not None and test.accumulation
    here = effect.summaries[arm]
    elsewhere = [c for c in (sm.clear_of(target) for sm in effect.summaries) if c is not None]
    if test is not None and (test.invariant or test.dispatch) and here.clear_of(target) is None and elsewhere:
        # A knob that turns the clear off does so in every iteration: the user's configuration,
        # not a path that skips it; nor is the fall-through of a dispatch on a parameter's values.
        return s._replace(facts=facts, held=_unapplied(s.held))
    # This choice can skip the step when another arm steps and this one does not, or when this
    # arm jumps away; the latest such guard says why a step was skipped.
    by_branch = target not in here.steps and any(target in sm.steps for sm in effect.summaries)
    guard, counter = s.guard, s.counter
    # Gradients already held back on purpose (an accumulation window, a partial window, a step
    # another branch skipped) are no batch that a later `continue` skips.
    carried = s.guard != NO_GUARD and not by_branch
    jumps = here.jumps_past(target)
    if s.pending and not s.foreign and (jumps or by_branch) and not carried:
        # A jump on the caller's say-so (`if not should_step: return`) may be the caller's
        # accumulation: it proves no skipped batch.
        skipped = jumps and not (test is not None and test.external)
        # Accumulation skips the step in k - 1 of k iterations, by a branch or a `continue` (a
        # `return` out of the method of an object whose counter says so); a `break`, another
        # `return`, or a jump where the congruence holds (a checkpoint every n steps) is not.
        leaves = here.continues or (here.returns and test is not None and test.tracked)
        accumulation = accumulation and (by_branch or (leaves and not effect.congruent))
        guard = ACCUM_GUARD if accumulation else (SKIP_GUARD if skipped else OTHER_GUARD)
        counter = effect.counter if accumulation else None
    skip = s.skip
    if s.stale and here.clear_of(target) is None and elsewhere:
        skip = elsewhere[0] if accumulation else ()
    return s._replace(guard=guard, skip=skip, facts=facts, counter=counter)


def _assume(facts: frozenset[tuple[str, int, bool]], test: Test, value: bool) -> Optional[frozenset[tuple[str, int, bool]]]:
    key, residue = test.key, test.residue
    assert key is not None
    modulus = _modulus(key)
    if modulus is not None:
        residue %= modulus  # `(i + 1) % 4 == 0` is the phase `i % 4 == 3`
    excluded = set()
    for fact_key, fact_residue, fact_value in facts:
        if fact_key != key:
            continue
        if fact_residue == residue and fact_value != value:
            return None
        if fact_residue != residue and fact_value and value:
            return None  # the counter cannot sit at two phases at once
        if not fact_value:
            excluded.add(fact_residue)
    if not value and modulus is not None and len(excluded | {residue}) >= modulus:
        return None  # every other phase is ruled out: the counter sits at this one
    return facts | {(key, residue, value)}


def _counted(facts: frozenset[tuple[str, int, bool]], event: Event, to: bool) -> frozenset[tuple[str, int, bool]]:
    """An object's wrapping counter or a flag (`event.target`, its key `event.label`) moved on by
    `event.phase`, or set to it: what was known of its value moves along, or gives way."""
    kept = set()
    for key, residue, value in facts:
        if counter_of(key) != event.target and key != event.label:
            kept.add((key, residue, value))
        elif not to and (moved := _moved(key, residue, event.phase)) is not None:
            kept.add((key, moved, value))
    if to:
        modulus = _modulus(event.label)
        kept.add((event.label, event.phase if modulus is None else event.phase % modulus, True))
    return frozenset(kept)


def _moved(key: str, residue: int, by: int) -> Optional[int]:
    """A modular fact's residue after its counter moves `by`; None: forgotten (too far from the
    current phase, where the modulus is not a literal)."""
    modulus = _modulus(key)
    if modulus is not None:
        return (residue + by) % modulus
    return residue + by if abs(residue + by) <= MAX_RESIDUE else None


def _modulus(key: str) -> Optional[int]:
    """The modulus of a modular key when it is a literal ("mod:i%4" -> 4)."""
    if not key.startswith("mod:"):
        return None
    text = key.rpartition("%")[2]
    return int(text) if text.isdigit() and 0 < int(text) <= 64 else None


def _shift(facts: frozenset[tuple[str, int, bool]], effect: BackEffect) -> frozenset[tuple[str, int, bool]]:
    """Going around a loop: a fact holds until a name in it is assigned (reaching definitions);
    a modular counter that moves on shifts its phase by one."""
    if not facts:
        return facts
    kept = set()
    for key, residue, value in facts:
        if key.startswith(INVARIANT):
            kept.add((key, residue, value))  # a knob: the same answer in every iteration
        elif key.startswith(FLAG):
            if not effect.everything:  # set by its assignments only (a step function's: a new call)
                kept.add((key, residue, value))
        elif key.startswith("mod:"):
            counter = key[4:].partition("%")[0]
            # Moved (or set) by the body itself, the counter's events have shifted it already.
            moves = counter not in effect.shifted and (
                effect.everything or counter in effect.moves or counter.split(".")[0] in effect.moves)
            moved = _moved(key, residue, 1 if moves else 0)
            if moved is not None:
                kept.add((key, moved, value))
        elif not effect.everything and not _mentions(key, effect.moves):
            kept.add((key, residue, value))
    return frozenset(kept)


def _mentions(key: str, names: frozenset[str]) -> bool:
    import re

    # An attribute may be changed by any call (`accelerator.sync_gradients`): only facts about
    # local names are known to hold until the loop assigns them.
    words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", key))
    return "(" in key or "[" in key or any("." in w or w in names for w in words)


# --- verdicts ------------------------------------------------------------------------------


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
               partial: Optional[Chain] = None, part: Optional[Chain] = None, modules: str = "") -> list[Verdict]:
    """`partial`: a write of one parameter's .grad near the step; `part`: a clear of only some of
    the optimizer's sets, `modules` (both name the clear that leaves the rest stale)."""
    found = []
    wiped = sorted({s.wiped for s in incoming if s.wiped is not None})
    found += [Verdict("frequency_mismatch", c, target, label) for c in wiped]
    leaking = [s for s in incoming if s.stale and s.pending]
    skipped = sorted({s.skip for s in leaking if s.skip})
    found += [Verdict("frequency_mismatch", c, target, label) for c in skipped]
    # Paths that leak without passing a skipped clear: the loop around the step never clears.
    leaking = [s for s in leaking if not s.skip]
    if not leaking and has_clear and any(s.leaks for s in incoming):
        # rules.md v3 LEAK: gradients a backward before the loop left reach this step, which
        # applies them with the loop's own (the loop clears only after its step).
        found.append(Verdict("leaked_in", chain, target, label))
    if leaking:
        kind = "skipped_clear" if has_clear or any(s.skip == () for s in leaking) else "never_cleared"
        if kind == "never_cleared" and part is not None:
            found.append(Verdict("part_cleared", chain, target, label, part[-1], other=modules))
        elif kind == "never_cleared" and partial is not None:
            found.append(Verdict("partially_cleared", chain, target, label, partial[0]))
        else:
            found.append(Verdict(kind, chain, target, label))
    discards: list[Chain] = []
    if not any(s.pending for s in incoming):
        discards = sorted({s.discard for s in incoming if s.discard is not None})
        found += [Verdict("cleared_before_step", c, target, label) for c in discards]
    zeroed = sorted({s.zeroed for s in incoming if s.zeroed is not None} - set(discards))
    found += [Verdict("zeroed_before_step", c, target, label) for c in zeroed]
    return found


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
        for event, other in _contaminations(stepped(s.window, SELF), target, mine, links):
            found.setdefault(event.site, Verdict("contaminated", chain, target, label, event.site, other, event.label))
    return [found[site] for site in sorted(found)]


def _contaminations(window: frozenset[tuple[Event, str]], target: str, mine: frozenset[str],
                    links: dict[str, frozenset[str]]) -> list[tuple[Event, str]]:
    own = {event for event, first in window if first == SELF}
    found = []
    for event, first in window:
        reach = event.reach
        if reach is None:
            continue
        if first != SELF:  # (a)
            theirs = links.get(first)
            if theirs and _foreign(reach, mine, theirs) and own:
                found.append((event, first))
            continue
        for other, theirs in links.items():  # (b)
            if other == target or not theirs or not _foreign(reach, mine, theirs):
                continue
            alone = all(e is event or e.reach is None or not _touches(e.reach.modules, theirs) for e, _ in window)
            if alone and any(_own_loss(e, mine, theirs) for e in own - {event}):
                found.append((event, other))
                break
    return found


def _touches(modules: frozenset[str], held: frozenset[str]) -> bool:
    return any(related(m, held) for m in modules)


def _foreign(reach: Reach, mine: frozenset[str], theirs: frozenset[str]) -> bool:
    """The loss reaches modules of mine that the other optimizer does not hold, and the other's."""
    return (_touches(reach.modules, theirs)
            and any(related(m, mine) and not related(m, theirs) for m in reach.modules))


def _own_loss(event: Event, mine: frozenset[str], theirs: frozenset[str]) -> bool:
    """A loss that reaches only `mine` and is known to leave `theirs` out."""
    reach = event.reach
    if reach is None or not reach.modules or _touches(reach.modules, theirs):
        return False
    if not all(related(m, mine) for m in reach.modules):
        return False
    return not reach.opaque or _touches(reach.cut, theirs)
