"""Files in, findings out: discovery, decoding (PEP 263, BOM), notebooks, noqa, per-file
ignores, parallel checking."""

from __future__ import annotations

import io
import os
import stat
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from .config import Config
from .engine import PREFILTER, lint_source
from .model import Finding, Settings, Span
from .notebook import NotebookError, read_notebook
from .rules import FIXABLE, message
from .suppress import unsuppressed

PARALLEL_THRESHOLD = 16  # below this many files a process pool costs more than it saves
SUFFIXES = (".py", ".ipynb")


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: Optional[str] = None  # the file could not be read at all (exit 2)


def decode(data: bytes) -> str:
    """Decode like the interpreter: BOM or PEP 263 cookie, else UTF-8. Raises on bad bytes."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def _problem(reason: str, line: int = 1) -> Finding:
    return Finding("ZG900", message("ZG900", reason), Span(line, 0, line, 0))


def check_source(source: str, settings: Settings, describe: bool = True,
                 found: Optional[list[Finding]] = None) -> list[Finding]:
    """lint_source plus `# noqa` and fix descriptions, never raising: an internal error is ZG901.
    Describing a fix re-parses the file with metadata: only for formats that print them.
    `found`: the findings of the module, already analysed with the project (project.py)."""
    try:
        findings = lint_source(source, settings) if found is None else found
        if describe and any(f.code in FIXABLE for f in findings):
            from .fix import describe as describe_fixes

            findings = describe_fixes(source, findings, settings)
    except Exception as error:  # noqa: BLE001 - a bug must not stop the run (ZG901)
        reason = f"{type(error).__name__}: {error}".strip().splitlines()[0]
        return [Finding("ZG901", message("ZG901", reason), Span(1, 0, 1, 0))]
    return unsuppressed(findings, source.splitlines())


def check_bytes(path: str, data: bytes, settings: Settings, describe: bool = True) -> FileResult:
    if path.endswith(".ipynb"):
        return _check_notebook(path, data, settings, describe)
    try:
        source = decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        return FileResult(path, [_problem(f"undecodable bytes ({error})".splitlines()[0])])
    return FileResult(path, check_source(source, settings, describe))


def _check_notebook(path: str, data: bytes, settings: Settings, describe: bool) -> FileResult:
    try:
        notebook = read_notebook(data.decode("utf-8-sig"))
    except UnicodeDecodeError as error:
        return FileResult(path, [_problem(f"not a notebook: undecodable bytes ({error.reason})")])
    except NotebookError as error:
        return FileResult(path, [_problem(str(error))])
    return FileResult(path, [notebook.locate(f) for f in check_source(notebook.source, settings, describe)])


def read_file(path: str) -> tuple[Optional[bytes], Optional[str]]:
    """The bytes of a regular file, or why not (a FIFO would block a read forever)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None, f"{path}: not a regular file"
        with open(path, "rb") as handle:
            return handle.read(), None
    except OSError as error:
        return None, f"cannot read {path}: {error.strerror or error}"


def check_file(path: str, settings: Settings, describe: bool = True) -> FileResult:
    data, error = read_file(path)
    if data is None:
        return FileResult(path, error=error)
    return check_bytes(path, data, settings, describe)


def _check_bytes_args(args: tuple[str, bytes, Settings, bool]) -> FileResult:
    return check_bytes(*args)


