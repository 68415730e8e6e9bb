"""Output formats: pure functions from findings to text. Columns are 1-based here."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO

from ..analysis.model import Finding
from ..analysis.rules import RULES, rule_page
from ..version import __version__

if TYPE_CHECKING:
    from .config import Config, Selection

Located = tuple[str, Finding]
RULE_PAGES = "src/zerograd/ruledocs"  # where the rule pages sit in the repository


@cache
def repository() -> Optional[str]:
    """The `Repository` of the installed distribution's `[project.urls]`; None when zerograd
    runs from a tree that was never installed (no metadata to read)."""
    from importlib import metadata

    try:
        urls = metadata.metadata("zerograd").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository" and url.strip():
            return str(url).strip().rstrip("/")
    return None


def rule_url(code: str) -> Optional[str]:
    """The rule's page in the repository, on `main`: the repository has no release tags yet, and
    a link must resolve (issue 48). `zerograd --explain` prints the installed version's page."""
    home = repository()
    return None if home is None else f"{home}/blob/main/{RULE_PAGES}/{code}.md"


# What a terminal or a log reader acts on rather than shows: C0 and C1 controls and DEL (a newline
# forges a finding line, an escape sequence colours or rewrites the terminal), the line and
# paragraph separators, and the bidirectional controls that reorder what is shown ("Trojan
# Source"). A file name or a message carries them only from the repository being checked.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(value: str) -> str:
    """`value` with every control character written as its Python escape (`\\x1b`, `\\u202e`)."""
    return _CONTROL.sub(_escaped, value) if _CONTROL.search(value) else value


def _escaped(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]


def shown(path: str) -> str:
    """A path as the output names it: `pkg/x.py`, not the walk's `./pkg/x.py` (as ruff prints)."""
    return os.path.normpath(path) if path and path != "-" else path


@dataclass(frozen=True)
class Style:
    """The text format's colours: ruff's (bold path, red code, cyan fix mark), only on a
    terminal; NO_COLOR turns them off and FORCE_COLOR on, in the order Python's own REPL reads
    them."""

    color: bool = False

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        if os.environ.get("NO_COLOR"):
            return cls(False)
        if os.environ.get("FORCE_COLOR"):
            return cls(True)
        isatty = getattr(stream, "isatty", None)
        return cls(bool(isatty is not None and isatty()) and os.environ.get("TERM") != "dumb")

    def paint(self, sgr: str, value: str) -> str:
        return f"\x1b[{sgr}m{value}\x1b[0m" if self.color else value

    def text(self, findings: Sequence[Located]) -> str:
        """`path:line:col: CODE message`, with ruff's `[*]` after the code when --fix can
        repair it; in a notebook `path:cell N:line:col` (ruff's form)."""
        out = []
        for path, f in findings:
            where = f"cell {f.cell[0]}:{f.cell[1]}" if f.cell is not None else str(f.line)
            mark = " " + self.paint("36", "[*]") if f.fix else ""
            out.append(f"{self.paint('1', printable(path))}:{where}:{f.col + 1}: {self.paint('1;31', f.code)}{mark} "
                       f"{printable(f.message)}\n")
        return "".join(out)


def text(findings: Sequence[Located]) -> str:
    """The text format, uncoloured."""
    return Style().text(findings)


def show_settings(config: Config, selection: Selection, cache: Optional[str]) -> str:
    """`--show-settings`: what a run from here would use, in [tool.zerograd]'s own terms."""
    values: dict[str, object] = {
        "select": list(selection.select), "ignore": list(selection.ignore),
        "extend-select": list(selection.extend_select), "exclude": list(config.exclude),
        "extend-exclude": list(config.extend_exclude),
        "per-file-ignores": {pattern: list(codes) for pattern, codes in config.per_file_ignores},
        "optimizer-names": list(config.optimizer_names), "not-optimizer-names": list(config.not_optimizer_names),
        "respect-gitignore": config.respect_gitignore,
    }
    head = [f"Settings path: {config.source if config.source is not None else 'none (the defaults)'}",
            f"Project root: {config.root}", f"Cache: {cache if cache is not None else 'off'}"]
    return "\n".join(head + [f"{key} = {json.dumps(value)}" for key, value in values.items()]) + "\n"


