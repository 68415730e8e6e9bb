"""LibCST's parser without its per-node validation (issue 33).

Every node LibCST makes runs `CSTNode._validate` from its `__post_init__`: checks that a node
built by hand is well formed (parentheses paired, required whitespace present). A node the
parser made from source text is well formed by construction (LibCST's own comment on
`__post_init__` says as much), and the checks cost about 15% of a parse. So while zerograd
parses, `__post_init__` does nothing. The switch is process-wide for the length of a parse; a
node another thread builds by hand meanwhile (the language server's code actions) goes
unchecked, which only defers the error to the re-parse every fix goes through (io/fix.py).

A process that lints the same files again and again (the language server) remembers the trees
(Trees): after an edit, only the top-level statements it changed are parsed again.

A statement whose indentation mixes tabs and spaces in a way LibCST's tokenizer rejects and
CPython's accepts is parsed re-indented (indentation.py, issue 42): parse_statement.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

import libcst as cst
from libcst._nodes.base import CSTNode

from .indentation import Indents, first_tab, mixes_tabs, reindented, written_column
from .sites import Located

MIXED = "its indentation mixes tabs and spaces"
TABS = "indentation mixes tabs and spaces in a way LibCST cannot read"

_VALIDATE = CSTNode.__post_init__
_LOCK = threading.Lock()
_parsing = 0  # parses under way (threads of the language server may overlap)


class Trees:
    """The trees of the last texts parsed, by text, each with the positions located in it since
    (sites.Chunk.known). A tree is immutable, so it serves wherever its text appears again, at
    any line; the engine parses each top-level statement on its own while trees are kept."""

    def __init__(self, lines: int) -> None:
        self.lines = lines  # lines of text kept (a tree weighs ~1.5 KB per line), the least recently parsed dropped first
        self._known: dict[str, tuple[cst.Module, dict[int, Located]]] = {}
        self._held = 0
        self._lock = threading.Lock()  # the server lints in worker threads

    def parse(self, text: str) -> tuple[cst.Module, dict[int, Located]]:
        with self._lock:
            found = self._known.pop(text, None)
            if found is not None:
                self._held -= text.count("\n")
        if found is None:
            found = (parse_module(text), {})
        with self._lock:
            self._known[text] = found
            self._held += text.count("\n")
            while self._held > self.lines and len(self._known) > 1:
                oldest = next(iter(self._known))
                self._held -= oldest.count("\n")
                del self._known[oldest]
        return found


_KEPT: Optional[Trees] = None


def keep_trees(lines: int) -> None:
    """Remember the trees of the top-level statements parsed last, up to `lines` lines of them
    (0: none, the default)."""
    global _KEPT
    _KEPT = Trees(lines) if lines else None


def kept_trees() -> Optional[Trees]:
    return _KEPT


class Unreadable(Exception):
    """A statement CPython reads and LibCST cannot, even re-indented: why, and where (the line
    in the statement's text, the column in characters of that line as written)."""

    def __init__(self, reason: str, line: int, col: int = 0) -> None:
        super().__init__(reason)
        self.reason, self.line, self.col = reason, line, col


Parsed = tuple[cst.Module, Optional[dict[int, Located]], Optional[Indents]]


def parse_statement(text: str, trees: Optional[Trees] = None) -> Parsed:
    """The tree of `text`, a top-level statement CPython has parsed (the engine's scan), with
    the positions known in it (when `trees` keeps them) and, when LibCST read it re-indented,
    the indentation as written of the lines it changed. Raises cst.ParserSyntaxError as
    parse_module does, or Unreadable when the re-indented text fails too."""
    try:
        return (*_parse(text, trees), None)
    except cst.ParserSyntaxError:
        # Only a mix of tabs and spaces can be the tokenizer's indentation error: any other
        # error stays LibCST's own.
        if not mixes_tabs(text):
            raise
    view = reindented(text)
    if view is None:
        raise Unreadable(TABS, first_tab(text)) from None
    try:
        return (*_parse(view[0], trees), view[1])
    except cst.ParserSyntaxError as error:
        # With only spaces left the indentation is not what fails: LibCST's reason is the one
        # to fix (a statement indented with tabs whose continuation lines align with spaces
        # "mixes" them too, and LibCST may have failed on it for this reason from the start).
        indent = view[1].get(error.raw_line)
        col = error.raw_column if indent is None else written_column(indent, error.raw_column)
        raise Unreadable(f"{error.message} (read re-indented, as {MIXED})", error.raw_line, col) from None


def _parse(text: str, trees: Optional[Trees]) -> tuple[cst.Module, Optional[dict[int, Located]]]:
    return trees.parse(text) if trees is not None else (parse_module(text), None)


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