def _check_all(files: list[str], settings: Settings, describe: bool, jobs: int) -> list[FileResult]:
    """The parent reads every file; the modules that call into each other's training functions
    are linked and checked together (project.py); of the rest, the parent checks those the
    prefilter clears itself (most of them, in a tree of unrelated code) and only files that need
    parsing go to the pool, the largest first so that no process is left alone with the big ones
    at the end, and no pool starts for one."""
    done: list[FileResult] = []
    data: dict[str, bytes] = {}
    for path in files:
        content, error = read_file(path)
        if content is None:
            done.append(FileResult(path, error=error))
        else:
            data[path] = content
    grouped = _check_groups(data, settings, describe)
    done += grouped
    work: list[tuple[str, bytes, Settings, bool]] = []
    linked = {r.path for r in grouped}
    for path in (p for p in data if p not in linked):
        if PREFILTER.encode() in data[path] and jobs > 1:  # sources are ASCII-compatible (PEP 263)
            work.append((path, data[path], settings, describe))
        else:
            done.append(check_bytes(path, data[path], settings, describe))
    work.sort(key=lambda item: -len(item[1]))
    if len(work) < 2 or len(files) < PARALLEL_THRESHOLD:
        return done + [check_bytes(*item) for item in work]
    with ProcessPoolExecutor(max_workers=min(jobs, len(work))) as pool:
        return done + list(pool.map(_check_bytes_args, work, chunksize=1))


def _check_groups(data: dict[str, bytes], settings: Settings, describe: bool) -> list[FileResult]:
    """The modules project.py links: checked here, together; a group that fails is left to be
    checked module by module."""
    from .project import Project, check_group

    if not any(PREFILTER.encode() in content for content in data.values()):
        return []  # nothing can backpropagate: no module to link
    texts: dict[str, str] = {}
    for path, content in data.items():
        if path.endswith(".py") and b"import" in content:
            try:
                texts[path] = decode(content)
            except (SyntaxError, UnicodeDecodeError, LookupError):
                continue  # check_bytes reports it
    try:
        project = Project(texts)
        groups = project.plan()
    except (RecursionError, MemoryError, ValueError):
        return []  # deeply nested text: every module is checked alone, as before
    results: list[FileResult] = []
    for group in groups:
        try:
            found = check_group(project, group, settings)
        except Exception:  # noqa: BLE001 - a bug in linking must not lose the modules' own findings
            continue
        results += [FileResult(path, check_source(texts[path], settings, describe, found[path])) for path in group]
    return results


def discover(paths: Sequence[str], config: Config, force_exclude: bool = False) -> Iterator[tuple[str, Optional[str]]]:
    """(path, error) pairs: files named explicitly (unless --force-exclude excludes them), and
    *.py / *.ipynb files found under directories, minus excluded names and paths."""
    for path in paths:
        if force_exclude and config.is_excluded(path):
            continue
        if os.path.isdir(path):
            yield from ((p, None) for p in _walk(path, config))
        elif os.path.exists(path):
            yield path, None
        else:
            yield path, f"{path}: no such file or directory"


def _walk(root: str, config: Config) -> Iterator[str]:
    """Like os.walk (symlinked folders are not entered), with the file type from the directory
    entry instead of a stat per file."""
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        inner = []
        for entry in entries:
            path = os.path.join(folder, entry.name)
            if entry.is_dir(follow_symlinks=False):
                if not config.is_excluded(path) and not _is_virtualenv(path):
                    inner.append(path)
            elif entry.name.endswith(SUFFIXES) and entry.is_file() and not config.is_excluded(path):
                yield path
        folders.extend(reversed(inner))


def _is_virtualenv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg"))


def lint_paths(paths: Iterable[str], settings: Optional[Settings] = None, jobs: int = 1,
               config: Optional[Config] = None, force_exclude: bool = False,
               describe: bool = True) -> list[FileResult]:
    """Check files and directories; results sorted by path, per-file ignores applied;
    `describe=False` leaves fix descriptions out (they cost a second parse)."""
    config = config or Config()
    settings = settings or config.settings
    found = list(discover(list(paths), config, force_exclude))
    results = [FileResult(path, error=error) for path, error in found if error]
    files = sorted({path for path, error in found if not error})
    results += _check_all(files, settings, describe, jobs)
    for result in results:
        ignored = config.ignored_for(result.path)
        if ignored:
            result.findings = [f for f in result.findings if not f.code.startswith(ignored)]
    return sorted(results, key=lambda r: r.path)
