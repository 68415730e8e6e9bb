"""Calls inside an expression or a simple statement, in evaluation order, without LibCST's
generic visitor (which copies and revisits every node and dominated the run time).

Common node types are walked by hand through their fields; anything else falls back to
`node.children`. Lambdas are not entered: their body runs later, if at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Callable, Optional

import libcst as cst

_Fields = Callable[[cst.CSTNode], Iterable[Optional[cst.CSTNode]]]


def _args(node: cst.Call) -> Iterable[cst.CSTNode]:
    yield node.func
    for arg in node.args:
        yield arg.value


def _subscript(node: cst.Subscript) -> Iterable[cst.CSTNode]:
    yield node.value
    for element in node.slice:
        inner = element.slice
        if isinstance(inner, cst.Index):
            yield inner.value
        elif isinstance(inner, cst.Slice):
            yield from (part for part in (inner.lower, inner.upper, inner.step) if part is not None)


def _elements(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    for element in node.elements:  # type: ignore[attr-defined]
        if isinstance(element, (cst.DictElement,)):
            yield element.key
            yield element.value
        else:
            yield element.value


def _comparison(node: cst.Comparison) -> Iterable[cst.CSTNode]:
    yield node.left
    for target in node.comparisons:
        yield target.comparator


def _assign(node: cst.Assign) -> Iterable[cst.CSTNode]:
    yield node.value
    for target in node.targets:
        yield target.target


def _formatted(node: cst.FormattedString) -> Iterable[cst.CSTNode]:
    for part in node.parts:
        if isinstance(part, cst.FormattedStringExpression):
            yield part.expression


FIELDS: dict[type, _Fields] = {
    cst.Call: _args,  # type: ignore[dict-item]
    cst.Attribute: lambda n: (n.value,),  # type: ignore[attr-defined]
    cst.Subscript: _subscript,  # type: ignore[dict-item]
    cst.BinaryOperation: lambda n: (n.left, n.right),  # type: ignore[attr-defined]
    cst.BooleanOperation: lambda n: (n.left, n.right),  # type: ignore[attr-defined]
    cst.UnaryOperation: lambda n: (n.expression,),  # type: ignore[attr-defined]
    cst.Comparison: _comparison,  # type: ignore[dict-item]
    cst.Tuple: _elements,
    cst.List: _elements,
    cst.Set: _elements,
    cst.Dict: _elements,
    cst.IfExp: lambda n: (n.test, n.body, n.orelse),  # type: ignore[attr-defined]
    cst.Await: lambda n: (n.expression,),  # type: ignore[attr-defined]
    cst.NamedExpr: lambda n: (n.value,),  # type: ignore[attr-defined]
    cst.StarredElement: lambda n: (n.value,),  # type: ignore[attr-defined]
    cst.FormattedString: _formatted,  # type: ignore[dict-item]
    cst.Expr: lambda n: (n.value,),  # type: ignore[attr-defined]
    cst.Assign: _assign,  # type: ignore[dict-item]
    cst.AugAssign: lambda n: (n.value, n.target),  # type: ignore[attr-defined]
    cst.AnnAssign: lambda n: (n.value, n.target),  # type: ignore[attr-defined]
    cst.Return: lambda n: (n.value,),  # type: ignore[attr-defined]
    cst.Raise: lambda n: (n.exc, n.cause),  # type: ignore[attr-defined]
    cst.Assert: lambda n: (n.test, n.msg),  # type: ignore[attr-defined]
    cst.Yield: lambda n: (n.value,),  # type: ignore[attr-defined]
    cst.ListComp: lambda n: (n.for_in, n.elt),  # type: ignore[attr-defined]
    cst.SetComp: lambda n: (n.for_in, n.elt),  # type: ignore[attr-defined]
    cst.GeneratorExp: lambda n: (n.for_in, n.elt),  # type: ignore[attr-defined]
    cst.DictComp: lambda n: (n.for_in, n.key, n.value),  # type: ignore[attr-defined]
    cst.CompFor: lambda n: (n.iter, n.target, *(i.test for i in n.ifs), n.inner_for_in),  # type: ignore[attr-defined]
    cst.Del: lambda n: (n.target,),  # type: ignore[attr-defined]
}
LEAVES = frozenset({cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
          cst.Ellipsis, cst.Lambda, cst.Pass, cst.Break, cst.Continue, cst.Import, cst.ImportFrom,
          cst.Global, cst.Nonlocal})  # exact types: `type(x) in LEAVES` is far cheaper than isinstance


def children(node: cst.CSTNode) -> Iterable[Optional[cst.CSTNode]]:
    if type(node) in LEAVES:
        return ()
    fields = FIELDS.get(type(node))
    return fields(node) if fields is not None else node.children


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call under `node` in evaluation order (inner before outer)."""
    found: list[cst.Call] = []
    _collect(node, found, 0)
    return found


def _collect(node: Optional[cst.CSTNode], found: list[cst.Call], depth: int) -> None:
    if node is None or type(node) in LEAVES:
        return
    if depth > 600:
        raise RecursionError("expression nested too deeply")
    fields = FIELDS.get(type(node))
    for child in fields(node) if fields is not None else node.children:
        _collect(child, found, depth + 1)
    if type(node) is cst.Call:
        found.append(node)


def nodes_in(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    """`node` and everything under it (lambdas included: a test may hold one)."""
    stack: list[Optional[cst.CSTNode]] = [node]
    while stack:
        current = stack.pop()
        if current is None:
            continue
        yield current
        if type(current) is cst.Lambda:
            stack.append(current.body)
        else:
            stack.extend(children(current))
