"""Attributes that hold no autograd graph (issue 45): the constants and hyperparameters an
object keeps (`self.gamma = 0.99`, `self.alpha = alpha` with `alpha=2.5` or `alpha: float`,
`self.noise = torch.randn(8, 2)`). A loss that reads one reaches nothing through it, so it stays
resolved; provenance.py reads an attribute as such only when every assignment of it in the
class (its bases in the module included) is plain and the module assigns no attribute of that
name on another object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import libcst as cst

from ..knowledge.values import NEW_TENSOR_METHODS, RECEIVER_ONLY, makes_leaf
from .walk import nodes_in

_SCALARS = frozenset({"int", "float", "bool", "str"})
# In-place initialisers of a new tensor (`torch.empty(3).normal_()`) and methods whose result is
# no tensor with a graph.
_PLAIN_METHODS = frozenset({"normal_", "uniform_", "fill_", "zero_", "item", "tolist", "detach", "numpy"})


def plain_parameters(function: cst.FunctionDef) -> frozenset[str]:
    """Parameters declared scalars: a literal default other than None (`alpha=2.5`,
    `name="disc"`) or a scalar annotation (`alpha: float`)."""
    found = set()
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        annotation = param.annotation.annotation if param.annotation is not None else None
        default = param.default  # `encoder=None` may be handed a module or a tensor: not a scalar
        if (default is not None and _literal(default) and not (isinstance(default, cst.Name) and default.value == "None")) or (
                isinstance(annotation, cst.Name) and annotation.value in _SCALARS):
            found.add(param.name.value)
    return frozenset(found)


# Methods only a module has: a parameter they are called on is a module handed in, not data.
_MODULE_METHODS = frozenset({"parameters", "named_parameters", "modules", "children", "forward", "train", "eval",
                             "zero_grad", "requires_grad_", "state_dict", "load_state_dict", "apply"})


def data_parameters(function: cst.FunctionDef) -> frozenset[str]:
    """Parameters the function never calls (`model(x)`, `nets[i](x)`) nor uses as a module
    (`model.parameters()`): what a training step is handed to read (`batch`, `replay_buffer`)."""
    params = function.params
    names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    modules = set()
    for node in nodes_in(function.body):
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MODULE_METHODS:
            func = func.value  # `model.parameters()`, `critic.q1.train()`
            while isinstance(func, cst.Attribute):
                func = func.value
        while isinstance(func, cst.Subscript):  # `nets[i](x)`
            func = func.value
        if isinstance(func, cst.Name):
            modules.add(func.value)
    return frozenset(names - modules - {"self", "cls"})


def plain(value: cst.BaseExpression, names: frozenset[str],
          qualify: Callable[[cst.BaseExpression], Optional[str]]) -> bool:
    """Whether `value` holds no graph whatever runs before it: literals and arithmetic of them,
    `names` (scalar parameters), new tensors, numbers of the scalar modules, `.item()`."""
    if _literal(value):
        return True
    if isinstance(value, cst.Name):
        return value.value in names
    if isinstance(value, (cst.UnaryOperation, cst.BinaryOperation, cst.BooleanOperation, cst.Comparison, cst.Tuple)):
        parts = [c for c in value.children if isinstance(c, cst.BaseExpression)]
        parts += [e.value for e in value.elements] if isinstance(value, cst.Tuple) else []
        parts += [c.comparator for c in value.comparisons] if isinstance(value, cst.Comparison) else []
        return bool(parts) and all(plain(p, names, qualify) for p in parts)
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("item", "tolist", "detach", "numpy"):
            return True  # `self.log_alpha.detach()`, `loss.item()`
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
            method = func.attr.value  # `torch.zeros(3).to(device)`, `x.detach().exp()`
            if not plain(func.value, names, qualify) or method == "requires_grad_":
                return False  # `requires_grad_()` makes a leaf that gathers gradients
            # A reshape, a move or a fill keeps the receiver's graph; any other method of a
            # tensor with none, handed none, makes none (`self.log_alpha.detach().exp()`).
            return method in RECEIVER_ONLY | NEW_TENSOR_METHODS | _PLAIN_METHODS or _plain_arguments(value, names, qualify)
        qualified = qualify(func) or ""
        if qualified.startswith("torch.") and not qualified.startswith("torch.nn.") and _plain_arguments(
                value, names, qualify):
            return not _requires_grad(value)  # `torch.clamp(x.detach().exp(), 0.0, 1.0)`
        return makes_leaf(qualified) and qualified != "copy.deepcopy" and not _requires_grad(value)
    return False


def _plain_arguments(call: cst.Call, names: frozenset[str],
                     qualify: Callable[[cst.BaseExpression], Optional[str]]) -> bool:
    return all(plain(a.value, names, qualify) for a in call.args)


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    return isinstance(node, cst.UnaryOperation) and isinstance(node.expression, (cst.Integer, cst.Float))


def _requires_grad(call: cst.Call) -> bool:
    """`torch.zeros(3, requires_grad=True)`: a leaf that gathers gradients (a tensor set if an
    optimizer holds it), not a constant."""
    return any(a.keyword is not None and a.keyword.value == "requires_grad" for a in call.args)
