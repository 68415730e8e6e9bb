"""The GitHub Action: its inputs as action.yml declares them, and its script run locally."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).resolve().parent / "data" / "sarif-schema-2.1.0.json"
BUG = "import torch\nfor b in loader:\n    loss.backward()\n    optimizer.step()\n"


def action() -> dict[str, object]:
    loaded = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def test_inputs_are_declared_and_all_reach_the_script() -> None:
    spec = action()
    inputs = spec["inputs"]
    assert isinstance(inputs, dict)
    assert set(inputs) == {"version", "install", "paths", "format", "sarif-file", "fail-on-findings", "args",
                           "working-directory", "cache"}
    assert all("description" in value and "default" in value for value in inputs.values())
    runs = spec["runs"]
    assert isinstance(runs, dict) and runs["using"] == "composite"
    cache, step = runs["steps"]
    assert cache["uses"].startswith("actions/cache@") and cache["if"] == "inputs.cache == 'true'"
    assert step["env"]["ZEROGRAD_CACHE_DIR"].count("zerograd-cache") == 1
    assert cache["with"]["path"] == "${{ runner.temp }}/zerograd-cache"  # the folder the run is told
    used = set(re.findall(r"inputs\.([a-z-]+)", json.dumps(runs["steps"])))
    assert used == set(inputs)  # every input is passed on, and nothing undeclared is read
    script = (ROOT / "action" / "run.sh").read_text(encoding="utf-8")
    for name in step["env"]:
        assert name in script or name == "ZEROGRAD_CACHE_DIR"  # read by zerograd itself


def run_action(tmp_path: Path, **inputs: str) -> subprocess.CompletedProcess[str]:
    """The script as the runner starts it, with the zerograd of this test environment."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GITHUB_OUTPUT": str(tmp_path / "output"), "INPUT_INSTALL": "false", "RUNNER_TEMP": str(tmp_path)}
    env.update({name if name.isupper() else f"INPUT_{name.upper()}": value for name, value in inputs.items()})
    return subprocess.run(["bash", str(ROOT / "action" / "run.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(BUG)
    (tmp_path / "src" / "clean.py").write_text("x = 1\n")
    return tmp_path


def test_github_format_annotates_and_fails_on_findings(project: Path) -> None:
    result = run_action(project, paths="src")
    assert result.returncode == 1
    assert result.stdout.startswith("::warning file=src/train.py,line=4,endLine=4,col=5,")
    assert "ZG001" in result.stdout
    assert run_action(project, paths="src", fail_on_findings="false").returncode == 0
    assert run_action(project, paths="src/clean.py").returncode == 0


def test_sarif_is_written_valid_and_does_not_fail_the_upload(project: Path) -> None:
    result = run_action(project, paths="src", format="sarif", sarif_file="out.sarif", args="--select ZG001")
    assert result.returncode == 0, result.stderr
    log = json.loads((project / "out.sarif").read_text(encoding="utf-8"))
    jsonschema.validate(log, json.loads(SCHEMA.read_text(encoding="utf-8")))
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["ZG001"]
    assert "sarif-file=out.sarif" in (project / "output").read_text()
    assert run_action(project, paths="src", format="sarif", fail_on_findings="true").returncode == 1


def test_bad_inputs_are_errors_with_an_annotation(project: Path) -> None:
    result = run_action(project, format="xml")
    assert result.returncode == 2 and result.stdout.startswith("::error title=zerograd::format must be")
    missing = run_action(project, paths="nowhere")
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr


def outputs(project: Path) -> dict[str, str]:
    """The last value of each output the script wrote (GITHUB_OUTPUT), then forget them."""
    found = dict(line.split("=", 1) for line in (project / "output").read_text().splitlines())
    (project / "output").unlink()
    return found


def test_outputs_findings_and_exit_code_in_a_working_directory(project: Path) -> None:
    """issue 31: outputs `findings` and `exit-code`, an input `working-directory`."""
    assert run_action(project.parent, working_directory=project.name, paths="src").returncode == 1
    assert outputs(project.parent) == {"sarif-file": "", "findings": "1", "exit-code": "1"}
    assert run_action(project, paths="src", fail_on_findings="false").returncode == 0
    assert outputs(project) == {"sarif-file": "", "findings": "1", "exit-code": "1"}
    assert run_action(project, paths="src", format="sarif", sarif_file="reports/z.sarif").returncode == 0
    assert outputs(project) == {"sarif-file": "reports/z.sarif", "findings": "1", "exit-code": "1"}
    assert run_action(project, paths="src/clean.py").returncode == 0
    assert outputs(project) == {"sarif-file": "", "findings": "0", "exit-code": "0"}
    missing = run_action(project, working_directory="nowhere")
    assert missing.returncode == 2 and "working-directory 'nowhere' is not a folder" in missing.stdout


def test_a_sarif_file_that_cannot_be_written_fails_the_step(project: Path) -> None:
    """A missing folder is made (reports/z.sarif above); one that cannot be (a file is in the way)
    fails the step instead of passing with nothing written."""
    (project / "blocker").write_text("a file, not a folder")
    result = run_action(project, paths="src", format="sarif", sarif_file="blocker/z.sarif")
    assert result.returncode == 2 and "cannot write the SARIF file 'blocker/z.sarif'" in result.stdout
    # issue 48: the outputs are written on this exit path too, and no shell message leaks.
    assert outputs(project) == {"sarif-file": "", "findings": "0", "exit-code": "2"}
    assert result.stderr == "", result.stderr
    assert run_action(project, format="xml").returncode == 2
    assert outputs(project) == {"sarif-file": "", "findings": "0", "exit-code": "2"}


def test_the_cache_folder_is_filled_and_read_back(project: Path) -> None:
    """The folder actions/cache keeps (ZEROGRAD_CACHE_DIR): the first run fills it, the second
    gives the same annotations from it; `cache: false` runs without one."""
    folder = project / "zerograd-cache"
    first = run_action(project, paths="src", ZEROGRAD_CACHE_DIR=str(folder))
    entries = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    assert first.returncode == 1 and len(entries) > 2
    second = run_action(project, paths="src", ZEROGRAD_CACHE_DIR=str(folder))
    assert (second.returncode, second.stdout) == (1, first.stdout)
    assert sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file()) == entries
    off = project / "unused-cache"
    assert run_action(project, paths="src", cache="false", ZEROGRAD_CACHE_DIR=str(off)).returncode == 1
    assert not off.exists()


def test_installs_from_its_own_checkout_into_a_venv_of_its_own(project: Path) -> None:
    """With no version the action installs the checkout it runs from (no release needed)."""
    result = run_action(project, install="true", paths="src")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ZG001" in result.stdout
    assert (project / "zerograd-action-venv" / "bin" / "zerograd").exists()
