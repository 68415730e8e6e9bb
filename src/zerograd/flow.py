"""The dataflow of rules.md section 4 over an event IR (no LibCST, no codes).

A unit (a loop body or a step function body) becomes a control-flow graph whose nodes hold at
most one event and whose edges may carry an effect (taking a branch arm, going around a back
edge, raising). For one optimizer at a time, a may-analysis propagates *sets* of path states to a
fixed point around the back edge; keeping whole path states (instead of one merged bit vector)
is what lets it tell which guard skipped a step or a clear.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

from .model import Branch, Event, Inline, Jump, Kind, Loop, Node, Seq, Test, Try, Unit, children

NO_GUARD, OTHER_GUARD, ACCUM_GUARD = 0, 1, 2
MAX_RESIDUE = 2  # modular facts further from the current phase than this are forgotten
MAX_NODES = 20_000  # a bigger unit is not analysed (report nothing rather than guess)
MAX_WORK = 400_000  # state transfers per optimizer before giving up


def covers(cleared: str, target: str) -> bool:
    """A clear of `opts[*]` (every entry, e.g. `for o in opts: o.zero_grad()`) clears `opts["g"]`."""
    if cleared == target:
        return True
    return cleared.endswith("[*]") and target.startswith(cleared[:-2])


def clears(summary: "Summary", target: str) -> Optional[int]:
    """The site of the first clear of `target` in `summary`, if any."""
    for cleared, site in summary.clears.items():
        if covers(cleared, target):
            return site
    return None


class Verdict(NamedTuple):
    """A finding in the dataflow's own words; rules.py turns it into a coded message."""

    kind: str  # "never_cleared" | "skipped_clear" | "cleared_before_step" | "frequency_mismatch"
    site: int
    target: str
    label: str  # the optimizer as written at its step


class State(NamedTuple):
    stale: bool  # gradients already applied by a step are still in .grad
    pending: bool  # a backward has produced gradients no step has used yet
    guard: int  # strongest guard passed while gradients were pending that could skip a step
    discard: Optional[int]  # site of an unguarded clear that threw pending gradients away
    skip: Optional[int]  # site of a clear skipped through an accumulation condition (-1: other)
    facts: frozenset[tuple[str, int, bool]]  # known outcomes of keyed conditions
    foreign: bool = False  # the pending gradients were used by another optimizer's step
    wiped: Optional[int] = None  # site of a clear that threw away accumulated gradients


START = State(False, False, NO_GUARD, None, None, frozenset())


@dataclass(frozen=True)
class ArmEffect:
    test: Optional[Test]
    arm: int
    summaries: tuple["Summary", ...]


@dataclass(frozen=True)
class BackEffect:
    targets: frozenset[str]
    analysed: bool  # the unit's own back edge: every counter moves on
    micro: bool  # an inner loop that only accumulates (backward, no step)


@dataclass(frozen=True)
class RaiseEffect:
    pass


@dataclass(frozen=True)
class ExitEffect:
    """Leaving a micro-batch loop: going around it was accumulation, what follows is not
    (a clear after an input-gradient loop, or before the step, is judged on its own)."""


Effect = Optional[object]


@dataclass
class Summary:
    """What a piece of IR can do, used to judge which branch arms matter."""

    steps: set[str] = field(default_factory=set)
    clears: dict[str, int] = field(default_factory=dict)  # target -> first site
    backward: bool = False
    jumps: bool = False
    maybe_clear: bool = False

    @property
    def empty(self) -> bool:
        """Nothing in it changes the dataflow: it can be left out of the graph."""
        return not (self.steps or self.clears or self.backward or self.jumps or self.maybe_clear)

    def add(self, other: "Summary") -> None:
        self.steps |= other.steps
        for target, site in other.clears.items():
            self.clears.setdefault(target, site)
        self.backward |= other.backward
        self.jumps |= other.jumps
        self.maybe_clear |= other.maybe_clear


