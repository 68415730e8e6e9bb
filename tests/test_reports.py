"""issue 44: the reproduced bug reports' headers, and the runner that scores a checker on them.

The suite is a measurement, not a gate: nothing here asks zerograd to find the bugs. What is
tested is that every case's header follows the format and that the runner, given a linter that
knows the answers, scores it 1.00 (and less when it misses one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import reports  # noqa: E402

ANSWERS = [sys.executable, str(ROOT / "tests" / "data" / "answer_linter.py")]


def test_every_header_follows_the_format() -> None:
    cases = reports.load("both")  # raises CaseError naming the case
    assert cases, "benchmarks/reports/ holds no case"
    by_name = {case.path.name: case for case in cases}
    for case in cases:
        stem = case.path.stem
        for suffix in ("_fixed", "_notabug"):
            if stem.endswith(suffix):
                assert not case.bug, f"{case.path.name} is named as a trap"
        twin = by_name.get(stem.removesuffix("_fixed") + ".py") if stem.endswith("_fixed") else None
        if twin is not None:  # a fix whose bug no rule covers stands alone
            assert twin.bug, f"{twin.path.name}: the bug of {case.path.name} is not a bug case"
            assert twin.source == case.source, f"{case.path.name}: not the source of its bug case"


def test_the_halves_come_from_the_source() -> None:
    assert reports.half_of("https://example.org/a") == reports.half_of("HTTPS://example.org/a/")
    cases = reports.load("both")
    assert {c.path for c in reports.load("tune")} | {c.path for c in reports.load("check")} == {
        c.path for c in cases}


def test_a_linter_that_knows_the_answers_scores_one() -> None:
    cases = reports.load("both")
    found = reports.run_checker(ANSWERS, cases)
    total = reports.score(cases, found)
    assert (total.found, total.silent, total.correct) == (total.bugs, total.traps, total.findings)
    assert total.failing == []


def test_a_missed_bug_lowers_recall() -> None:
    cases = reports.load("both")
    bug = next(case for case in cases if case.bug)
    found = reports.run_checker([*ANSWERS, "--drop", bug.path.name], cases)
    total = reports.score(cases, found)
    assert total.found == total.bugs - 1
    assert any(bug.path.name in line for line in total.failing)


@pytest.mark.parametrize("header, problem", [
    ("# case: bug\n# expect: clean\n", "a bug expects findings"),
    ("# case: trap\n# expect: ZG001@1-2\n", "a bug expects findings"),
    ("# case: bug\n# expect: ZG009@1-2\n", "names no rule"),
    ("# case: bug\n# expect: ZG001@5-99\n", "outside the file"),
    ("# case: bug\n# expect: ZG001\n", "not CODE@FIRST-LAST"),
])
def test_a_bad_header_is_refused(tmp_path: Path, header: str, problem: str) -> None:
    rest = "# source: https://example.org/x\n# pattern: p\n# spread: single\n# label: reading: r\n"
    (tmp_path / "case.py").write_text(header + rest + "x = 1\n" * 8)
    with pytest.raises(reports.CaseError, match=problem):
        reports.load("both", tmp_path)


def test_findings_are_read_in_the_forms_linters_print() -> None:
    text = "\n".join([
        "::warning file=a.py,line=12,endLine=12,col=13,title=ZG001 gradients-never-cleared::ZG001 gradients...",
        "::error file=b.py,line=6,endLine=6,col=5,title=TG003 backward() in a loop::`.backward()` runs...",
        "::error title=Ruff (F401),file=c.py,line=3,col=1,endLine=3,endColumn=9::c.py:3:1: F401 unused",
        "d.py:7:1: ZG002 'optimizer' is cleared after backward()",
        "Found 2 findings.",
    ])
    assert list(reports.parse_output(text)) == [
        ("a.py", 12, "ZG001"), ("b.py", 6, "TG003"), ("c.py", 3, "F401"), ("d.py", 7, "ZG002")]
