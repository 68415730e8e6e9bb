"""Output formats: pure functions from findings to text. Columns are 1-based here."""

from __future__ import annotations

import json
from collections import Counter
from typing import Sequence

from .model import Finding
from .rules import RULES

Located = tuple[str, Finding]


def text(findings: Sequence[Located]) -> str:
    return "".join(f"{path}:{f.line}:{f.col + 1}: {f.code} {f.message}\n" for path, f in findings)


def as_json(findings: Sequence[Located]) -> str:
    rows = [
        {
            "path": path,
            "line": f.line,
            "col": f.col + 1,
            "end_line": f.span.end_line,
            "end_col": f.span.end_col + 1,
            "code": f.code,
            "message": f.message,
            "fix": f.fix,
        }
        for path, f in findings
    ]
    return json.dumps(rows, indent=2) + "\n"


def statistics(findings: Sequence[Located]) -> str:
    counts = Counter(f.code for _, f in findings)
    return "".join(f"{counts[code]:<5} {code} {RULES[code].name}\n" for code in sorted(counts))


FORMATS = {"text": text, "json": as_json}
