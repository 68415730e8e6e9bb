"""A framework's per-batch order (frameworks.py) as a scope of its own: the *driver* of a class
whose hooks the framework calls (rules.md section 7).

The driver is a loop over batches that calls the class's hooks where the framework does, and
performs the framework's own BACKWARD, STEP and CLEAR between them, on one optimizer key that the
hooks' receivers are mapped to (`self.optimizers()`, a hook's `optimizer` argument). With a
literal accumulation setting N > 1, what runs on the first or the last batch of a window sits
under the framework's own test (`batch_idx % N == 0`, `(batch_idx + 1) % N == 0`), so the
ordinary dataflow and rules judge what the hooks do: a clear between the framework's backward and
step is ZG002, a clear every batch under accumulation ZG003, an override of the clear hook that
drops it ZG001. Handlers registered on an engine (ignite's) get a driver of the same kind, with
the handlers before and after the framework's update.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Optional

import libcst as cst

from ..analysis.model import Branch, Call, Event, Function, Kind, Loop, Node, Seq, Test
from ..knowledge.frameworks import (
    ALONE,
    COUNTER,
    EVERY,
    FIRST,
    LAST,
    NOT_LAST,
    STARTED,
    Framework,
    Outside,
    Slot,
    framework_of,
    named,
)
from .conditions import classify
from .moduleinfo import ClassInfo, ModuleInfo, Registered
from .naming import positional
from .sites import Chunk, Sites
from .walk import nodes_in

MAX_DEPTH = 5  # bases followed within the module


def hooked(info: ModuleInfo, outside: Outside = ALONE) -> dict[int, Framework]:
    """id(ClassInfo) -> the framework whose order runs the class's hooks. A class that takes the
    order over (Lightning's `automatic_optimization = False`) has none: its `training_step` is a
    step function of its own (rules.md section 3)."""
    found = {}
    for cls in {id(c): c for c in info.class_of.values()}.values():
        framework = _framework(info, cls, 0, outside)
        if framework is not None and not (framework.manual and _manual(info, cls, framework.manual)):
            found[id(cls)] = framework
    return found


def _framework(info: ModuleInfo, cls: ClassInfo, depth: int, outside: Outside) -> Optional[Framework]:
    for base in cls.bases:
        head, _, rest = base.partition(".")
        local = info.classes.get(base) if not rest else None
        if local is not None and local is not cls:
            found = _framework(info, local, depth + 1, outside) if depth < MAX_DEPTH else None
        elif head in info.aliases:
            qualified = info.aliases[head] + (f".{rest}" if rest else "")
            # A base of the framework's own, or a class of the project's that derives from one.
            found = framework_of(qualified) or named(outside.base(qualified) or "")
        else:  # `from fastai.vision.all import *`
            found = next((f for star in info.stars if (f := framework_of(f"{star}.{base}")) is not None), None)
        if found is not None:
            return found
    return None


def _manual(info: ModuleInfo, cls: ClassInfo, flag: str) -> bool:
    """The class (or a base of it here) defines `flag`, sets `self.<flag>` to anything but True,
    or calls `manual_backward` (which only manual optimization allows); or its `training_step`
    takes `optimizer_idx`: Lightning 1.x's several optimizers, an order the table does not hold.
    Methods a subclass overrides say nothing of it (taming's VQSegmentationModel overrides
    VQModel's two-optimizer `training_step`)."""
    names = {name for current in info.lineage(cls) for name in current.methods}
    if flag in names:
        return True
    step = info.method(cls, "training_step")
    if step is not None and "optimizer_idx" in {p.name.value for p in step.params.params}:
        return True
    for method in (m for name in names if (m := info.method(cls, name)) is not None):
        for node in nodes_in(method.body):
            if isinstance(node, cst.Assign) and any(_is_flag(t.target, flag) for t in node.targets):
                if not (isinstance(node.value, cst.Name) and node.value.value == "True"):
                    return True
            if isinstance(node, cst.Attribute) and node.attr.value == "manual_backward":
                return True
    return False


def _is_flag(target: cst.BaseExpression, flag: str) -> bool:
    return isinstance(target, cst.Attribute) and target.attr.value == flag


def hooks(info: ModuleInfo, cls: ClassInfo, framework: Framework) -> dict[str, cst.FunctionDef]:
    """The hooks of the order that the class (or a base here) defines."""
    return {s.hook: m for s in framework.order if s.hook and (m := info.method(cls, s.hook)) is not None}


def parameter(hook: cst.FunctionDef, position: int) -> Optional[str]:
    """The name of a hook's parameter at `position` after `self` (None: it takes fewer)."""
    params = list(positional(hook))[1:]
    return params[position] if 0 <= position < len(params) else None


def add_driver(info: ModuleInfo, cls: ClassInfo, framework: Framework, sites: Sites, index: dict[int, int],
               functions: list[Function], chunks: Sequence[Chunk]) -> None:
    """Append the driver of `cls` to `functions` (with a closure function when the class
    overrides the step hook), if the class defines a hook that performs an event or replaces
    one of the framework's own; `index` places the module's built functions."""
    defined = hooks(info, cls, framework)
    if cls.node is None or not any(id(m) in index or (framework.slot(h) or Slot()).event for h, m in defined.items()):
        return
    sites.chunk, sites.top = _position(chunks, cls.node)
    n = info.accumulation.get(framework.accumulation[1]) or 1
    driver = _Driver(framework, cls.name, (cls.node, cls.node.name, cls.node.body), defined, max(n, 1), sites, index,
                     functions, (("self", "self"),))
    driver.add(framework.order)


def add_registered(trainer: Registered, sites: Sites, index: dict[int, int], functions: list[Function],
                   chunks: Sequence[Chunk]) -> None:
    """The driver of an engine built by a framework's factory (ignite's create_supervised_trainer)
    around the handlers registered on it, when its accumulation is a literal N > 1: only then can
    a handler's clear be misplaced (every handler runs before or after the whole update)."""
    if trainer.accumulation is None or trainer.accumulation <= 1 or not trainer.handlers:
        return
    sites.chunk, sites.top = _position(chunks, trainer.call)
    framework = replace(trainer.framework, optimizer=trainer.optimizer)
    defined = {f"{event}:{h.name.value}": h for event, h in trainer.handlers}
    order = [*(Slot(k) for k in defined if k.startswith(STARTED)), *framework.order,
             *(Slot(k) for k in defined if not k.startswith(STARTED))]
    call = trainer.call
    driver = _Driver(framework, "engine", (call, call.func, call.args[0] if call.args else call), defined,
                     trainer.accumulation, sites, index, functions, ())
    driver.add(order)


@dataclass
class _Driver:
    framework: Framework
    name: str  # the class (or engine) whose hooks it calls
    nodes: tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]  # where its step, its other events and its loop are
    defined: dict[str, cst.FunctionDef]  # the hooks the class defines
    n: int  # batches per accumulation window
    sites: Sites
    index: dict[int, int]
    functions: list[Function]
    bindings: tuple[tuple[str, str], ...]  # a method's `self` is the driver's; a function's names its caller's

    def add(self, order: Sequence[Slot]) -> None:
        """Append the driver: a loop over batches."""
        loop = Loop(Seq(tuple(self.batch(order))), self.sites.site(self.nodes[2]), targets=frozenset({COUNTER}),
                    collection=True, moves=frozenset({COUNTER}))
        self.functions.append(Function(f"<{self.framework.name} driver of {self.name}>", Seq((loop,)),
                                       self.sites.site(self.nodes[0]), params=frozenset(b[0] for b in self.bindings),
                                       local=frozenset({COUNTER}), driver=self.framework.name))

    def batch(self, order: Sequence[Slot]) -> list[Node]:
        """One batch: the slots in order, those of the first or last batch of a window gated."""
        # An override that names the closure it is handed (not `*args`) calls it where it says.
        wrapping = next((s for s in order if s.closure >= 0 and s.hook in self.defined
                         and parameter(self.defined[s.hook], s.closure) is not None), None)
        if wrapping is not None:
            return self._wrapped(order, wrapping)
        items: list[Node] = []
        for when, slots in _runs(order):
            items.extend(self._gate(when, self._flat(slots)))
        return items

    def _wrapped(self, order: Sequence[Slot], wrapping: Slot) -> list[Node]:
        """An override of the step hook (Lightning's optimizer_step) calls `step(closure)` with
        the closure the framework made of the hooks around the backward: on a step batch the
        override runs with that closure handed over; on other batches the closure runs alone."""
        start = next(i for i, s in enumerate(order) if s.hook == "training_step")
        end = order.index(wrapping)
        before, inside, after = order[:start], order[start:end], order[end + 1:]
        # With N > 1 the last batch of a window is not its first: its closure does not clear.
        stepping = [s for s in inside if s.when != FIRST or self.n == 1]
        hook = self.defined[wrapping.hook]
        self.functions.append(Function(f"<closure of {self.name}>", Seq(tuple(self._flat(stepping))),
                                       self.sites.site(hook), params=frozenset({"self"})))
        param = parameter(hook, wrapping.closure)
        step: list[Node] = []
        if id(hook) in self.index and param is not None:  # (named: batch() checked it)
            funcs = ((param, len(self.functions) - 1, "self"),)
            step = [Call(self.sites.site(hook), self.index[id(hook)], self.bindings, funcs)]
        items = self._flat(before)
        if self.n > 1:
            # The closure alone first, on the batches that do not step; then the step batch's
            # override: so the gradients of the others pass the step's test pending, as in a
            # loop that steps under `if (i + 1) % n == 0:` after its backward.
            accumulating = self.batch([s for s in inside if s.when != LAST])
            items.append(Branch((Seq(), Seq(tuple(accumulating))), self._test(LAST)))
            step = [Branch((Seq(tuple(step)), Seq()), self._test(LAST))]
        return items + step + self.batch(after)

    def _flat(self, slots: Iterable[Slot]) -> list[Node]:
        return [n for s in slots for n in self._slot(s)]

    def _slot(self, slot: Slot) -> list[Node]:
        """A hook the class defines (a call of it, or nothing when it performs no event), else
        the framework's own event there."""
        if slot.within and slot.within in self.defined:
            return []  # it runs inside a hook the user replaced
        hook = self.defined.get(slot.hook) if slot.hook else None
        if hook is not None:
            if id(hook) not in self.index:
                return []
            return [Call(self.sites.site(hook), self.index[id(hook)], self.bindings)]
        if slot.event is None:
            return []
        # The framework's own events are reported at the class, but for its step: at an
        # override of the clear hook, which is what a ZG001 there is about.
        clear = next((s.hook for s in self.framework.order if s.event is Kind.CLEAR and s.hook), "")
        dropped = self.defined.get(clear)
        where = self.nodes[1]
        if slot.event is Kind.STEP:
            where = dropped.name if dropped is not None else self.nodes[0]
        target = None if slot.event is Kind.BACKWARD else self.framework.optimizer
        return [Event(slot.event, self.sites.site(where), target, "optimizer")]

    def _gate(self, when: str, nodes: list[Node]) -> list[Node]:
        if not nodes or when == EVERY:
            return nodes
        if self.n == 1:
            return [] if when == NOT_LAST else nodes  # every batch is a window of its own
        if when == NOT_LAST:
            return [Branch((Seq(), Seq(tuple(nodes))), self._test(LAST))]
        return [Branch((Seq(tuple(nodes)), Seq()), self._test(when))]

    def _test(self, when: str) -> Test:
        text = f"{COUNTER} % {self.n} == 0" if when == FIRST else f"({COUNTER} + 1) % {self.n} == 0"
        return classify(cst.parse_expression(text))


def _runs(order: Sequence[Slot]) -> list[tuple[str, list[Slot]]]:
    """Consecutive slots that run on the same batches."""
    return [(when, list(slots)) for when, slots in groupby(order, key=lambda slot: slot.when)]


def _position(chunks: Sequence[Chunk], node: cst.CSTNode) -> tuple[int, int]:
    """The chunk and top-level statement that hold `node` (for its sites)."""
    for number, chunk in enumerate(chunks):
        for top, statement in enumerate(chunk.module.body):
            if any(found is node for found in nodes_in(statement)):
                return number, top
    return 0, 0

