"""Source text in, findings out: parse once, extract units, run the dataflow, apply the rules.

libcst is imported only when a file can hold a finding (its text mentions `backward`), so
checking a tree of unrelated files never pays for the import or the parse.
"""

from __future__ import annotations

import ast

from typing import TYPE_CHECKING

from .flow import analyse
from .model import Finding, Settings, Span
from .rules import code_for, message

if TYPE_CHECKING:
    from .events import Analysis

# Every BACKWARD form of rules.md contains this text (`.backward(`, `manual_backward(`,
# `torch.autograd.backward`, `backward (`); without it no finding is possible.
PREFILTER = "backward"


def lint_source(source: str, settings: Settings = Settings()) -> list[Finding]:
    """Findings for one module's source, sorted by position; no `# noqa` applied."""
    if PREFILTER not in source:
        return []
    import libcst

    from .events import extract

    try:
        module = libcst.parse_module(source)
    except libcst.ParserSyntaxError as error:
        return [_syntax_error(source, error.message, error.raw_line, error.raw_column)]
    except (RecursionError, MemoryError, ValueError) as error:
        return [_syntax_error(source, str(error) or type(error).__name__, 1, 0)]
    try:
        return _findings(extract(module, settings))
    except RecursionError:
        return []  # nesting too deep to walk safely: report nothing rather than guess


def _findings(analysis: "Analysis") -> list[Finding]:
    sites: dict[tuple[str, int], str] = {}
    for unit, targets in analysis.units:
        reported: set[tuple[str, str]] = set()
        for verdict in sorted(analyse(unit, targets), key=lambda v: v.site):
            code = code_for(verdict, unit.is_function)
            if (code, verdict.target) in reported:
                continue  # a loop is reported once per (optimizer, rule)
            reported.add((code, verdict.target))
            sites.setdefault((code, verdict.site), analysis.labels.get(verdict.target, verdict.target))
    findings = [
        Finding(code, message(code, label), analysis.locate(site)) for (code, site), label in sites.items()
    ]
    return sorted(findings, key=lambda f: (f.line, f.col, f.code))


def _syntax_error(source: str, reason: str, line: int, col: int) -> Finding:
    """ZG900 where CPython's own parser places the error (LibCST's position is often off)."""
    try:
        compile(source, "<source>", "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as error:
        reason, line, col = error.msg, error.lineno or 1, (error.offset or 1) - 1
    except (ValueError, RecursionError, MemoryError) as error:
        reason, line, col = str(error), 1, 0
    reason = " ".join(reason.split()) or "invalid syntax"
    return Finding("ZG900", message("ZG900", reason), Span(max(line, 1), max(col, 0), max(line, 1), max(col, 0)))
