"""Calls across scopes: one summary per function, applied at its call sites (rules.md v2 §3).

A function's summary is its transfer function over the abstract states of flow.py, for one
optimizer: which states leave it for a state that enters it, and which states reach each of its
steps (the events a finding needs). It is tabulated on demand, bottom-up through the calls, and
shared by every caller that enters it in the same state. The names a callee uses are its own:
the optimizer a caller analyses is renamed through the call's bindings (`optimizer` for
`self.opt` in `train_step(self.opt)`), and chains of sites are re-rooted at the call.

No LibCST and no codes here.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Optional

from .conditions import given_facts, given_tests
from .flow import OUT, START, State, cross, relink, relinked, transfer
from .graph import Chain, Graph, Summary, summarize
from .keys import HANDED, INVARIANT, counter_of, rebase, rename, root_of, unrelated
from .model import Call, Event, Function, Kind, Program, Test, nodes_of
from .verdicts import Verdict, judge_contamination, judge_step

# State transfers per analysed scope and optimizer, callees included: 400,000, or 16 per node of
# the scope's graph when that is more. The budget stops path states that multiply (conditions
# that correlate); a fixed one also stopped scopes that are merely long (a notebook of 10,000
# training cells is one module body), so it grows with the graph, and stays linear in it.
MAX_WORK = 400_000
WORK_PER_NODE = 16
NOBODY = "<none>"  # the optimizer a callee cannot name: only its backward and unknown clears matter
Funcs = tuple[tuple[str, int, str], ...]  # parameter -> function handed over, its `self`


class CapReached(Exception):
    """The work budget of a scope is spent: `budget`, the transfers it allowed."""

    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        self.budget = budget


# In a coarse run, the distinct path facts kept per node for one contents of `.grad` (held,
# removed) before they are joined: past it, a state keeps only the facts all the others there
# share (ESP's join of property simulation).
MAX_FACT_SETS = 64


class _Joins:
    """Path facts that multiply without bound (the phases of one counter modulo 2, 4 and two
    knobs, times configuration flags: 10,000 states of 17 contents in one trainer) spend the
    work cap. A scope that spent it is run again coarse (engine.analyse): the facts are joined
    per node and contents once there are MAX_FACT_SETS of them, so what `.grad` holds stays
    exact and only which paths are told apart is lost, where there were too many to tell."""

    def __init__(self) -> None:
        # per node and contents: the states seen there, and the facts they all share
        self.seen: dict[tuple[int, Any, Any], tuple[int, frozenset[Any]]] = {}

    def join(self, node: int, state: State) -> State:
        key = (node, state.held, state.removed)
        count, common = self.seen.get(key, (0, state.facts))
        facts = common & state.facts
        self.seen[key] = (count + 1, facts)
        return state if count < MAX_FACT_SETS or facts == state.facts else state._replace(facts=facts)


@dataclass
class Outcome:
    """The tabulated summary of one function for one entry state."""

    exits: set[State] = field(default_factory=set)
    steps: dict[Chain, tuple[Event, set[State]]] = field(default_factory=dict)


class Analyzer:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.graphs: dict[tuple[int, bool, Funcs], Graph] = {}
        self._trained: dict[int, frozenset[str]] = {}
        self.memo: dict[tuple[int, str, State, Funcs, frozenset[str]], Outcome] = {}
        self.active: set[tuple[int, str, State, Funcs, frozenset[str]]] = set()
        self.statics: dict[tuple[int, Funcs], Summary] = {}
        self.caches: dict[tuple[int, Funcs], dict[int, Summary]] = {}  # per-node summaries, shared
        self.held: dict[int, list[tuple[Any, ...]]] = {}  # fid -> its keys in graphs, caches, memo
        self.computing: list[tuple[int, Funcs]] = []  # the static summaries under way, innermost last
        self.pinned: set[tuple[int, Funcs]] = set()  # those whose node summaries read one under way
        self.work = 0
        self.budget = MAX_WORK  # set per analysed scope (analyse)
        self.coarse = False  # join path facts (_Joins): the second try of a scope past the cap
        self.given: dict[int, list[Test]] = {}  # fid -> its tests a caller's literal may decide
        self.moved: Optional[frozenset[str]] = None  # _moved()

    def set_coarse(self, coarse: bool) -> None:
        """Enter or leave coarse runs. What was tabulated in the other mode goes: an exact outcome
        would be reused by a coarse run, but a coarse one must never stand in for an exact one."""
        if coarse != self.coarse:
            self.memo.clear()
            self.coarse = coarse

    def forget(self, fid: int) -> None:
        """Drop what was built to analyse `fid` (graphs, summaries, outcomes): once no other
        function can ask for it, keeping it costs memory in proportion to the file. Anything
        dropped is rebuilt, the same, if asked for again."""
        for key in self.held.pop(fid, ()):
            self.graphs.pop(key, None)
            self.caches.pop(key, None)
            self.memo.pop(key, None)
            self.statics.pop(key, None)

    def _hold(self, key: tuple[Any, ...]) -> None:
        self.held.setdefault(key[0], []).append(key)

    # --- static summaries (what a function can do at all, in its caller's words) ------------

    def static(self, fid: int, funcs: Funcs = ()) -> Summary:
        """What `fid` can do at all. The summaries of its nodes made on the way go with it, unless
        they read a summary still under way (recursion): a graph of `fid` makes them again, the
        same, from the summaries that stay. Kept, they were most of a linked project's memory
        (one per IR node of every function)."""
        key = (fid, funcs)
        if key not in self.statics:
            self.statics[key] = Summary()  # recursion: what is known so far
            function = self.program.functions[fid]
            cache = self.caches.setdefault(key, {})
            self._hold(key)
            self.computing.append(key)
            try:
                self.statics[key] = summarize(function.body, cache, lambda call: self.call_summary(call, funcs))
            finally:
                self.computing.pop()
            if key not in self.pinned and self.caches.get(key) is cache:
                del self.caches[key]
        return self.statics[key]

    def call_summary(self, call: Call, funcs: Funcs = ()) -> Summary:
        fid = self.callee(call, funcs)
        if fid is None:
            return Summary()
        callee = self.program.functions[fid]
        handed = self.handed(call, funcs)
        if self.computing and (fid, handed) in self.computing:
            self.pinned.add(self.computing[-1])  # its node summaries hold what is known so far
        inner = self.static(fid, handed)
        call = self.bound(call, funcs)
        out = Summary(backward=inner.backward, maybe=set(inner.maybe))
        out.partial = None if inner.partial is None else (call.site,) + inner.partial
        out.steps = {k for k in (outward(t, call, callee) for t in inner.steps) if k is not None}
        out.moves = {k for k in (outward(t, call, callee) for t in inner.moves) if k is not None}
        for target, chain in inner.clears.items():
            key = outward(target, call, callee)
            if key is not None:
                out.clears.setdefault(key, (call.site,) + chain)
        out.spares = {k for k in (outward(t, call, callee) for t in inner.spares) if k is not None}
        if inner.maybe:
            # The callee's possible clears (`self.model.zero_grad()`) are judged in its own words:
            # an optimizer it steps over none of those modules is one they miss, whatever the
            # caller knows of it (no branch skips a clear that never was one: ZG001, not ZG004).
            links = self.program.links_of(fid)
            missed = (t for t in inner.steps if links.get(t) and all(unrelated(m, t, links) for m in inner.maybe))
            out.spares |= {k for k in (outward(t, call, callee) for t in missed) if k is not None}
        for target, (chain, keeps) in inner.parts.items():
            key = outward(target, call, callee)
            if key is not None:
                out.parts.setdefault(key, ((call.site,) + chain, keeps))
        return out

    def callee(self, call: Call, funcs: Funcs) -> Optional[int]:
        if call.param is not None:
            return next((fid for name, fid, _ in funcs if name == call.param), None)
        return call.callee

    def bound(self, call: Call, funcs: Funcs) -> Call:
        """A call of a parameter, with the `self` of the method handed over bound."""
        if call.param is None:
            return call
        receiver = next((bound for name, _, bound in funcs if name == call.param), "")
        return Call(call.site, -1, (("self", receiver),) if receiver else (), param=call.param)

    def handed(self, call: Call, funcs: Funcs) -> Funcs:
        """Functions the callee's parameters stand for: handed over here, or passed through."""
        return tuple(sorted(call.funcs))

    # --- the tabulated dataflow -------------------------------------------------------------

    def trained(self, fid: int) -> frozenset[str]:
        """The optimizers the scope's own statements step."""
        if fid not in self._trained:
            body = self.program.functions[fid].body
            self._trained[fid] = frozenset(e.target for e in nodes_of(body)
                                           if isinstance(e, Event) and e.kind is Kind.STEP and e.target)
        return self._trained[fid]

    def graph(self, fid: int, repeat: bool, funcs: Funcs) -> Graph:
        key = (fid, repeat, funcs)
        if key not in self.graphs:
            self.static(fid, funcs)
            self.graphs[key] = Graph(self.program.functions[fid], repeat, lambda call: self.call_summary(call, funcs),
                                     self.caches.setdefault((fid, funcs), {}))
            self._hold(key)
        return self.graphs[key]

    def run(self, fid: int, target: str, entry: State, funcs: Funcs, repeat: bool = False,
            outer: frozenset[str] = frozenset()) -> Outcome:
        """The fixed point of one scope from one entry state: a worklist of (node, state) pairs,
        each state set only growing, so it ends; the budget makes sure it ends soon. `outer`: the
        optimizers the callers step, in this scope's words (a loss a helper backpropagates is
        another optimizer's as much as one of the caller's own statements)."""
        graph = self.graph(fid, repeat, funcs)
        states: list[set[State]] = [set() for _ in graph.nodes]
        states[graph.head].add(entry)
        work = [(graph.head, entry)]
        outcome = Outcome()
        joins = _Joins() if self.coarse else None
        links = self.program.links_of(fid)
        trained = self.trained(fid) | outer
        while work:
            self.work += 1
            if self.work > self.budget:
                raise CapReached(self.budget)
            node, state = work.pop()
            item = graph.nodes[node]
            if isinstance(item, Event):
                # Steps are judged on every state that reaches them, after the fixed point:
                # "a clear on every path" is a property of the whole set, not of one state.
                if item.kind is Kind.STEP and item.target == target:
                    outcome.steps.setdefault((item.site,), (item, set()))[1].add(state)
                outs = [transfer(item, state, target, links, trained)]
            elif isinstance(item, Call):
                outs = self.apply(item, state, target, funcs, outcome, trained)
            else:
                outs = [state]
            for out in outs:
                for succ, effect in graph.succ[node]:
                    moved = out if effect is None else cross(effect, out, target)
                    if moved is not None and joins is not None:
                        moved = joins.join(succ, moved)
                    if moved is not None and moved not in states[succ]:
                        states[succ].add(moved)
                        work.append((succ, moved))
        outcome.exits = states[graph.end]
        return outcome

    def apply(self, call: Call, state: State, target: str, funcs: Funcs, outcome: Outcome,
              trained: frozenset[str] = frozenset()) -> list[State]:
        """A call: the callee's summary for the state that enters it, re-rooted at the call."""
        fid = self.callee(call, funcs)
        if fid is None:
            return [state]
        callee = self.program.functions[fid]
        handed = self.handed(call, funcs)
        call = self.bound(call, funcs)
        inner_target = inward(target, call, callee)
        # A method of an object reads the object's configuration and counters: its knobs keep
        # their answers from call to call, its counters their phase.
        receiver = next((key for param, key in call.bindings if param == "self"), None)
        carry = _Carry(receiver, self.static(fid, handed).moves, callee.local)
        entry = carry.enter(state)
        if call.values:
            entry = entry._replace(facts=entry.facts | given_facts(self._given(fid), dict(call.values)))
        outer = frozenset(o for o in (inward(t, call, callee) for t in trained) if o != NOBODY)
        key = (fid, inner_target, entry, handed, outer)
        if key in self.active:
            return [state]  # recursion: the call adds nothing the path into it did not hold
        found = self.memo.get(key)
        if found is None:
            self.active.add(key)
            try:
                found = self.memo[key] = self.run(fid, inner_target, entry, handed, outer=outer)
                self._hold(key)
            finally:
                self.active.discard(key)
        if inner_target != NOBODY:
            # The callee's steps, as reached from here, are this scope's to judge too (with the
            # caller's states they may show what the callee alone cannot).
            for chain, (event, states) in found.steps.items():
                entry_states = outcome.steps.setdefault((call.site,) + chain, (event, set()))[1]
                entry_states.update(_lift(s, call.site, carry.back(state, s)) for s in states)
        return [_lift(s, call.site, carry.back(state, s)) for s in found.exits]

    def _moved(self) -> frozenset[str]:
        """The counters some function of the program moves (MOVE events)."""
        if self.moved is None:
            self.moved = frozenset(node.label for f in self.program.functions for node in nodes_of(f.body)
                                   if isinstance(node, Event) and node.kind is Kind.MOVE)
        return self.moved

    def _given(self, fid: int) -> list[Test]:
        if fid not in self.given:
            self.given[fid] = given_tests(self.program.functions[fid].body)
        return self.given[fid]

    # --- one scope, standalone --------------------------------------------------------------

    def analyse(self, fid: int, target: str) -> list[Verdict]:
        """rules.md section 3: a scope entered with no gradients (the module body, a function no
        finding may assume anything about); a step function runs again and again."""
        function = self.program.functions[fid]
        entry = START
        if "self" in function.params and self.program.phases:
            # A method runs on an object that its `__init__` built: its counters start there. A
            # method analysed once is called any number of times, though: a counter some method
            # moves may be at any phase by then (TD3's `self.total_it += 1` then `% policy_freq`).
            moved = frozenset() if function.step_function else self._moved()
            phases = [(key, phase) for key, phase in self.program.phases.items() if key not in moved]
            entry = START._replace(facts=frozenset((key, phase, True) for key, phase in phases))
        graph = self.graph(fid, function.step_function, ())
        self.budget = max(MAX_WORK, WORK_PER_NODE * len(graph.nodes))
        outcome = self.run(fid, target, entry, (), repeat=function.step_function,
                           outer=frozenset(self.static(fid).steps))
        verdicts: list[Verdict] = []
        for chain, (event, states) in sorted(outcome.steps.items()):
            # Named in this scope's words (a hand-over by the module whose gradients it hands).
            label = event.label if len(chain) == 1 else target.removesuffix(HANDED)
            around = self._around(graph, chain[0])
            has_clear = around is not None and around.may_clear(target, self.program.links_of(fid))
            partial = around.partial if around is not None else None
            part, keeps = around.parts.get(target, (None, "")) if around is not None else (None, "")
            looped = graph.loop_around(chain[0])[1] is not None  # a loop of its own, not a step function's repeat
            found = judge_step(chain, label, states, target, has_clear, partial, part, keeps, looped)
            verdicts.extend(v._replace(note=_backward_before(graph, chain[0])) if v.kind == "leaked_in" else v
                            for v in found)
            verdicts.extend(judge_contamination(chain, label, states, target, self.program.links_of(fid)))
        return verdicts

    def _around(self, graph: Graph, site: int) -> Optional[Summary]:
        """What the loop around `site` (or the whole scope) does: does it clear at all?"""
        at, loop = graph.loop_around(site)
        if at is None:
            return None
        return graph.summary(loop.body if loop is not None else graph.body)

    def in_loop(self, fid: int, site: int) -> bool:
        function = self.program.functions[fid]
        return self.graph(fid, function.step_function, ()).loop_around(site)[1] is not None

    def targets(self, fid: int) -> list[str]:
        """The optimizers a scope steps, itself or through what it calls, in its own words."""
        summary = self.static(fid)
        return sorted(summary.steps) if summary.backward else []


