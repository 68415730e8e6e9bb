"""Receivers and keys: how the analysis names what code writes (`self._opt` -> `self.opt`).

Plain helpers over LibCST expressions and statement blocks; every later stage of the front end
uses them, none of them knows about events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Optional, Union

import libcst as cst

from ..analysis.keys import rebase, root_of  # noqa: F401  (keys are plain strings)
from ..knowledge.frameworks import LOSS_BACKWARD
from .walk import nodes_in

_EMPTY_MODULE = cst.Module(body=[])
# LibCST's node classes are ABCs, and an isinstance() that fails costs one ABC check per class
# (~0.2 us): hot paths test `type(node)` first (no concrete node class has subclasses).
_COMPOUND = frozenset({cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar, cst.Match})
_TARGETED = frozenset({cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.With})
Statement = Union[cst.BaseStatement, cst.BaseSmallStatement]


_BETWEEN_WORDS = re.compile(r"(?<=\w)\s+(?=\w)")  # whitespace a key keeps (as one space)


def text_of(node: cst.CSTNode) -> str:
    """Source text of an expression without whitespace (a stable key), but one space between
    two words (`i == n if a else b`: `n if a` glued as `nifa` read as one name)."""
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute and not node.lpar:
        return f"{text_of(node.value)}.{node.attr.value}"
    code = _EMPTY_MODULE.code_for_node(node)
    if " " in code or "\n" in code:
        code = "".join(_BETWEEN_WORDS.sub("\0", code).split()).replace("\0", " ")
    return code



def written(node: cst.CSTNode) -> str:
    """Source text of an expression on one line, as written (for messages)."""
    return " ".join(_EMPTY_MODULE.code_for_node(node).split())


def receiver_key(node: cst.BaseExpression) -> str:
    """A receiver as the analysis names it: `self._opt` is `self.opt` (a private attribute and its
    property), and an entry picked by a computed index is any entry: `opts[name]` -> `opts[*]`."""
    if type(node) is cst.Attribute and not node.lpar:
        base = receiver_key(node.value)
        attr = node.attr.value
        if base == "self":
            attr = attr.lstrip("_") or attr
        return f"{base}.{attr}"
    if type(node) is cst.Subscript and not node.lpar and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index):
            literal = isinstance(index.value, (cst.Integer, cst.SimpleString))
            return f"{receiver_key(node.value)}[{text_of(index.value) if literal else '*'}]"
    return text_of(node)


def collection_key(node: cst.BaseExpression) -> Optional[str]:
    """What iterating `node` yields: `opts`, `opts.values()`, `enumerate(opts)` -> `opts[*]`."""
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("values", "items") and not node.args:
            return collection_key(func.value)
        if isinstance(func, cst.Name) and func.value in ("enumerate", "list", "tuple", "reversed") and node.args:
            return collection_key(node.args[0].value)
        return None
    if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)):
        return f"{receiver_key(node)}[*]"
    return None


def element_name(target: cst.BaseExpression, iterator: cst.BaseExpression) -> Optional[str]:
    """The loop variable bound to the element: `opt` in `for opt in x`, `for i, opt in enumerate(x)`,
    `for name, opt in x.items()`."""
    if isinstance(target, cst.Name):
        return target.value
    wrapped = isinstance(iterator, cst.Call) and (
        (isinstance(iterator.func, cst.Name) and iterator.func.value == "enumerate")
        or (isinstance(iterator.func, cst.Attribute) and iterator.func.attr.value in ("items", "named_parameters"))
    )
    if wrapped and isinstance(target, cst.Tuple) and len(target.elements) == 2:
        last = target.elements[1].value
        return last.value if isinstance(last, cst.Name) else None
    return None


def loss_of(call: cst.Call, func: cst.Attribute) -> cst.BaseExpression:
    """What `<receiver>.backward(...)` or `.manual_backward(loss)` backpropagates: the receiver
    itself (`loss.backward()`), or the first argument of an accelerator's or Fabric's backward."""
    receiver = (dotted(func.value) or "").rsplit(".", 1)[-1].lower()
    takes_loss = func.attr.value == "manual_backward" or receiver.endswith(LOSS_BACKWARD)
    if takes_loss and call.args and call.args[0].keyword is None and not call.args[0].star:
        return call.args[0].value
    return func.value


def dotted(node: cst.BaseExpression) -> Optional[str]:
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def bound_names(target: cst.BaseExpression) -> Iterable[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from bound_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from bound_names(target.value)


def block_of(suite: cst.BaseSuite) -> Sequence[Statement]:
    return suite.body


def suites(node: cst.CSTNode) -> list[cst.BaseSuite]:
    """The blocks directly nested in a compound statement, in source order."""
    found: list[cst.BaseSuite] = []
    if type(node) not in _COMPOUND:
        return found
    if isinstance(node, (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar)):
        found.append(node.body)
    if isinstance(node, cst.If) and node.orelse is not None:
        if isinstance(node.orelse, cst.If):
            found.extend(suites(node.orelse))
        else:
            found.append(node.orelse.body)
    elif isinstance(node, (cst.For, cst.While)) and node.orelse is not None:
        found.append(node.orelse.body)
    elif isinstance(node, (cst.Try, cst.TryStar)):
        found.extend(h.body for h in node.handlers)
        if node.orelse is not None:
            found.append(node.orelse.body)
        if node.finalbody is not None:
            found.append(node.finalbody.body)
    elif isinstance(node, cst.Match):
        found.extend(case.body for case in node.cases)
    return found


def statements_of(body: Sequence[cst.CSTNode]) -> Iterable[cst.CSTNode]:
    """Small statements and compound statements of a body, nested blocks included, definitions
    excluded (their bodies run elsewhere)."""
    for statement in body:
        if type(statement) is cst.SimpleStatementLine:
            yield from statement.body
        elif type(statement) is not cst.FunctionDef and type(statement) is not cst.ClassDef:
            yield statement
            for suite in suites(statement):
                yield from statements_of(block_of(suite))


def assigned_names(body: Sequence[cst.CSTNode]) -> frozenset[str]:
    """Root names a body assigns (`x = `, `x += `, `self.step += 1` -> `self.step`, loop and `with`
    targets): a condition on them may change from one iteration to the next."""
    names: set[str] = set()
    for statement in statements_of(body):
        for target in targets_of(statement):
            # `self.step += 1` moves `self.step`, not every attribute of `self`.
            for element in flatten(target):
                names.add(text_of(element) if isinstance(element, cst.Attribute) else root_of(text_of(element)))
        for node in walrus(statement):
            names.add(node)
    return frozenset(names)


def targets_of(statement: cst.CSTNode) -> list[cst.BaseExpression]:
    """What a statement assigns: its targets, a loop's, a `with`'s `as` names."""
    if type(statement) not in _TARGETED:
        return []
    if isinstance(statement, cst.Assign):
        return [t.target for t in statement.targets]
    if isinstance(statement, (cst.AugAssign, cst.AnnAssign, cst.For)):
        return [statement.target]
    if isinstance(statement, cst.With):
        return [item.asname.name for item in statement.items if item.asname is not None]
    return []


def flatten(target: cst.BaseExpression) -> Iterable[cst.BaseExpression]:
    if type(target) is cst.Name or type(target) is cst.Attribute:
        yield target
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from flatten(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from flatten(target.value)
    else:
        yield target


def walrus(statement: cst.CSTNode) -> Iterable[str]:
    if type(statement) not in _COMPOUND:
        return
    if isinstance(statement, (cst.If, cst.While)):
        for node in nodes_in(statement.test):
            if type(node) is cst.NamedExpr and isinstance(node.target, cst.Name):
                yield node.target.value


def positional(function: cst.FunctionDef) -> tuple[str, ...]:
    """The names of a function's positional parameters, in order (`self` included)."""
    return tuple(p.name.value for p in (*function.params.posonly_params, *function.params.params))


