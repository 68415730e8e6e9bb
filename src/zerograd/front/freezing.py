"""Which statements stop a module's parameters from requiring gradients (rules.md section 5:
a backward never reaches a frozen module; provenance.py freezes what these name): a loop over
its parameters that sets `requires_grad`, a comprehension run for that effect, and a function of
ours whose body is such a loop over one of its parameters (`toggle_grad(D, False)`), and a context
manager of ours whose `__enter__` is one over what its constructor kept (`FreezeParameters`)."""

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


def gathered_freezes(node: cst.For, gathered: cst.BaseExpression) -> list[Freeze]:
    """`for p in q_params: p.requires_grad = False` where `q_params` holds the parameters of
    `gathered`'s modules (`list(critic.parameters())`, `itertools.chain(q1.parameters(), ...)`)."""
    nets = [c.func.value for c in _calls(gathered)
            if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("parameters", "named_parameters")]
    settings = [flag(value, True if method else None) for value, method in _settings(node.body, node.target)]
    return [(net, setting) for net in nets for setting in settings]


def _calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    if isinstance(node, cst.Call):
        yield node
    for child in node.children:
        yield from _calls(child)


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


def context_freezer(init: Optional[cst.FunctionDef], enter: Optional[cst.FunctionDef]) -> Optional[tuple[str, bool]]:
    """(the constructor parameter, whether trainable inside) of a context manager of ours whose
    `__enter__` sets `requires_grad` of the parameters of modules its constructor keeps
    (dreamer-pytorch's `with FreezeParameters([critic]):`: `self.modules = modules`, then `for m
    in self.modules: for p in m.parameters(): p.requires_grad = False`)."""
    if init is None or enter is None:
        return None
    kept = {f"self.{t.target.attr.value}": small.value.value for statement in block_of(init.body)
            for small in (statement.body if isinstance(statement, cst.SimpleStatementLine) else ())
            if isinstance(small, cst.Assign) and isinstance(small.value, cst.Name)
            for t in small.targets if isinstance(t.target, cst.Attribute)
            and isinstance(t.target.value, cst.Name) and t.target.value.value == "self"}
    for statement in block_of(enter.body):
        if not isinstance(statement, cst.For):
            continue
        held = _dotted(statement.iter)
        gathered = _gathered(statement.iter)  # `for p in get_parameters(self.modules):`
        loops = [(statement, None)] if _owner(statement.iter, ("parameters",)) is not None or gathered else [
            (inner, statement.target) for inner in block_of(statement.body) if isinstance(inner, cst.For)]
        for loop, element in loops:
            net = gathered or _owner(loop.iter, ("parameters",))
            if net is None or (element is not None and not net.deep_equals(element)):
                continue
            name = _dotted(net) if element is None else held
            for value, method in _settings(loop.body, loop.target):
                literal = flag(value, True if method else None)
                if name in kept and literal is not None and kept[name] in positional(init):
                    return kept[name], literal
    return None


def _gathered(it: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`self.modules` of `get_parameters(self.modules)`: a helper's call over one kept attribute,
    whose results the loop sets `requires_grad` of (their parameters)."""
    if (isinstance(it, cst.Call) and len(it.args) == 1 and not it.args[0].star and it.args[0].keyword is None
            and _dotted(it.args[0].value).startswith("self.")):
        return it.args[0].value
    return None


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


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