def _backward_before(graph: Graph, site: int) -> Optional[int]:
    """The last backward of the scope before the loop around `site` (a LEAK's message names it)."""
    loop = graph.loop_around(site)[1]
    return None if loop is None else graph.backward_before(loop)


def inward(target: str, call: Call, callee: Function) -> str:
    """The caller's optimizer as the callee names it."""
    for param, key in call.bindings:
        renamed = rebase(target, key, param)
        if renamed is not None:
            return renamed
    root = root_of(target)
    if root in callee.params or root in callee.local:
        return NOBODY  # the callee's own name hides the caller's
    return target


def outward(key: str, call: Call, callee: Function) -> Optional[str]:
    """The callee's optimizer as the caller names it (None: a local of the callee)."""
    # The longest bound name first: `self.optimizer` (a constructor's argument) before `self`.
    for param, bound in sorted(call.bindings, key=lambda b: -len(b[0])):
        renamed = rebase(key, param, bound)
        if renamed is not None:
            return renamed
    root = root_of(key)
    if root in callee.params or root in callee.local:
        return None
    return key


# Facts a method shares with its caller about its object: its knobs, and its modular counters
# (`self.num_updates`-based phases that a step function's caller moves on).
_CARRIED = (INVARIANT, "mod:")
Facts = frozenset[tuple[str, int, bool]]


