"""The dataflow of rules.md section 4 within one scope (no LibCST, no codes).

A scope's IR becomes a control-flow graph whose nodes hold at most one event or call and whose
edges may carry an effect (taking a branch arm, going around a loop's back edge, leaving a loop,
raising). For one optimizer at a time, a may-analysis propagates *sets* of path states; keeping
whole path states (instead of one merged bit vector) is what tells which guard skipped a step or
a clear. Calls are applied by summaries.py; this module only says what one node does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

from .keys import counter_of, within
from .model import Branch, Call, Event, Function, Jump, Kind, Loop, Node, Seq, Test, Try, children

# Why pending gradients may have skipped a step: nothing, a branch not taken, an accumulation
# condition, a partial window left by a loop, or a jump (`continue`, `return`) that skipped the
# rest of the iteration: only the last leaves gradients behind for the next step (ZG004).
NO_GUARD, OTHER_GUARD, ACCUM_GUARD, PARTIAL_WINDOW, SKIP_GUARD = 0, 1, 2, 3, 4
MAX_RESIDUE = 2  # modular facts further from the current phase than this are forgotten
MAX_NODES = 20_000  # a bigger scope is not analysed (it reports nothing, and is counted)
Chain = tuple[int, ...]  # sites from the analysed scope down to an event: calls, then the event
OUT = -1  # first link of a chain that leads out of a callee, back into its caller


def covers(cleared: str, target: str) -> bool:
    """A clear of `opts[*]` (every entry, e.g. `for o in opts: o.zero_grad()`) clears `opts["g"]`."""
    if cleared == target:
        return True
    return cleared.endswith("[*]") and target.startswith(cleared[:-2])


class State(NamedTuple):
    stale: bool  # gradients already applied by a step are still in .grad
    pending: bool  # a backward has produced gradients no step has used yet
    guard: int  # strongest guard passed while gradients were pending that could skip a step
    discard: Optional[Chain]  # an unguarded clear that threw pending gradients away
    skip: Optional[Chain]  # a clear skipped through an accumulation condition (() : another guard)
    facts: frozenset[tuple[str, int, bool]]  # known outcomes of keyed conditions
    foreign: bool = False  # the pending gradients were used by another optimizer's step
    wiped: Optional[Chain] = None  # a clear that threw away accumulated gradients
    counter: Optional[str] = None  # the counter of the accumulation guard, when known
    zeroed: Optional[Chain] = None  # a clear that zeroed pending gradients in place, on some path


START = State(False, False, NO_GUARD, None, None, frozenset())


@dataclass(frozen=True)
class ArmEffect:
    test: Optional[Test]
    arm: int
    summaries: tuple["Summary", ...]
    counter: Optional[str] = None  # of an accumulation test, even when its outcome is not kept


@dataclass(frozen=True)
class BackEffect:
    moves: frozenset[str]  # names that change between iterations
    micro: bool  # an inner loop that only accumulates (backward, no step)
    closure: bool = False  # a closure evaluated again by the same step
    everything: bool = False  # a step function's implicit loop: every counter moves on


@dataclass(frozen=True)
class ExitEffect:
    """Leaving a loop: a window that an accumulation guard left open is judged afresh when its
    counter restarts with the loop (a partial window dropped), or after a micro-batch loop."""

    targets: frozenset[str]
    micro: bool


@dataclass(frozen=True)
class RaiseEffect:
    pass


@dataclass
class Summary:
    """What a piece of IR can do (calls included), used to judge which branch arms matter."""

    steps: set[str] = field(default_factory=set)
    clears: dict[str, Chain] = field(default_factory=dict)  # target -> first clear
    backward: bool = False
    jumps: bool = False
    maybe: set[Optional[str]] = field(default_factory=set)  # modules cleared with no known link
    partial: Optional[Chain] = None  # a write of one named parameter's .grad

    @property
    def maybe_clear(self) -> bool:
        return bool(self.maybe)

    @property
    def empty(self) -> bool:
        """Nothing in it changes the dataflow: it can be left out of the graph."""
        return not (self.steps or self.clears or self.backward or self.jumps or self.maybe_clear)

    def add(self, other: "Summary", jumps: bool = True) -> None:
        self.steps |= other.steps
        for target, site in other.clears.items():
            self.clears.setdefault(target, site)
        self.backward |= other.backward
        self.jumps |= other.jumps and jumps
        self.maybe |= other.maybe
        self.partial = self.partial or other.partial

    def may_clear(self, target: str, links: dict[str, frozenset[str]]) -> bool:
        """Some clear here may clear `target` (its own, or a module's that may hold it)."""
        return self.clear_of(target) is not None or any(not _unrelated(m, target, links) for m in self.maybe)

    def clear_of(self, target: str) -> Optional[Chain]:
        for cleared, chain in self.clears.items():
            if covers(cleared, target):
                return chain
        return None


CallSummary = Callable[[Call], Summary]


def summarize(node: Node, cache: dict[int, Summary], of_call: CallSummary) -> Summary:
    found = cache.get(id(node))
    if found is not None:
        return found
    result = Summary()
    if isinstance(node, Event):
        if node.kind is Kind.BACKWARD:
            result.backward = True
        elif node.kind is Kind.STEP and node.target:
            result.steps.add(node.target)
        elif node.kind is Kind.CLEAR and node.target:
            result.clears[node.target] = (node.site,)
        elif node.kind is Kind.MAYBE_CLEAR:
            result.maybe.add(node.target)
        elif node.kind is Kind.PARTIAL:
            result.partial = (node.site,)
    elif isinstance(node, Jump):
        result.jumps = True
    elif isinstance(node, Call):
        result.add(of_call(node), jumps=False)
    else:
        for child in children(node):
            result.add(summarize(child, cache, of_call))
    cache[id(node)] = result
    return result


Wire = Callable[[int], None]


@dataclass(frozen=True)
class Exits:
    """Where each kind of jump goes from the current position."""

    brk: Optional[Wire]
    cont: Optional[Wire]
    ret: Wire
    exc: Optional[Wire]  # None: exceptions leave the scope and are not followed


class TooBig(Exception):
    pass


class Graph:
    """The control-flow graph of one scope; `repeat` closes it into a loop (a step function)."""

    def __init__(self, function: Function, repeat: bool, of_call: CallSummary) -> None:
        self.nodes: list[Optional[Node]] = []  # an Event, a Call, or None
        self.succ: list[list[tuple[int, object]]] = []
        self.loop_of: list[Optional[Loop]] = []  # innermost loop of the scope around each node
        self.cache: dict[int, Summary] = {}
        self.of_call = of_call
        self.body = function.body
        self.keys = _tested_twice(function.body, self.cache, of_call)
        self._loops: list[Loop] = []
        self.head = self.node()
        self.end = self.node()
        back = BackEffect(frozenset(), micro=False, everything=True)
        done: Wire = (lambda n: self.edge(n, self.head, back)) if repeat else (lambda n: self.edge(n, self.end))
        last = self.build(function.body, self.head, Exits(brk=None, cont=None, ret=done, exc=None))
        if last is not None:
            done(last)
        if repeat:
            self.edge(self.head, self.end)

    def summary(self, node: Node) -> Summary:
        return summarize(node, self.cache, self.of_call)

    def node(self, item: Optional[Node] = None) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise TooBig
        self.nodes.append(item)
        self.succ.append([])
        self.loop_of.append(self._loops[-1] if self._loops else None)
        return len(self.nodes) - 1

    def edge(self, a: int, b: int, effect: object = None) -> None:
        self.succ[a].append((b, effect))

    def build(self, node: Node, at: int, exits: Exits) -> Optional[int]:
        """Wire `node` after graph node `at`; return where control continues (None: nowhere)."""
        if isinstance(node, Seq):
            current: Optional[int] = at
            for item in node.items:
                if current is None:
                    return None
                current = self.build(item, current, exits)
            return current
        if isinstance(node, (Event, Call)):
            # An exception is raised by a backward, a step or a call (which then has no effect)
            # or by code before it; zero_grad() is not expected to raise.
            if exits.exc is not None and not (isinstance(node, Event) and node.kind is Kind.CLEAR):
                exits.exc(at)
            n = self.node(node)
            self.edge(at, n)
            return n
        if isinstance(node, Jump):
            wire = {"break": exits.brk, "continue": exits.cont, "return": exits.ret, "raise": exits.exc}[node.kind]
            if wire is not None:
                wire(at)
            return None
        if isinstance(node, (Branch, Loop, Try)) and self.summary(node).empty:
            return at  # no event and no jump inside: it cannot change any state
        if isinstance(node, Branch):
            return self._branch(node, at, exits)
        if isinstance(node, Loop):
            return self._loop(node, at, exits)
        if isinstance(node, Try):
            return self._try(node, at, exits)
        raise TypeError(node)

    def _branch(self, node: Branch, at: int, exits: Exits) -> Optional[int]:
        summaries = tuple(self.summary(arm) for arm in node.arms)
        test = node.test
        if test is not None and test.key not in self.keys:
            # Tested once: its outcome correlates with nothing.
            test = Test(test.accumulation, None, invariant=test.invariant)
        join = self.node()
        reached = False
        for index, arm in enumerate(node.arms):
            entry = self.node()
            self.edge(at, entry, ArmEffect(test, index, summaries, counter_of(node.test.key if node.test else None)))
            last = self.build(arm, entry, exits)
            if last is not None:
                self.edge(last, join)
                reached = True
        return join if reached else None

    def _loop(self, node: Loop, at: int, exits: Exits) -> Optional[int]:
        if node.closure:
            return self._evaluations(node, at, exits)
        self._loops.append(node)
        head, done, first = self.node(), self.node(), self.node()
        inner = self.summary(node.body)
        # A loop that only clears or steps (`for opt in optimizers: opt.zero_grad()`) runs over a
        # collection that is not empty: it is entered at its body, never skipped.
        self.edge(at, first if node.collection and (not inner.backward or node.closure) else head)
        self.edge(head, first)
        micro = inner.backward and not inner.steps
        back = BackEffect(node.moves | node.targets, micro=micro, closure=node.closure)
        to_head: Wire = lambda n: self.edge(n, head, back)
        leave = ExitEffect(frozenset(), micro=False)  # `break`
        body_exits = Exits(lambda n: self.edge(n, done, leave), to_head, exits.ret, exits.exc)
        last = self.build(node.body, first, body_exits)
        if last is not None:
            to_head(last)
        self._loops.pop()
        if not node.infinite:
            leave = self.node()
            self.edge(head, leave, ExitEffect(node.targets, micro))
            after_else = self.build(node.orelse, leave, exits)
            if after_else is not None:
                self.edge(after_else, done)
        return done

    def _evaluations(self, node: Loop, at: int, exits: Exits) -> Optional[int]:
        """A closure that the step evaluates one or more times: each evaluation after the first
        starts from the gradients the one before it left (which the step has used)."""
        first, done = self.node(), self.node()
        self.edge(at, first)
        last = self.build(node.body, first, exits)
        if last is None:
            return None
        self.edge(last, first, BackEffect(frozenset(), micro=False, closure=True))
        self.edge(last, done)
        return done

    def _try(self, node: Try, at: int, exits: Exits) -> Optional[int]:
        if not node.final.items:
            return self._try_except(node, at, exits)

        def through_final(wire: Optional[Wire]) -> Optional[Wire]:
            """Jumps of one kind out of the try run one shared copy of the finally block."""
            if wire is None:
                return None
            landing: list[int] = []

            def go(n: int) -> None:
                if not landing:
                    landing.append(self.node())
                    last = self.build(node.final, landing[0], exits)
                    if last is not None:
                        wire(last)
                self.edge(n, landing[0])

            return go

        inner = Exits(through_final(exits.brk), through_final(exits.cont),
                      through_final(exits.ret) or exits.ret, through_final(exits.exc))
        last = self._try_except(node, at, inner)
        return None if last is None else self.build(node.final, last, exits)

    def _try_except(self, node: Try, at: int, exits: Exits) -> Optional[int]:
        if not node.handlers:
            last = self.build(node.body, at, exits)
            return None if last is None else self.build(node.orelse, last, exits)
        dispatch = self.node()
        raise_here: Wire = lambda n: self.edge(n, dispatch, RaiseEffect())
        raise_here(at)
        last = self.build(node.body, at, Exits(exits.brk, exits.cont, exits.ret, raise_here))
        join = self.node()
        reached = False
        if last is not None:
            after = self.build(node.orelse, last, exits)
            if after is not None:
                self.edge(after, join)
                reached = True
        for handler in node.handlers:
            end = self.build(handler, dispatch, exits)
            if end is not None:
                self.edge(end, join)
                reached = True
        if exits.exc is not None:
            exits.exc(dispatch)
        return join if reached else None


def _tested_twice(body: Seq, cache: dict[int, Summary], of_call: CallSummary) -> frozenset[str]:
    """Condition keys tested by two or more branches that hold events: only their outcomes are
    remembered, so the path states do not multiply for conditions that correlate with nothing."""
    seen: set[str] = set()
    twice: set[str] = set()
    stack: list[Node] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, Branch) and node.test is not None and node.test.key is not None:
            if not summarize(node, cache, of_call).empty:
                (twice if node.test.key in seen else seen).add(node.test.key)
        stack.extend(children(node))
    return frozenset(twice)


