"""Files in, findings out: decoding (PEP 263, BOM), notebooks, noqa, per-file ignores, the
projects' plans, parallel checking (discovery.py finds the files)."""

from __future__ import annotations

import gc
import hashlib
import io
import os
import re
import stat
import sys
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Optional, Union

from ..analysis.model import Finding, Settings, Span
from ..analysis.rules import FIXABLE, message
from ..engine import PREFILTER, inspect_source
from ..project.cache import Cache, Group, content_hash
from ..project.index import Facts
from .config import Config
from .discovery import discover, walk
from .notebook import NotebookError, read_notebook
from .projects import contexts, fallback_for
from .suppress import unsuppressed

if TYPE_CHECKING:  # plan.py imports libcst: only runs that make a plan pay for it
    from ..front.relevance import Scan
    from ..project.plan import Project

    # A project's plan: the project, its groups still to check, the findings cached for the others.
    Planned = tuple[Optional[Project], list[list[str]], list["FileResult"]]

STRICT = "ZEROGRAD_STRICT"  # set: a linked group that fails raises instead of falling back (tests)
PARALLEL_THRESHOLD = 16  # below this many files a process pool costs more than it saves
PRESCAN_MIN = 8  # below this many modules to scan before a plan, the parent scans them itself


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: Optional[str] = None  # the file could not be read at all (exit 2)
    skipped: list[str] = field(default_factory=list)  # what was left unchecked (--statistics)


def decode(data: bytes) -> str:
    """Decode like the interpreter: BOM or PEP 263 cookie, else UTF-8. Raises on bad bytes."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


# The first two lines as CPython's tokenizer ends them (not at a form feed: front/lines.py).
_TWO_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?[^\r\n]*(?:\r\n|\r|\n)?")


def encoded(text: str) -> Optional[bytes]:
    """Decoded text (an editor's buffer, flake8's lines) as bytes that `decode` turns back into
    it, its PEP 263 cookie honoured; None when the cookie's encoding cannot hold the text."""
    first = _TWO_LINES.match(text)  # always matches (maybe nothing)
    head = (first.group() if first else "").encode("utf-8", "replace")  # where a cookie may be
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(head).readline)
        return text.encode("utf-8" if encoding == "utf-8-sig" else encoding)
    except (SyntaxError, LookupError, UnicodeError):
        return None


def _problem(reason: str, line: int = 1) -> Finding:
    return Finding("ZG900", message("ZG900", reason), Span(line, 0, line, 0))


def check_source(source: str, settings: Settings, describe: bool = True,
                 found: Optional[list[Finding]] = None, scan: Optional[Scan] = None) -> list[Finding]:
    """lint_source plus `# noqa` and fix descriptions, never raising: an internal error is ZG901.
    Describing a fix re-parses the file with metadata: only for formats that print them.
    `found`: the findings of the module, already analysed with the project (project.py)."""
    try:
        findings = inspect_source(source, settings, scan=scan).findings if found is None else found
        if describe and any(f.code in FIXABLE for f in findings):
            from .fix import describe as describe_fixes

            findings = describe_fixes(source, findings, settings)
    except Exception as error:  # noqa: BLE001 - a bug must not stop the run (ZG901)
        reason = f"{type(error).__name__}: {error}".strip().splitlines()[0]
        return [Finding("ZG901", message("ZG901", reason), Span(1, 0, 1, 0))]
    return unsuppressed(findings, source) if findings else []


def check_bytes(path: str, data: bytes, settings: Settings, describe: bool = True,
                scan: Optional[Scan] = None) -> FileResult:
    """`scan`: the relevance scan of the decoded text, when the plan made one."""
    if path.endswith(".ipynb"):
        return _check_notebook(path, data, settings, describe)
    try:
        source = decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return FileResult(path, [_problem(f"undecodable bytes ({error})".splitlines()[0])])
    return FileResult(path, check_source(source, settings, describe, scan=scan))


