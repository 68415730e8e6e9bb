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
    result = subprocess.run([sys.executable, "-m", "zerograd", "-q", str(path)], capture_output=True, cwd=ROOT,
                            timeout=60)
    got = []
    for line in result.stdout.decode().splitlines():
        match = re.match(r".*:cell (\d+):(\d+):\d+: (ZG\d+) ", line)
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
        "Found 2 findings.",
    ]
    assert result.stderr == b""


def test_directories_include_notebooks(tmp_path: Path) -> None:
    (tmp_path / "nb.ipynb").write_bytes((NOTEBOOKS / "train.ipynb").read_bytes())
    result = subprocess.run([sys.executable, "-m", "zerograd", "."], capture_output=True, cwd=tmp_path, timeout=60)
    assert result.stdout.decode().startswith("nb.ipynb:cell 4:6:5: ZG001 ")


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
    result = subprocess.run([sys.executable, "-m", "zerograd", "-q", "--no-cache", "timed.ipynb"], capture_output=True,
                            cwd=tmp_path, timeout=60)
    assert [line.split(": ")[0] for line in result.stdout.decode().splitlines()] == [
        "timed.ipynb:cell 2:4:5", "timed.ipynb:cell 3:5:5"]
    # The cells left out are named in --statistics (stderr for the machine formats), on a warm
    # run (the cache keeps them) as on a cold one.
    for form, stream in (("text", "stdout"), ("json", "stderr"), ("json", "stderr")):
        stats = subprocess.run([sys.executable, "-m", "zerograd", "--statistics", "--format", form,
                                "timed.ipynb"], capture_output=True, cwd=tmp_path, timeout=60)
        assert ("not checked: 2 notebook cells not Python\n  timed.ipynb: cell 4 (%%bash)\n"
                "  timed.ipynb: cell 5 (%%writefile)\n") in getattr(stats, stream).decode()


def _file_lines_of_expectations(path: Path) -> list[int]:
    return [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if "# expect: ZG" in line]


def test_github_and_sarif_point_at_the_notebook_file_line() -> None:
    """GitHub shows annotations and code-scanning alerts on the .ipynb file itself: the line
    they name is the line of the file that holds the cell's line, and the message names the cell."""
    path = NOTEBOOKS / "train.ipynb"
    want = _file_lines_of_expectations(path)
    run = [sys.executable, "-m", "zerograd", str(path), "--format"]
    github = subprocess.run([*run, "github"], capture_output=True, cwd=ROOT, timeout=60).stdout.decode()
    assert [int(m) for m in re.findall(r",line=(\d+),", github)] == want and want
    assert "::ZG001 cell 4, line 6: " in github and "col=" not in github
    sarif = json.loads(subprocess.run([*run, "sarif"], capture_output=True, cwd=ROOT, timeout=60).stdout)
    results = sarif["runs"][0]["results"]
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in results] == want
    assert [(r["properties"]["cell"], r["properties"]["cellLine"]) for r in results] == [
        (cell, line) for cell, line, _ in expected(path)]
    assert results[0]["message"]["text"].startswith("cell 4, line 6: ")


def test_file_lines_of_any_source_layout() -> None:
    """Jupyter writes one string per line; other writers one string per cell, or pieces that
    split a line: each line of a cell maps to the file line where it begins."""
    from zerograd.io.notebook import source_file_lines

    text = ('{"cells": [\n {"cell_type": "markdown", "source": "# title"},\n'
            ' {"cell_type": "code", "source": "a = 1\\nb = 2\\n"},\n'
            ' {"cell_type": "code",\n  "source": [\n   "x = (",\n   "1)\\n",\n   "\\n",\n   "y = 2"\n  ]}\n]}\n')
    assert json.loads(text)  # the layout is valid JSON
    assert source_file_lines(text) == {1: [2], 2: [3, 3], 3: [6, 8, 9]}
    assert source_file_lines("not json") == {}


def test_every_output_names_cells_not_joined_lines(tmp_path: Path) -> None:
    """issue 48: ruff's `cell N` in the text format, and a fix's description in the cell's own
    lines (it named a line of the joined cells, which no editor shows); `--diff` names the file
    as the user wrote it, without `./`."""
    (tmp_path / "nb.ipynb").write_text((NOTEBOOKS / "train.ipynb").read_text(encoding="utf-8"))
    text = subprocess.run([sys.executable, "-m", "zerograd", "-q", "."], capture_output=True, cwd=tmp_path,
                          timeout=60).stdout.decode()
    assert text.startswith("nb.ipynb:cell 4:6:5: ZG001 [*] ")
    (row,) = json.loads(subprocess.run([sys.executable, "-m", "zerograd", "--format", "json", "."],
                                       capture_output=True, cwd=tmp_path, timeout=60).stdout)
    assert (row["cell"], row["cell_line"], row["fix"]) == (4, 6, "insert optimizer.zero_grad() at cell 4, line 3")
    diff = subprocess.run([sys.executable, "-m", "zerograd", "--diff", "."], capture_output=True, cwd=tmp_path,
                          timeout=60).stdout.decode()
    assert diff.startswith("--- a/nb.ipynb\n+++ b/nb.ipynb\n")
