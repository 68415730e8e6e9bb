"""What a loss reaches, combined (front/provenance.py builds it): the union of parts, a product's
chaining, a cut, and the moves between a caller's terms and a method's (analysis/keys.py)."""

from __future__ import annotations

from collections.abc import Mapping

from .keys import inward, outward, rebase, root_of
from .model import Reach

CLEAN = Reach(frozenset(), frozenset(), False)
OPAQUE = Reach(frozenset(), frozenset(), True)


def union(*parts: Reach) -> Reach:
    if len(parts) == 1:
        return parts[0]
    return Reach(frozenset().union(*(p.modules for p in parts)), frozenset().union(*(p.cut for p in parts)),
                 any(p.opaque for p in parts), frozenset().union(*(p.chained for p in parts)))


def coupled(*parts: Reach) -> Reach:
    """`union`, where the parts' graphs meet in a product or a function of several of them (not
    a sum): each module of one is chained with each module of another (Reach.chained)."""
    found = union(*parts)
    with_modules = [p.modules for p in parts if p.modules]
    if len(with_modules) < 2:
        return found
    pairs = {(a, b) for i, one in enumerate(with_modules) for other in with_modules[i + 1:] for a in one for b in other}
    return found._replace(chained=found.chained | pairs)


def instantiate(summary: Reach, bound: Mapping[str, Reach], renamed: Mapping[str, str]) -> Reach:
    """A summary whose modules name a function's parameters (front/valued.py), each replaced by
    what the caller's argument reaches, or by the caller's module it is (`renamed`: `D.enc`
    is the caller's `self.D.enc`); a name under no parameter may be anything (opaque)."""
    def of(name: str) -> Reach:
        root = root_of(name)
        if root in renamed:
            return Reach(frozenset({rebase(name, root, renamed[root]) or name}), frozenset(), False)
        return bound.get(root, OPAQUE)
    cut = frozenset().union(*(of(m).modules | of(m).cut for m in summary.cut))
    chained = frozenset((a, b) for x, y in summary.chained for a in of(x).modules for b in of(y).modules)
    return union(Reach(frozenset(), cut, summary.opaque, chained), *(of(m) for m in summary.modules))


def cut(value: Reach) -> Reach:
    return Reach(frozenset(), value.modules | value.cut, False)


def inward_reach(reach: Reach, receiver: str) -> Reach:
    return Reach(frozenset(inward(k, receiver) for k in reach.modules),
                 frozenset(inward(k, receiver) for k in reach.cut), reach.opaque,
                 frozenset((inward(a, receiver), inward(b, receiver)) for a, b in reach.chained))


def outward_reach(reach: Reach, receiver: str) -> Reach:
    return Reach(frozenset(outward(k, receiver) for k in reach.modules),
                 frozenset(outward(k, receiver) for k in reach.cut), reach.opaque,
                 frozenset((outward(a, receiver), outward(b, receiver)) for a, b in reach.chained))
