"""One object per distinct piece of whitespace, and one string per name, in a long file's CST
(issues 32, 43).

LibCST's parser makes a new node for every space, newline and blank line: in generated training
code they are over half of the nodes and 40% of the tree's memory, and a 200k-line file holds
about 70 MB of them. They are immutable and carry no identity the analysis or its positions use
(sites are calls, loops, statements and definitions; a position is computed per statement, and
a shared node only has its position recorded more than once), so equal ones can be one object.
The walk costs about 7% of the parse, which is why only long files take it (engine.py).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Optional

import libcst as cst

_FIELDS: dict[type, tuple[str, ...]] = {}
Shared = dict[tuple[Any, ...], cst.CSTNode]


def share_whitespace(module: cst.Module, shared: Optional[Shared] = None) -> None:
    """Replace, in place, every plain whitespace node of `module` by the first equal one (of
    `shared`: the nodes met in the other statements of the file)."""
    shared = {} if shared is None else shared
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if type(node) is cst.Name:
            # The parser makes a string per name written (56 bytes for `optimizer`): one each,
            # as CPython's own compiler keeps them, saves a KB per training function.
            object.__setattr__(node, "value", sys.intern(node.value))
        names = _FIELDS.get(type(node))
        if names is None:
            names = _FIELDS[type(node)] = tuple(f.name for f in dataclasses.fields(node))
        for name in names:
            value = getattr(node, name)
            if isinstance(value, cst.CSTNode):
                same = _shared(value, shared)
                if same is None:
                    stack.append(value)
                elif same is not value:
                    object.__setattr__(node, name, same)  # frozen, but equal and immutable
            elif isinstance(value, (tuple, list)) and value and isinstance(value[0], cst.CSTNode):
                items = [_shared(item, shared) for item in value]
                stack.extend(item for item, same in zip(value, items) if same is None)
                if any(same is not None and same is not item for item, same in zip(value, items)):
                    merged = [item if same is None else same for item, same in zip(value, items)]
                    object.__setattr__(node, name, type(value)(merged))


def _shared(node: cst.CSTNode, shared: Shared) -> Optional[cst.CSTNode]:
    """The shared node equal to `node`, or None when it is no plain whitespace."""
    kind = type(node)
    if kind is cst.SimpleWhitespace or kind is cst.Newline:
        key: tuple[Any, ...] = (kind, node.value)  # type: ignore[attr-defined]
    elif kind is cst.TrailingWhitespace and node.comment is None:  # type: ignore[attr-defined]
        key = (kind, node.whitespace.value, node.newline.value)  # type: ignore[attr-defined]
    elif kind is cst.EmptyLine and node.comment is None:  # type: ignore[attr-defined]
        key = (kind, node.indent, node.whitespace.value, node.newline.value)  # type: ignore[attr-defined]
    else:
        return None
    found = shared.get(key)
    if found is None:
        found = shared[key] = node
        for name in ("whitespace", "newline"):  # its own parts shared too
            part = getattr(node, name, None)
            if part is not None:
                object.__setattr__(node, name, _shared(part, shared))
    return found
