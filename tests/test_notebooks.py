"""Notebooks: cells joined, magics blanked, findings mapped back to cell and line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "fixtures" / "notebooks"


def expected(path: Path) -> list[tuple[int, int, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for number, cell in enumerate(cells, start=1):
        for line_number, line in enumerate("".join(cell["source"]).splitlines(), start=1):
            match = re.search(r"# expect: (ZG\d+)", line)
            if match and cell["cell_type"] == "code":
                found.append((number, line_number, match.group(1)))
    return found


def test_findings_point_at_cell_and_line() -> None:
    path = NOTEBOOKS / "train.ipynb"
    result = subprocess.run([sys.executable, "-m", "zerograd", str(path)], capture_output=True, cwd=ROOT, timeout=60)
    got = []
    for line in result.stdout.decode().splitlines():
        match = re.match(r".*:cell_(\d+):(\d+):\d+: (ZG\d+) ", line)
        assert match, line
        got.append((int(match.group(1)), int(match.group(2)), match.group(3)))
    assert got == expected(path) and got


def test_malformed_notebooks_are_one_line_diagnostics() -> None:
    result = subprocess.run([sys.executable, "-m", "zerograd", "not_json.ipynb", "no_cells.ipynb"],
                            capture_output=True, cwd=NOTEBOOKS, timeout=60)
    assert result.returncode == 1
    assert result.stdout.decode().splitlines() == [
        "no_cells.ipynb:1:1: ZG900 cannot parse: not a notebook: no 'cells' list",
        "not_json.ipynb:1:1: ZG900 cannot parse: not a notebook: invalid JSON "
        "(Expecting property name enclosed in double quotes at line 1)",
    ]
    assert result.stderr == b"Found 2 findings.\n"


def test_directories_include_notebooks(tmp_path: Path) -> None:
    (tmp_path / "nb.ipynb").write_bytes((NOTEBOOKS / "train.ipynb").read_bytes())
    result = subprocess.run([sys.executable, "-m", "zerograd", "."], capture_output=True, cwd=tmp_path, timeout=60)
    assert result.stdout.decode().startswith("./nb.ipynb:cell_4:6:5: ZG001 ")


def test_flake8_with_an_ipynb_display_name_on_stdin() -> None:
    """Editors and nbQA hand flake8 the Python of a notebook under the notebook's name."""
    source = b"for b in loader:\n    loss.backward()\n    optimizer.step()\n"
    result = subprocess.run([sys.executable, "-m", "flake8", "--select", "ZG", "--stdin-display-name",
                             "analysis.ipynb", "-"], input=source, capture_output=True, timeout=120)
    assert result.stdout.decode().startswith("analysis.ipynb:3:5: ZG001 ")


def test_a_continuation_line_starting_with_an_operator_is_no_magic() -> None:
    """captum's TracInCP tutorial: `% (a, b)` and `!= b` open a line inside brackets; IPython
    reads magics and shell lines only where a statement starts."""
    from zerograd.io.notebook import blank_magics

    cell = ['print(', '    "%d of %d"', '    % (1, 2)', ')', 'ok = (1', '!= 2)', '%matplotlib inline',
            'for i in range(2):', '    !ls', 's = """', '%not a magic', '"""']
    assert blank_magics(cell) == [*cell[:6], '', *cell[7:8], '    pass', *cell[9:]]


def test_python_cell_magics_have_their_body_checked(tmp_path: Path) -> None:
    """issue 31: a training loop under `%%time` (or `%%capture` then `%%time`) is Python and was
    never checked; a `%%bash` cell is not Python and stays out."""
    loop = ["for b in loader:\n", "    model(b).sum().backward()\n", "    optimizer.step()\n"]
    cells = [["import torch\n"], ["%%time\n", *loop], ["%%capture out\n", "%%time\n", *loop],
             ["%%bash\n", "for b in loader; do echo $b; done\n"], ["%%writefile train.py\n", *loop]]
    notebook = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": [],
                           "execution_count": None} for c in cells],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "timed.ipynb").write_text(json.dumps(notebook))
    result = subprocess.run([sys.executable, "-m", "zerograd", "--no-cache", "timed.ipynb"], capture_output=True,
                            cwd=tmp_path, timeout=60)
    assert [line.split(": ")[0] for line in result.stdout.decode().splitlines()] == [
        "timed.ipynb:cell_2:4:5", "timed.ipynb:cell_3:5:5"]
