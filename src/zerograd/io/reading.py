"""Reading a run's files: bytes within a size limit, decoded as the interpreter decodes them
(PEP 263, BOM), and what a run keeps of them (Read: hashes and Facts of every module, bytes and
texts only where a check or the plan reads them)."""

from __future__ import annotations

import io
import os
import re
import stat
import tokenize
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

from ..analysis.model import Finding, Span
from ..analysis.rules import message
from ..project.cache import content_hash
from ..project.index import Facts


@dataclass(init=False)
class FileResult:
    # Slotted, its sequences by default one shared empty tuple: a run keeps one for every file
    # of a big tree, and most find nothing (`dataclass(slots=True)` needs Python 3.10).
    __slots__ = ("path", "findings", "error", "skipped")
    path: str
    findings: Sequence[Finding]
    error: Optional[str]  # the file could not be read at all (exit 2)
    skipped: Sequence[str]  # what was left unchecked (--statistics)

    def __init__(self, path: str, findings: Sequence[Finding] = (), error: Optional[str] = None,
                 skipped: Sequence[str] = ()) -> None:
        self.path, self.findings, self.error, self.skipped = path, findings, error, skipped


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


def problem(reason: str, line: int = 1) -> Finding:
    return Finding("ZG900", message("ZG900", reason), Span(line, 0, line, 0))


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
    return problem(f"too large to analyse ({mib:,} MiB; the limit is {MAX_SOURCE_BYTES >> 20} MiB)")


def read_file(path: str) -> tuple[Optional[bytes], Optional[str]]:
    """read_source for the fixer: the bytes, or why not; (None, None) for a file too large to
    analyse, which has nothing to fix (its check reported it)."""
    read = read_source(path)
    return (None, read.error) if isinstance(read, FileResult) else (read, None)


class Texts(Mapping[str, str]):
    """The texts of a project's modules for its plan, read when asked (Read.text)."""

    def __init__(self, read: Read, paths: list[str]) -> None:
        self.read, self.paths = read, paths

    def __getitem__(self, path: str) -> str:
        return self.read.text(path)

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


@dataclass
class Read:
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
    sizes: dict[str, int] = field(default_factory=dict)  # of the files whose bytes or text it keeps
    # Modules whose check alone finds nothing (the prefilter); a dict's keys, as a set of 20,000
    # paths takes twice the memory.
    clean: dict[str, None] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)  # read again with other bytes

    def add(self, path: str) -> Optional[FileResult]:
        """Read `path`; its result when it cannot be read."""
        content = _read(path, self.overrides)
        if isinstance(content, FileResult):
            return content
        self.hashes[path] = content_hash(content)
        pinned = path in self.overrides
        try:
            text = decode(content) if path.endswith(".py") else None
        except (SyntaxError, UnicodeDecodeError, LookupError):
            text = None  # check_bytes reports it
        if text is None:
            self.data[path], self.sizes[path] = content, len(content)
            return None
        facts = self.facts[path] = Facts.of(text)
        if facts.holds or pinned:
            self.data[path] = content
        else:
            self.clean[path] = None
        if facts.holds or facts.events or facts.settings or pinned:
            self.texts[path], self.sizes[path] = text, len(content)
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