def _check_notebook(path: str, data: bytes, settings: Settings, describe: bool) -> FileResult:
    try:
        notebook = read_notebook(data.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return FileResult(path, [_problem(f"not a notebook: undecodable bytes ({error.reason})")])
    except NotebookError as error:
        return FileResult(path, [_problem(str(error))])
    findings = [notebook.locate(f) for f in check_source(notebook.source, settings, describe)]
    return FileResult(path, findings, skipped=[f"cell {cell} ({magic})" for cell, magic in notebook.skipped])


# A source file larger than this is not read: it gets a ZG900 that says so. Analysis holds some
# 1.4 KB a line at its peak (docs/bad-input.md, "Long runs": 282 MiB for 200k lines of 30
# bytes), so 64 MiB of source (about 2M lines) is some 3 GB and 10 minutes: the most a CI
# runner can give one file. Hand-written modules are far smaller, a generated file this large
# is data rather than training code, and a 2 GiB file read whole only ended in MemoryError.
MAX_SOURCE_BYTES = 64 << 20


def read_source(path: str) -> Union[bytes, FileResult]:
    """The bytes of a regular file; else the file's result: why it cannot be read (exit 2), or a
    ZG900 when it is too large to analyse. The size is the open file's (a FIFO would block a
    read forever, so the path is looked at first), and no more than the limit is ever read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return FileResult(path, error=f"{path}: not a regular file")
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            # Asking for the limit at once would have every read allocate 64 MiB first: the size
            # and a byte, then the rest of a file that grew since fstat, up to the limit.
            data = handle.read(size + 1) if size <= MAX_SOURCE_BYTES else b""
            if len(data) > size:
                data += handle.read(MAX_SOURCE_BYTES + 1 - len(data))
    except OSError as error:
        return FileResult(path, error=f"cannot read {path}: {error.strerror or error}")
    if size > MAX_SOURCE_BYTES or len(data) > MAX_SOURCE_BYTES:  # or it grew since fstat
        return FileResult(path, [too_large(max(size, len(data)))])
    return data


def too_large(size: int) -> Finding:
    mib = -(-size // (1 << 20))  # rounded up: a byte over the limit is over it
    return _problem(f"too large to analyse ({mib:,} MiB; the limit is {MAX_SOURCE_BYTES >> 20} MiB)")


def read_file(path: str) -> tuple[Optional[bytes], Optional[str]]:
    """read_source for the fixer: the bytes, or why not; (None, None) for a file too large to
    analyse, which has nothing to fix (its check reported it)."""
    read = read_source(path)
    return (None, read.error) if isinstance(read, FileResult) else (read, None)


def check_file(path: str, settings: Settings, describe: bool = True) -> FileResult:
    read = read_source(path)
    return read if isinstance(read, FileResult) else check_bytes(path, read, settings, describe)


def _check_all(given: dict[str, tuple[list[str], list[str]]], settings: Settings, describe: bool, jobs: int,
               cache: Optional[Cache] = None, overrides: Optional[dict[str, bytes]] = None) -> list[FileResult]:
    """`given`: each project's files to report and the project's other modules, read as context
    (projects.py). The parent reads every file and takes from the cache what it holds for a
    file's content; the modules that call into each other's training functions are planned into
    groups (project.py), and those holding a given file are checked together; of the given files
    in no group, the parent checks those the prefilter clears itself (most of them, in a tree of
    unrelated code). Groups and files that need parsing go to the pool, the largest first so
    that no process is left alone with the big ones at the end, and no pool starts for one."""
    done: list[FileResult] = []
    read = _Read(overrides or {})
    reported: list[str] = []
    for files, context in given.values():
        for path in files:
            failed = read.add(path)
            if failed is None:
                reported.append(path)
            else:
                done.append(failed)
        for path in context:
            read.add(path)  # a context module that cannot be read is left out
    stored = _Stored(cache, read.hashes, settings, describe, frozenset(read.clean), read.changed)
    pooled = jobs if len(reported) >= PARALLEL_THRESHOLD else 1
    prepared = [_prepare(read, files + context, stored, set(files)) for files, context in given.values()]
    # One pool scans what every project's plan reads: a pool per project (15 on DENSE) waited,
    # each time, for its process left alone with that project's largest module.
    pending = [p for ready in prepared if isinstance(ready, _Pending) for p in ready.texts]
    scans = _prescan(read, pending, cache, pooled)
    planned = [_plan(ready, stored, scans) if isinstance(ready, _Pending) else ready for ready in prepared]
    projects = {a: project for project, _, _ in planned if project is not None for a in project.units}
    scans = {p: s for project, _, _ in planned if project is not None for p, s in project.alone.items()}
    work = [group for _, todo, _ in planned for group in todo]
    cached = [result for _, _, hits in planned for result in hits]
    gc.freeze()  # the plan's trees are acyclic: collections walking them would only cost time
    try:
        rest = _check_rest(read, reported, stored, _Shared(read, projects, scans, stored.settings, stored.describe),
                           work, {r.path for r in cached}, jobs)
    finally:
        gc.unfreeze()
    wanted = set(reported)
    return done + [r for r in cached + rest if r.path in wanted]


class _Texts(Mapping[str, str]):
    """The texts of a project's modules for its plan, read when asked (_Read.text)."""

    def __init__(self, read: _Read, paths: list[str]) -> None:
        self.read, self.paths = read, paths

    def __getitem__(self, path: str) -> str:
        return self.read.text(path)

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


@dataclass
class _Read:
    """The files of a run as it keeps them (issue 43: a run held every file's bytes and text,
    6 KB a module of a 20,000-module project, while a check reads few of them). Every file read
    is hashed, and a module that decodes leaves its Facts. Its bytes stay only when its check
    alone reads them (it may hold a finding, or it is a notebook or undecodable), its text only
    when the plan reads it (it may hold a finding, steps or clears, or names a framework's
    setting) or when it cannot be read again (stdin, an editor's buffer). Anything else asked
    for later is read again, its hash compared: a file changed since is checked as it is now,
    and its findings are not cached (they may rest on a plan of its old text)."""

    overrides: dict[str, bytes]
    data: dict[str, bytes] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Facts] = field(default_factory=dict)  # every module that decodes
    hashes: dict[str, str] = field(default_factory=dict)  # every file read
    sizes: dict[str, int] = field(default_factory=dict)
    clean: set[str] = field(default_factory=set)  # modules whose check alone finds nothing (the prefilter)
    changed: set[str] = field(default_factory=set)  # read again with other bytes

    def add(self, path: str) -> Optional[FileResult]:
        """Read `path`; its result when it cannot be read."""
        content = _read(path, self.overrides)
        if isinstance(content, FileResult):
            return content
        self.hashes[path], self.sizes[path] = content_hash(content), len(content)
        pinned = path in self.overrides
        try:
            text = decode(content) if path.endswith(".py") else None
        except (SyntaxError, UnicodeDecodeError, LookupError):
            text = None  # check_bytes reports it
        if text is None:
            self.data[path] = content
            return None
        facts = self.facts[path] = Facts.of(text)
        if facts.holds or pinned:
            self.data[path] = content
        else:
            self.clean.add(path)
        if facts.holds or facts.events or facts.settings or pinned:
            self.texts[path] = text
        return None

    def text(self, path: str) -> str:
        if path in self.texts:
            return self.texts[path]
        content = self.bytes_of(path)
        try:
            return decode(content) if isinstance(content, bytes) else ""
        except (SyntaxError, UnicodeDecodeError, LookupError):
            self.changed.add(path)
            return ""

    def bytes_of(self, path: str) -> Union[bytes, FileResult]:
        if path in self.data:
            return self.data[path]
        content = read_source(path)
        if isinstance(content, FileResult) or content_hash(content) != self.hashes.get(path):
            self.changed.add(path)
        return content


