"""Autofix: fixture pairs, idempotence, bytes preserved, --diff writes nothing, notebooks, and a
property check over every buggy fixture."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from zerograd import lint_source
from zerograd.io.fix import FIXABLE, fix_source

ROOT = Path(__file__).resolve().parent.parent
FIXES = ROOT / "fixtures" / "fixes"
PAIRS = sorted(FIXES.glob("*.in.py"))
BUGGY = sorted(p for p in (ROOT / "fixtures").glob("zg00*.py"))
BUG = "from torch import optim\nfor b in loader:\n    loss.backward()\n    optimizer.zero_grad()\n    optimizer.step()\n"
FIXED = "from torch import optim\nfor b in loader:\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # no newline translation: CRLF stays CRLF


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "zerograd", *args], capture_output=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("path", PAIRS, ids=lambda p: p.name)
def test_fix_pair(path: Path) -> None:
    source = read(path)
    expected = read(path.with_name(path.name.replace(".in.py", ".out.py")))
    outcome = fix_source(source)
    assert outcome.source == expected
    assert outcome.fixed and not outcome.warnings
    assert not [f for f in lint_source(outcome.source) if f.code in FIXABLE]
    assert fix_source(outcome.source).source == outcome.source  # idempotent


@pytest.mark.parametrize("path", BUGGY, ids=lambda p: p.name)
def test_fix_every_buggy_fixture(path: Path) -> None:
    """Whatever --fix changes parses, lints clean of what it fixed, and touches only those lines."""
    source = read(path)
    outcome = fix_source(source)
    after = lint_source(outcome.source)
    assert not [f for f in after if f.code.startswith("ZG9")]
    remaining = {(f.code, f.message) for f in after}
    before = [(f.code, f.message) for f in lint_source(source)]
    for finding in outcome.fixed:
        assert before.count((finding.code, finding.message)) > [(f.code, f.message) for f in after].count(
            (finding.code, finding.message)
        ) or (finding.code, finding.message) not in remaining
    old, new = source.splitlines(), outcome.source.splitlines()
    moved = [line for line in new if line not in old] + [line for line in old if line not in new]
    assert all(line.strip().endswith(")") and ("zero_grad(" in line or "backward(" in line) or "# expect" in line
               for line in moved), moved
    assert len(new) - len(old) <= len(outcome.fixed)


def test_bom_latin1_and_crlf_preserved(tmp_path: Path) -> None:
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + BUG.encode())
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + BUG.encode())
    (tmp_path / "crlf.py").write_bytes(BUG.replace("\n", "\r\n").encode())
    result = run(tmp_path, "--fix", "bom.py", "latin.py", "crlf.py")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "bom.py").read_bytes() == b"\xef\xbb\xbf" + FIXED.encode()
    assert (tmp_path / "latin.py").read_bytes() == b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + FIXED.encode()
    assert (tmp_path / "crlf.py").read_bytes() == FIXED.replace("\n", "\r\n").encode()
    again = run(tmp_path, "--diff", ".")
    assert (again.returncode, again.stdout) == (0, b"")


def test_diff_writes_nothing_and_exits_one(tmp_path: Path) -> None:
    target = tmp_path / "t.py"
    target.write_text(BUG)
    result = run(tmp_path, "--diff", "t.py")
    assert result.returncode == 1
    assert target.read_text() == BUG
    assert result.stdout.decode().splitlines()[:2] == ["--- a/t.py", "+++ b/t.py"]
    assert "+    optimizer.zero_grad()" in result.stdout.decode()


def test_fix_keeps_permissions_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    target = tmp_path / "t.py"
    target.write_text(BUG)
    os.chmod(target, 0o640)
    assert run(tmp_path, "--fix", "t.py").returncode == 0
    assert target.read_text() == FIXED
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]


def test_unparseable_file_is_never_written(tmp_path: Path) -> None:
    broken = BUG + "def oops(:\n"
    (tmp_path / "b.py").write_text(broken)
    result = run(tmp_path, "--fix", "b.py")
    assert (tmp_path / "b.py").read_text() == broken
    assert b"ZG900" in result.stdout and b"Traceback" not in result.stderr


def test_notebook_fix_changes_only_the_cell(tmp_path: Path) -> None:
    document = json.loads((ROOT / "fixtures" / "notebooks" / "train.ipynb").read_text())
    text = json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    (tmp_path / "nb.ipynb").write_text(text)
    assert run(tmp_path, "--fix", "nb.ipynb").returncode == 0
    fixed = json.loads((tmp_path / "nb.ipynb").read_text())
    assert fixed["cells"][:3] == document["cells"][:3]
    assert fixed["cells"][3]["source"][:3] == [
        "optimizer = optim.SGD(model.parameters(), lr=0.1)\n", "for x, y in loader:\n", "    optimizer.zero_grad()\n"
    ]
    assert "    %time print(loss)\n" in fixed["cells"][3]["source"]
    document["cells"][3]["source"] = fixed["cells"][3]["source"]
    assert (tmp_path / "nb.ipynb").read_text() == json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def test_notebook_with_unusual_layout_is_not_rewritten(tmp_path: Path) -> None:
    original = (ROOT / "fixtures" / "notebooks" / "train.ipynb").read_text().replace('"cells": [', '"cells":   [')
    (tmp_path / "nb.ipynb").write_text(original)
    result = run(tmp_path, "--fix", "nb.ipynb")
    assert (tmp_path / "nb.ipynb").read_text() == original
    assert b"cannot be reproduced exactly" in result.stderr


def test_json_says_which_findings_are_fixable(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(BUG)
    (tmp_path / "helper.py").write_text(
        "from torch import optim\ndef step(o):\n    o.step()\nfor b in loader:\n    loss.backward()\n    step(optimizer)\n"
    )
    rows = json.loads(run(tmp_path, "--format", "json", ".").stdout)
    assert {row["path"]: row["fix"] for row in rows} == {
        "helper.py": None,
        "t.py": "move the clear before line 3",
    }


def test_a_fix_that_shifts_another_findings_line_number_holds() -> None:
    """A message names a line ("the backward() at line 28"): a fix inserted above it shifts the
    number, and the other finding is the same one. The check took it for a new finding: the
    first leak of zg001_leak_before_loop.py "did not hold" and was left unfixed."""
    source = (ROOT / "fixtures" / "zg001_leak_before_loop.py").read_text(encoding="utf-8")
    outcome = fix_source(source)
    # Both fixes are applied together: the lines are the file's before any fix.
    assert [f.line for f in outcome.fixed] == [20, 32] and outcome.warnings == []
    assert not [f for f in lint_source(outcome.source) if f.code == "ZG001"]


def test_fixes_applied_together_are_the_fixes_applied_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """fix_source tries a module's fixes together (one re-lint for all), then one at a time:
    the text must be the same either way, on every fixture with two or more fixes."""
    import zerograd.io.fix as fix

    together = {p: fix_source(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "fixtures").rglob("*.py"))}
    several = {p: o for p, o in together.items() if len(o.fixed) > 1}
    assert len(several) >= 3
    monkeypatch.setattr(fix, "_fix_together", lambda *args: None)
    for path, outcome in several.items():
        alone = fix_source(path.read_text(encoding="utf-8"))
        assert alone.source == outcome.source, path.name
        assert sorted(fix.key(f.code, f.message) for f in alone.fixed) == sorted(
            fix.key(f.code, f.message) for f in outcome.fixed), path.name  # line numbers aside


def test_descriptions_checked_together_agree_with_each_checked_alone() -> None:
    """describe() re-lints once with every planned edit applied (one re-lint instead of one per
    finding: 4.7 s -> 0.8 s for a 600-line file with 25 findings); the fixtures with several
    fixable findings get the same marks as when each is checked alone."""
    import zerograd.io.fix as fix

    compared = 0
    for path in sorted((ROOT / "fixtures").glob("zg00*.py")):
        source = path.read_text(encoding="utf-8")
        findings = lint_source(source)
        if sum(f.code in FIXABLE for f in findings) < 2:
            continue
        together = [f.fix for f in fix.describe(source, findings)]
        held = fix._together
        try:
            fix._together = lambda *args: None  # type: ignore[assignment]
            each = [f.fix for f in fix.describe(source, findings)]
        finally:
            fix._together = held
        assert together == each, path.name
        compared += 1 if any(together) else 0
    assert compared >= 5


def test_a_killed_fix_leaves_every_file_whole_and_the_next_run_no_temporary_file(tmp_path: Path) -> None:
    """issue 32: SIGKILL a `--fix` over many files at several moments: every file is byte for
    byte the original or the fixed text; a temporary file it left (named after its target)
    is removed by the next run that checks that target, which leaves none."""
    import random
    import signal
    import time

    original = (ROOT / "examples" / "train.py").read_bytes()
    fixed = fix_source(original.decode()).source.encode()
    assert fixed != original
    rng = random.Random(32)
    for attempt in range(3):
        folder = tmp_path / f"run{attempt}"
        folder.mkdir()
        for n in range(40):
            (folder / f"train_{n}.py").write_bytes(original)
        # A leftover of an earlier killed run, and another tool's file that looks alike.
        stale = folder / ".train_0.py.zerograd-old_k3j2.tmp"
        stale.write_bytes(b"half")
        os.utime(stale, (time.time() - 3600, time.time() - 3600))
        foreign = folder / ".notes.zerograd-x.tmp"
        foreign.write_bytes(b"keep")
        process = subprocess.Popen([sys.executable, "-m", "zerograd", "--fix", "--no-cache", "-j", "1", str(folder)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.4, 1.8))
        process.send_signal(signal.SIGKILL)
        process.wait()
        for n in range(40):
            assert (folder / f"train_{n}.py").read_bytes() in (original, fixed)
        again = subprocess.run([sys.executable, "-m", "zerograd", "--fix", "--no-cache", str(folder)],
                               capture_output=True, timeout=300)
        assert again.returncode == 0, again.stderr.decode()
        assert all((folder / f"train_{n}.py").read_bytes() == fixed for n in range(40))
        assert sorted(p.name for p in folder.glob(".*.tmp")) == [foreign.name]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process (a subprocess per case costs a second of imports)."""
    from zerograd.cli import main

    code = main(["--no-cache", "-q", *args])
    out, err = capsys.readouterr()
    return code, out, err


