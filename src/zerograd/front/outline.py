"""What the project's plan reads of a module without its tree (relevance.Scan.outline makes
it; the cache keeps it per content hash), and the name closure both use: which functions can
perform an event, directly or through a function they call by name."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any


def closure(names: Sequence[str], start: set[int], callees: Sequence[AbstractSet[str]],
            linked: frozenset[str]) -> set[int]:
    """The functions (by index) that perform an event or call, by name, one that can."""
    relevant = set(start)
    while True:
        called = {names[i] for i in relevant} | linked
        grown = {i for i in range(len(names)) if i not in relevant and not callees[i].isdisjoint(called)}
        if not grown:
            return relevant
        relevant |= grown


@dataclass(frozen=True)
class Outline:
    """What the project's plan (plan.py) reads of a module's functions and classes, without its
    tree: kept in the cache per content hash, so that re-planning a project after an edit parses
    only the modules that changed."""

    names: tuple[str, ...]  # its functions, nested ones included, in Scan order
    start: frozenset[int]  # those that perform an event themselves
    callees: tuple[frozenset[str], ...]  # the names each calls or hands over
    members: dict[str, tuple[tuple[int, ...], tuple[str, ...]]]  # class -> (its methods, its bases' names)
    aliases: dict[str, str]  # local name -> what it was imported as
    bases: dict[str, tuple[tuple[str, bool], ...]]  # module-level class -> (base qualified, a local name?)
    # Classes whose `__init__` keeps a parameter (`self.opt = opt`) or hands its base's some.
    keeps: frozenset[str] = frozenset()
    top: frozenset[str] = frozenset()  # the names the module's own statements call or hand over
    optimizers: int = 0  # how many it builds, by name (Scan.optimizers)

    def relevant(self, linked: frozenset[str] = frozenset()) -> set[int]:
        return closure(self.names, set(self.start), self.callees, linked)

    def methods_of(self, name: str, relevant: AbstractSet[int]) -> set[str]:
        """The names of class `name`'s methods in `relevant`, its bases' here included."""
        found: set[str] = set()
        seen: set[str] = set()
        pending = [name]
        while pending:
            current = pending.pop()
            if current in seen or current not in self.members:
                continue
            seen.add(current)
            methods, written = self.members[current]
            found.update(self.names[i] for i in methods if i in relevant)
            pending.extend(base.rsplit(".", 1)[-1] for base in written)
        return found

    def keeping(self, name: str) -> bool:
        """Whether class `name`'s constructor (its own, or a base's here) may keep what it is handed."""
        seen: set[str] = set()
        pending = [name]
        while pending:
            current = pending.pop()
            if current in seen or current not in self.members:
                continue
            if current in self.keeps:
                return True
            seen.add(current)
            pending.extend(base.rsplit(".", 1)[-1] for base in self.members[current][1])
        return False

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "start": sorted(self.start), "callees": [sorted(c) for c in self.callees],
                "members": {k: [list(m), list(b)] for k, (m, b) in self.members.items()}, "aliases": self.aliases,
                "bases": {k: [list(b) for b in v] for k, v in self.bases.items()}, "keeps": sorted(self.keeps),
                "top": sorted(self.top), "optimizers": self.optimizers}

    @staticmethod
    def from_json(body: Any) -> Outline:
        """Raises ValueError (or TypeError, KeyError) on anything but what to_json writes."""
        names = tuple(_strings(body["names"]))
        count = len(names)

        def indices(values: Any) -> tuple[int, ...]:
            if not all(type(v) is int and 0 <= v < count for v in values):
                raise ValueError("bad index")
            return tuple(values)

        callees = tuple(frozenset(_strings(c)) for c in body["callees"])
        if len(callees) != count:
            raise ValueError("bad callees")
        members = {str(k): (indices(m), tuple(_strings(b))) for k, (m, b) in body["members"].items()}
        aliases = {str(k): str(v) for k, v in body["aliases"].items()}
        bases = {str(k): tuple((str(q), bool(local)) for q, local in v) for k, v in body["bases"].items()}
        return Outline(names, frozenset(indices(body["start"])), callees, members, aliases, bases,
                       frozenset(_strings(body["keeps"])), frozenset(_strings(body["top"])), _count(body["optimizers"]))


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError("not a count")
    return value


def _strings(values: Any) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError("not a list of strings")
    return values