def summary(findings: Sequence[Located]) -> str:
    """The closing line of the text format (on stderr: stdout keeps one finding per line)."""
    count = len(findings)
    fixable = sum(f.fix is not None for _, f in findings)
    line = f"Found {count} finding{'s' if count != 1 else ''}"
    return line + (f" ({fixable} fixable with `zerograd --fix`).\n" if fixable else ".\n")


def as_json(findings: Sequence[Located]) -> str:
    rows = []
    for path, f in findings:
        row: dict[str, Any] = {
            "path": path,
            "line": f.line,
            "col": f.col + 1,
            "end_line": f.span.end_line,
            "end_col": f.span.end_col + 1,
            "code": f.code,
            "message": f.message,
            "fix": f.fix,
        }
        if f.cell is not None:
            row["cell"], row["cell_line"], row["file_line"] = f.cell
        rows.append(row)
    return json.dumps(rows, indent=2) + "\n"


def sarif(findings: Sequence[Located]) -> str:
    """SARIF 2.1.0 as GitHub code scanning reads it: rules with help, results with regions."""
    codes = sorted(RULES)
    rules = [_sarif_rule(code) for code in codes]
    results = [_sarif_result(path, f, codes.index(f.code)) for path, f in findings]
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": _driver(rules)},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _driver(rules: list[dict[str, Any]]) -> dict[str, Any]:
    driver: dict[str, Any] = {"name": "zerograd", "version": __version__}
    if repository() is not None:
        driver["informationUri"] = repository()
    driver["rules"] = rules
    return driver


def _sarif_rule(code: str) -> dict[str, Any]:
    rule = RULES[code]
    page = rule_page(code)
    what = page.section("What it does") or rule.summary
    out = {
        "id": code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": what},
        "help": {"text": page.text or rule.summary, "markdown": page.text or rule.summary},
        "helpUri": rule_url(code),
        "defaultConfiguration": {"level": _level(code)},
        "properties": {"tags": ["pytorch", "correctness"]},
    }
    return {key: value for key, value in out.items() if value is not None}


def _level(code: str) -> str:
    return "error" if code.startswith("ZG9") else "warning"


def _sarif_result(path: str, f: Finding, index: int) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": f.line, "startColumn": f.col + 1, "endLine": f.span.end_line,
                              "endColumn": f.span.end_col + 1}
    if f.cell is not None:
        # A viewer shows the .ipynb file: point at the file line that holds the cell's line.
        region = {"startLine": f.cell[2]}
    result: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": index,
        "level": _level(f.code),
        "message": {"text": _cell_message(f)},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": PurePath(path).as_posix()},
                                            "region": region}}],
    }
    properties: dict[str, Any] = {"fixable": f.fix is not None}
    if f.fix is not None:
        properties["fix"] = f.fix  # what `zerograd --fix` would do
    if f.cell is not None:
        properties.update(cell=f.cell[0], cellLine=f.cell[1], programLine=f.line, programColumn=f.col + 1)
    result["properties"] = properties
    return result


def github(findings: Sequence[Located]) -> str:
    """GitHub Actions workflow commands; no column when the finding spans several lines."""
    out = []
    for path, f in findings:
        if f.cell is not None:  # the line of the .ipynb file that holds the cell's line
            props = [f"file={_escape_property(path)}", f"line={f.cell[2]}"]
        else:
            props = [f"file={_escape_property(path)}", f"line={f.line}", f"endLine={f.span.end_line}"]
            if f.span.end_line == f.line:
                props += [f"col={f.col + 1}", f"endColumn={f.span.end_col + 1}"]
        props.append(f"title={_escape_property(f'{f.code} {RULES[f.code].name}')}")
        out.append(f"::{_level(f.code)} {','.join(props)}::{_escape_data(f'{f.code} {_cell_message(f)}')}\n")
    return "".join(out)


def _cell_message(f: Finding) -> str:
    return f.message if f.cell is None else f"cell {f.cell[0]}, line {f.cell[1]}: {f.message}"


def _escape_data(value: str) -> str:
    """GitHub's escapes for what it reads, then ours for what a log viewer would act on."""
    return printable(value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def statistics(findings: Sequence[Located]) -> str:
    counts = Counter(f.code for _, f in findings)
    return "".join(f"{counts[code]:<5} {code} {RULES[code].name}\n" for code in sorted(counts))


# Formats that print what a fix would do; the others are spared describing it.
DESCRIBED = frozenset({"text", "json", "sarif"})
FORMATS: dict[str, Callable[[Sequence[Located]], str]] = {
    "text": text, "json": as_json, "sarif": sarif, "github": github,
}
