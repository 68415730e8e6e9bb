"""The scope builder's reading of accumulation counters (a mixin of scopes.Builder): which
assignments are events of a counter (counters.py), which clears restart a window beside a reset
of its counter, and which branches end a window that no `%` test marks."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Optional

import libcst as cst

from ..analysis.keys import FLAG
from ..analysis.model import Event, Kind, Node, Seq
from .calls import Calls, Context
from .counters import step_events
from .naming import block_of, dotted, text_of
from .walk import nodes_in


class Windows(Calls):
    def _counts(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        """A flag or a counter set, a counter moved (counters.py); building an object of this
        module sets its counters to their phase after `__init__`."""
        counters = self.info.counters
        stepped = step_events(node, ctx.counts + counters.stepped_counts, self.sites.site(node))
        if stepped:
            return list(stepped)
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            return []
        target = node.targets[0].target
        name = dotted(target) or ""
        if isinstance(target, cst.Name) and name in ctx.flags:
            return [Event(Kind.SET, self.sites.site(node), name, FLAG + name, phase=int(text_of(node.value) == "True"))]
        if name in counters.key:
            found = counters.event(node, name, self.sites.site(node))
            return [found] if found is not None else []
        if not counters.start or not isinstance(node.value, cst.Call) or not isinstance(target, (cst.Name, cst.Attribute)):
            return []
        cls = self.info.classes.get(dotted(node.value.func) or "")
        if cls is None:
            return []
        methods = {id(method) for c in self.info.lineage(cls) for method in c.methods.values()}
        return [*counters.built(self.sites.site(node), self.key(target, ctx), methods)]

    def _resets(self, body: Sequence[cst.CSTNode], ctx: Context) -> bool:
        """Some statement of `body` sets to an int literal a counter: a name the function
        increments and compares in a test (`micro += 1`, `if micro == accum:`), not a running sum,
        or a stepped or wrapping counter (`self.step = 0` beside the end of an epoch's flush), or
        an attribute another method counts up by an int (`self.count = 0` in `on_epoch_end`
        beside the clear that drops a partial window of `train_step`'s `self.count += 1`)."""
        facts = self._facts(ctx)
        known = self.info.counters
        counters = facts.increments & facts.compared | self._counters(ctx) | (known.stepping - known.spoilt)
        return _reset(body, counters, literal=True) is not None

    def _window_counter(self, node: cst.If, body: Seq, ctx: Context) -> Optional[str]:
        """The counter of a window `node` ends: its body steps and resets (to an int literal or
        a name) a counter the test reads and the scope moves (`+=`, `-=`)."""
        if not any(isinstance(i, Event) and i.kind is Kind.STEP for i in body.items):
            return None
        moved = self._facts(ctx).increments | self._counters(ctx)
        read = {dotted(n) or "" for n in nodes_in(node.test) if isinstance(n, (cst.Name, cst.Attribute))} & moved
        return _reset(block_of(node.body), read, literal=False)

    def _counters(self, ctx: Context) -> set[str]:
        """The counters whose assignments are events here: the scope's stepped ones, the module's
        stepped and wrapping attribute counters."""
        known = self.info.counters
        return {name for name, _ in ctx.counts} | set(known.key) | set(known.stepped)


def _reset(body: Sequence[cst.CSTNode], counters: AbstractSet[str], literal: bool) -> Optional[str]:
    """The first of `counters` a statement of `body` sets to an int literal (or, without
    `literal`, to a name: `left = accum`)."""
    values = (cst.Integer,) if literal else (cst.Integer, cst.Name, cst.Attribute)
    for statement in body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and isinstance(small.value, values):
                found = next((name for t in small.targets if (name := dotted(t.target)) in counters), None)
                if found is not None:
                    return found
    return None
