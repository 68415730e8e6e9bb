"""The on-disk cache (interface.md, "Whole projects and the cache"): what a run found in each
file, keyed by the file's content hash, the zerograd build and the settings, so that a second
run over an unchanged tree parses nothing.

Two kinds of entry, one small file each: a file's findings, with the (path, hash) of the modules
it was linked with (none when it was analysed alone), and a project's plan (which modules are
linked, project.py). Each entry carries an HMAC of its body, under a key kept in the user's own
cache folder (key.py), and the key it was written under: one that cannot be read, fails its
HMAC or answers another key is a miss, and the run rewrites it. A repository can ship a cache
folder; an entry nobody on this machine wrote fails the HMAC, and a folder that holds links, is
tracked by git or lies outside the project it came from is not used at all (usable()).
Writes go to a temporary file in the same folder that os.replace puts in place, so a reader
sees the old entry or the new one, never part of either: with -j N (only the parent process
writes) and with two runs at once.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import mmap
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
from . import key as keys

FORMAT = 4  # of the entries; bumped when their layout changes
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
    """A file's identity for the cache: BLAKE2b at 128 bits, 32 characters (a run keeps one for
    every file of its project; entries are signed apart, see Cache._sign)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


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


@dataclass
class Entry:
    """A file's findings as a run left them (noqa applied, per-file ignores not yet)."""

    sha: str
    group: Group
    describe: bool
    findings: list[Finding]
    skipped: list[str]  # what the file holds that was not checked (a notebook's bash cells)


def project_cache(flag: Optional[str], configured: Optional[str], root: str, settings: Settings) -> Cache:
    """The cache a run uses: `--cache-dir`, else `ZEROGRAD_CACHE_DIR` (the user's: any folder,
    from the working directory), else `cache-dir` of the config, else `.zerograd_cache`, in the
    config's folder (or the working directory without one); a folder the project names must
    stay inside it (the config refuses `~`, absolute and `..` names; usable() the rest)."""
    chosen = flag or os.environ.get(ENV)
    if chosen:
        return Cache(os.path.abspath(os.path.expanduser(chosen)), settings)
    return Cache(os.path.join(root, configured or NAME), settings, root)