def _read(path: str, overrides: Optional[dict[str, bytes]]) -> Union[bytes, FileResult]:
    """The text the caller holds for `path` (stdin, an editor's buffer), else the file's bytes."""
    if overrides and path in overrides:
        return overrides[path]
    return read_source(path)


def _check_rest(read: _Read, reported: list[str], stored: _Stored, shared: _Shared,
                work: list[list[str]], taken: set[str], jobs: int) -> list[FileResult]:
    done: list[FileResult] = []
    taken |= {p for group in work for p in group}
    for path in (p for p in reported if p not in taken):
        hit = stored.get(path, ())
        if hit is not None:
            done.append(hit)
        elif PREFILTER.encode() in read.data.get(path, b"") and jobs > 1:  # sources are ASCII-compatible (PEP 263)
            work.append([path])
        else:
            done += [stored.put(result, ()) for result in shared.check([path])]
    work.sort(key=lambda paths: -sum(read.sizes[p] for p in paths))
    pooled = jobs > 1 and len(work) > 1 and len(reported) >= PARALLEL_THRESHOLD
    for paths, results in _run(work, shared, min(jobs, len(work)) if pooled else 1):
        done += [stored.put(result, stored.group(paths)) for result in results]
    return done


@dataclass
class _Shared:
    """What every job reads: forked workers inherit it instead of receiving it pickled."""

    read: _Read
    projects: dict[str, Project]  # each grouped module's (absolute path)
    scans: dict[str, Scan]  # the plan's relevance scans of modules checked alone (path as given)
    settings: Settings
    describe: bool

    def check(self, paths: list[str]) -> list[FileResult]:
        """One file alone, or one group linked; a group that fails is checked module by module."""
        if len(paths) == 1 and paths[0] in self.read.clean:
            return [FileResult(paths[0])]  # the prefilter's answer, without reading it again
        project = self.projects.get(os.path.abspath(paths[0]))
        if len(paths) > 1 and project is not None:
            from ..project.linking import check_group

            try:
                found = check_group(project, paths, self.settings)
                return [FileResult(p, check_source(project.units[os.path.abspath(p)].text, self.settings,
                                                   self.describe, found[p])) for p in paths]
            except Exception:  # a bug in linking must not lose the modules' own findings
                if os.environ.get(STRICT):
                    raise  # the tests' setting: a fallback there hides a bug (it hid one for 30 minutes)
        return [self.alone(p) for p in paths]

    def alone(self, path: str) -> FileResult:
        content = self.read.bytes_of(path)
        if isinstance(content, FileResult):
            return content
        return check_bytes(path, content, self.settings, self.describe, self.scans.get(path))


