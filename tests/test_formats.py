"""Golden outputs for every format, SARIF validated against the official 2.1.0 schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from zerograd.analysis.model import Finding, Span
from zerograd.io.report import github, text

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "fixtures" / "reports"
INPUTS = ["examples/train.py", "fixtures/notebooks/train.ipynb", "fixtures/notebooks/not_json.ipynb"]
SCHEMA = Path(__file__).resolve().parent / "data" / "sarif-schema-2.1.0.json"


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "zerograd", *args], capture_output=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_golden(fmt: str) -> None:
    result = run("--format", fmt, *INPUTS)
    assert result.returncode == 1
    golden = GOLDEN / f"report.{fmt}"
    if os.environ.get("ZEROGRAD_UPDATE_FIXTURES") == "1":
        golden.write_bytes(result.stdout)
    assert result.stdout.decode() == golden.read_text(encoding="utf-8")


def test_sarif_is_valid_against_the_official_schema() -> None:
    log = json.loads(run("--format", "sarif", *INPUTS).stdout)
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema).validate(log)
    driver = log["runs"][0]["tool"]["driver"]
    assert [rule["id"] for rule in driver["rules"]] == ["ZG001", "ZG002", "ZG003", "ZG004", "ZG005", "ZG006", "ZG900", "ZG901"]
    assert "## Why is this bad?" in driver["rules"][0]["help"]["markdown"]
    regions = [r["locations"][0]["physicalLocation"]["region"] for r in log["runs"][0]["results"]]
    assert all(region["startLine"] >= 1 and region.get("startColumn", 1) >= 1 for region in regions)


def test_sarif_without_findings_is_valid() -> None:
    log = json.loads(run("--format", "sarif", "fixtures/traps/").stdout)
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(log)
    assert log["runs"][0]["results"] == []


def test_github_escapes_and_drops_the_column_of_multiline_spans() -> None:
    one = Finding("ZG001", "50% of it,\nnew: line", Span(3, 4, 3, 10))
    many = Finding("ZG002", "spans lines", Span(5, 0, 7, 1))
    assert github([("a,b:c.py", one), ("d.py", many)]) == (
        "::warning file=a%2Cb%3Ac.py,line=3,endLine=3,col=5,endColumn=11,title=ZG001 gradients-never-cleared"
        "::ZG001 50%25 of it,%0Anew: line\n"
        "::warning file=d.py,line=5,endLine=7,title=ZG002 zero-grad-between-backward-and-step"
        "::ZG002 spans lines\n"
    )


def test_explain_prints_the_rule_page() -> None:
    result = run("--explain", "zg003")
    assert result.returncode == 0
    assert result.stdout.decode().startswith("# ZG003 accumulation-frequency-mismatch\n")
    unknown = run("--explain", "ZG999")
    assert unknown.returncode == 2 and b"unknown rule" in unknown.stderr


@pytest.mark.parametrize("fmt", ["text", "github"])
def test_control_characters_from_the_repository_are_escaped(tmp_path: Path, fmt: str) -> None:
    """issue 42: a newline or an escape sequence in a file name forged a finding line or
    coloured the terminal. A file name comes from the repository being checked: every control
    character in it is printed as its escape, and so is one in a message."""
    name = "evil\n\x1b[2J\u202e.py"
    (tmp_path / name).write_text((ROOT / "examples" / "train.py").read_text())
    done = subprocess.run([sys.executable, "-m", "zerograd", "-q", "--format", fmt, "--no-cache", name],
                          capture_output=True, cwd=tmp_path, timeout=120)
    out = done.stdout.decode()
    assert done.returncode == 1 and out.count("\n") == 3, out  # three findings, three lines
    assert not any(c in out.replace("\n", "") for c in "\x1b\r\u202e")
    assert out.count("evil\\n\\x1b[2J\\u202e.py" if fmt == "text" else "evil%0A\\x1b[2J\\u202e.py") == 3
    os.mkfifo(tmp_path / f"{name}.fifo.py")  # an error line names the file too
    done = subprocess.run([sys.executable, "-m", "zerograd", "--no-cache", f"{name}.fifo.py"], capture_output=True,
                          cwd=tmp_path, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and "not a regular file" in err, err
    assert not any(c in err[:-1] for c in "\x1b\r\u202e")
    quoted = Finding("ZG001", "gradients of 'opts[\"\x1b[31m\"]' are never cleared", Span(3, 4, 3, 10))
    shown = {"text": text, "github": github}[fmt]([("a.py", quoted)])
    assert "\x1b" not in shown and "opts[\"\\x1b[31m\"]" in shown