def summarize(node: Node, cache: dict[int, Summary]) -> Summary:
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
            result.clears[node.target] = node.site
        elif node.kind is Kind.MAYBE_CLEAR:
            result.maybe_clear = True
    elif isinstance(node, Jump):
        result.jumps = True
    else:
        for child in children(node):
            result.add(summarize(child, cache))
    cache[id(node)] = result
    return result


Wire = Callable[[int], None]


@dataclass(frozen=True)
class Exits:
    """Where each kind of jump goes from the current position."""

    brk: Optional[Wire]
    cont: Optional[Wire]
    ret: Wire
    exc: Optional[Wire]  # None: exceptions leave the unit and are not followed


class TooBig(Exception):
    pass


class Graph:
    def __init__(self, unit: Unit) -> None:
        self.events: list[Optional[Event]] = []
        self.succ: list[list[tuple[int, Effect]]] = []
        self.cache: dict[int, Summary] = {}
        self.keys = _tested_twice(unit.body, self.cache)
        self.head = self.node()
        self.end = self.node()
        back = BackEffect(unit.targets, analysed=True, micro=False)
        to_head: Wire = lambda n: self.edge(n, self.head, back)
        to_end: Wire = lambda n: self.edge(n, self.end)
        exits = Exits(brk=to_end, cont=to_head, ret=to_head if unit.is_function else to_end, exc=None)
        last = self.build(unit.body, self.head, exits)
        if last is not None:
            to_head(last)

    def node(self, event: Optional[Event] = None) -> int:
        if len(self.events) >= MAX_NODES:
            raise TooBig
        self.events.append(event)
        self.succ.append([])
        return len(self.events) - 1

    def edge(self, a: int, b: int, effect: Effect = None) -> None:
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
        if isinstance(node, Event):
            # An exception is raised by a backward or a step itself (which then has no effect)
            # or by code before it; zero_grad() is not expected to raise.
            if exits.exc is not None and node.kind is not Kind.CLEAR:
                exits.exc(at)
            n = self.node(node)
            self.edge(at, n)
            return n
        if isinstance(node, Jump):
            wire = {"break": exits.brk, "continue": exits.cont, "return": exits.ret}.get(node.kind)
            if node.kind == "raise":
                wire = exits.exc
            if wire is not None:
                wire(at)
            return None
        if isinstance(node, (Branch, Loop, Try)) and summarize(node, self.cache).empty:
            return at  # no event and no jump inside: it cannot change any state
        if isinstance(node, Branch):
            return self._branch(node, at, exits)
        if isinstance(node, Loop):
            return self._loop(node, at, exits)
        if isinstance(node, Try):
            return self._try(node, at, exits)
        if isinstance(node, Inline):
            done = self.node()
            inner = Exits(exits.brk, exits.cont, lambda n: self.edge(n, done), exits.exc)
            last = self.build(node.body, at, inner)
            if last is not None:
                self.edge(last, done)
            return done
        raise TypeError(node)

    def _branch(self, node: Branch, at: int, exits: Exits) -> Optional[int]:
        summaries = tuple(summarize(arm, self.cache) for arm in node.arms)
        test = node.test
        if test is not None and test.key not in self.keys:
            test = Test(test.accumulation, None)  # tested once: its outcome correlates with nothing
        node = Branch(node.arms, test)
        join = self.node()
        reached = False
        for index, arm in enumerate(node.arms):
            entry = self.node()
            self.edge(at, entry, ArmEffect(node.test, index, summaries))
            last = self.build(arm, entry, exits)
            if last is not None:
                self.edge(last, join)
                reached = True
        return join if reached else None

    def _loop(self, node: Loop, at: int, exits: Exits) -> Optional[int]:
        head, done, first = self.node(), self.node(), self.node()
        inner = summarize(node.body, self.cache)
        # A loop that only clears or steps (`for opt in optimizers: opt.zero_grad()`) runs over a
        # collection that is not empty: it is entered at its body, never skipped.
        self.edge(at, first if node.collection and not inner.backward else head)
        self.edge(head, first)
        back = BackEffect(node.targets, analysed=False, micro=inner.backward and not inner.steps)
        to_head: Wire = lambda n: self.edge(n, head, back)
        body_exits = Exits(lambda n: self.edge(n, done), to_head, exits.ret, exits.exc)
        last = self.build(node.body, first, body_exits)
        if last is not None:
            to_head(last)
        if not node.infinite:
            leave = self.node()
            self.edge(head, leave, ExitEffect() if back.micro else None)
            after_else = self.build(node.orelse, leave, exits)
            if after_else is not None:
                self.edge(after_else, done)
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

        inner = Exits(
            through_final(exits.brk),
            through_final(exits.cont),
            through_final(exits.ret) or exits.ret,
            through_final(exits.exc),
        )
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