# Characters str.splitlines() ends a line at and CPython's tokenizer (and LibCST) do not.
ODD_ENDS = ["\f", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
STEP_WITHOUT_CLEAR = "from torch import optim\n# a{}b\nfor b in loader:\n    loss.backward()\n    optimizer.step(){}\n"


@pytest.mark.parametrize("char", ODD_ENDS, ids=lambda c: f"U+{ord(c):04X}")
def test_a_line_end_only_str_splitlines_knows_moves_no_line(tmp_path: Path, char: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """issue 42 item 8: such a character in a comment shifted the lines the engine reported, so
    the `# noqa` below it was read on the wrong line and the fix "did not hold"."""
    (tmp_path / "quiet.py").write_text(STEP_WITHOUT_CLEAR.format(char, "  # noqa: ZG001"), encoding="utf-8")
    assert cli(capsys, str(tmp_path / "quiet.py")) == (0, "", "")
    target = tmp_path / "t.py"
    target.write_text(STEP_WITHOUT_CLEAR.format(char, ""), encoding="utf-8")
    code, out, _ = cli(capsys, str(target))
    assert (code, out.split(" ")[0]) == (1, f"{target}:5:5:")
    code, out, err = cli(capsys, "--fix", str(target))
    assert (code, out) == (0, ""), err
    assert target.read_text(encoding="utf-8") == STEP_WITHOUT_CLEAR.format(char, "").replace(
        "    loss", "    optimizer.zero_grad()\n    loss")


@pytest.mark.parametrize("source", [
    "from torch import optim\nfor b in loader:\n\f    loss.backward()\n    optimizer.zero_grad()\n    optimizer.step()\n",
    "from torch import optim\nfor b in loader:\n    loss.backward()\n\f    optimizer.zero_grad()\n    optimizer.step()\n",
    "from torch import optim\n\f\nfor b in loader:\n    loss.backward()\n    optimizer.zero_grad()\n    optimizer.step()\n",
    "from torch import optim\nfor b in loader:\n    \f# c\n    loss.backward()\n    optimizer.step()\n",
    "from torch import optim\nfor b in loader:\n\f    loss.backward()\n    optimizer.step()\n",
    "from torch import optim\nfor b in loader:\n        \f    loss.backward()\n    optimizer.step()\n",
], ids=["before-backward", "before-clear", "alone", "before-comment", "insert-at", "reset-indent"])
def test_a_form_feed_at_the_start_of_a_line_is_indentation_as_cpython_reads_it(source: str) -> None:
    """CPython's tokenizer resets the column at a form feed in indentation: the line
    `\\f    loss.backward()` is indented by four. A fix indented after it must be too."""
    import ast

    ast.parse(source)
    outcome = fix_source(source)
    assert len(outcome.fixed) == 1 and not outcome.warnings
    assert not lint_source(outcome.source)
    moved = "\f    optimizer.zero_grad()" in source  # a moved line is indented anew
    assert outcome.source.count("\f") == source.count("\f") - moved
    assert outcome.source.count("\n") == source.count("\n") + (outcome.fixed[0].code == "ZG001")


def test_fix_writes_through_a_symlink_to_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    """issue 42 item 7: as black and ruff do; the link was replaced by a fixed regular file and
    its target left unfixed."""
    (tmp_path / "src").mkdir()
    (tmp_path / "links").mkdir()
    target = tmp_path / "src" / "real.py"
    target.write_text(BUG)
    os.chmod(target, 0o640)
    link = tmp_path / "links" / "link.py"
    link.symlink_to(os.path.join("..", "src", "real.py"))
    result = run(tmp_path, "--no-cache", "--fix", "links/link.py")
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == os.path.join("..", "src", "real.py")
    assert target.read_text() == FIXED
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["link.py", "links", "real.py", "src"]


def test_fix_does_not_follow_a_repositorys_link_out_of_the_folder_it_walks(tmp_path: Path) -> None:
    """issue 42: a repository is untrusted. A link it ships to a file of the user's outside it
    (found by walking the folder) is not written through; a link inside it is, and so is one
    the user names on the command line."""
    (tmp_path / "repo").mkdir()
    victim = tmp_path / "victim.py"
    victim.write_text(BUG)
    (tmp_path / "repo" / "out.py").symlink_to(victim)
    (tmp_path / "repo" / "real.py").write_text(BUG)
    (tmp_path / "repo" / "in.py").symlink_to("real.py")
    result = run(tmp_path, "--no-cache", "--fix", "repo")
    assert result.returncode == 2 and b"cannot fix repo/out.py: it links outside repo" in result.stderr, result.stderr
    assert victim.read_text() == BUG and (tmp_path / "repo" / "real.py").read_text() == FIXED
    assert run(tmp_path, "--no-cache", "--fix", "repo/out.py").returncode == 0
    assert victim.read_text() == FIXED and (tmp_path / "repo" / "out.py").is_symlink()


def test_a_read_only_file_is_refused_left_as_it_was_and_its_finding_reported(tmp_path: Path) -> None:
    """issue 42 item 7: a 0444 file in a writable folder was rewritten (the rename needs only the
    folder's permission, and root's access() ignores the mode). Refusing is an error (exit 2,
    as a file that cannot be read); the other files are fixed and the finding is still shown."""
    locked = tmp_path / "locked.py"
    locked.write_text(BUG)
    os.chmod(locked, 0o444)
    (tmp_path / "open.py").write_text(BUG)
    result = run(tmp_path, "--no-cache", "--fix", "locked.py", "open.py")
    assert result.returncode == 2
    assert locked.read_bytes() == BUG.encode() and stat.S_IMODE(os.stat(locked).st_mode) == 0o444
    assert (tmp_path / "open.py").read_text() == FIXED
    assert b"zerograd: error: cannot fix locked.py: read-only file\n" in result.stderr
    assert result.stdout.decode().startswith("locked.py:4:5: ZG002 ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked.py", "open.py"]

def _aged(path: Path, text: str = "half") -> Path:
    path.write_text(text)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    return path


def test_fix_sweeps_leftovers_of_every_file_it_checks_not_only_those_it_writes(tmp_path: Path) -> None:
    """issue 42 item 12: a temporary file left by a killed `--fix` stayed for as long as its
    target needed no fix. Only our exact names for a checked file go, and only regular files."""
    (tmp_path / "clean.py").write_text("print('no training here')\n")
    (tmp_path / "t.py").write_text(BUG)
    swept = [_aged(tmp_path / ".clean.py.zerograd-k3j2_x9q.tmp"), (tmp_path / ".t.py.zerograd-abcdefgh.tmp")]
    swept[1].write_text("young: its writer was killed, nobody holds it")
    kept = [
        _aged(tmp_path / ".other.py.zerograd-k3j2_x9q.tmp"),  # other.py is not checked
        _aged(tmp_path / ".clean.py.zerograd-notours.tmp"),  # not mkstemp's eight characters
        _aged(tmp_path / ".clean.py.zerograd-k3j2_x9q.tmp.bak"),
        tmp_path / ".clean.py.zerograd-linklink.tmp",
        tmp_path / ".clean.py.zerograd-folderxx.tmp",
    ]
    kept[3].symlink_to(tmp_path / "t.py")
    kept[4].mkdir()
    diff = run(tmp_path, "--no-cache", "--diff", "clean.py", "t.py")  # --diff writes (and removes) nothing
    assert diff.returncode == 1 and all(p.exists() for p in swept)
    result = run(tmp_path, "--no-cache", "--fix", "clean.py", "t.py")
    assert result.returncode == 0, result.stderr
    assert [p.name for p in swept if os.path.lexists(p)] == []
    assert [p.name for p in kept if os.path.lexists(p)] == [p.name for p in kept]
    assert (tmp_path / "t.py").read_text() == FIXED


def test_fix_spares_a_temporary_file_that_a_live_writer_holds(tmp_path: Path) -> None:
    """Another `zerograd --fix` may be writing that file right now: it holds a lock on it from
    creation to rename, and a locked file is not swept, however old."""
    import fcntl

    from zerograd.io.writing import temporary_file

    (tmp_path / "clean.py").write_text("print('no training here')\n")
    handle, name = temporary_file(str(tmp_path / "clean.py"))
    try:
        os.utime(name, (1_000_000_000, 1_000_000_000))
        probe = os.open(name, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(probe)
        assert run(tmp_path, "--no-cache", "--fix", "clean.py").returncode == 0
        assert os.path.exists(name)
    finally:
        os.close(handle)
    assert run(tmp_path, "--no-cache", "--fix", "clean.py").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.py"]
