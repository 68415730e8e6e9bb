"""The pre-commit hook, run for real through `pre-commit try-repo` on a temporary git repo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git")
def test_hook_through_try_repo(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q")
    git(work, "config", "user.email", "test@example.invalid")
    git(work, "config", "user.name", "test")
    (work / "train.py").write_text("for b in loader:\n    loss.backward()\n    optimizer.step()\n")
    (work / "ok.py").write_text("print('nothing to see')\n")
    git(work, "add", ".")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "zerograd", "--all-files", "--verbose"],
        cwd=work, capture_output=True, env=env, timeout=600,
    )
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 1, output
    assert "train.py:3:5: ZG001 [*] gradients of 'optimizer' are never cleared" in output
    assert "ok.py" not in output


def test_hooks_run_serially() -> None:
    """interface.md v3: a file's findings never depend on the batch it came in; pre-commit must not
    split the files into parallel batches (the CLI has its own pool)."""
    import yaml  # type: ignore[import-untyped]

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hooks and all(hook.get("require_serial") is True for hook in hooks)
