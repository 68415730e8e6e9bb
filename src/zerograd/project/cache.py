"""The on-disk cache (interface.md, "Whole projects and the cache"): what a run found in each
file, keyed by the file's content hash, the zerograd build and the settings, so that a second
run over an unchanged tree parses nothing.

Two kinds of entry, one small file each: a file's findings, with the (path, hash) of the modules
it was linked with (none when it was analysed alone), and a project's plan (which modules are
linked, project.py). Each entry carries a checksum of its body and the key it was written
under: one that cannot be read, fails its checksum or answers another key is a miss, and the
run rewrites it. Writes go to a temporary file in the same folder that os.replace puts in place,
so a reader sees the old entry or the new one, never part of either: with -j N (only the parent
process writes) and with two runs at once.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Optional

from ..analysis.model import Finding, Settings, Span
from ..analysis.rules import FIXABLE
from ..front.outline import Outline
from ..version import __version__

FORMAT = 2  # of the entries; bumped when their layout changes
# An entry is refused when larger than this plus ENTRY_PER_BYTE bytes per byte of what it
# describes (the file, the module's text, the plan's list of paths): a repository can ship a
# cache folder, and an entry replaced by /dev/zero or a huge file must not be read whole.
ENTRY_BASE = 1 << 20
ENTRY_PER_BYTE = 64
# Open without following a symlink (POSIX) and without blocking on a FIFO.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
_warned: set[str] = set()  # cache folders a warning was printed for: one line per run
NAME = ".zerograd_cache"
ENV = "ZEROGRAD_CACHE_DIR"
Group = tuple[tuple[str, str], ...]  # (absolute path, content hash) of the modules linked together


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@cache
def build_id() -> str:
    """The version and the size and mtime of zerograd's own modules: an edited checkout (an
    editable install) invalidates the cache as a new release does."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parts = [__version__, str(FORMAT), sys.version]
    for folder, folders, names in os.walk(package):
        folders.sort()
        for name in sorted(names):
            if name.endswith(".py"):
                info = os.stat(os.path.join(folder, name))
                parts.append(f"{os.path.relpath(os.path.join(folder, name), package)}:{info.st_size}:{info.st_mtime_ns}")
    return content_hash("\0".join(parts).encode())


def cache_folder(flag: Optional[str], configured: Optional[str], root: str) -> str:
    """`--cache-dir`, else `ZEROGRAD_CACHE_DIR` (both from the working directory), else
    `cache-dir` of the config, else `.zerograd_cache`, in the config's folder (or the working
    directory without one)."""
    chosen = flag or os.environ.get(ENV)
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    return os.path.join(root, os.path.expanduser(configured or NAME))


@dataclass
class Entry:
    """A file's findings as a run left them (noqa applied, per-file ignores not yet)."""

    sha: str
    group: Group
    describe: bool
    findings: list[Finding]
    skipped: list[str]  # what the file holds that was not checked (a notebook's bash cells)


