"""Files in, findings out: notebooks, noqa, per-file ignores, the projects' plans, parallel
checking (discovery.py finds the files, reading.py reads them)."""

from __future__ import annotations

import ast
import gc
import hashlib
import os
import sys
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Optional, Union

from ..analysis.model import Finding, Settings, Span
from ..analysis.rules import FIXABLE, message
from ..engine import PREFILTER, inspect_source
from ..project.cache import Cache, Group
from .config import Config
from .discovery import discover, walk
from .notebook import NotebookError, read_notebook
from .projects import contexts, fallback_for
from .reading import FileResult, Read, Texts, decode, problem, read_source
from .suppress import unsuppressed

if TYPE_CHECKING:  # plan.py imports libcst: only runs that make a plan pay for it
    from ..front.relevance import Scan
    from ..project.plan import Project

    # A project's plan: the project, its groups still to check, the findings cached for the others.
    Planned = tuple[Optional[Project], list[list[str]], list["FileResult"]]

STRICT = "ZEROGRAD_STRICT"  # set: a linked group that fails raises instead of falling back (tests)
PARALLEL_THRESHOLD = 16  # below this many files a process pool costs more than it saves
PRESCAN_MIN = 8  # below this many modules to scan before a plan, the parent scans them itself


def check_source(source: str, settings: Settings, describe: bool = True,
                 found: Optional[list[Finding]] = None, scan: Optional[Scan] = None,
                 tree: Optional[ast.Module] = None) -> list[Finding]:
    """lint_source plus `# noqa` and fix descriptions, never raising: an internal error is ZG901.
    Describing a fix re-parses the file with metadata: only for formats that print them.
    `found`: the findings of the module, already analysed with the project (project.py);
    `tree`: `ast.parse(source)` when the caller has it (flake8)."""
    try:
        findings = inspect_source(source, settings, scan=scan, tree=tree).findings if found is None else found
        if describe and any(f.code in FIXABLE for f in findings):
            from .fix import describe as describe_fixes

            findings = describe_fixes(source, findings, settings)
    except Exception as error:  # noqa: BLE001 - a bug must not stop the run (ZG901)
        reason = f"{type(error).__name__}: {error}".strip().splitlines()[0]
        return [Finding("ZG901", message("ZG901", reason), Span(1, 0, 1, 0))]
    return unsuppressed(findings, source) if findings else []


def check_bytes(path: str, data: bytes, settings: Settings, describe: bool = True,
                scan: Optional[Scan] = None, tree: Optional[ast.Module] = None) -> FileResult:
    """`scan`: the relevance scan of the decoded text, when the plan made one; `tree`: its
    parse, when the caller has one (flake8)."""
    if path.endswith(".ipynb"):
        return _check_notebook(path, data, settings, describe)
    try:
        source = decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return FileResult(path, [problem(f"undecodable bytes ({error})".splitlines()[0])])
    return FileResult(path, check_source(source, settings, describe, scan=scan, tree=tree))