# --- what one node and one edge do ---------------------------------------------------------


def transfer(event: Event, s: State, target: str, links: dict[str, frozenset[str]]) -> State:
    kind = event.kind
    if kind is Kind.BACKWARD:
        # The guard survives: another loss's backward (a GAN's) does not undo a skipped step.
        return s._replace(pending=True, discard=None, foreign=False, zeroed=None)
    if kind is Kind.STEP and event.target == target:
        return s._replace(stale=True, pending=False, guard=NO_GUARD, discard=None, skip=None, wiped=None, counter=None,
                          zeroed=None)
    if kind is Kind.STEP and s.pending:
        # Another optimizer stepped on these gradients: they were its loss's (TD3's critic), so
        # skipping this optimizer's step afterwards is no accumulation.
        return s._replace(foreign=True)
    if kind is Kind.CLEAR and event.target is not None and covers(event.target, target):
        return _cleared(s, (event.site,), event.zeroes)
    if kind is Kind.BUILD and event.target == target:
        return s._replace(stale=False, skip=None)
    if kind is Kind.MAYBE_CLEAR and not _unrelated(event.target, target, links):
        # A possible clear ends stale gradients but never proves a misplaced clear.
        return s._replace(stale=False, pending=False, guard=NO_GUARD, discard=None, skip=None, foreign=False)
    return s


