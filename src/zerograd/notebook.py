"""Jupyter notebooks: code cells joined into one program, with a map back to cell and line.

Magics and shell lines (`%...`, `!...`) are blanked so the rest parses; a cell magic (`%%bash`)
blanks its whole cell. Each cell contributes its lines plus one empty separator line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from .model import Finding


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
        lines.extend(_blank_magics(text_of_cell.splitlines()))
        lines.append("")
    return Notebook("\n".join(lines) + "\n", tuple(starts))


def _blank_magics(lines: list[str]) -> list[str]:
    if lines and lines[0].lstrip().startswith("%%"):
        return ["" for _ in lines]
    return [_blank(line) if line.lstrip().startswith(("%", "!")) else line for line in lines]


def _blank(line: str) -> str:
    """An indented magic becomes `pass`, so the block around it keeps a statement."""
    indent = line[: len(line) - len(line.lstrip())]
    return f"{indent}pass" if indent else ""