class _Carry:
    """The facts of a call's receiver that go into its method and come back: all the carried
    ones for `self.m()` (as they are), those about the receiver for `agent.m()` (renamed
    `self.` inside); a counter the method moves or sets comes back as the method left it. A
    counter the method assigns otherwise (`self.global_step += 1`, no event) is not known on
    either side of the call: the method may test it before or after the assignment."""

    def __init__(self, receiver: Optional[str], moves: set[str], assigned: AbstractSet[str] = frozenset()) -> None:
        self.receiver = receiver
        # Inside the method: the counters of its object it assigns with no event to follow them.
        self.blind = {name for name in assigned if name.startswith("self.")} - moves
        # The caller's names of the counters the method moves or sets: their facts come back.
        self.gone = {rename(counter, "self", receiver) for counter in moves | self.blind} - {None} if receiver else set()

    def enter(self, s: State) -> State:
        """Into a callee: its conditions are its own (but for its object's knobs and counters),
        the caller's sites lead back out."""
        facts = frozenset(f for f in (self._into(f) for f in s.facts) if f is not None)
        return _lift(s, OUT, facts)

    def back(self, caller: State, inner: State) -> Facts:
        """The caller's facts after the call: its own, and what the method answered or moved."""
        if self.receiver is None:
            return caller.facts
        out = (self._renamed(f, "self", self.receiver) for f in inner.facts if counter_of(f[0]) not in self.blind)
        found = {f for f in out if f is not None}
        if self.gone:
            return frozenset(f for f in caller.facts if counter_of(f[0]) not in self.gone) | found
        return caller.facts | found

    def _into(self, fact: tuple[str, int, bool]) -> Optional[tuple[str, int, bool]]:
        if self.receiver is None:
            return None
        inside = self._renamed(fact, self.receiver, "self")
        return None if inside is None or counter_of(inside[0]) in self.blind else inside

    @staticmethod
    def _renamed(fact: tuple[str, int, bool], old: str, new: str) -> Optional[tuple[str, int, bool]]:
        """A carried fact about `old` as one about `new` (None: not carried)."""
        if not fact[0].startswith(_CARRIED):
            return None
        key = fact[0] if old == new else rename(fact[0], old, new)
        return None if key is None else (key, fact[1], fact[2])


def _lift(s: State, site: int, facts: frozenset[tuple[str, int, bool]]) -> State:
    """A state out of a callee through its call at `site` (OUT: into the callee)."""
    removed = s.removed if s.removed is None else s.removed._replace(chain=relinked(s.removed.chain, site))
    return State(relink(s.held, site), removed, facts, wiped=s.wiped)