class Cache:
    def __init__(self, folder: str, settings: Settings, project: Optional[str] = None) -> None:
        """`project`: the root of the project the folder's name came from (its config, or the
        default name), which the folder must not leave; None: the user chose it."""
        self.folder = folder
        self.project = project
        self.scope = content_hash(f"{build_id()}\0{settings!r}".encode())
        self.writable = True
        self.ready: set[str] = set()  # folders made (and the root marked) by this instance
        self._usable: Optional[bool] = None
        self._key = b""

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

    def store(self, path: str, sha: str, group: Group, describe: bool, findings: Sequence[Finding],
              skipped: Sequence[str] = ()) -> None:
        if any(f.code == "ZG901" for f in findings):
            return  # an internal error is not a fact about the file
        self._save("file", path, {"sha": sha, "group": [list(m) for m in group], "describe": describe,
                                  "findings": [_row(f) for f in findings], "skipped": list(skipped)})

    # --- plans ------------------------------------------------------------------------------

    def plan(self, paths: list[str], key: str) -> Optional[list[list[str]]]:
        """The groups planned for these files (absolute paths) when their state was `key`."""
        body = self._load("plan", _paths_name(paths), sum(len(p) + 1 for p in paths))
        if body is None or body.get("key") != key:
            return None
        try:
            return [[str(p) for p in group] for group in body["groups"]]
        except TypeError:
            return None

    def store_plan(self, paths: list[str], key: str, groups: list[list[str]]) -> None:
        self._save("plan", _paths_name(paths), {"key": key, "groups": groups})

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
            if not hmac.compare_digest(self._sign(payload), check):
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
                # Its size and a byte (more shows an entry that grew), never `limit` at once:
                # a read allocates what it asks for, and a plan's limit is tens of MiB.
                data = stream.read(info.st_size + 1)
            return data if len(data) <= limit else None
        except OSError:
            return None
        finally:
            os.close(handle)

    def usable(self) -> bool:
        """Whether the folder can be trusted with the run's writes (reads are authenticated
        anyway): once per folder and process."""
        if self._usable is None:
            key = keys.secret(keys.key_folder())
            why = key if isinstance(key, str) else _distrust(self.folder, self.project)
            self._usable = why is None
            if why is not None:
                self.writable = False
                self._warn(f"{why}; running without a cache")
            else:
                self._key = key if isinstance(key, bytes) else b""
        return self._usable

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).hexdigest().encode()

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
                    out.write(self._sign(payload) + b"\n" + payload)
                os.replace(temporary, target)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as error:
            self.writable = False  # warn once, then run on without a cache
            self._warn(f"cannot write the cache in {self.folder}: {error.strerror or error}")

    def _prepare(self, folder: str) -> None:
        """The entry folder, and in the cache's root a `.gitignore` with `*` (the folder never
        shows up in `git status`) and a CACHEDIR.TAG (backup tools skip it); once per run. The
        markers are only ever created, never rewritten, and never through a link."""
        if folder in self.ready:
            return
        os.makedirs(folder, exist_ok=True)
        self.ready.add(folder)
        for name, text in MARKERS.items():
            try:
                handle = os.open(os.path.join(self.folder, name), _CREATE_FLAGS, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(handle, "w") as out:
                out.write(text)


MARKERS = {".gitignore": "# Automatically created by zerograd.\n*\n",
           "CACHEDIR.TAG": "Signature: 8a477f597d28d172789f06886806bc55\n# zerograd's cache\n"}
KINDS = ("file", "plan", "outline")
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
_trust: dict[tuple[str, Optional[str]], Optional[str]] = {}  # folder, project -> why not trusted


def _distrust(folder: str, project: Optional[str]) -> Optional[str]:
    """Why the run must not write into `folder`, or None. A link in the folder's own entries
    (markers, entry folders) would take a write anywhere; a folder the project named must
    resolve inside the project, not be a link itself and not be tracked by git (a repository
    can commit one)."""
    if (folder, project) not in _trust:
        _trust[folder, project] = _why_not(folder, project)
    return _trust[folder, project]


def _why_not(folder: str, project: Optional[str]) -> Optional[str]:
    real = os.path.realpath(folder)
    if project is not None:
        inside = os.path.realpath(project)
        if os.path.commonpath([inside, real]) != inside or os.path.islink(folder):
            return f"the cache folder {folder} links or lies outside its project"
        if _tracked(folder):
            return f"the cache folder {folder} is tracked by git"
    elif os.path.islink(folder):
        parent = os.path.realpath(os.path.dirname(os.path.abspath(folder)))
        if os.path.commonpath([parent, real]) != parent:
            return f"the cache folder {folder} links outside its folder"
    if any(os.path.islink(os.path.join(folder, name)) for name in (*MARKERS, *KINDS)):
        return f"the cache folder {folder} holds links"
    return None


def _tracked(folder: str) -> bool:
    """Whether git's index names a file in `folder`, read from the index itself: running git
    on a repository someone else made would run what its config says (core.fsmonitor). The
    path is looked for as it is written in index versions 2 and 3 (git's default); a path
    elsewhere holding the same text only makes the cache unused, never trusted."""
    top = os.path.dirname(os.path.abspath(folder))
    for _ in range(64):
        index = os.path.join(top, ".git", "index")
        if os.path.isdir(os.path.join(top, ".git")):
            relative = os.path.relpath(os.path.abspath(folder), top).replace(os.sep, "/")
            return _holds(index, relative.encode("utf-8", "surrogateescape") + b"/")
        if os.path.dirname(top) == top:
            return False
        top = os.path.dirname(top)
    return False


def _holds(path: str, text: bytes) -> bool:
    try:
        handle = os.open(path, _OPEN_FLAGS)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return False
        with os.fdopen(handle, "rb", closefd=False) as stream, mmap.mmap(stream.fileno(), 0,
                                                                         access=mmap.ACCESS_READ) as data:
            return data.find(text) >= 0
    except (OSError, ValueError):  # ValueError: an empty file cannot be mapped
        return False
    finally:
        os.close(handle)


def _paths_name(paths: list[str]) -> str:
    """A plan entry's name: a hash of the files it covers, in order (their joined list, kept in
    the entry and compared, was 2 MB read and made again on every warm run at 20,000 modules)."""
    digest = hashlib.blake2b(digest_size=16)
    for path in paths:
        digest.update(os.fsencode(path) + b"\0")
    return "paths:" + digest.hexdigest()


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