class Cache:
    def __init__(self, folder: str, settings: Settings) -> None:
        self.folder = folder
        self.scope = content_hash(f"{build_id()}\0{settings!r}".encode())
        self.writable = True
        self.ready: set[str] = set()  # folders made (and the root marked) by this instance
        self._usable: Optional[bool] = None

    # --- findings ---------------------------------------------------------------------------

    def entry(self, path: str) -> Optional[Entry]:
        """The last entry written for the file at `path` (absolute), whatever its content."""
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0  # standard input or an editor's buffer under a name with no file
        body = self._load("file", path, size)
        if body is None:
            return None
        try:
            group = tuple((str(p), str(h)) for p, h in body["group"])
            skipped = [str(s) for s in body.get("skipped", [])]
            return Entry(str(body["sha"]), group, bool(body["describe"]), [_finding(f) for f in body["findings"]],
                         skipped)
        except (KeyError, TypeError, ValueError, IndexError):
            return None

    def findings(self, path: str, sha: str, group: Group, describe: bool) -> Optional[Entry]:
        """The cached entry of `path` with content `sha`, linked with `group`; None: a miss."""
        entry = self.entry(path)
        if entry is None or entry.sha != sha or entry.group != group:
            return None
        if describe and not entry.describe and any(f.code in FIXABLE for f in entry.findings):
            return None  # written without fix descriptions, which this format prints
        return entry if describe else replace(entry, findings=[replace(f, fix=None) for f in entry.findings])

    def store(self, path: str, sha: str, group: Group, describe: bool, findings: list[Finding],
              skipped: Sequence[str] = ()) -> None:
        if any(f.code == "ZG901" for f in findings):
            return  # an internal error is not a fact about the file
        self._save("file", path, {"sha": sha, "group": [list(m) for m in group], "describe": describe,
                                  "findings": [_row(f) for f in findings], "skipped": list(skipped)})

    # --- plans ------------------------------------------------------------------------------

    def plan(self, paths: list[str], key: str) -> Optional[list[list[str]]]:
        """The groups planned for these files (absolute paths) when their state was `key`."""
        body = self._load("plan", "\0".join(paths), sum(len(p) + 1 for p in paths))
        if body is None or body.get("key") != key:
            return None
        try:
            return [[str(p) for p in group] for group in body["groups"]]
        except TypeError:
            return None

    def store_plan(self, paths: list[str], key: str, groups: list[list[str]]) -> None:
        self._save("plan", "\0".join(paths), {"key": key, "groups": groups})

    # --- outlines ---------------------------------------------------------------------------

    def outline(self, text: str) -> Optional[Outline]:
        """What the plan read of a module with this text, when a run has planned it before."""
        body = self._load("outline", _text_hash(text), len(text))
        try:
            return Outline.from_json(body["outline"]) if body is not None else None
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def store_outline(self, text: str, outline: Outline) -> None:
        self._save("outline", _text_hash(text), {"outline": outline.to_json()})

    # --- storage ----------------------------------------------------------------------------

    def _file(self, kind: str, name: str) -> str:
        return os.path.join(self.folder, kind, content_hash(f"{self.scope}\0{name}".encode()) + ".json")

    def _load(self, kind: str, name: str, described: int) -> Optional[dict[str, Any]]:
        """The entry's body, or None: a miss for anything but a regular file this format wrote,
        no larger than what `described` bytes can need, whose checksum holds."""
        data = self._read(self._file(kind, name), ENTRY_BASE + ENTRY_PER_BYTE * described)
        if data is None:
            return None
        check, _, payload = data.partition(b"\n")
        try:
            if content_hash(payload) != check.decode("ascii"):
                return None
            body = json.loads(payload)
        except (ValueError, RecursionError):
            return None
        if not isinstance(body, dict) or body.get("scope") != self.scope or body.get("name") != name:
            return None  # another build's, settings' or file's entry (or a collision): never trusted
        return body

    def _read(self, entry: str, limit: int) -> Optional[bytes]:
        if not self.usable():
            return None
        try:
            handle = os.open(entry, _OPEN_FLAGS)
        except OSError as error:
            if error.errno not in (errno.ENOENT, errno.ENOTDIR):
                self._warn(f"cannot read a cache entry in {self.folder} ({error.strerror or error}); it is ignored")
            return None
        try:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
                self._warn(f"a cache entry in {self.folder} is not a file this cache wrote (a special file, "
                           "or too large); it is ignored")
                return None
            with os.fdopen(handle, "rb", closefd=False) as stream:
                data = stream.read(limit + 1)
            return data if len(data) <= limit else None
        except OSError:
            return None
        finally:
            os.close(handle)

    def usable(self) -> bool:
        """Whether the folder is the cache's own: not a symlink to somewhere outside the folder
        it sits in (a repository can ship `.zerograd_cache` as a link to any folder)."""
        if self._usable is None:
            parent = os.path.realpath(os.path.dirname(os.path.abspath(self.folder)))
            real = os.path.realpath(self.folder)
            self._usable = os.path.commonpath([parent, real]) == parent if os.path.islink(self.folder) else True
            for kind in ("file", "plan", "outline"):
                inner = os.path.join(self.folder, kind)
                if os.path.islink(inner) and os.path.commonpath([real, os.path.realpath(inner)]) != real:
                    self._usable = False
            if not self._usable:
                self.writable = False
                self._warn(f"the cache folder {self.folder} links outside its folder; running without a cache")
        return self._usable

    def _warn(self, text: str) -> None:
        if self.folder not in _warned:
            _warned.add(self.folder)
            print(f"zerograd: warning: {text}", file=sys.stderr)

    def _save(self, kind: str, name: str, body: dict[str, Any]) -> None:
        if not self.writable or not self.usable():
            return
        payload = json.dumps({"scope": self.scope, "name": name, **body}, separators=(",", ":")).encode()
        target = self._file(kind, name)
        try:
            self._prepare(os.path.dirname(target))
            handle, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(content_hash(payload).encode() + b"\n" + payload)
                os.replace(temporary, target)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as error:
            self.writable = False  # warn once, then run on without a cache
            self._warn(f"cannot write the cache in {self.folder}: {error.strerror or error}")

    def _prepare(self, folder: str) -> None:
        """The entry folder, and in the cache's root a `.gitignore` with `*` (the folder never
        shows up in `git status`) and a CACHEDIR.TAG (backup tools skip it); once per run."""
        if folder in self.ready:
            return
        os.makedirs(folder, exist_ok=True)
        self.ready.add(folder)
        ignore = os.path.join(self.folder, ".gitignore")
        if not os.path.exists(ignore):
            with open(ignore, "w") as out:
                out.write("# Automatically created by zerograd.\n*\n")
            with open(os.path.join(self.folder, "CACHEDIR.TAG"), "w") as out:
                out.write("Signature: 8a477f597d28d172789f06886806bc55\n# zerograd's cache\n")


def _text_hash(text: str) -> str:
    return content_hash(text.encode("utf-8", "surrogatepass"))


def _row(finding: Finding) -> list[Any]:
    span = finding.span
    return [finding.code, finding.message, span.line, span.col, span.end_line, span.end_col, finding.fix,
            list(finding.cell) if finding.cell else None]


def _finding(row: Any) -> Finding:
    code, message, line, col, end_line, end_col, fix, cell = row
    numbers = (line, col, end_line, end_col)
    if not (isinstance(code, str) and isinstance(message, str) and all(type(n) is int for n in numbers)):
        raise ValueError("malformed finding")
    if fix is not None and not isinstance(fix, str):
        raise ValueError("malformed fix")
    located = None if cell is None else (int(cell[0]), int(cell[1]), int(cell[2]))
    return Finding(code, message, Span(line, col, end_line, end_col), fix, located)
