"""A view LibCST can read of a text whose indentation mixes tabs and spaces (issue 42, item 9).

CPython's tokenizer counts a tab in indentation as a move to the next multiple of 8 columns, and
accepts a line when it agrees with its block both that way and counting a tab as 1 column
(otherwise: TabError, "inconsistent use of tabs"). LibCST's tokenizer wants a block's indentation
to begin with its parent's, as written: a body indented `"  \\t  "` under a `for` indented
`"    "` is 10 columns deep, a block deeper than 4 to CPython, and "no matching outer block for
dedent" to LibCST. The view writes each such line's indentation as the spaces CPython counts:
the same blocks, and only leading whitespace changes, so every line keeps its number; a column
of the view is turned back into one of the line as written (`written_span`).
"""

from __future__ import annotations

import io
import tokenize
from typing import Optional

from ..analysis.model import Span

TAB = 8  # CPython's tokenizer: a tab moves to the next multiple of 8 columns

Indents = dict[int, str]  # line (1-based, of the text re-indented) -> its indentation as written


def width(indent: str) -> int:
    """The column CPython's tokenizer reaches after `indent` (spaces and tabs)."""
    column = 0
    for char in indent:
        column = (column // TAB + 1) * TAB if char == "\t" else column + 1
    return column


def written_column(indent: str, column: int) -> int:
    """The column (in characters) of the line as written at `column` of its re-indented line."""
    reached = 0
    for index, char in enumerate(indent):
        if reached >= column:
            return index  # within the indentation (an end column): where that width is reached
        reached = (reached // TAB + 1) * TAB if char == "\t" else reached + 1
    return len(indent) + column - reached


def written_span(span: Span, indents: Indents, offset: int) -> Span:
    """`span`, located in a view that starts after line `offset` of the file, on the lines as
    written."""
    start, end = indents.get(span.line - offset), indents.get(span.end_line - offset)
    return Span(span.line, span.col if start is None else written_column(start, span.col),
                span.end_line, span.end_col if end is None else written_column(end, span.end_col))


def mixes_tabs(text: str) -> bool:
    """Whether some line of `text` is indented with a tab and some with a space (the only
    indentation the view changes anything for)."""
    indents = _indents(text)
    return any("\t" in i for i in indents) and any(" " in i for i in indents)


def first_tab(text: str) -> int:
    """The first line (1-based) of `text` indented with a tab; 1 when none is."""
    return next((n for n, indent in enumerate(_indents(text), start=1) if "\t" in indent), 1)


def _lines(text: str) -> list[str]:
    """The physical lines of `text` as CPython counts them (ended by `\r\n`, `\r` or `\n`
    only, unlike str.splitlines), their line ends kept."""
    return io.StringIO(text, newline="").readlines()


def _indents(text: str) -> list[str]:
    return [line[: len(line) - len(line.lstrip(" \t"))] for line in _lines(text)]


def reindented(text: str) -> Optional[tuple[str, Indents]]:
    """`text` with the indentation of every line holding a tab written as the spaces CPython
    counts, and the lines changed with their indentation as written; None when the text does
    not tokenize. A line that starts inside a string keeps its whitespace: that is the
    string's content, not indentation."""
    inside = _in_strings(text)
    if inside is None:
        return None
    lines = _lines(text)
    indents: Indents = {}
    for number, (line, indent) in enumerate(zip(lines, _indents(text)), start=1):
        if "\t" in indent and number not in inside:
            lines[number - 1] = " " * width(indent) + line[len(indent):]
            indents[number] = indent
    return "".join(lines), indents


def _in_strings(text: str) -> Optional[set[int]]:
    """The lines (1-based) that start inside a token spanning lines: a string, or in Python
    3.12+ a piece of an f-string; None when the text does not tokenize."""
    inside: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            inside.update(range(token.start[0] + 1, token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        return None
    return inside