def _tested_twice(body: Seq, cache: dict[int, Summary]) -> frozenset[str]:
    """Condition keys tested by two or more branches that hold events: only their outcomes are
    remembered, so the path states do not multiply for conditions that correlate with nothing."""
    seen: set[str] = set()
    twice: set[str] = set()
    stack: list[Node] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, Branch) and node.test is not None and node.test.key is not None:
            if not summarize(node, cache).empty:
                (twice if node.test.key in seen else seen).add(node.test.key)
        stack.extend(children(node))
    return frozenset(twice)


def analyse(unit: Unit, targets: list[str]) -> list[Verdict]:
    """Run the dataflow for each optimizer key in `targets` and return what it found."""
    try:
        graph = Graph(unit)
    except (TooBig, RecursionError):
        return []
    whole = summarize(unit.body, graph.cache)
    verdicts: list[Verdict] = []
    for target in targets:
        states = _fixpoint(graph, target)
        if states is not None:
            has_clear = clears(whole, target) is not None or whole.maybe_clear
            verdicts.extend(_judge(graph, target, states, has_clear))
    return verdicts


def _fixpoint(graph: Graph, target: str) -> Optional[list[set[State]]]:
    states: list[set[State]] = [set() for _ in graph.events]
    states[graph.head].add(START)
    work = [(graph.head, START)]
    budget = MAX_WORK
    while work:
        budget -= 1
        if budget < 0:
            return None
        node, state = work.pop()
        event = graph.events[node]
        out = state if event is None else _transfer(event, state, target)
        for succ, effect in graph.succ[node]:
            moved = out if effect is None else _cross(effect, out, target)
            if moved is not None and moved not in states[succ]:
                states[succ].add(moved)
                work.append((succ, moved))
    return states


def _transfer(event: Event, s: State, target: str) -> State:
    if event.kind is Kind.BACKWARD:
        # The guard survives: another loss's backward (a GAN's) does not undo a skipped step.
        return s._replace(pending=True, discard=None, foreign=False)
    if event.kind is Kind.STEP and event.target == target:
        return s._replace(stale=True, pending=False, guard=NO_GUARD, discard=None, skip=None, wiped=None)
    if event.kind is Kind.STEP and s.pending:
        # Another optimizer stepped on these gradients: they were its loss's (TD3's critic), so
        # skipping this optimizer's step afterwards is no accumulation.
        return s._replace(foreign=True)
    if event.kind is Kind.CLEAR and event.target is not None and covers(event.target, target):
        discard = event.site if s.pending and s.guard == NO_GUARD else s.discard
        # Wiping gradients whose step an accumulation condition skipped is ZG003 if a step
        # follows; a later clear of pending gradients makes the earlier wipe moot.
        wiped = s.wiped
        if s.pending:
            wiped = event.site if s.guard == ACCUM_GUARD else None
        return s._replace(stale=False, pending=False, guard=NO_GUARD, discard=discard, skip=None,
                          foreign=False, wiped=wiped)
    if event.kind is Kind.BUILD and event.target == target:
        return s._replace(stale=False, skip=None)
    if event.kind is Kind.MAYBE_CLEAR:
        return s._replace(stale=False, pending=False, guard=NO_GUARD, discard=None, skip=None, foreign=False)
    return s


