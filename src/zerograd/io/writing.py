"""Applying fixes to files: decode like Python, fix, re-encode the same way, write atomically.
A notebook's fixed program goes back into the cells it came from, in the notebook's own JSON
layout.

The encoding (a PEP 263 cookie, a UTF-8 BOM) and the line endings of the file are kept: fixes
only insert and delete whole lines of the decoded text. The new content is written to a
temporary file in the same folder, given the original's permissions, then renamed over it;
through a symbolic link, the folder and the file are the link's target's.
"""

from __future__ import annotations

import difflib
import io
import json
import os
import re
import stat
import sys
import tempfile
import time
import tokenize
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from ..analysis.model import Finding, Settings
from ..front.lines import split_lines
from .notebook import Notebook, NotebookError, read_notebook
from .reading import read_file
from .report import shown


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
            fromfile=f"a/{shown(self.path)}", tofile=f"b/{shown(self.path)}",
        )
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def fix_file(path: str, settings: Settings, write: bool,
             wanted: Optional[Collection[tuple[str, str]]] = None, within: Optional[str] = None) -> FixResult:
    """Never raises: a failure is reported as an error and the file is left as it was.
    `wanted`: what may be fixed (fix.fix_source); `within`: the folder a link found in it must
    lead into to be written through (None: the user named the file)."""
    try:
        return _fix_file(path, settings, write, wanted, within)
    except Exception as error:  # noqa: BLE001
        return FixResult(path, error=f"ZG901 internal error while fixing {path}: {type(error).__name__}: {error}")


def _fix_file(path: str, settings: Settings, write: bool, wanted: Optional[Collection[tuple[str, str]]],
              within: Optional[str]) -> FixResult:
    data, error = read_file(path)
    if data is None:
        return FixResult(path, error=error)
    if path.endswith(".ipynb"):
        result, new_data = fix_notebook(path, data, settings)
    else:
        result, new_data = _fix_python(path, data, settings, wanted)
    if write and result.changed and result.error is None and new_data is not None:
        result.error = _write(path, new_data, within)
    return result


def _write(path: str, data: bytes, within: Optional[str] = None) -> Optional[str]:
    """Write `data` to the file `path` names, through a symbolic link to its target (as black
    and ruff do: the link stays a link); None, or why not. A link found in a folder the run
    walked must lead into that folder: a repository is untrusted, and one shipping a link to a
    file of the user's must not make --fix write there (issue 42)."""
    target = os.path.realpath(path)
    if within is not None and os.path.islink(path):
        inside = os.path.realpath(within)
        if os.path.commonpath([inside, target]) != inside:
            return f"cannot fix {path}: it links outside {within} (to {target})"
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


# A temporary file is named after its target (`.train.py.zerograd-k3j2_x9q.tmp`, mkstemp's eight
# characters) and locked (flock) by its writer from creation to rename. A run killed in between
# leaves it behind; the next `--fix` sweeps those of every file it checks (sweep_leftovers),
# whether or not it writes that file again. Another `zerograd --fix` may be writing one at that
# very moment (a pre-commit hook and an editor's save): the sweep removes only a file it can
# lock itself, so never one a live writer holds, however old; and a writer that finds its new
# file locked or gone (swept between mkstemp and its lock) starts again with another name.
# Where there is no flock (Windows), only files untouched for a minute are swept: a live writer
# renames its file within seconds of its last write.
_SUFFIX = ".tmp"
_RANDOM = re.compile(r"[a-z0-9_]{8}")  # tempfile._RandomNameSequence
_STALE_SECONDS = 60
_WINDOWS = sys.platform == "win32"


def _temporary_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.zerograd-"


def _is_temporary_of(name: str, target: str) -> bool:
    prefix = _temporary_prefix(target)
    return (name.startswith(prefix) and name.endswith(_SUFFIX)
            and _RANDOM.fullmatch(name[len(prefix):-len(_SUFFIX)]) is not None)


def temporary_file(path: str) -> tuple[int, str]:
    """A new temporary file beside `path`, locked by the returned descriptor until it is closed."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=_temporary_prefix(path), suffix=_SUFFIX)
        if _lock(handle) and _still_named(handle, temporary):
            return handle, temporary
        os.close(handle)  # a sweep took it before the lock: its name is gone or about to be


def _lock(handle: int) -> bool:
    """Hold an exclusive lock on the open file; False when another process holds one."""
    if _WINDOWS:
        return True
    import fcntl

    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _still_named(handle: int, name: str) -> bool:
    try:
        return os.path.samestat(os.fstat(handle), os.lstat(name))
    except OSError:
        return False


def sweep_leftovers(paths: Iterable[str]) -> None:
    """Remove the temporary files left beside each of `paths` (and beside its target, when it
    is a link) by a `--fix` that was killed; each folder is read once."""
    names: dict[str, set[str]] = {}
    for path in paths:
        for where in {os.path.abspath(path), os.path.realpath(path)}:
            names.setdefault(os.path.dirname(where), set()).add(os.path.basename(where))
    for folder, targets in names.items():
        try:
            with os.scandir(folder) as entries:
                leftovers = [e.path for e in entries if any(_is_temporary_of(e.name, t) for t in targets)]
        except OSError:
            continue
        for leftover in leftovers:
            _remove_if_abandoned(leftover)


def _remove_if_abandoned(path: str) -> None:
    """Remove a regular file (never through a link) that no live writer holds."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return  # a link (O_NOFOLLOW), gone already, or not ours to read
    try:
        status = os.fstat(handle)
        abandoned = stat.S_ISREG(status.st_mode) and _lock(handle) and _still_named(handle, path)
        if abandoned and _WINDOWS:
            abandoned = time.time() - status.st_mtime > _STALE_SECONDS
        if abandoned:
            os.unlink(path)
    except OSError:
        pass  # a leftover that cannot be removed harms nothing
    finally:
        os.close(handle)


def write_atomically(path: str, data: bytes) -> None:
    """Write `data` to a locked temporary file beside `path`, with `path`'s permissions, and
    rename it over `path`; the lock is held until the rename is done."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    handle, temporary = temporary_file(path)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
            os.chmod(temporary, mode)
            if not _WINDOWS:
                os.replace(temporary, path)
        if _WINDOWS:  # which renames no open file (and has no flock to hold)
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
        notebook = read_notebook(text)  # first: any JSON it rejects (too deep, a huge number) is ZG900
        document = json.loads(text)
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
