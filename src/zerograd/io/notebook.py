"""Jupyter notebooks: code cells joined into one program, with a map back to cell and line.

Magics and shell lines (`%...`, `!...`) are blanked so the rest parses; a cell magic (`%%bash`)
blanks its whole cell. Each cell contributes its lines plus one empty separator line.
"""

from __future__ import annotations

import difflib
import io
import json
import tokenize
from dataclasses import dataclass, replace
from typing import Any, Optional

from ..analysis.model import Finding, Settings
from .writing import FixResult


class NotebookError(ValueError):
    """Not a notebook we can read; reported as ZG900."""


@dataclass(frozen=True)
class Notebook:
    source: str
    starts: tuple[tuple[int, int], ...]  # (first line in source, cell number), 1-based

    def locate(self, finding: Finding) -> Finding:
        cell, first = 0, 1
        for start, number in self.starts:
            if start <= finding.line:
                cell, first = number, start
        return replace(finding, cell=(cell, finding.line - first + 1)) if cell else finding


def read_notebook(text: str) -> Notebook:
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotebookError(f"not a notebook: invalid JSON ({error.msg} at line {error.lineno})") from error
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("not a notebook: no 'cells' list")
    lines: list[str] = []
    starts: list[tuple[int, int]] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text_of_cell = "".join(source) if isinstance(source, list) else str(source)
        starts.append((len(lines) + 1, number))
        lines.extend(blank_magics(text_of_cell.splitlines()))
        lines.append("")
    return Notebook("\n".join(lines) + "\n", tuple(starts))


def blank_magics(lines: list[str]) -> list[str]:
    if lines and lines[0].lstrip().startswith("%%"):
        return ["" for _ in lines]
    out: list[str] = []
    for line in lines:
        # IPython reads a magic or shell line only where a statement starts: `% (a, b)` or
        # `!= b` inside brackets, or a line in a string, is Python.
        magic = line.lstrip().startswith(("%", "!")) and _statement_starts(out)
        out.append(_blank(line) if magic else line)
    return out


def _statement_starts(before: list[str]) -> bool:
    """Whether the next line after `before` starts a statement: no bracket, string or backslash
    continuation is open (tokenize stops with an error at the end of an open one)."""
    if before and before[-1].endswith("\\"):
        return False
    try:
        depth = 0
        for token in tokenize.generate_tokens(io.StringIO("\n".join(before) + "\n").readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
    except (tokenize.TokenError, SyntaxError):
        return False  # an unterminated bracket or string runs on
    return depth <= 0


def _blank(line: str) -> str:
    """An indented magic becomes `pass`, so the block around it keeps a statement."""
    indent = line[: len(line) - len(line.lstrip())]
    return f"{indent}pass" if indent else ""


# --- fixing ------------------------------------------------------------------------------

_STYLES: list[dict[str, Any]] = [
    {"indent": indent, "sort_keys": sort_keys, "ensure_ascii": ascii_only}
    for indent in (1, 2, 4, None)
    for sort_keys in (True, False)
    for ascii_only in (False, True)
]


def _style(document: Any, text: str) -> Optional[tuple[dict[str, Any], str]]:
    """The json.dumps options (and trailing text) that give back `text` byte for byte, if any:
    only then can a fixed notebook be written with every other byte unchanged."""
    for style in _STYLES:
        dumped = json.dumps(document, **style)
        if text.startswith(dumped) and text[len(dumped):] in ("", "\n", "\r\n"):
            return style, text[len(dumped):]
    return None


def fix_notebook(path: str, data: bytes, settings: Settings) -> tuple[FixResult, Optional[bytes]]:
    from .fix import fix_source

    try:
        text = data.decode("utf-8")
        document = json.loads(text)
        notebook = read_notebook(text)
    except (UnicodeDecodeError, json.JSONDecodeError, NotebookError):
        return FixResult(path), None  # reported as ZG900; never written
    outcome = fix_source(notebook.source, settings)
    if outcome.source == notebook.source:
        return FixResult(path, text, text, [], outcome.warnings), None
    style = _style(document, text)
    if style is None:
        warning = "the notebook's JSON layout cannot be reproduced exactly; not fixed"
        return FixResult(path, text, text, [], [*outcome.warnings, warning]), None
    _update_cells(document["cells"], notebook, outcome.source)
    new_text = json.dumps(document, **style[0]) + style[1]
    fixed = [notebook.locate(f) for f in outcome.fixed]
    return FixResult(path, text, new_text, fixed, outcome.warnings), new_text.encode("utf-8")


def _update_cells(cells: list[Any], notebook: Notebook, fixed: str) -> None:
    """Give each cell whose lines changed its new source; untouched cells keep theirs."""
    owners = _line_owners(notebook)
    old_lines = notebook.source.splitlines()
    new_lines = fixed.splitlines()
    per_cell: dict[int, list[str]] = {}
    originals = {n: "".join(c["source"]) if isinstance(c["source"], list) else c["source"] for n, c in enumerate(cells, 1)}
    kept_text = {n: originals[n].splitlines() for n in originals}
    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, a1, a2, b1, b2 in matcher.get_opcodes():
        if tag == "equal":
            for index in range(a1, a2):
                owner = owners[index]
                if owner is not None:
                    per_cell.setdefault(owner[0], []).append(kept_text[owner[0]][owner[1]])
            continue
        for index in range(a1, a2):
            if owners[index] is not None:
                changed.add(owners[index][0])  # type: ignore[index]
        if b2 > b1:
            cell = _owner_near(owners, a1)
            changed.add(cell)
            per_cell.setdefault(cell, []).extend(new_lines[b1:b2])
    for number in changed:
        cell = cells[number - 1]
        lines = per_cell.get(number, [])
        ending = originals[number].endswith("\n")
        joined = "\n".join(lines) + ("\n" if ending else "")
        if isinstance(cell["source"], list):
            cell["source"] = joined.splitlines(keepends=True)
        else:
            cell["source"] = joined


def _line_owners(notebook: Notebook) -> list[Optional[tuple[int, int]]]:
    """For each line of the joined source: (cell number, line index in the cell) or None."""
    total = len(notebook.source.splitlines())
    owners: list[Optional[tuple[int, int]]] = [None] * total
    starts = list(notebook.starts) + [(total + 1, 0)]  # every cell is followed by a separator
    for (start, number), (next_start, _) in zip(starts, starts[1:]):
        for index in range(start - 1, min(next_start - 2, total)):
            owners[index] = (number, index - (start - 1))
    return owners


def _owner_near(owners: list[Optional[tuple[int, int]]], position: int) -> int:
    """The cell an inserted line at `position` belongs to: the line before it, else after it."""
    before = owners[position - 1] if 0 < position <= len(owners) else None
    if before is not None:
        return before[0]
    for owner in owners[position:]:
        if owner is not None:
            return owner[0]
    return next(o for o in reversed(owners) if o is not None)[0]
