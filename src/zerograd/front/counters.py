"""An object's wrapping counters (ParlAI's `self._number_grad_accum = (n + 1) % update_freq`):
an attribute `self.n` that the module's methods assign `(self.n + c) % k`, with one modulus, and
otherwise only int literals. Its phase is a fact the object's methods share: its assignments are
events (MOVE by `c`, SET to a literal), and building an object sets its `__init__` phase
(docs/analysis.md, "An object's wrapping counter")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from ..analysis.keys import counter_of, rename
from ..analysis.model import Event, Kind
from .conditions import modular_phase
from .naming import dotted


@dataclass
class Counters:
    """What the module's assignments of `self.x` say, then (settle) which are wrapping counters."""

    moved: dict[int, int] = field(default_factory=dict)  # id(Assign) -> c
    literal: dict[int, int] = field(default_factory=dict)  # id(Assign) -> the literal
    keys: dict[str, set[str]] = field(default_factory=dict)  # counter -> its modular keys
    starts: dict[str, set[int]] = field(default_factory=dict)  # counter -> literals in __init__
    spoilt: set[str] = field(default_factory=set)  # assigned anything else somewhere
    where: dict[str, set[int]] = field(default_factory=dict)  # counter -> id(function) assigning it
    key: dict[str, str] = field(default_factory=dict)  # the result: counter -> "mod:self.n%k"
    start: dict[str, int] = field(default_factory=dict)  # its phase after __init__

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

    def settle(self) -> set[int]:
        """Decide the wrapping counters; the functions that assign one perform an event."""
        for name, keys in self.keys.items():
            if len(keys) == 1 and name not in self.spoilt:
                self.key[name] = next(iter(keys))
                starts = self.starts.get(name, set())
                if len(starts) == 1:
                    self.start[name] = next(iter(starts))
        return {function for name in self.key for function in self.where[name]}

    def event(self, node: cst.CSTNode, name: str, site: int) -> Optional[Event]:
        """The MOVE or SET that an assignment of counter `name` is, if it is one."""
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
                      rename(self.key[counter], "self", receiver) or "", phase=start)
                for counter, start in self.start.items() if self.where[counter] & methods]


def int_literal(node: Optional[cst.BaseExpression]) -> Optional[int]:
    try:
        return int(node.value, 0) if isinstance(node, cst.Integer) else None
    except ValueError:
        return None
