"""A scope's control-flow graph (no LibCST, no codes).

Nodes hold at most one event or call; edges may carry an effect that flow.py applies to a path
state: taking a branch arm, going around a loop's back edge, leaving a loop, raising. Branches,
loops and try blocks that can change no state are left out, which keeps graphs small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from .keys import INVARIANT, counter_of, covers, shares, size_key, unit_window, unrelated
from .model import Branch, Call, Event, Function, Jump, Kind, Loop, Node, Seq, Test, Try, children, nodes_of

# A scope whose graph would pass this many nodes is not analysed; it gets a ZG901 that says so
# (engine.py), never silence. A training step at module level is about 6 nodes, so this is some
# 40,000 of them (a 10,000-cell notebook is 60,000 nodes): the graph and its path states take
# some 500 bytes a node, while the front end holds about 4 KB a line of such a scope already.
MAX_NODES = 250_000
Chain = tuple[int, ...]  # sites from the analysed scope down to an event: calls, then the event


@dataclass(frozen=True)
class ArmEffect:
    test: Optional[Test]
    arm: int
    summaries: tuple[Summary, ...]
    counter: Optional[str] = None  # of an accumulation test, even when its outcome is not kept
    congruent: Optional[bool] = None  # a modular test's arm where `counter % k == r` holds
    # A test of a parameter against a literal: its key, which a call's literal argument may
    # decide (conditions.given_facts).
    given: Optional[str] = None


@dataclass(frozen=True)
class BackEffect:
    moves: frozenset[str]  # names that change between iterations
    micro: bool  # an inner loop that only accumulates (backward, no step)
    closure: bool = False  # a closure evaluated again by the same step
    everything: bool = False  # a step function's implicit loop: every counter moves on
    # The optimizers the loop body steps, when it backpropagates ("*": not a micro-batch loop).
    steps: frozenset[str] = frozenset({"*"})
    backward: bool = True  # the body backpropagates (gradients pending here may be its own)
    shifted: frozenset[str] = frozenset()  # counters the body moves itself (MOVE, SET): not moved here


@dataclass(frozen=True)
class ExitEffect:
    """Leaving a loop: a window that an accumulation guard left open is judged afresh when its
    counter restarts with the loop (a partial window dropped), or after a micro-batch loop."""

    targets: frozenset[str]
    micro: bool
    steps: frozenset[str] = frozenset({"*"})  # as BackEffect.steps ("*": not a micro-batch loop)


@dataclass(frozen=True)
class RaiseEffect:
    pass


@dataclass(frozen=True)
class EnterEffect:
    """Entering a loop from before it: what .grad holds then was made outside the loop (when
    `held`: the body backpropagates and steps), and the loop's targets start again (what an
    earlier run of the loop left known of `i` says nothing of the new run's first `i`)."""

    targets: frozenset[str] = frozenset()
    held: bool = True
    starts: frozenset[str] = frozenset()  # phase keys of the tests at 0 in the first turn ("mod:i%k")


@dataclass
class Summary:
    """What a piece of IR can do (calls included), used to judge which branch arms matter."""

    steps: set[str] = field(default_factory=set)
    clears: dict[str, Chain] = field(default_factory=dict)  # target -> first clear
    backward: bool = False
    jumps: bool = False
    continues: bool = False  # a `continue` (a jump that can be accumulation's)
    returns: bool = False  # a `return` (accumulation's in a method that an object's counter gates)
    maybe: set[Optional[str]] = field(default_factory=set)  # modules cleared with no known link
    partial: Optional[Chain] = None  # a write of one named parameter's .grad
    spares: set[str] = field(default_factory=set)  # inner optimizers a custom optimizer's clear misses
    # target -> the first clear of only some of its sets, and the sets that clear leaves
    parts: dict[str, tuple[Chain, str]] = field(default_factory=dict)
    moves: set[str] = field(default_factory=set)  # wrapping counters moved or set (MOVE, SET)
    # Optimizers stepped on the way to every jump here (`step(); if done: break` jumps only
    # after the step, so it skips none of that optimizer's updates).
    stepped_first: frozenset[str] = frozenset()

    @property
    def maybe_clear(self) -> bool:
        return bool(self.maybe)

    @property
    def empty(self) -> bool:
        """Nothing in it changes the dataflow: it can be left out of the graph."""
        return not (self.steps or self.clears or self.backward or self.jumps or self.maybe_clear or self.moves
                    or self.parts)

    def add(self, other: Summary, jumps: bool = True) -> None:
        self.steps |= other.steps
        for target, site in other.clears.items():
            self.clears.setdefault(target, site)
        for target, part in other.parts.items():
            self.parts.setdefault(target, part)
        self.spares |= other.spares
        self.backward |= other.backward
        self.jumps |= other.jumps and jumps
        self.continues |= other.continues and jumps
        self.returns |= other.returns and jumps
        self.maybe |= other.maybe
        self.moves |= other.moves
        self.partial = self.partial or other.partial

    def jumps_past(self, target: str) -> bool:
        """Some jump here can leave before `target` is stepped."""
        return self.jumps and not any(covers(stepped, target) for stepped in self.stepped_first)

    def may_clear(self, target: str, links: dict[str, frozenset[str]]) -> bool:
        """Some clear here may clear `target` (its own, or a module's that may hold it)."""
        if self.clear_of(target) is not None:
            return True
        # `spares`: optimizers these clears are known to miss (a custom optimizer's inner one, an
        # optimizer linked to a cleared module, whose own clear decides it).
        return target not in self.spares and (any(not unrelated(m, target, links) for m in self.maybe)
                                              or any(shares(other, target, links) for other in self.clears))

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
        elif node.kind is Kind.CLEAR and node.target and node.sets is not None:
            result.parts[node.target] = ((node.site,), ", ".join(sorted(node.keeps)))
        elif node.kind is Kind.CLEAR and node.target:
            result.clears[node.target] = (node.site,)
            result.spares |= node.spares
        elif node.kind is Kind.MAYBE_CLEAR:
            result.maybe.add(node.target)
            result.spares |= node.spares
        elif node.kind is Kind.PARTIAL:
            result.partial = (node.site,)
        elif node.kind in (Kind.MOVE, Kind.SET) and node.target:
            result.moves.add(node.target)
    elif isinstance(node, Jump):
        result.jumps = True
        result.continues = node.kind == "continue"
        result.returns = node.kind == "return"
    elif isinstance(node, Call):
        result.add(of_call(node), jumps=False)
    else:
        parts = [summarize(child, cache, of_call) for child in children(node)]
        for part in parts:
            result.add(part)
        result.stepped_first = _stepped_first(parts, isinstance(node, Seq))
    cache[id(node)] = result
    return result