def _cleared(s: State, chain: Chain, zeroes: bool = False) -> State:
    discard = chain if s.pending and s.guard == NO_GUARD else s.discard
    # Zeroed in place, a skipped update still moves the weights (momentum, weight decay); set to
    # None, the optimizer skips every parameter without a gradient (rules.md section 4).
    zeroed = chain if s.pending and zeroes else s.zeroed
    # Wiping gradients whose step an accumulation condition skipped is ZG003 if a step follows;
    # a later clear of pending gradients makes the earlier wipe moot.
    wiped = s.wiped
    if s.pending:
        wiped = chain if s.guard == ACCUM_GUARD else None
    return s._replace(stale=False, pending=False, guard=NO_GUARD, discard=discard, skip=None,
                      foreign=False, wiped=wiped, counter=None, zeroed=zeroed)


def _unrelated(module: Optional[str], target: str, links: dict[str, frozenset[str]]) -> bool:
    """`teacher.zero_grad()` is no clear of an optimizer known to hold `student`'s parameters."""
    held = links.get(target)
    if module is None or not held:
        return False
    return not any(within(m, module) for m in held)


def cross(effect: object, s: State, target: str) -> Optional[State]:
    if isinstance(effect, ArmEffect):
        return _enter_arm(effect, s, target)
    if isinstance(effect, BackEffect):
        return _around(effect, s)
    if isinstance(effect, ExitEffect):
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


