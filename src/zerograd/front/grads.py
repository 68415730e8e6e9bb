""".grad written by hand (rules.md v2 section 4): which writes clear, which put a new gradient
there, and which only scale it."""

from __future__ import annotations

from typing import NamedTuple, Optional

import libcst as cst

from .naming import text_of
from .walk import nodes_in

_ZEROS = frozenset({"zeros_like", "zeros", "new_zeros"})
_ADDS = (cst.AddAssign, cst.SubtractAssign)


class Write(NamedTuple):
    holder: object  # `p` as a str for a bare name, else the expression
    clears: bool  # the old gradient is gone (set to None, zeroed or overwritten)
    adds: bool  # a new gradient is there afterwards
    zeroes: bool  # zeroed in place rather than set to None


def grad_written(node: cst.CSTNode) -> Optional[Write]:
    if type(node) is cst.Assign and len(node.targets) == 1:
        target = node.targets[0].target
        if not (isinstance(target, cst.Attribute) and target.attr.value == "grad"):
            return None
        if _reads_grad(node.value):
            return None  # `p.grad = p.grad / n`: scaling
        value = node.value
        none = isinstance(value, cst.Name) and value.value == "None"
        zeros = isinstance(value, cst.Call) and text_of(value.func).rsplit(".", 1)[-1] in _ZEROS
        return Write(holder(target.value), True, not (none or zeros), zeros)
    if type(node) is cst.AugAssign and isinstance(node.operator, _ADDS):
        target = node.target
        if isinstance(target, cst.Attribute) and target.attr.value == "grad" and not _reads_grad(node.value):
            # `p.grad += g` adds into .grad as backward() does: a gradient, no clear.
            return Write(holder(target.value), False, True, False)
        return None
    if type(node) is cst.Expr and type(node.value) is cst.Call and type(node.value.func) is cst.Attribute:
        func, args = node.value.func, node.value.args
        grad = func.value
        if isinstance(grad, cst.Attribute) and grad.attr.value == "data":
            grad = grad.value
        if not (isinstance(grad, cst.Attribute) and grad.attr.value == "grad"):
            return None
        if func.attr.value == "zero_":
            return Write(holder(grad.value), True, False, True)
        if func.attr.value == "fill_" and args:
            zero = isinstance(args[0].value, (cst.Integer, cst.Float)) and float(args[0].value.value) == 0
            return Write(holder(grad.value), True, not zero, zero)
        if func.attr.value == "copy_":
            return Write(holder(grad.value), True, True, False)
    return None


def _reads_grad(value: cst.BaseExpression) -> bool:
    """Whether `value` reads a gradient already there (`p.grad / n`, a gradient kept elsewhere and
    moved back, `p.colo_attr.grad_payload`), not `torch.autograd.grad(...)`, whose result is a new
    gradient (GradNorm's `w.grad = torch.autograd.grad(loss, w)[0]`)."""
    return any(isinstance(n, cst.Attribute) and "grad" in n.attr.value and n.attr.value != "autograd"
               and not text_of(n.value).endswith("autograd") for n in nodes_in(value))


def holder(node: cst.BaseExpression) -> object:
    return node.value if isinstance(node, cst.Name) else node