def _stepped_first(parts: list[Summary], in_order: bool) -> frozenset[str]:
    """What every jump among `parts` has stepped before it: in a sequence, the steps of the parts
    before the jumping one count too (a step in a branch before it counts as well: a guess that
    only ever keeps a finding back)."""
    found: Optional[frozenset[str]] = None
    before: set[str] = set()
    for part in parts:
        if part.jumps:
            here = part.stepped_first | (frozenset(before) if in_order else frozenset())
            found = here if found is None else found & here
        before |= part.steps
    return found or frozenset()


Wire = Callable[[int], None]


@dataclass(frozen=True)
class Exits:
    """Where each kind of jump goes from the current position."""

    brk: Optional[Wire]
    cont: Optional[Wire]
    ret: Wire
    exc: Optional[Wire]  # None: exceptions leave the scope and are not followed
    torch: Optional[Wire] = None  # where what an event raises goes, when not `exc`


class TooBig(Exception):
    """A scope's graph passes MAX_NODES: `scope`, the function whose graph it is (the analysed
    scope's own or a callee's)."""

    def __init__(self, scope: str) -> None:
        super().__init__(scope)
        self.scope = scope


class Graph:
    """The control-flow graph of one scope; `repeat` closes it into a loop (a step function)."""

    def __init__(self, function: Function, repeat: bool, of_call: CallSummary,
                 cache: Optional[dict[int, Summary]] = None) -> None:
        self.nodes: list[Optional[Node]] = []  # an Event, a Call, or None
        self.succ: list[list[tuple[int, object]]] = []
        self.loop_of: list[Optional[Loop]] = []  # innermost loop of the scope around each node
        # The first node of each event's or call's site: the verdicts look up every step's loop,
        # and a scan of the nodes for each made a scope with a step per cell quadratic.
        self.at: dict[int, int] = {}
        self.entered: dict[int, int] = {}  # id of a loop -> its first node (its head)
        self.cache: dict[int, Summary] = {} if cache is None else cache
        self.of_call = of_call
        self.body = function.body
        self.name = function.name
        self.keys = _tested_twice(function.body, self.cache, of_call)
        self._loops: list[Loop] = []
        self.head = self.node()
        self.end = self.node()
        back = BackEffect(frozenset(), micro=False, everything=True, shifted=frozenset(self.summary(self.body).moves))
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
            raise TooBig(self.name)
        if isinstance(item, (Event, Call)):
            self.at.setdefault(item.site, len(self.nodes))
        self.nodes.append(item)
        self.succ.append([])
        self.loop_of.append(self._loops[-1] if self._loops else None)
        if self._loops:
            self.entered.setdefault(id(self._loops[-1]), len(self.nodes) - 1)
        return len(self.nodes) - 1

    def loop_around(self, site: int) -> tuple[Optional[int], Optional[Loop]]:
        """The node of `site` (None: not in this graph) and the innermost loop around it."""
        at = self.at.get(site)
        return at, None if at is None else self.loop_of[at]

    def backward_before(self, loop: Loop) -> Optional[int]:
        """The site of the last backward before `loop`'s head (its body's nodes all come after it)."""
        for n in range(self.entered[id(loop)] - 1, -1, -1):
            item = self.nodes[n]
            if isinstance(item, Event) and item.kind is Kind.BACKWARD:
                return item.site
        return None

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
            # or by code before it; zero_grad() and an assignment of a literal are not.
            if exits.exc is not None and not (isinstance(node, Event) and node.kind in (Kind.CLEAR, Kind.MOVE, Kind.SET)):
                (exits.torch or exits.exc if isinstance(node, Event) else exits.exc)(at)
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
        tested = test.key or "" if test is not None else ""
        if test is not None and test.key not in self.keys and not (
                tested.startswith(INVARIANT) or test.tracked or tested.startswith("mod:") and test.external):
            # Tested once: its outcome correlates with nothing (but a knob's, a fact that events
            # set, or a modular test of a counter the caller hands over, `batch_idx` in a hook:
            # the caller's phase).
            test = Test(test.accumulation, None, positive=test.positive, invariant=test.invariant, external=test.external,
                        counter=test.counter, dispatch=test.dispatch)
        given = node.test.key if node.test is not None and node.test.given is not None else None
        join = self.node()
        reached = False
        for index, arm in enumerate(node.arms):
            entry = self.node()
            key = node.test.key if node.test else None
            congruent = (index == 0) == node.test.positive if node.test and key and key.startswith("mod:") else None
            self.edge(at, entry, ArmEffect(test, index, summaries, node.test.counter if node.test else None, congruent,
                                           given))
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
        self.edge(at, first if node.collection and (not inner.backward or node.closure) else head,
                  EnterEffect(node.targets, inner.backward and bool(inner.steps), _phases(node))
                  if inner.backward and inner.steps or node.targets else None)
        self.edge(head, first)
        micro = inner.backward and not inner.steps
        back = BackEffect(node.moves | node.targets, micro=micro, closure=node.closure,
                          steps=frozenset(inner.steps) if inner.backward else frozenset({"*"}), backward=inner.backward,
                          shifted=frozenset(inner.moves))
        def to_head(n: int) -> None:
            self.edge(n, head, back)

        # A `break` leaves as the loop's end does, for the optimizers the body never steps (what
        # another optimizer's inner loop backpropagated is no window of theirs left open); its
        # counter does not restart with it.
        broken = ExitEffect(frozenset(), micro, back.steps)
        returned: list[int] = []

        def ret(n: int) -> None:
            """A `return` leaves this loop too: what its counter held back is left behind."""
            if not returned:
                returned.append(self.node())
                exits.ret(returned[0])
            self.edge(n, returned[0], ExitEffect(node.targets, micro, back.steps))

        body_exits = Exits(lambda n: self.edge(n, done, broken), to_head, ret, exits.exc)
        last = self.build(node.body, first, body_exits)
        if last is not None:
            to_head(last)
        self._loops.pop()
        if not node.infinite:
            leave = self.node()
            self.edge(head, leave, ExitEffect(node.targets, micro, back.steps))
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
        def raise_here(n: int) -> None:
            self.edge(n, dispatch, RaiseEffect())

        # What a backward or a step raises reaches only the handlers that may catch it; the
        # others pass it on (`except Grid2OpException:` around an update).
        caught = node.torch or (True,) * len(node.handlers)
        events: Optional[Wire] = None
        if not all(caught):
            torch_dispatch = self.node()

            def raise_torch(n: int) -> None:
                self.edge(n, torch_dispatch, RaiseEffect())
            events = raise_torch
        raise_here(at)
        last = self.build(node.body, at, Exits(exits.brk, exits.cont, exits.ret, raise_here, events))
        join = self.node()
        reached = False
        if last is not None:
            after = self.build(node.orelse, last, exits)
            if after is not None:
                self.edge(after, join)
                reached = True
        for handler, catches in zip(node.handlers, caught):
            end = self.build(handler, dispatch, exits)
            if end is not None:
                self.edge(end, join)
                reached = True
            if events is not None and catches:
                end = self.build(handler, torch_dispatch, exits)
                if end is not None:
                    self.edge(end, join)
        if exits.exc is not None:
            exits.exc(dispatch)
            if events is not None:
                exits.exc(torch_dispatch)
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
    # A knob on a window's size (`if k == 1:`) and a test of that window (`i % k == 0`) correlate.
    knobs = {key: found[0] for key in seen if (found := unit_window(key, True)) is not None}
    windows = {key: size for key in seen if (size := size_key(key)) is not None}
    paired = set(knobs.values()) & set(windows.values())
    return frozenset(twice | {key for key, size in (*knobs.items(), *windows.items()) if size in paired})


def _phases(loop: Loop) -> frozenset[str]:
    """The phase keys of the tests in `loop`'s body on a target that is 0 in its first turn: a
    new run starts at phase 0 (`if i % k == 0: opt.zero_grad()` clears on its first turn)."""
    if not loop.starts:
        return frozenset()
    return frozenset(node.test.key for node in nodes_of(loop.body) if isinstance(node, Branch) and node.test is not None
                     and node.test.key is not None and counter_of(node.test.key) in loop.starts)