def _cross(effect: object, s: State, target: str) -> Optional[State]:
    if isinstance(effect, ArmEffect):
        return _enter_arm(effect, s, target)
    if isinstance(effect, BackEffect):
        facts = _shift(s.facts, effect)
        guard = ACCUM_GUARD if effect.micro and s.pending and not s.foreign else s.guard
        return s._replace(facts=facts, guard=guard)
    if isinstance(effect, RaiseEffect) and s.pending:
        return s._replace(guard=OTHER_GUARD)
    if isinstance(effect, ExitEffect) and s.guard == ACCUM_GUARD:
        return s._replace(guard=NO_GUARD)
    return s


def _enter_arm(effect: ArmEffect, s: State, target: str) -> Optional[State]:
    test, arm = effect.test, effect.arm
    facts = s.facts
    if test is not None and test.key is not None:
        facts = _assume(facts, test, (arm == 0) == test.positive)
        if facts is None:
            return None
    accumulation = test is not None and test.accumulation
    here = effect.summaries[arm]
    # This choice can skip the step when another arm steps and this one does not, or when this
    # arm jumps away; the latest such guard says why a step was skipped.
    skips_step = here.jumps or (
        target not in here.steps and any(target in sm.steps for sm in effect.summaries)
    )
    guard = s.guard
    if s.pending and not s.foreign and skips_step:
        guard = ACCUM_GUARD if accumulation else OTHER_GUARD
    skip = s.skip
    if s.stale and clears(here, target) is None:
        elsewhere = [site for site in (clears(sm, target) for sm in effect.summaries) if site is not None]
        if elsewhere:
            skip = elsewhere[0] if accumulation else -1
    return s._replace(guard=guard, skip=skip, facts=facts)


def _assume(facts: frozenset[tuple[str, int, bool]], test: Test, value: bool):  # type: ignore[no-untyped-def]
    key, residue = test.key, test.residue
    for fact_key, fact_residue, fact_value in facts:
        if fact_key != key:
            continue
        if fact_residue == residue and fact_value != value:
            return None
        if fact_residue != residue and fact_value and value:
            return None  # the counter cannot sit at two phases at once
    return facts | {(key, residue, value)}


def _shift(facts: frozenset[tuple[str, int, bool]], effect: BackEffect) -> frozenset[tuple[str, int, bool]]:
    if not facts:
        return facts
    kept = set()
    for key, residue, value in facts:
        if not key.startswith("mod:"):
            continue  # a plain condition is evaluated afresh on the next iteration
        counter = key[4:].partition("%")[0]
        moves = effect.analysed or counter in effect.targets
        residue = residue + 1 if moves else residue
        if abs(residue) <= MAX_RESIDUE:
            kept.add((key, residue, value))
    return frozenset(kept)


def _judge(graph: Graph, target: str, states: list[set[State]], has_clear: bool) -> list[Verdict]:
    verdicts = []
    for node, event in enumerate(graph.events):
        if event is None or event.target is None or not covers(event.target, target):
            continue
        incoming = states[node]
        if event.kind is Kind.STEP and event.target == target:
            verdicts.extend(_judge_step(event, incoming, target, has_clear))
    return verdicts


def _judge_step(event: Event, incoming: set[State], target: str, has_clear: bool) -> list[Verdict]:
    found = []
    wiped = sorted({s.wiped for s in incoming if s.wiped is not None})
    found += [Verdict("frequency_mismatch", site, target, event.label) for site in wiped]
    leaking = [s for s in incoming if s.stale and s.pending]
    skipped = sorted({s.skip for s in leaking if s.skip is not None and s.skip >= 0})
    if skipped:
        found += [Verdict("frequency_mismatch", site, target, event.label) for site in skipped]
    elif leaking:
        kind = "skipped_clear" if has_clear else "never_cleared"
        found.append(Verdict(kind, event.site, target, event.label))
    if not any(s.pending for s in incoming):
        discards = sorted({s.discard for s in incoming if s.discard is not None})
        found += [Verdict("cleared_before_step", site, target, event.label) for site in discards]
    return found
