"""LibCST's parser without its per-node validation (issue 33).

Every node LibCST makes runs `CSTNode._validate` from its `__post_init__`: checks that a node
built by hand is well formed (parentheses paired, required whitespace present). A node the
parser made from source text is well formed by construction (LibCST's own comment on
`__post_init__` says as much), and the checks cost about 15% of a parse. So while zerograd
parses, `__post_init__` does nothing. The switch is process-wide for the length of a parse; a
node another thread builds by hand meanwhile (the language server's code actions) goes
unchecked, which only defers the error to the re-parse every fix goes through (io/fix.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import libcst as cst
from libcst._nodes.base import CSTNode

_VALIDATE = CSTNode.__post_init__
_LOCK = threading.Lock()
_parsing = 0  # parses under way (threads of the language server may overlap)


def _skip(self: CSTNode) -> None:
    return None


def parse_module(text: str) -> cst.Module:
    """cst.parse_module(text), its nodes unvalidated."""
    with _unvalidated():
        return cst.parse_module(text)


@contextmanager
def _unvalidated() -> Iterator[None]:
    global _parsing
    with _LOCK:
        if not _parsing:
            CSTNode.__post_init__ = _skip  # type: ignore[method-assign]
        _parsing += 1
    try:
        yield
    finally:
        with _LOCK:
            _parsing -= 1
            if not _parsing:
                CSTNode.__post_init__ = _VALIDATE  # type: ignore[method-assign]
