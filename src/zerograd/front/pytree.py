"""Reading CPython's `ast` trees quickly, for the relevance scan (relevance.py): a node's children
without its leaves, a statement's first line, dotted names, a function's bare header."""

from __future__ import annotations

import ast
from typing import Optional, Union

# Nodes with nothing to record under them (a Call reads its own name and arguments).
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)
# By exact type, as the walk tests them (an isinstance() per node and base costs more).
LEAF_TYPES = frozenset(t for base in _LEAVES for t in (base, *base.__subclasses__()))
# Fields that hold no node worth walking (names, flags, expression contexts, operators).
_NO_NODES = frozenset({"ctx", "op", "name", "id", "attr", "arg", "type_comment", "kind", "level", "module",
                       "conversion", "simple", "is_async"})
_FIELDS: dict[type, tuple[str, ...]] = {}  # node type -> its fields that may hold one


def children(node: ast.AST) -> list[ast.AST]:
    """ast.iter_child_nodes without the leaves, by a table of each type's fields (a third of a
    scan's time went to iter_child_nodes and iter_fields)."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(f for f in kind._fields if f not in _NO_NODES)
    found: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if type(value) is list:
            found += [v for v in value if isinstance(v, ast.AST) and type(v) not in LEAF_TYPES]
        elif isinstance(value, ast.AST) and type(value) not in LEAF_TYPES:
            found.append(value)
    return found


def signature(node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> str:
    """The function's name and parameters as a header with nothing else (elision.py)."""
    arguments = node.args
    names = [a.arg for a in arguments.posonlyargs]
    if names:
        names.append("/")
    names += [a.arg for a in arguments.args]
    if arguments.vararg is not None:
        names.append("*" + arguments.vararg.arg)
    elif arguments.kwonlyargs:
        names.append("*")
    names += [a.arg for a in arguments.kwonlyargs]
    if arguments.kwarg is not None:
        names.append("**" + arguments.kwarg.arg)
    prefix = "async def " if isinstance(node, ast.AsyncFunctionDef) else "def "
    return f"{prefix}{node.name}({', '.join(names)})"


def dotted(node: ast.expr) -> Optional[tuple[str, ...]]:
    """`a.b.c` -> ("a", "b", "c"); None for anything but a dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return (node.id, *reversed(parts)) if isinstance(node, ast.Name) else None


def qualify(dotted: Optional[tuple[str, ...]], aliases: dict[str, str]) -> Optional[str]:
    """facts.ModuleInfo.qualify of a dotted name."""
    if dotted is None:
        return None
    return ".".join([aliases.get(dotted[0], dotted[0]), *dotted[1:]])


def first_line(statement: ast.stmt) -> int:
    """The first line of a statement as CPython counts it: its first decorator's."""
    decorators: list[ast.expr] = getattr(statement, "decorator_list", [])
    return min([statement.lineno] + [d.lineno for d in decorators])
