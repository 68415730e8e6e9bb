"""The benchmark scripts run: benchmarks/realcode.py crashed on every package for a session
(it handed a list of lines where a text was asked for) and no test ran it. Here its scan runs
on a project of the fixtures, offline, as it runs on a downloaded package."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import realcode  # noqa: E402


def test_realcode_scans_a_project_and_counts_its_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realcode, "CACHE", tmp_path)
    root = tmp_path / "src" / "split"
    shutil.copytree(ROOT / "fixtures" / "projects" / "split", root)
    details: list[str] = []
    row: Counter[str] = realcode._scan(root, details)
    assert row["files"] == len(list(root.rglob("*.py"))) and row["linked"] >= 2
    assert (row["ZG001"], row["ZG002"]) == (1, 1)
    assert sorted(line.split(": ")[1][:5] for line in details) == ["ZG001", "ZG002"]
