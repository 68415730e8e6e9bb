"""What a display or a container holds, for provenance.py: the elements of a tuple or list
display, a tuple assigned or returned element by element, a container filled by `append`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Optional, Union

import libcst as cst

from ..analysis.model import Reach
from ..analysis.reach import CLEAN, union

Shape = tuple[Reach, ...]
_COLLECTING = frozenset({"append", "extend", "insert", "add", "appendleft"})


def collects(call: cst.Call, env: Mapping[str, Reach], key: Callable[[cst.BaseExpression], str]) -> bool:
    """`xs.append(v)` on a container the scope built (`xs = []`)."""
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value in _COLLECTING
            and isinstance(func.value, (cst.Name, cst.Attribute)) and key(func.value) in env)


def displayed(node: cst.BaseExpression) -> Optional[list[cst.BaseExpression]]:
    """The elements of a tuple or list display without a starred one, else None."""
    if not isinstance(node, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement) for e in node.elements):
        return None
    return [e.value for e in node.elements]


def shape_of(elements: list[Optional[Shape]]) -> Optional[Shape]:
    """Per position, what every return's tuple reaches there, if all return tuples of one length."""
    if not elements or any(e is None or len(e) != len(elements[0] or ()) for e in elements):
        return None
    return tuple(union(CLEAN, *parts) for parts in zip(*(e for e in elements if e is not None)))


def tuple_pairs(target: cst.BaseExpression, value: cst.BaseExpression) -> Optional[list[tuple[cst.BaseExpression,
                                                                                         cst.BaseExpression]]]:
    """A tuple assigned element by element (no starred element on either side), else None."""
    if not (isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List))):
        return None
    if len(target.elements) != len(value.elements) or any(
            isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
        return None
    return [(t.value, v.value) for t, v in zip(target.elements, value.elements)]


def elements(node: cst.CSTNode) -> list[Union[cst.BaseElement, cst.BaseDictElement]]:
    """The values a display holds (a dict's values: `{"q": q_value}` carries q_value's graph)."""
    if isinstance(node, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
        return list(node.elements)
    return []