def _around(effect: BackEffect, s: State) -> State:
    facts = _shift(s.facts, effect)
    if effect.closure and s.pending:
        # The step already used this evaluation's gradients; the next evaluation adds to them.
        return s._replace(facts=facts, stale=True)
    guard, counter = s.guard, s.counter
    if effect.micro and s.pending and not s.foreign:
        guard = ACCUM_GUARD
    if s.pending and s.guard == SKIP_GUARD and not s.foreign and not effect.micro:
        # Gradients that a `continue` (or a handled error) kept from both the step and the
        # clear are left over for the next step: they leak into it (ZG004).
        return s._replace(facts=facts, stale=True, skip=(), counter=None)
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
    if test is not None and test.invariant and here.clear_of(target) is None and elsewhere:
        # A knob that turns the clear off does so in every iteration: the user's configuration,
        # not a path that skips it.
        return s._replace(facts=facts, stale=False)
    # This choice can skip the step when another arm steps and this one does not, or when this
    # arm jumps away; the latest such guard says why a step was skipped.
    skips_step = here.jumps or (target not in here.steps and any(target in sm.steps for sm in effect.summaries))
    guard, counter = s.guard, s.counter
    if s.pending and not s.foreign and skips_step:
        guard = ACCUM_GUARD if accumulation else (SKIP_GUARD if here.jumps else OTHER_GUARD)
        counter = effect.counter if accumulation else None
    skip = s.skip
    if s.stale and here.clear_of(target) is None and elsewhere:
        skip = elsewhere[0] if accumulation else ()
    return s._replace(guard=guard, skip=skip, facts=facts, counter=counter)


