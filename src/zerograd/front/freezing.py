"""Which statements stop a module's parameters from requiring gradients (rules.md section 5:
a backward never reaches a frozen module; provenance.py freezes what these name): a loop over
its parameters that sets `requires_grad`, a comprehension run for that effect, and a function of
ours whose body is such a loop over one of its parameters (`toggle_grad(D, False)`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional, Union

import libcst as cst

from .naming import block_of, positional

# A freeze: the module written, and whether it is trainable after (None: not known).
Freeze = tuple[cst.BaseExpression, Optional[bool]]


def flag(node: Optional[cst.BaseExpression], default: Optional[bool]) -> Optional[bool]:
    """`True` / `False` as written; `default` when absent; None when computed."""
    if node is None:
        return default
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def loop_freezes(node: cst.For, outer: Optional[tuple[cst.BaseExpression, cst.BaseExpression]] = None) -> list[Freeze]:
    """`for p in D.parameters(): p.requires_grad = False` (or `p.requires_grad_(False)`);
    `outer`: the target and the list of an enclosing loop over modules, which the loop's
    `net.parameters()` then stands for."""
    net = _owner(node.iter, ("parameters", "named_parameters"))
    if net is None:
        return []
    if outer is not None:
        if not net.deep_equals(outer[0]):
            return []
        net = outer[1]
    return [(net, flag(value, True if method else None)) for value, method in _settings(node.body, node.target)]


def comprehension_freezes(node: Union[cst.ListComp, cst.GeneratorExp]) -> list[Freeze]:
    """`[p.requires_grad_(False) for p in D.parameters()]`, run for its effect."""
    loop = node.for_in
    if loop.inner_for_in is not None or loop.ifs:
        return []
    body = cst.IndentedBlock([cst.SimpleStatementLine([cst.Expr(node.elt)])])
    return loop_freezes(cst.For(target=loop.target, iter=loop.iter, body=body))


def freezer(function: cst.FunctionDef) -> Optional[tuple[str, Union[str, bool]]]:
    """(the module parameter, the flag parameter or a literal) of a function whose own loop over
    one of its parameters' `.parameters()` sets `requires_grad`."""
    names = set(positional(function))
    for statement in block_of(function.body):
        net = _owner(statement.iter, ("parameters",)) if isinstance(statement, cst.For) else None
        if not isinstance(statement, cst.For) or not isinstance(net, cst.Name) or net.value not in names:
            continue
        for value, method in _settings(statement.body, statement.target):
            if isinstance(value, cst.Name) and value.value in names:
                return net.value, value.value
            literal = flag(value, True if method else None)
            if literal is not None:
                return net.value, literal
    return None


def _owner(it: cst.BaseExpression, methods: tuple[str, ...]) -> Optional[cst.BaseExpression]:
    """`D` of `D.parameters()`."""
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value in methods:
        return it.func.value
    return None


def _settings(body: cst.BaseSuite, target: cst.BaseExpression) -> Iterator[tuple[Optional[cst.BaseExpression], bool]]:
    """What a loop body's own statements set `requires_grad` to: (the value, whether by the
    method `target.requires_grad_(value)`, whose value may be left out)."""
    for statement in block_of(body):
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Attribute)
                    and small.targets[0].target.attr.value == "requires_grad"):
                yield small.value, False
            elif (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
                  and isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value == "requires_grad_"
                  and small.value.func.value.deep_equals(target)):
                yield (small.value.args[0].value if small.value.args else None), True
