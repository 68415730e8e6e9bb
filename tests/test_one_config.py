"""One config and one noqa on every route (issue 48): file-level `# flake8: noqa` and `# ruff:
noqa` forms, the project of `--stdin-filename` from anywhere, a broken `[tool.zerograd]`
reported under flake8 as on the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from zerograd.analysis.model import Settings
from zerograd.io.files import check_source

BUG = "import torch\nfor b in loader:\n    loss.backward()\n    optimizer.step()\n"
ZG002 = ("import torch\nfor b in loader:\n    optimizer.zero_grad()\n    loss.backward()\n"
         "    optimizer.zero_grad()\n    optimizer.step()\n")
EXEMPT = {  # the first line of a file -> whether it silences the ZG001 below it
    "# flake8: noqa": True,
    "# flake8: NOQA: E501": True,  # flake8 skips the file for any line that starts so
    "# ruff: noqa": True,
    "# ruff: noqa: ZG001": True,
    "# ruff: noqa: ZG0": True,
    "# ruff: noqa: ZG002, F401": False,
    "x = 1  # ruff: noqa": False,  # ruff's file-level form is a comment line of its own
    "# flake8: noqa-nope": True,  # flake8's own pattern matches the start (as flake8 does)
    "# noqa": False,  # an inline noqa silences its own line only
}


def run(tool: str, *args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    prefix = ["-m", "flake8", "--select", "ZG"] if tool == "flake8" else ["-m", "zerograd", "-j", "1"]
    return subprocess.run([sys.executable, *prefix, *args], cwd=cwd, input=stdin.decode(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture()
def exempt_files(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.zerograd]\n")
    for number, first in enumerate(EXEMPT):
        (tmp_path / f"f{number}.py").write_text(f"{first}\n{BUG}")
    return tmp_path


def _reported(output: str) -> set[str]:
    return {line.split(":")[0].lstrip("./") for line in output.splitlines() if ": ZG" in line}


def _expected() -> set[str]:
    return {f"f{number}.py" for number, silent in enumerate(EXEMPT.values()) if not silent}


def test_file_level_noqa_on_the_command_line(exempt_files: Path) -> None:
    assert _reported(run("zerograd", ".", cwd=exempt_files).stdout) == _expected()


def test_file_level_noqa_under_flake8(exempt_files: Path) -> None:
    assert _reported(run("flake8", ".", cwd=exempt_files).stdout) == _expected()


def test_file_level_noqa_on_stdin_and_in_the_servers_check(exempt_files: Path) -> None:
    for number, (first, silent) in enumerate(EXEMPT.items()):
        source = f"{first}\n{BUG}"
        stdin = run("zerograd", "-", "--stdin-filename", f"f{number}.py", cwd=exempt_files, stdin=source.encode())
        assert (stdin.returncode == 0) == silent, first
        assert (not check_source(source, Settings(), describe=False)) == silent, first


def test_ruff_codes_keep_the_others(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(ZG002 + BUG.replace("import torch\n", ""))
    assert {" ZG001 ", " ZG002 "} <= {f" {w} " for w in run("zerograd", "a.py", cwd=tmp_path).stdout.split()}
    (tmp_path / "a.py").write_text("# ruff: noqa: ZG001\n" + ZG002 + BUG.replace("import torch\n", ""))
    found = run("zerograd", "a.py", cwd=tmp_path).stdout
    assert " ZG002 " in found and " ZG001 " not in found


def test_stdin_reads_the_config_of_the_file_it_stands_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZEROGRAD_CACHE_DIR")  # where the project puts its cache is under test
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text('[tool.zerograd]\nper-file-ignores = {"train.py" = ["ZG001"]}\n')
    (project / "train.py").write_text(BUG)
    (project / "other.py").write_text(BUG)
    for name in (str(project / "train.py"), "../proj/train.py"):
        found = run("zerograd", "-", "--stdin-filename", name, cwd=elsewhere, stdin=BUG.encode())
        assert (found.returncode, found.stdout) == (0, "All checks passed!\n"), name
    other = run("zerograd", "-", "--stdin-filename", "../proj/other.py", cwd=elsewhere, stdin=BUG.encode())
    assert other.returncode == 1 and " ZG001 " in other.stdout
    assert not (elsewhere / ".zerograd_cache").exists()  # the project's cache, beside its config
    assert (project / ".zerograd_cache").is_dir()


def test_flake8_stops_on_a_broken_config_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.zerograd]\nselectt = ["ZG001"]\nper-file-ignores = {"a.py" = ["ZG"]}\n')
    (tmp_path / "a.py").write_text(BUG)
    for jobs in ("1", "2"):
        found = run("flake8", "-j", jobs, "a.py", cwd=tmp_path)
        assert found.returncode == 1, found
        assert "selectt: unknown key" in found.stdout and "Traceback" not in found.stdout + found.stderr
    cli = run("zerograd", "a.py", cwd=tmp_path)
    assert cli.returncode == 2 and "selectt: unknown key" in cli.stderr


def test_noqa_is_flake8s_own_pattern() -> None:
    """issue 48: the inline pattern was a copy of flake8's; it is flake8's, so the two cannot drift."""
    from flake8.defaults import NOQA_FILE, NOQA_INLINE_REGEXP

    from zerograd.io import suppress

    assert suppress.NOQA_INLINE is NOQA_INLINE_REGEXP and suppress.NOQA_FILE is NOQA_FILE


def test_the_readme_says_what_a_newcomer_needs() -> None:
    """issue 48: the venv module (a package of its own on Debian and Ubuntu), the package index,
    git, how long the tests take; and pytest says why a test was skipped."""
    root = Path(__file__).resolve().parent.parent
    readme = root.joinpath("README.md").read_text(encoding="utf-8")
    for needed in ("python3-venv", "package index", "`git`", "minutes on 2 idle cores", "`-rs`"):
        assert needed in readme, needed
    assert 'addopts = "-rs"' in root.joinpath("pyproject.toml").read_text(encoding="utf-8")
