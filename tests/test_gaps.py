"""Known false alarms (benchmarks/REALCODE.md, "Open false positives"): correct code, confirmed
by running it under torch (../shared/tools/oracle.py: no violation), that zerograd still reports.
Each line marked `# gap: ZGxxx` must still be reported: when a change silences one, this test
fails on purpose, and the file moves to fixtures/traps/ as a trap that must stay silent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zerograd.analysis.model import Settings
from zerograd.io.files import check_source

GAPS = sorted((Path(__file__).resolve().parent / "gaps").glob("*.py"))
MARK = re.compile(r"#\s*gap:\s*(ZG\d{3})")


@pytest.mark.parametrize("path", GAPS, ids=lambda p: p.name)
def test_known_false_alarm_is_still_reported(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    marked = sorted((n, m.group(1)) for n, line in enumerate(source.splitlines(), 1) if (m := MARK.search(line)))
    assert marked, "a gap file marks the false alarms it documents"
    got = sorted((f.line, f.code) for f in check_source(source, Settings()))
    assert got == marked, "the analysis changed here: if the false alarm is gone, move the file to fixtures/traps/"