def _check_notebook(path: str, data: bytes, settings: Settings, describe: bool) -> FileResult:
    try:
        notebook = read_notebook(data.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return FileResult(path, [problem(f"not a notebook: undecodable bytes ({error.reason})")])
    except NotebookError as error:
        return FileResult(path, [problem(str(error))])
    findings = [notebook.locate(f) for f in check_source(notebook.source, settings, describe)]
    return FileResult(path, findings, skipped=[f"cell {cell} ({magic})" for cell, magic in notebook.skipped])


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
    read = Read(overrides or {})
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
    stored = _Stored(cache, read.hashes, settings, describe, read.clean.keys(), read.changed)
    pooled = jobs if len(reported) >= PARALLEL_THRESHOLD else 1
    prepared = [_prepare(read, files + context, stored, dict.fromkeys(files).keys()) for files, context in given.values()]
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


def _check_rest(read: Read, reported: list[str], stored: _Stored, shared: _Shared,
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
    work.sort(key=lambda paths: -sum(read.sizes.get(p, 0) for p in paths))
    pooled = jobs > 1 and len(work) > 1 and len(reported) >= PARALLEL_THRESHOLD
    for paths, results in _run(work, shared, min(jobs, len(work)) if pooled else 1):
        done += [stored.put(result, stored.group(paths)) for result in results]
    return done


@dataclass
class _Shared:
    """What every job reads: forked workers inherit it instead of receiving it pickled."""

    read: Read
    projects: dict[str, Project]  # each grouped module's (absolute path)
    scans: dict[str, Scan]  # the plan's relevance scans of modules checked alone (path as given)
    settings: Settings
    describe: bool

    def check(self, paths: list[str], tree: Optional[ast.Module] = None) -> list[FileResult]:
        """One file alone, or one group linked; a group that fails is checked module by module.
        `tree`: a module alone's parse, when the caller has one (flake8)."""
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
        return [self.alone(p, tree if len(paths) == 1 else None) for p in paths]

    def alone(self, path: str, tree: Optional[ast.Module] = None) -> FileResult:
        content = self.read.bytes_of(path)
        if isinstance(content, FileResult):
            return content
        return check_bytes(path, content, self.settings, self.describe, self.scans.get(path), tree)


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


def _prescan(read: Read, paths: list[str], cache: Optional[Cache], jobs: int) -> dict[str, Scan]:
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
    clean: AbstractSet[str] = frozenset()
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

    def _rests_on_change(self, path: str, group: Group) -> bool:
        """Whether the file, or a module of its group (by absolute path), changed during the run."""
        if not self.changed:
            return False
        changed = {os.path.abspath(p) for p in self.changed}
        return os.path.abspath(path) in changed or any(member in changed for member, _ in group)

    def put(self, result: FileResult, group: Group) -> FileResult:
        if (self.cache is not None and result.error is None and (group or result.path not in self.clean)
                and not self._rests_on_change(result.path, group)):
            self.cache.store(os.path.abspath(result.path), self.hashes[result.path], group, self.describe,
                             result.findings, result.skipped)
        return result


@dataclass
class _Pending:
    """A project whose plan is to be made: its modules' texts, which files it reports."""

    texts: Texts
    given: dict[str, str]  # absolute path -> path as given
    key: str  # the cache's key for the project's plan
    reported: AbstractSet[str]


def _prepare(read: Read, paths: list[str], stored: _Stored, reported: AbstractSet[str]) -> Union[Planned, _Pending]:
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
    return _Pending(Texts(read, [p for p in candidates if p in read.facts]), given, key, reported)


def _plan(pending: _Pending, stored: _Stored, scans: dict[str, Scan]) -> Planned:
    """Make a project's plan (an unchanged tree takes it from the cache); `scans`: made beforehand."""
    from ..project.plan import Project  # imports libcst: only a plan to make pays for it

    try:
        facts = pending.texts.read.facts
        project = Project(pending.texts, stored.cache, {p: scans[p] for p in pending.texts if p in scans}, facts,
                          {a: p for a, p in pending.given.items() if p in facts})
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
    lines = chain((f"{a}\0{stored.hashes[given[a]]}" for a in sorted(given)),
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
    projects = _projects(paths, config, force_exclude, overrides, results)
    results += _check_all(projects, settings, describe, jobs, cache, overrides)
    for result in results:
        ignored = config.ignored_for(result.path)
        if ignored:
            result.findings = [f for f in result.findings if not f.code.startswith(ignored)]
    return sorted(results, key=lambda r: r.path)


def _projects(paths: Iterable[str], config: Config, force_exclude: bool, overrides: Optional[dict[str, bytes]],
              results: list[FileResult]) -> dict[str, tuple[list[str], list[str]]]:
    """The files found from `paths`, by project (projects.contexts); those that cannot be walked
    go to `results`. Its own function: what finding them took is freed before the checks."""
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
    return contexts(pairs, lambda root, packages_only: iter(listed[root]) if root in listed
                    else walk(root, config, packages_only), imported=set(memo.values()))
