"""`# noqa` with flake8's semantics (flake8/defaults.py NOQA_INLINE_REGEXP, violation.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..analysis.model import Finding
from ..front.lines import split_lines

NOQA_INLINE = re.compile(r"# noqa(?::[\s]?(?P<codes>([A-Z]+[0-9]+(?:[,\s]+)?)+))?", re.IGNORECASE)
_SEPARATORS = re.compile(r"[,\s]")


def is_suppressed(code: str, physical_line: str) -> bool:
    """A bare `# noqa` silences everything; `# noqa: ZG0` silences codes starting with ZG0."""
    match = NOQA_INLINE.search(physical_line)
    if match is None:
        return False
    codes_text = match.group("codes")
    if codes_text is None:
        return True
    codes = tuple(c.strip() for c in _SEPARATORS.split(codes_text) if c.strip())
    return code in codes or code.startswith(codes)


def unsuppressed(findings: Sequence[Finding], source: str) -> list[Finding]:
    """The findings of `source` that no `# noqa` on their line silences; lines counted as the
    engine counts them (split_lines: a form feed in a comment above ends no line)."""
    lines = split_lines(source)
    kept = []
    for finding in findings:
        line = lines[finding.line - 1] if 0 < finding.line <= len(lines) else ""
        if not is_suppressed(finding.code, line):
            kept.append(finding)
    return kept
