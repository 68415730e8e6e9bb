"""[tool.zerograd]: discovery, precedence, exclude, per-file-ignores, errors that name key and file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BUG = "for b in loader:\n    loss.backward()\n    optimizer.step()\n"
ZG002 = "for b in loader:\n    loss.backward()\n    optimizer.zero_grad()\n    optimizer.step()\n"
CUSTOM = "for b in loader:\n    loss.backward()\n    updater.step()\n"


def run(cwd: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "zerograd", "-j", "1", *args], input=stdin,
                            capture_output=True, cwd=cwd, timeout=120)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())


def codes(output: str) -> list[str]:
    return [f"{line.split(':')[0]} {line.split(': ')[1].split()[0]}" for line in output.splitlines()
            if ": ZG" in line]  # not the closing line (`Found 2 findings.`, `All checks passed!`)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "bug.py").write_text(BUG)
    (tmp_path / "pkg" / "late.py").write_text(ZG002)
    (tmp_path / "pkg" / "sub" / "custom.py").write_text(CUSTOM)
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "gen.py").write_text(BUG)
    return tmp_path


def write_config(root: Path, body: str) -> None:
    (root / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.zerograd]\n{body}\n")


def test_found_walking_up_from_the_first_path(project: Path) -> None:
    write_config(project, 'select = ["ZG002"]')
    assert codes(run(project / "pkg" / "sub", "../").stdout) == ["../late.py ZG002"]


def test_no_config_means_defaults(project: Path) -> None:
    assert codes(run(project, "pkg").stdout) == ["pkg/bug.py ZG001", "pkg/late.py ZG002"]


def test_command_line_select_wins_and_ignore_adds(project: Path) -> None:
    write_config(project, 'select = ["ZG002"]\nignore = ["ZG003"]')
    assert codes(run(project, "--select", "ZG001", "pkg").stdout) == ["pkg/bug.py ZG001"]
    assert codes(run(project, "--ignore", "ZG002", "pkg").stdout) == []
    assert codes(run(project, "--extend-select", "ZG001", "pkg").stdout) == ["pkg/bug.py ZG001", "pkg/late.py ZG002"]


def test_exclude_extend_exclude_and_force_exclude(project: Path) -> None:
    write_config(project, 'extend-exclude = ["generated", "pkg/late.py"]')
    assert codes(run(project, ".").stdout) == ["pkg/bug.py ZG001"]
    named = run(project, "generated/gen.py")
    assert codes(named.stdout) == ["generated/gen.py ZG001"]  # named explicitly: checked
    assert run(project, "-q", "--force-exclude", "generated/gen.py").stdout == ""


def test_exclude_replaces_the_defaults(project: Path) -> None:
    (project / "build").mkdir()
    (project / "build" / "b.py").write_text(BUG)
    write_config(project, 'exclude = ["generated"]')
    assert "build/b.py ZG001" in codes(run(project, ".").stdout)


def test_per_file_ignores(project: Path) -> None:
    write_config(project, '[tool.zerograd.per-file-ignores]\n"pkg/late.py" = ["ZG002"]\n"bug.py" = ["ZG0"]')
    assert codes(run(project, "pkg").stdout) == []
    result = run(project, "-", "--stdin-filename", "pkg/late.py", stdin=ZG002.encode())
    assert result.stdout == "All checks passed!\n"


def test_optimizer_names(project: Path) -> None:
    write_config(project, 'optimizer-names = ["updater"]')
    assert codes(run(project, "pkg/sub").stdout) == ["pkg/sub/custom.py ZG001"]
    write_config(project, 'not-optimizer-names = ["optim*"]')
    assert codes(run(project, "pkg").stdout) == []


def test_explicit_config_file(project: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text('[tool.zerograd]\nselect = ["ZG001"]\n')
    assert codes(run(project, "--config", str(other), "pkg").stdout) == ["pkg/bug.py ZG001"]
    missing = run(project, "--config", "nope.toml", "pkg")
    assert missing.returncode == 2 and "nope.toml: config file not found" in missing.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('selct = ["ZG001"]', "[tool.zerograd] selct: unknown key"),
        ('select = "ZG001"', "[tool.zerograd] select: expected a list of strings"),
        ('ignore = ["E501"]', "[tool.zerograd] ignore: 'E501' is not a zerograd code"),
        ('per-file-ignores = ["x"]', "[tool.zerograd] per-file-ignores: expected a table"),
        ("select = [", "cannot read"),
    ],
)
def test_bad_config_is_an_error_naming_key_and_file(project: Path, body: str, message: str) -> None:
    write_config(project, body)
    result = run(project, "pkg")
    assert result.returncode == 2
    assert result.stdout == ""
    line = result.stderr.strip()
    assert line.startswith("zerograd: error: ") and str(project / "pyproject.toml") in line and message in line
    assert "Traceback" not in result.stderr


def test_globs_read_as_gitignore_lines(tmp_path: Path) -> None:
    """issue 48: globs were fnmatch over path parts, so `**` meant `*` and `legacy/*.py` also
    matched legacy/deep/x.py. Now as ruff's users expect (gitignore-style, through pathspec)."""
    from zerograd.io.config import Patterns

    patterns = Patterns(["legacy/*.py", "tests/**/conftest.py", "*_pb2.py", "generated"], tmp_path)
    expected = {"legacy/a.py": True, "legacy/deep/a.py": False, "pkg/legacy/a.py": False,
                "tests/a/b/conftest.py": True, "tests/conftest.py": True, "conftest.py": False,
                "pkg/deep/x_pb2.py": True, "pkg/generated/x.py": True, "pkg/generated_x.py": False}
    assert {p: patterns.matches(str(tmp_path / p)) for p in expected} == expected
