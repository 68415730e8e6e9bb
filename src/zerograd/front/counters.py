"""Counters whose assignments are events (MOVE by `c`, SET to a literal), so that a test of a
counter reads the phase its last assignment left (docs/analysis.md):
- an object's wrapping counters (ParlAI's `self._number_grad_accum = (n + 1) % update_freq`): an
  attribute `self.n` that the module's methods assign `(self.n + c) % k`, with one modulus, and
  otherwise only int literals. Its phase is a fact the object's methods share, and building an
  object sets its `__init__` phase;
- a scope's stepped counters (`micro += 1` ... `if micro % k == 0:`, `self.n += 1` in a method
  that tests `self.n % self.k`): names a body tests modularly and assigns nothing but `+= c`,
  `-= c`, `= n + c` and int literals."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from ..analysis.keys import counter_of, rename
from ..analysis.model import Event, Kind
from .conditions import modular_phase
from .naming import dotted, flatten, statements_of, targets_of, walrus
from .walk import nodes_in

Counts = tuple[tuple[str, tuple[str, ...]], ...]  # a scope's stepped counters -> their modular keys


@dataclass
class Counters:
    """What the module's assignments of `self.x` say, then (settle) which are wrapping counters
    and which stepped ones (`self.n += c` beside tests of `self.n % k`)."""

    moved: dict[int, int] = field(default_factory=dict)  # id(Assign) -> c
    literal: dict[int, int] = field(default_factory=dict)  # id(Assign) -> the literal
    keys: dict[str, set[str]] = field(default_factory=dict)  # counter -> its modular keys
    starts: dict[str, set[int]] = field(default_factory=dict)  # counter -> literals in __init__
    spoilt: set[str] = field(default_factory=set)  # assigned anything else somewhere
    where: dict[str, set[int]] = field(default_factory=dict)  # counter -> id(function) assigning it
    key: dict[str, str] = field(default_factory=dict)  # the result: counter -> "mod:self.n%k"
    start: dict[str, int] = field(default_factory=dict)  # its phase after __init__
    stepping: set[str] = field(default_factory=set)  # `self.n` assigned `self.n += c` somewhere
    tested: dict[str, set[str]] = field(default_factory=dict)  # `self.n` -> keys of tests `self.n % k`
    stepped: dict[str, str] = field(default_factory=dict)  # the result: stepped attribute counters

    def record(self, node: cst.CSTNode, targets: Sequence[cst.BaseExpression], value: Optional[cst.BaseExpression],
               function: Optional[cst.FunctionDef]) -> None:
        """One assignment (`value` None: an augmented one) in `function` (None: the module)."""
        for target in targets:
            for element in target.elements if isinstance(target, (cst.Tuple, cst.List)) else ():
                self.spoilt.add(dotted(element.value) or "")
            name = dotted(target) or ""
            if not name.startswith("self.") or function is None:
                continue
            self.where.setdefault(name, set()).add(id(function))
            step = counter_step(node)
            if step is not None and step[0] == name:
                self.stepping.add(name)
                continue
            modulo = isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo)
            phase = modular_phase(value, 0) if modulo and len(targets) == 1 else None  # type: ignore[arg-type]
            literal = int_literal(value)
            if phase is not None and counter_of(phase[0]) == name:
                self.moved[id(node)] = -phase[1]
                self.keys.setdefault(name, set()).add(phase[0])
            elif literal is not None:
                self.literal[id(node)] = literal
                if function.name.value == "__init__":
                    self.starts.setdefault(name, set()).add(literal)
            else:
                self.spoilt.add(name)

    def test(self, expression: cst.BaseExpression) -> None:
        """A test (or a flag's value) of the module: the `self.n % k` in it."""
        for key in modular_keys(expression):
            counter = counter_of(key) or ""
            if counter.startswith("self."):
                self.tested.setdefault(counter, set()).add(key)

    def settle(self) -> set[int]:
        """Decide the wrapping and the stepped counters; the functions that assign one perform an
        event."""
        for name, keys in self.keys.items():
            if len(keys) == 1 and name not in self.spoilt and name not in self.stepping:
                self.key[name] = next(iter(keys))
        for name in self.stepping - self.spoilt - set(self.keys):
            if name in self.tested:
                self.stepped[name] = min(self.tested[name])
        for name in (*self.key, *self.stepped):
            starts = self.starts.get(name, set())
            if len(starts) == 1:
                self.start[name] = next(iter(starts))
        return {function for name in (*self.key, *self.stepped) for function in self.where[name]}

    def key_of(self, counter: str) -> str:
        """The key of a wrapping or stepped counter."""
        return self.key.get(counter) or self.stepped[counter]

    @property
    def stepped_counts(self) -> Counts:
        """The stepped attribute counters as a scope's are given (step_events makes their events)."""
        return tuple((name, (key,)) for name, key in self.stepped.items())

    def event(self, node: cst.CSTNode, name: str, site: int) -> Optional[Event]:
        """The MOVE or SET that an assignment of wrapping counter `name` is, if it is one."""
        key = self.key.get(name)
        if key is not None and id(node) in self.moved:
            return Event(Kind.MOVE, site, name, key, phase=self.moved[id(node)])
        if key is not None and id(node) in self.literal:
            return Event(Kind.SET, site, name, key, phase=self.literal[id(node)])
        return None

    def built(self, site: int, receiver: str, methods: set[int]) -> list[Event]:
        """Building an object (`agent = Agent()`) whose class's `methods` assign counters: each
        is set to its `__init__` phase, under the receiver's name (`agent.n`)."""
        return [Event(Kind.SET, site, rename(counter, "self", receiver) or "",
                      rename(self.key_of(counter), "self", receiver) or "", phase=start)
                for counter, start in self.start.items() if self.where[counter] & methods]


def int_literal(node: Optional[cst.BaseExpression]) -> Optional[int]:
    try:
        return int(node.value, 0) if isinstance(node, cst.Integer) else None
    except ValueError:
        return None



def stepped_counters(body: Sequence[cst.CSTNode], wrapping: Mapping[str, str]) -> Counts:
    """The stepped counters of a body (its own statements, not those of the functions it
    defines), but for the module's wrapping counters (`wrapping`, events already)."""
    keys: dict[str, set[str]] = {}
    plain: dict[str, bool] = {}  # name -> assigned nothing but steps and int literals
    steps: set[str] = set()
    for statement in statements_of(body):
        # A small statement whole (`should_step = (i + 1) % k == 0`), a compound one's test only:
        # its body's statements come next.
        if isinstance(statement, (cst.If, cst.While)):
            root: Optional[cst.CSTNode] = statement.test
        else:
            root = statement if isinstance(statement, cst.BaseSmallStatement) else None
        for key in modular_keys(root) if root is not None else ():
            keys.setdefault(counter_of(key) or "", set()).add(key)
        step = counter_step(statement)
        if step is not None:
            steps.add(step[0])
            continue
        literal = (isinstance(statement, cst.Assign) and len(statement.targets) == 1
                   and int_literal(statement.value) is not None)
        for target in targets_of(statement):
            for element in flatten(target):
                name = dotted(element) or ""
                plain[name] = plain.get(name, True) and literal
        for name in walrus(statement):
            plain[name] = False
    return tuple(sorted((name, tuple(sorted(keys[name]))) for name in steps
                        if name in keys and plain.get(name, True) and name not in wrapping))


def modular_keys(node: cst.CSTNode) -> Iterator[str]:
    """The modular keys of the `counter % k` under `node` ("mod:i%k")."""
    for inner in nodes_in(node):
        if isinstance(inner, cst.BinaryOperation) and isinstance(inner.operator, cst.Modulo):
            found = modular_phase(inner, 0)
            if found is not None:
                yield found[0]


def counter_step(node: cst.CSTNode) -> Optional[tuple[str, int]]:
    """`n += c`, `n -= c`, `n = n + c` (`n` a name or an attribute chain, `c` an int literal):
    the counter and how far it moves."""
    if isinstance(node, cst.AugAssign):
        target, sign = node.target, {cst.AddAssign: 1, cst.SubtractAssign: -1}.get(type(node.operator))
        value: Optional[cst.BaseExpression] = node.value
    elif isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.BinaryOperation):
        target, sign = node.targets[0].target, {cst.Add: 1, cst.Subtract: -1}.get(type(node.value.operator))
        same = dotted(node.value.left) is not None and dotted(node.value.left) == dotted(target)
        value = node.value.right if same else None
    else:
        return None
    name, by = dotted(target), int_literal(value)
    if name is None or sign is None or by is None:
        return None
    return name, sign * by


def step_events(node: cst.CSTNode, counts: Counts, site: int) -> list[Event]:
    """The MOVE or SET a statement of a scope with stepped counters `counts` is, if any."""
    keys = dict(counts)
    found = counter_step(node)
    if found is not None and found[0] in keys:
        return [Event(Kind.MOVE, site, found[0], keys[found[0]][0], phase=found[1])]
    if isinstance(node, cst.Assign) and len(node.targets) == 1 and (value := int_literal(node.value)) is not None:
        name = dotted(node.targets[0].target) or ""
        if name in keys:
            return [Event(Kind.SET, site, name, keys[name][0], phase=value)]
    return []