_SHARED: Optional[_Shared] = None  # set in the parent before its workers are forked


def _check_inherited(paths: list[str]) -> list[FileResult]:
    assert _SHARED is not None
    return _SHARED.check(paths)


def _check_bytes_args(args: tuple[str, bytes, Settings, bool]) -> FileResult:
    return check_bytes(*args)


def _run(work: list[list[str]], shared: _Shared, workers: int) -> Iterator[tuple[list[str], list[FileResult]]]:
    """Each job's results; in `workers` processes when there are more than one. Forked workers
    share the parent's project; where fork is not safe (macOS) or missing, groups stay in the
    parent and only single files, sent as bytes, go to the pool."""
    global _SHARED
    if workers < 2:
        yield from ((paths, shared.check(paths)) for paths in work)
        return
    import multiprocessing  # only a run with work for a pool pays for the import
    from concurrent.futures import ProcessPoolExecutor

    if _forks():
        _SHARED = shared
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                yield from zip(work, pool.map(_check_inherited, work, chunksize=1))
        finally:
            _SHARED = None
        return
    singles = [paths for paths in work if len(paths) == 1]
    yield from ((paths, shared.check(paths)) for paths in work if len(paths) > 1)
    read = [(paths, shared.read.bytes_of(paths[0])) for paths in singles]
    yield from ((paths, [content]) for paths, content in read if isinstance(content, FileResult))
    args = [(paths[0], content, shared.settings, shared.describe) for paths, content in read if isinstance(content, bytes)]
    if not args:
        return
    with ProcessPoolExecutor(min(workers, len(args))) as pool:
        yield from (([a[0]], [r]) for a, r in zip(args, pool.map(_check_bytes_args, args, chunksize=1)))


_TEXTS: dict[str, str] = {}  # set in the parent before its prescan workers are forked