def bound_arguments(call: cst.Call, positional: Sequence[str]) -> tuple[dict[str, cst.BaseExpression], bool]:
    """What the call hands each named parameter (`positional`: the callee's positional ones, in
    order), up to the first `*args` or `**kwargs`; and whether there is one (what it passes is
    unknown)."""
    bound: dict[str, cst.BaseExpression] = {}
    for position, arg in enumerate(call.args):
        if arg.star:
            return bound, True
        name = arg.keyword.value if arg.keyword else (positional[position] if position < len(positional) else None)
        if name is not None:
            bound[name] = arg.value
    return bound, False


def bound_parameters(function: cst.FunctionDef, args: Sequence[cst.Arg],
                     method: bool) -> Optional[dict[str, cst.BaseExpression]]:
    """The callee's parameter each argument binds, in the call's order (defaults: none); None
    when an argument binds none or one twice."""
    params = list(positional(function))
    if method and params:
        params = params[1:]
    bound: dict[str, cst.BaseExpression] = {}
    for position, arg in enumerate(args):
        name = arg.keyword.value if arg.keyword else (params[position] if position < len(params) else None)
        if name is None or name in bound:
            return None
        bound[name] = arg.value
    return bound


def binds_self(function: cst.FunctionDef, receiver: Optional[str]) -> bool:
    """Whether a call through `receiver` binds the function's first parameter (not a
    `@staticmethod`)."""
    return receiver is not None and not any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
                                            for d in function.decorators)
