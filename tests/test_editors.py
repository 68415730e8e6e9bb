"""The editor snippets of the README, tried in the real editor where one is installed (issue 48).

Emacs with eglot (Debian: `apt-get install emacs-nox elpa-eglot`; eglot is built in from Emacs
29) runs tests/editors/eglot.el, whose snippet must be the README's word for word. Without
Emacs the run is skipped, with that reason shown. VS Code cannot be installed here (it is no
package of the registries this machine reaches): its snippets are not tried."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "editors" / "eglot.el"
BUG = "import torch\nfor b in loader:\n    loss = model(b).sum()\n    loss.backward()\n    optimizer.step()\n"


def _snippet(text: str) -> str:
    """The eglot form: from `(with-eval-after-load 'eglot` to its last parenthesis."""
    match = re.search(r"\(with-eval-after-load 'eglot\n.*?\"server\"\)\)\)", text, re.S)
    assert match, "no eglot snippet"
    return " ".join(match.group().split())


def test_the_script_tries_the_readmes_snippet() -> None:
    assert _snippet(SCRIPT.read_text(encoding="utf-8")) == _snippet((ROOT / "README.md").read_text(encoding="utf-8"))


@pytest.mark.skipif(shutil.which("emacs") is None, reason="Emacs is not installed (apt-get install emacs-nox elpa-eglot)")
def test_eglot_shows_the_diagnostics(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # a project for project.el
    (tmp_path / "pyproject.toml").write_text("[tool.zerograd]\n")
    (tmp_path / "train.py").write_text(BUG)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["emacs", "--batch", "-l", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    if "Cannot open load file" in done.stderr and "eglot" in done.stderr:
        pytest.skip("eglot is not installed (Emacs 28: apt-get install elpa-eglot)")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()  # eglot words the source and code its own way per version
    assert line.startswith("5: ") and "ZG001" in line and "gradients of 'optimizer' are never cleared" in line