def _prescan(read: _Read, paths: list[str], cache: Optional[Cache], jobs: int) -> dict[str, Scan]:
    """The relevance scans of the modules that may hold a finding, made in `jobs` forked
    processes: the plan reads them (it scans the library modules they call itself), and so does
    a module's check alone. Made one after another in the parent before any worker started,
    scans were a quarter of a cold run on DENSE; the modules checked alone were scanned twice."""
    if jobs < 2 or not _forks():
        return {}  # the plan scans as it goes (the language server, `-j 1`)
    wanted = sorted((p for p in paths if read.facts[p].holds and not (cache and cache.outline(read.text(p)))),
                    key=lambda p: -read.sizes[p])
    if len(wanted) < PRESCAN_MIN:
        return {}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _TEXTS
    _TEXTS = {p: read.text(p) for p in wanted}  # kept: they may hold a finding
    try:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            return {p: s for p, s in zip(wanted, pool.map(_scan_of, wanted, chunksize=2)) if s is not None}
    finally:
        _TEXTS = {}


def _scan_of(path: str) -> Optional[Scan]:
    from ..front.relevance import scan_text

    try:
        return scan_text(_TEXTS[path])
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the plan meets the error again, and the check reports it


def _forks() -> bool:
    """Whether workers can be forked safely (not on macOS, nor where fork is missing)."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin"


@dataclass
class _Stored:
    """The cache as one run sees it: paths as given, content hashes computed once."""

    cache: Optional[Cache]
    hashes: dict[str, str]
    settings: Settings
    describe: bool
    # Modules whose check alone finds nothing by the prefilter: answered without the cache, so a
    # cold run writes (and a warm one reads) an entry only for a file that can hold a finding.
    clean: frozenset[str] = frozenset()
    changed: set[str] = field(default_factory=set)  # files that changed during the run: not stored

    def group(self, paths: list[str]) -> Group:
        if self.cache is None or len(paths) < 2:
            return ()
        return tuple(sorted((os.path.abspath(p), self.hashes[p]) for p in paths))

    def get(self, path: str, group: Group) -> Optional[FileResult]:
        if self.cache is None:
            return None
        if not group and path in self.clean:
            return FileResult(path)
        entry = self.cache.findings(os.path.abspath(path), self.hashes[path], group, self.describe)
        return None if entry is None else FileResult(path, entry.findings, skipped=entry.skipped)

    def put(self, result: FileResult, group: Group) -> FileResult:
        if (self.cache is not None and result.error is None and (group or result.path not in self.clean)
                and self.changed.isdisjoint(p for p, _ in group or [(result.path, "")])):
            self.cache.store(os.path.abspath(result.path), self.hashes[result.path], group, self.describe,
                             result.findings, result.skipped)
        return result


@dataclass
class _Pending:
    """A project whose plan is to be made: its modules' texts, which files it reports."""

    texts: _Texts
    given: dict[str, str]  # absolute path -> path as given
    key: str  # the cache's key for the project's plan
    reported: set[str]


def _prepare(read: _Read, paths: list[str], stored: _Stored, reported: set[str]) -> Union[Planned, _Pending]:
    """One project's plan when the cache holds it and the findings of the groups it makes:
    the project (none then), the groups of linked modules holding a reported file still to
    check, and the cached findings of those that hold one; else what _plan needs to make it."""
    # Every module: one that imports nothing may still be called (a wrapper that steps, a helper).
    candidates = sorted(p for p in set(paths) if p.endswith(".py") and p in read.hashes)
    if not any(read.facts[p].holds for p in candidates if p in read.facts):
        return None, [], []  # no module can hold a finding: none to link
    given = {os.path.abspath(p): p for p in candidates}
    key = _state(given, stored) if stored.cache else ""
    planned = stored.cache.plan(sorted(given), key) if stored.cache else None
    if planned is not None and all(a in given for group in planned for a in group):
        wanted = [[given[a] for a in group] for group in planned]
        hits = [_cached_group(group, stored) for group in wanted if not reported.isdisjoint(group)]
        if all(hit is not None for hit in hits):
            return None, [], [result for hit in hits for result in hit or []]
    return _Pending(_Texts(read, [p for p in candidates if p in read.facts]), given, key, reported)


