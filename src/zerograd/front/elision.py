"""Cutting what LibCST need not parse out of a module's text (issue 13; relevance.py decides).

A function whose body the analysis does not need keeps its decorators, its name and its
parameters' names (what call resolution and the frameworks' hooks read of it) and `pass`, on its
`def` line, blank lines after it, so every position stays where it was; a body read only for its
facts keeps only the statements holding them, the other lines blank (issue 33).
`benchmarks/realcode.py --compare-elision` checks that findings and analysed scopes are the same
with and without.
"""

from __future__ import annotations

from typing import Optional

from .kept import parts
from .lines import LINE
from .relevance import ODD_ENDS, Def, Lines, Scan

MIN_LINES = 3  # a shorter body is not worth cutting


def elide(source: str, scan: Scan, linked: frozenset[str] = frozenset(), values: frozenset[str] = frozenset()) -> str:
    """`source` with the bodies of the functions the analysis does not need cut out; `scan`:
    source's (scan_text); `linked` names functions of other modules of the project that can
    perform an event; `values` its functions whose return values they trace."""
    if ODD_ENDS.search(source):
        return source
    needed, trimmed = parts(scan, linked, values)
    cut = [d for key, d in enumerate(scan.functions, start=1) if key not in needed]
    if not cut and not trimmed:
        return source
    lines = LINE.findall(source)
    changed = False
    for definition in cut:
        changed |= _cut(lines, definition)
    for key, kept in trimmed.items():  # after the cuts: a cut body may lie in what a trim blanks
        changed |= _trim(lines, scan.functions[key - 1], kept)
    return "".join(lines) if changed else source


def _cut(lines: list[str], definition: Def) -> bool:
    first, last = definition.first, definition.last
    indent = _body_indent(lines, definition)
    if indent is None or last - first + 1 < MIN_LINES:
        return False  # too short to matter
    header = lines[definition.line - 1]
    outer = header[: len(header) - len(header.lstrip(" \t"))]
    # Annotations and defaults, often longer than the body's `pass`, are read by nothing.
    lines[definition.line - 1] = f"{outer}{definition.signature}: pass{_ending(header)}"
    for index in range(definition.line, last):
        _blank(lines, index)
    return True


def _trim(lines: list[str], definition: Def, kept: list[Lines]) -> bool:
    """Blank the lines of the body of `definition` outside the statements `kept`."""
    if _body_indent(lines, definition) is None:
        return False
    keep = {line for a, b in kept for line in range(a, b + 1)}
    changed = False
    for number in range(definition.first, definition.last + 1):
        if number not in keep and lines[number - 1].strip():
            _blank(lines, number - 1)
            changed = True
    return changed


def _body_indent(lines: list[str], definition: Def) -> Optional[str]:
    """The indentation of the body's first line, or None when the body does not start a line
    of its own (`def f(): return x`, a header continued with a backslash)."""
    first = definition.first
    if first <= definition.line or definition.last > len(lines):
        return None
    text = lines[first - 1]
    indent = text[: len(text) - len(text.lstrip(" \t"))]
    return indent if indent and len(indent) == definition.col else None


def _blank(lines: list[str], index: int) -> None:
    """An empty line in the place of lines[index], its line end kept. After a line ended by a
    lone CR, an empty line ended by LF would read as that CR's LF (one CRLF: a line lost, every
    later position off by one; found by fuzzing, `def f():\\` + CR): a space keeps it a line."""
    ending = _ending(lines[index]) or "\n"
    before = lines[index - 1] if index else ""
    lines[index] = " " + ending if before.endswith("\r") and ending.startswith("\n") else ending


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")):]
