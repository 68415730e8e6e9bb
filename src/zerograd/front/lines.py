"""Source text into physical lines, numbered as CPython's tokenizer and LibCST number them.

str.splitlines() also ends a line at a form feed, \\x0b, \\x1c-\\x1e, \\x85, U+2028 and U+2029;
the parsers end one only at \\r\\n, \\r and \\n. Whatever numbers lines of source (noqa, the
engine's chunks, the fixes' edits, a notebook's cells) splits with this module, so that a line
number means the same line to every reader (issue 42).
"""

from __future__ import annotations

import re

LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
# The characters only str.splitlines() ends a line at.
_OTHER_ENDS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def split_lines(source: str, keepends: bool = False) -> list[str]:
    """The physical lines of `source`, as str.splitlines() gives them when none of its other
    line ends is in the text (its C loop is four times the regex's speed: the common case)."""
    if not any(char in source for char in _OTHER_ENDS):
        return source.splitlines(keepends)
    lines: list[str] = LINE.findall(source)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]
