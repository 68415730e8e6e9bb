"""Applying fixes to files: decode like Python, fix, re-encode the same way, write atomically.
A notebook's fixed program goes back into the cells it came from, in the notebook's own JSON
layout.

The encoding (a PEP 263 cookie, a UTF-8 BOM) and the line endings of the file are kept: fixes
only insert and delete whole lines of the decoded text. The new content is written to a
temporary file in the same folder, given the original's permissions, then renamed over it.
"""

from __future__ import annotations

import difflib
import io
import json
import os
import stat
import tempfile
import time
import tokenize
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Optional

from ..analysis.model import Finding, Settings
from ..front.lines import split_lines
from .files import read_file
from .notebook import Notebook, NotebookError, read_notebook


@dataclass
class FixResult:
    path: str
    before: str = ""
    after: str = ""
    fixed: list[Finding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def changed(self) -> bool:
        return self.after != self.before

    def diff(self) -> str:
        lines = difflib.unified_diff(
            split_lines(self.before, keepends=True), split_lines(self.after, keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}",
        )
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def fix_file(path: str, settings: Settings, write: bool,
             wanted: Optional[Collection[tuple[str, str]]] = None) -> FixResult:
    """Never raises: a failure is reported as an error and the file is left as it was.
    `wanted`: what may be fixed (fix.fix_source)."""
    try:
        return _fix_file(path, settings, write, wanted)
    except Exception as error:  # noqa: BLE001
        return FixResult(path, error=f"ZG901 internal error while fixing {path}: {type(error).__name__}: {error}")


def _fix_file(path: str, settings: Settings, write: bool, wanted: Optional[Collection[tuple[str, str]]]) -> FixResult:
    data, error = read_file(path)
    if data is None:
        return FixResult(path, error=error)
    if path.endswith(".ipynb"):
        result, new_data = fix_notebook(path, data, settings)
    else:
        result, new_data = _fix_python(path, data, settings, wanted)
    if write and result.changed and result.error is None and new_data is not None:
        result.error = _write(path, new_data)
    return result


def _write(path: str, data: bytes) -> Optional[str]:
    """Write `data` to the file `path` names, through a symbolic link to its target (as black
    and ruff do: the link stays a link); None, or why not."""
    target = os.path.realpath(path)
    try:
        if _read_only(target):
            return f"cannot fix {path}: read-only file"
        write_atomically(target, data)
    except OSError as error:
        return f"cannot write {path}: {error.strerror or error}"
    return None


def _read_only(path: str) -> bool:
    """The rename that writes a fix needs only the folder's permission, and access() answers
    yes to root whatever the mode: a file nobody may write (0444) is refused on the mode too."""
    writable = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    return not os.stat(path).st_mode & writable or not os.access(path, os.W_OK)


def _fix_python(path: str, data: bytes, settings: Settings,
                wanted: Optional[Collection[tuple[str, str]]]) -> tuple[FixResult, Optional[bytes]]:
    from .fix import fix_source

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return FixResult(path), None  # reported as ZG900 by the check; never written
    outcome = fix_source(source, settings, wanted=wanted)
    result = FixResult(path, source, outcome.source, outcome.fixed, outcome.warnings)
    return result, outcome.source.encode(encoding) if result.changed else None


# A temporary file is named after its target (`.train.py.zerograd-k3j2.tmp`): a run killed
# between writing it and renaming it leaves it behind, and the next write of the same target
# removes those that are older than that run.
_STARTED = time.time()


def _temporary_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.zerograd-"


def _remove_leftovers(folder: str, path: str) -> None:
    prefix = _temporary_prefix(path)
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if (entry.name.startswith(prefix) and entry.name.endswith(".tmp")
                        and entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < _STARTED):
                    os.unlink(entry.path)
    except OSError:
        pass  # a leftover that cannot be removed harms nothing


def write_atomically(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    mode = stat.S_IMODE(os.stat(path).st_mode)
    _remove_leftovers(folder, path)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=_temporary_prefix(path), suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


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
    old_lines = split_lines(notebook.source)  # as read_notebook split the cells
    new_lines = split_lines(fixed)
    per_cell: dict[int, list[str]] = {}
    originals = {n: "".join(c["source"]) if isinstance(c["source"], list) else c["source"] for n, c in enumerate(cells, 1)}
    kept_text = {n: split_lines(originals[n]) for n in originals}
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
            cell["source"] = joined.splitlines(keepends=True)  # nbformat's own list: str.splitlines
        else:
            cell["source"] = joined


def _line_owners(notebook: Notebook) -> list[Optional[tuple[int, int]]]:
    """For each line of the joined source: (cell number, line index in the cell) or None."""
    total = len(split_lines(notebook.source))
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
