"""Jupyter notebooks: code cells joined into one program, with a map back to cell and line.

Magics and shell lines (`%...`, `!...`) are blanked so the rest parses; a cell magic that runs
its body as Python (`%%time`, `%%capture`) blanks its own line, any other (`%%bash`) its whole
cell. Each cell contributes its lines plus one empty separator line.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from dataclasses import dataclass, replace
from typing import Any

from ..analysis.model import Finding


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


# Cell magics that run their body as Python (IPython's own, and memory_profiler's): a loop timed
# with `%%time` is the usual way a notebook's training cell is written. Any other cell magic
# (`%%bash`, `%%html`, `%%writefile`) holds something else, and its cell is left out.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "python", "python3", "debug", "memit"})


def blank_magics(lines: list[str]) -> list[str]:
    if lines and lines[0].lstrip().startswith("%%"):
        words = lines[0].lstrip()[2:].split()
        if words and words[0] in PYTHON_CELL_MAGICS:
            return [""] + blank_magics(lines[1:])  # the body may start with another cell magic
        return ["" for _ in lines]
    out: list[str] = []
    for line in lines:
        # IPython reads a magic or shell line only where a statement starts: `% (a, b)` or
        # `!= b` inside brackets, or a line in a string, is Python.
        stripped = line.lstrip()
        assigned = _ASSIGNED.match(line) if "=" in line else None
        if (stripped.startswith(("%", "!")) or assigned) and _statement_starts(out):
            # `x = !ls` and `t = %timeit -o f()` still bind their name.
            out.append(f"{assigned.group(1)} = None" if assigned else _blank(line))
        else:
            out.append(line)
    return out


_ASSIGNED = re.compile(r"^(\s*[A-Za-z_][\w.]*)\s*=\s*[!%]")  # IPython's `x = !cmd`, `x = %magic`


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