def _assume(facts: frozenset[tuple[str, int, bool]], test: Test, value: bool) -> Optional[frozenset[tuple[str, int, bool]]]:
    key, residue = test.key, test.residue
    assert key is not None
    for fact_key, fact_residue, fact_value in facts:
        if fact_key != key:
            continue
        if fact_residue == residue and fact_value != value:
            return None
        if fact_residue != residue and fact_value and value:
            return None  # the counter cannot sit at two phases at once
    return facts | {(key, residue, value)}


def _shift(facts: frozenset[tuple[str, int, bool]], effect: BackEffect) -> frozenset[tuple[str, int, bool]]:
    """Going around a loop: a fact holds until a name in it is assigned (reaching definitions);
    a modular counter that moves on shifts its phase by one."""
    if not facts:
        return facts
    kept = set()
    for key, residue, value in facts:
        if key.startswith("mod:"):
            counter = key[4:].partition("%")[0]
            if effect.everything or counter in effect.moves or counter.split(".")[0] in effect.moves:
                residue += 1
            if abs(residue) <= MAX_RESIDUE:
                kept.add((key, residue, value))
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
    note: Optional[int] = None  # a site the message names (the partial clear)


def judge_step(chain: Chain, label: str, incoming: set[State], target: str, has_clear: bool,
               partial: Optional[Chain] = None) -> list[Verdict]:
    found = []
    wiped = sorted({s.wiped for s in incoming if s.wiped is not None})
    found += [Verdict("frequency_mismatch", c, target, label) for c in wiped]
    leaking = [s for s in incoming if s.stale and s.pending]
    skipped = sorted({s.skip for s in leaking if s.skip})
    if skipped:
        found += [Verdict("frequency_mismatch", c, target, label) for c in skipped]
    elif leaking:
        kind = "skipped_clear" if has_clear or any(s.skip == () for s in leaking) else "never_cleared"
        if kind == "never_cleared" and partial is not None:
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
