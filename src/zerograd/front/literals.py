"""What a call's literal arguments decide in its callee (issue 45): `adversarial(x, for_G=True)`,
`self.vae(img, return_loss=True)`, `model(x, mode="disc")` run one branch of the callee, and a
summary of the call reads only that one (front/provenance.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import libcst as cst

from .naming import block_of, suites

_UNKNOWN = object()  # a value no literal gives


def literals_of(function: cst.FunctionDef, bound: dict[str, cst.BaseExpression], method: bool) -> dict[str, object]:
    """The callee's parameters a call gives a literal: an argument written as one, else a
    literal default."""
    found: dict[str, object] = {}
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params)[1 if method else 0:]:
        name = param.name.value
        given = bound.get(name, param.default)
        value = _literal(given) if given is not None else _UNKNOWN
        if value is not _UNKNOWN:
            found[name] = value
    return found


def _literal(node: cst.BaseExpression) -> object:
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, (cst.Integer, cst.SimpleString)):
        return node.evaluated_value
    return _UNKNOWN


def decided(test: cst.BaseExpression, literals: dict[str, object]) -> Optional[bool]:
    """What a test is, given the literal parameters (None: not decided)."""
    if isinstance(test, cst.Name):
        value = literals.get(test.value, _literal(test))
        return None if value is _UNKNOWN else bool(value)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = decided(test.expression, literals)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = decided(test.left, literals), decided(test.right, literals)
        if isinstance(test.operator, cst.And):
            return False if False in (left, right) else (True if left and right else None)
        return True if True in (left, right) else (False if left is False and right is False else None)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name):
        left_value = literals.get(test.left.value, _UNKNOWN)
        target = test.comparisons[0]
        right_value = _literal(target.comparator)
        if left_value is _UNKNOWN or right_value is _UNKNOWN:
            return None
        if isinstance(target.operator, (cst.Equal, cst.Is)):
            return left_value == right_value
        if isinstance(target.operator, (cst.NotEqual, cst.IsNot)):
            return left_value != right_value
    return None


def returns_taken(function: cst.FunctionDef, literals: dict[str, object]) -> list[cst.Return]:
    """The `return` statements a call with these literal arguments may reach."""
    found: list[cst.Return] = []
    _walk(block_of(function.body), literals, found)
    return found


def _walk(body: Sequence[cst.CSTNode], literals: dict[str, object], found: list[cst.Return]) -> bool:
    """Collect the returns of `body`; whether every path through it returns."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            returned = next((s for s in statement.body if isinstance(s, cst.Return)), None)
            if returned is not None:
                found.append(returned)
                return True
        elif isinstance(statement, cst.If):
            if _if(statement, literals, found):
                return True
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            for suite in suites(statement):  # a loop or a `try` may return, or not
                _walk(block_of(suite), literals, found)
    return False


def _if(node: cst.If, literals: dict[str, object], found: list[cst.Return]) -> bool:
    taken = decided(node.test, literals)
    orelse = node.orelse
    if taken is not False:
        ends = _walk(block_of(node.body), literals, found)
        if taken is True:
            return ends
    else:
        ends = True
    if isinstance(orelse, cst.If):
        return _if(orelse, literals, found) and ends
    if orelse is not None:
        return _walk(block_of(orelse.body), literals, found) and ends
    return False
