"""`# noqa` with flake8's semantics (flake8.defaults' own patterns), and the file-level forms of
flake8 and ruff: `# flake8: noqa` and `# ruff: noqa` skip the whole file, `# ruff: noqa: ZG001`
the codes it names (issue 48: every route, not only flake8's, where flake8 skips the file)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

from flake8.defaults import NOQA_FILE, NOQA_INLINE_REGEXP  # type: ignore[import-untyped]

from ..analysis.model import Finding
from ..front.lines import split_lines

NOQA_INLINE = NOQA_INLINE_REGEXP
# ruff's file-level exemption: a comment line of its own, with or without codes.
_RUFF_FILE = re.compile(r"\s*# ruff[:=]\s*noqa(?:\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?\s*$",
                        re.IGNORECASE)
_SEPARATORS = re.compile(r"[,\s]")
_EVERY = ("",)  # the prefix every code starts with


def _codes(text: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in _SEPARATORS.split(text) if c.strip())


def is_suppressed(code: str, physical_line: str) -> bool:
    """A bare `# noqa` silences everything; `# noqa: ZG0` silences codes starting with ZG0."""
    match = NOQA_INLINE.search(physical_line)
    if match is None:
        return False
    codes_text = match.group("codes")
    return codes_text is None or code.startswith(_codes(codes_text))


def file_exempt(lines: Sequence[str]) -> tuple[str, ...]:
    """The code prefixes a file-level comment exempts the whole file from ("" for all): flake8
    skips a file with a line starting `# flake8: noqa` (its own NOQA_FILE.match, codes or not);
    ruff reads `# ruff: noqa` and `# ruff: noqa: ZG001, ZG002` on a line of their own."""
    exempt: list[str] = []
    for line in lines:
        if "noqa" not in line.lower():
            continue
        if NOQA_FILE.match(line):
            return _EVERY
        ruff: Optional[re.Match[str]] = _RUFF_FILE.match(line)
        if ruff is not None:
            if ruff.group("codes") is None:
                return _EVERY
            exempt += _codes(ruff.group("codes"))
    return tuple(exempt)


def unsuppressed(findings: Sequence[Finding], source: str) -> list[Finding]:
    """The findings of `source` that no `# noqa` on their line, and no file-level exemption,
    silences; lines counted as the engine counts them (split_lines: a form feed in a comment
    above ends no line)."""
    if not findings:
        return []
    lines = split_lines(source)
    exempt = file_exempt(lines)
    kept = []
    for finding in findings:
        line = lines[finding.line - 1] if 0 < finding.line <= len(lines) else ""
        if not (exempt and finding.code.startswith(exempt)) and not is_suppressed(finding.code, line):
            kept.append(finding)
    return kept