def _plan(pending: _Pending, stored: _Stored, scans: dict[str, Scan]) -> Planned:
    """Make a project's plan (an unchanged tree takes it from the cache); `scans`: made beforehand."""
    from ..project.plan import Project  # imports libcst: only a plan to make pays for it

    try:
        project = Project(pending.texts, stored.cache, {p: scans[p] for p in pending.texts if p in scans},
                          pending.texts.read.facts)
        groups = project.plan()
    except (RecursionError, MemoryError, ValueError):
        return None, [], []  # deeply nested text: every module is checked alone, as before
    if stored.cache:
        stored.cache.store_plan(sorted(pending.given), pending.key,
                                [[os.path.abspath(p) for p in g] for g in groups])
    cached: list[FileResult] = []
    todo = []
    for group in (g for g in groups if not pending.reported.isdisjoint(g)):
        hit = _cached_group(group, stored)
        if hit is None:
            todo.append(group)
        else:
            cached += hit
    return project, todo, cached


def _cached_group(group: list[str], stored: _Stored) -> Optional[list[FileResult]]:
    """Every module's findings from the cache, or None when one is missing."""
    signature = stored.group(group)
    results = []
    for path in group:
        found = stored.get(path, signature)
        if found is None:
            return None
        results.append(found)
    return results


def _state(given: dict[str, str], stored: _Stored) -> str:
    """What a plan depends on: the candidate modules' contents (`given`: absolute path -> path as
    given) and which folders are packages (index.import_root's view of them). Hashed as it is
    made: at 20,000 modules its lines, and the Index it was read from, were a run's largest
    passing weight (17 MiB), for a key of 64 characters."""
    from ..project.index import import_root

    packages: dict[str, bool] = {}

    def is_package(folder: str) -> bool:
        if folder not in packages:
            packages[folder] = os.path.isfile(os.path.join(folder, "__init__.py"))
        return packages[folder]

    for absolute in given:
        import_root(os.path.dirname(absolute), is_package)
    lines = chain((f"{a}\0{stored.hashes[p]}" for a, p in sorted(given.items())),
                  (f"{folder}\0{flag}" for folder, flag in sorted(packages.items())))
    digest = hashlib.sha256(next(lines, "").encode())
    for line in lines:
        digest.update(f"\n{line}".encode())
    return digest.hexdigest()


def lint_paths(paths: Iterable[str], settings: Optional[Settings] = None, jobs: int = 1,
               config: Optional[Config] = None, force_exclude: bool = False, describe: bool = True,
               cache: Optional[Cache] = None, overrides: Optional[dict[str, bytes]] = None) -> list[FileResult]:
    """Check files and directories, each in its project's context (projects.py); results sorted
    by path, per-file ignores applied; `describe=False` leaves fix descriptions out (they cost a
    second parse); `cache`: findings of unchanged files are read from it, and what is found is
    written to it; `overrides`: text that stands in for a file's (stdin, an editor's buffer)."""
    config = config or Config()
    settings = settings or config.settings
    results: list[FileResult] = []
    arguments: dict[str, str] = {}  # each file found -> the argument it was found from
    listed: dict[str, list[str]] = {}  # a folder walked already -> its files (a project's context)
    for argument in paths:
        if overrides and argument in overrides:
            arguments.setdefault(argument, argument)
            continue
        found = list(discover([argument], config, force_exclude))
        if os.path.isdir(argument):
            listed[os.path.abspath(argument)] = [path for path, _ in found]
        for path, error in found:
            if error:
                results.append(FileResult(path, error=error))
            else:
                arguments.setdefault(path, argument)
    memo: dict[str, str] = {}  # a named file's folder -> its import root
    pairs = sorted((path, fallback_for(path, argument, memo)) for path, argument in arguments.items())
    projects = contexts(pairs, lambda root, packages_only: iter(listed[root]) if root in listed
                        else walk(root, config, packages_only), imported=set(memo.values()))
    results += _check_all(projects, settings, describe, jobs, cache, overrides)
    for result in results:
        ignored = config.ignored_for(result.path)
        if ignored:
            result.findings = [f for f in result.findings if not f.code.startswith(ignored)]
    return sorted(results, key=lambda r: r.path)
