"""A project read, hashed and planned once per process, answering for any of its files (issue 43).

flake8 hands the plugin one file at a time. Checked as `zerograd FILE` checks it, each file read,
hashed and planned its whole project again: 331 files of a project read 331 times each, a route
quadratic in the project's size that the cache could not help (reading the files to validate it
was the cost). A process now takes one snapshot of a file's project, the first time it is asked
about one of its files: every module read and hashed, the plan made or taken from the cache, the
cached findings of every group taken. A file is then answered from it, its group checked at the
first ask of any of its modules. A run is one moment: as the CLI reads each file once per run,
a snapshot is not re-read, except that the text the caller holds for the file asked about must
be the text the snapshot read; when it is not (an edit since, standard input), the caller falls
back to a fresh run over the project.
"""

from __future__ import annotations

import ast
import gc
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from ..analysis.model import Settings
from ..project.cache import Cache, content_hash
from .config import Config
from .discovery import walk
from .files import _Pending, _plan, _prepare, _Shared, _Stored
from .projects import Projects, contexts, fallback_for
from .reading import FileResult, Read, decode

KEPT = 4  # projects whose snapshots a process keeps (flake8 walks one project's files together)


@dataclass
class Snapshot:
    hashes: dict[str, str]  # path as walked -> the hash of the bytes read
    stored: _Stored
    shared: _Shared
    groups: dict[str, list[str]]  # a linked module -> its group still to check (paths as walked)
    known: dict[str, FileResult] = field(default_factory=dict)  # answered, or taken from the cache

    def answer(self, path: str, tree: Optional[ast.Module] = None) -> FileResult:
        """The findings of `path` (as walked), its group checked together at the first ask;
        `tree`: the caller's parse of the text the snapshot read (flake8's), for a module alone."""
        if path not in self.known:
            group = self.groups.get(path, [path])
            hit = self.stored.get(path, ()) if len(group) == 1 else None  # a group's hits came with the plan
            if hit is not None:
                self.known[path] = hit
            else:
                signature = self.stored.group(group)  # () for a module alone
                for result in self.shared.check(group, tree if len(group) == 1 else None):
                    self.known[result.path] = self.stored.put(result, signature)
        return self.known[path]


def take(paths: list[str], settings: Settings, cache: Optional[Cache]) -> Snapshot:
    """Read, hash and plan the project of `paths` (every module of it) once."""
    read = Read({})
    for path in paths:
        read.add(path)
    stored = _Stored(cache, read.hashes, settings, False, read.clean.keys(), read.changed)
    ready = _prepare(read, list(read.hashes), stored, read.hashes.keys())
    project, todo, cached = _plan(ready, stored, {}) if isinstance(ready, _Pending) else ready
    units = {a: project for a in project.units} if project is not None else {}
    shared = _Shared(read, units, dict(project.alone) if project is not None else {}, settings, False)
    snapshot = Snapshot(read.hashes, stored, shared, {p: group for group in todo for p in group})
    snapshot.known.update((r.path, r) for r in cached)
    return snapshot


# Each folder's project looked up once per process, as its snapshot is taken once (a flake8 run
# is one moment): every file looked up its folders' markers again (32 stats a file on DENSE).
_PROJECTS = Projects()
_FALLBACKS: dict[str, str] = {}
_TAKEN: OrderedDict[tuple[str, Config, Settings, Optional[str]], tuple[Snapshot, dict[str, str]]] = OrderedDict()


def lint_in_snapshot(path: str, data: bytes, settings: Settings, config: Config,
                     cache: Optional[Cache], tree: Optional[ast.Module] = None) -> Optional[FileResult]:
    """The result of the file at `path`, whose text the caller holds as `data`, from this
    process's snapshot of its project (taken now if missing); None when the snapshot read other
    text for it, or none (the caller then runs over the project afresh)."""
    fallback = fallback_for(path, path, _FALLBACKS)
    root = _PROJECTS.root_of(path, fallback)
    key = (root, config, settings, cache.folder if cache is not None else None)
    if key not in _TAKEN:
        found = contexts([(path, fallback)], lambda r, packages: walk(r, config, packages))
        files, context = found.get(root, ([path], []))
        snapshot = take(sorted(set(files + context)), settings, cache)
        _TAKEN[key] = snapshot, {os.path.abspath(p): p for p in snapshot.hashes}
        # What a snapshot holds is acyclic and stays for the run: left to the collector, every
        # collection flake8's own work triggers walked it again (DENSE: 4.8 s of CPU, a quarter
        # of the plugin's cost). Frozen objects are still freed by reference counting.
        gc.freeze()
        while len(_TAKEN) > KEPT:
            _TAKEN.popitem(last=False)
    _TAKEN.move_to_end(key)
    snapshot, walked = _TAKEN[key]
    mine = walked.get(os.path.abspath(path))
    if mine is None or snapshot.hashes[mine] != content_hash(data) and not _same_text(snapshot, mine, data):
        return None
    return snapshot.answer(mine, tree)  # the text is the one the snapshot read: so is its tree


def _same_text(snapshot: Snapshot, path: str, data: bytes) -> bool:
    """Whether the caller's text is the file's as Python reads it: flake8 reads lines with
    universal newlines, so a file written with `\\r\\n` reaches the plugin as other bytes. Lines
    and columns are the same either way; before, each such file ran the whole project again
    (torchattacks: 43 files, each a run over the package)."""
    held = snapshot.shared.read.bytes_of(path)
    if isinstance(held, FileResult) or content_hash(held) != snapshot.hashes[path]:
        return False  # not what the snapshot read
    try:
        return _universal(decode(held)) == _universal(decode(data))
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return False


def _universal(text: str) -> str:
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
