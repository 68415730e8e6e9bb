"""Jupyter notebooks: code cells joined into one program, with a map back to cell and line.

Magics and shell lines (`%...`, `!...`) are blanked so the rest parses; a cell magic that runs
its body as Python (`%%time`, `%%capture`) blanks its own line, any other (`%%bash`) its whole
cell. Each cell contributes its lines plus one empty separator line.
"""

from __future__ import annotations

import bisect
import io
import json
import json.scanner
import re
import tokenize
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Callable, Optional

from ..analysis.model import Finding
from ..front.lines import split_lines

_LINE = re.compile(r"\bline (\d+)")
_AFTER_ALL = 1 << 62  # sorts after any cell number: bisect to the last cell starting at or before a line


class NotebookError(ValueError):
    """Not a notebook we can read; reported as ZG900."""


@dataclass(frozen=True)
class Notebook:
    source: str
    starts: tuple[tuple[int, int], ...]  # (first line in source, cell number), 1-based
    text: str = ""  # the .ipynb file's own text
    skipped: tuple[tuple[int, str], ...] = ()  # (cell number, magic) of cells left out

    def locate(self, finding: Finding) -> Finding:
        where = self._cell_of(finding.line)
        if where is None:
            return finding
        cell, line = where
        in_file = self.file_lines.get(cell) or [1]
        # A fix's description names lines of the joined program: named in the cell's terms, as
        # every output names the finding (issue 48).
        fix = _LINE.sub(self._in_cell, finding.fix) if finding.fix else finding.fix
        return replace(finding, cell=(cell, line, in_file[min(line, len(in_file)) - 1]), fix=fix)

    def _cell_of(self, line: int) -> Optional[tuple[int, int]]:
        """(cell number, line in the cell) of a line of the joined program."""
        # A bisection, not a scan: a notebook with a finding in each of 10,000 cells is common
        # enough in generated tests and took seconds that way. `starts` is in order of lines.
        index = bisect.bisect_right(self.starts, (line, _AFTER_ALL)) - 1
        if index < 0:
            return None
        first, cell = self.starts[index]
        return cell, line - first + 1

    def _in_cell(self, match: re.Match[str]) -> str:
        where = self._cell_of(int(match.group(1)))
        return match.group() if where is None else f"cell {where[0]}, line {where[1]}"

    @cached_property
    def file_lines(self) -> dict[int, list[int]]:
        """Per cell number, the line of the .ipynb file that holds each line of the cell: where
        a GitHub annotation or a SARIF region can point (they know the file, not its cells).
        Computed only for a notebook with findings."""
        return source_file_lines(self.text)


def read_notebook(text: str) -> Notebook:
    """The notebook's program; NotebookError for anything else, whatever the JSON holds (one
    bad notebook is that file's ZG900, never the run's traceback)."""
    cells = _cells(_load(text))
    lines: list[str] = []
    starts: list[tuple[int, int]] = []
    skipped: list[tuple[int, str]] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        text_of_cell = _source(cell, number)
        starts.append((len(lines) + 1, number))
        cell_lines = split_lines(text_of_cell)
        magic = foreign_cell_magic(cell_lines)
        if magic is not None:
            skipped.append((number, magic))
        lines.extend(blank_magics(cell_lines))
        lines.append("")
    return Notebook("\n".join(lines) + "\n", tuple(starts), text, tuple(skipped))


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise NotebookError(f"not a notebook: invalid JSON ({error.msg} at line {error.lineno})") from error
    except RecursionError as error:  # arrays or objects nested deeper than the stack
        raise NotebookError("not a notebook: JSON nested too deeply") from error
    except ValueError as error:  # a number longer than int() reads (sys.get_int_max_str_digits)
        reason = str(error).split(";")[0]
        raise NotebookError(f"not a notebook: unreadable JSON ({reason})") from error


def _cells(document: Any) -> list[Any]:
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("not a notebook: no 'cells' list")
    return cells


def _source(cell: dict[str, Any], number: int) -> str:
    """A cell's text: nbformat's string or list of strings (a missing source is empty)."""
    source = cell.get("source", "")
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(piece, str) for piece in source):
        return "".join(source)
    raise NotebookError(f"not a notebook: cell {number}'s source is not text")


class _At(str):
    """A JSON string value that knows where it starts in the text."""

    offset = 0


def _positioned_loads(text: str) -> Any:
    """`json.loads`, with each string value an `_At`. The standard library's parsers keep no
    positions, but its pure-Python scanner takes the string parser from its context."""
    decoder = json.JSONDecoder()
    scan: Callable[[str, int, bool], tuple[str, int]] = getattr(decoder, "parse_string")  # noqa: B009

    def parse_string(s: str, end: int, strict: bool) -> tuple[str, int]:
        value, after = scan(s, end, strict)
        at = _At(value)
        at.offset = end
        return at, after

    decoder.parse_string = parse_string  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder.decode(text)


def source_file_lines(text: str) -> dict[int, list[int]]:
    """For each cell (numbered from 1), the file line of each of its
    lines: the line of the source string where that line begins."""
    try:
        cells = _positioned_loads(text).get("cells")
    except (ValueError, AttributeError, RecursionError):  # read_notebook reported it
        return {}
    newlines = [i for i, char in enumerate(text) if char == "\n"]
    out: dict[int, list[int]] = {}
    for number, cell in enumerate(cells if isinstance(cells, list) else [], start=1):
        source = cell.get("source") if isinstance(cell, dict) else None
        pieces = source if isinstance(source, list) else [source]
        lines: list[int] = []
        begins = True  # the next character starts a line of the cell
        for piece in pieces:
            if not isinstance(piece, _At):
                continue
            line = bisect.bisect_left(newlines, piece.offset) + 1
            parts = _LINE_END.split(piece)  # as read_notebook splits the cell (front/lines.py)
            for index, part in enumerate(parts):
                ended = index < len(parts) - 1
                if begins and (part or ended):
                    lines.append(line)
                begins = ended or begins and not part
        out[number] = lines
    return out


_LINE_END = re.compile(r"\r\n|\r|\n")


# Cell magics that run their body as Python (IPython's own, and memory_profiler's): a loop timed
# with `%%time` is the usual way a notebook's training cell is written. Any other cell magic
# (`%%bash`, `%%html`, `%%writefile`) holds something else, and its cell is left out.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "python", "python3", "debug", "memit"})


def foreign_cell_magic(lines: list[str]) -> Optional[str]:
    """The cell magic (`%%bash`) that leaves this cell out, if one does."""
    for line in lines:
        words = line.lstrip()[2:].split() if line.lstrip().startswith("%%") else None
        if words is None:
            return None
        if not words or words[0] not in PYTHON_CELL_MAGICS:
            return f"%%{words[0] if words else ''}"
    return None


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
