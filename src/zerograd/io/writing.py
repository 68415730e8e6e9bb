"""Applying fixes to files: decode like Python, fix, re-encode the same way, write atomically.

The encoding (a PEP 263 cookie, a UTF-8 BOM) and the line endings of the file are kept: fixes
only insert and delete whole lines of the decoded text. The new content is written to a
temporary file in the same folder, given the original's permissions, then renamed over it.
"""

from __future__ import annotations

import difflib
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass, field
from typing import Optional

from ..analysis.model import Finding, Settings


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
            self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}",
        )
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def fix_file(path: str, settings: Settings, write: bool) -> FixResult:
    """Never raises: a failure is reported as an error and the file is left as it was."""
    try:
        return _fix_file(path, settings, write)
    except Exception as error:  # noqa: BLE001
        return FixResult(path, error=f"ZG901 internal error while fixing {path}: {type(error).__name__}: {error}")


def _fix_file(path: str, settings: Settings, write: bool) -> FixResult:
    from .files import read_file

    data, error = read_file(path)
    if data is None:
        return FixResult(path, error=error)
    if path.endswith(".ipynb"):
        from .notebook import fix_notebook

        result, new_data = fix_notebook(path, data, settings)
    else:
        result, new_data = _fix_python(path, data, settings)
    if write and result.changed and result.error is None and new_data is not None:
        try:
            write_atomically(path, new_data)
        except OSError as error:
            result.error = f"cannot write {path}: {error.strerror or error}"
    return result


def _fix_python(path: str, data: bytes, settings: Settings) -> tuple[FixResult, Optional[bytes]]:
    from .fix import fix_source

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return FixResult(path), None  # reported as ZG900 by the check; never written
    outcome = fix_source(source, settings)
    result = FixResult(path, source, outcome.source, outcome.fixed, outcome.warnings)
    return result, outcome.source.encode(encoding) if result.changed else None


def write_atomically(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    mode = stat.S_IMODE(os.stat(path).st_mode)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".zerograd-", suffix=".tmp")
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
