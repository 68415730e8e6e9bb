"""Real flake8 runs: the plugin is wired, columns match the CLI, noqa, stdin and -j 2 work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def flake8(*args: str, stdin: bytes = b"", cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "ZG", *args],
        input=stdin, capture_output=True, cwd=cwd, timeout=300,
    )


def zerograd(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    """The CLI, findings only (-q: no closing line), to compare with flake8's lines."""
    return subprocess.run([sys.executable, "-m", "zerograd", "-q", *args], capture_output=True, cwd=cwd, timeout=300)


def test_flake8_prints_what_zerograd_prints_on_all_fixtures() -> None:
    theirs = flake8("fixtures").stdout.decode().splitlines()
    ours = [line.replace(" [*] ", " ", 1)  # the CLI's fixable mark; flake8 prints its own format
            for line in zerograd("-j", "1", "--no-cache", "fixtures").stdout.decode().splitlines()
            if ".ipynb:" not in line]
    assert any("projects" in line for line in ours)
    assert len(ours) > 40
    assert sorted(theirs) == sorted(ours)


def test_flake8_sees_the_project() -> None:
    """flake8 hands the plugin one file at a time; the plugin checks it in its project's context
    (interface.md v3), so the split tree shows the linked findings, not each module's alone."""
    theirs = flake8("fixtures/projects/split").stdout.decode().splitlines()
    assert [line.split(": ")[0] + " " + line.split()[1] for line in theirs] == [
        "fixtures/projects/split/train_leak.py:11:9 ZG001", "fixtures/projects/split/train_lost.py:11:9 ZG002"]


def test_flake8_answers_as_the_cli_cold_warm_and_after_an_edit(tmp_path: Path) -> None:
    """No `zerograd` run needed first; the cache a run leaves changes nothing; an edit of a
    module the file is linked with changes the file's findings on both routes alike."""
    shutil.copytree(ROOT / "fixtures" / "projects" / "split", tmp_path / "split")
    env = {k: v for k, v in os.environ.items() if k != "ZEROGRAD_CACHE_DIR"}

    def found(command: list[str]) -> list[str]:
        out = subprocess.run(command, capture_output=True, cwd=tmp_path, env=env, timeout=300).stdout.decode()
        return sorted(line.split(": ")[0] + " " + line.split()[1] for line in out.splitlines())

    plugin = [sys.executable, "-m", "flake8", "--select", "ZG", "split"]
    cli = [sys.executable, "-m", "zerograd", "-q", "split"]
    linked = ["split/train_leak.py:11:9 ZG001", "split/train_lost.py:11:9 ZG002"]
    assert found(plugin) == linked
    assert found(cli) == linked
    assert found(plugin) == linked
    (tmp_path / "split" / "train_ok.py").write_text("import torch\n")
    edited = found(plugin)
    assert edited != linked and "split/mylib/steps.py:19:5 ZG005" in edited
    assert found(cli) == edited


def test_flake8_parallel_equals_serial() -> None:
    serial = flake8("-j", "1", "fixtures").stdout
    parallel = flake8("-j", "2", "fixtures").stdout
    assert sorted(serial.splitlines()) == sorted(parallel.splitlines()) and serial


def test_flake8_noqa(tmp_path: Path) -> None:
    source = "for b in loader:\n    loss.backward()\n    optimizer.step()  # noqa: ZG001\n"
    (tmp_path / "a.py").write_text(source)
    (tmp_path / "b.py").write_text(source.replace("  # noqa: ZG001", ""))
    result = flake8("a.py", "b.py", cwd=tmp_path)
    assert result.stdout.decode().splitlines() == [
        "b.py:3:5: ZG001 gradients of 'optimizer' are never cleared in this loop; "
        "call optimizer.zero_grad() before backward() or after step()"
    ]


def test_flake8_stdin_with_display_name() -> None:
    source = b"for b in loader:\n    loss.backward()\n    optimizer.zero_grad()\n    optimizer.step()\n"
    result = flake8("--stdin-display-name", "train.py", "-", stdin=source)
    assert result.stdout.decode().startswith("train.py:3:5: ZG002 ")


def test_flake8_plugin_option_registered() -> None:
    source = b"for b in loader:\n    loss.backward()\n    trainer_thing.step()\n"
    plain = flake8("-", stdin=source)
    configured = flake8("--zerograd-optimizer-names", "trainer_thing", "-", stdin=source)
    assert plain.stdout == b""
    assert configured.stdout.decode().count("ZG001") == 1


def test_plugin_import_does_not_import_libcst() -> None:
    code = "import sys, zerograd.flake8_plugin, zerograd.cli; print('libcst' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert result.stdout.decode().strip() == "False"


def test_flake8_reads_the_files_tool_zerograd(tmp_path: Path) -> None:
    """issue 30: flake8 applies the [tool.zerograd] the CLI reads (names, per-file-ignores); its own
    --zerograd-* options win."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.zerograd]\noptimizer-names = ["trainer_thing"]\n'
        '[tool.zerograd.per-file-ignores]\n"legacy/*" = ["ZG001"]\n')
    source = "for b in loader:\n    loss.backward()\n    trainer_thing.step()\n    trainer_thing.step()\n"
    (tmp_path / "legacy").mkdir()
    for name in ("train.py", "legacy/old.py"):
        (tmp_path / name).write_text(source)
    cli = zerograd("--no-cache", "train.py", "legacy/old.py", cwd=tmp_path).stdout.decode()
    plugin = flake8("train.py", "legacy/old.py", cwd=tmp_path).stdout.decode()
    assert "train.py:3:5: ZG001" in plugin and "old.py" not in plugin
    assert [line.split(" ")[0] for line in plugin.splitlines()] == [line.split(" ")[0] for line in cli.splitlines()]
    overridden = flake8("--zerograd-optimizer-names", "other", "train.py", cwd=tmp_path).stdout.decode()
    assert overridden == ""


def test_the_plugin_reads_a_project_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 43: flake8 hands the plugin one file at a time, and each file read, hashed and
    planned its whole project again (331 files read 331 times each on a real package). A
    process now reads each module of the project once, and answers as a run over the project."""
    import ast

    import zerograd.io.reading
    from zerograd.flake8_plugin import ZeroGradPlugin

    project = tmp_path / "split"
    shutil.copytree(ROOT / "fixtures" / "projects" / "split", project)
    (project / "pyproject.toml").write_text("[tool.zerograd]\n")
    for index in range(20):  # unrelated modules: the context every file used to read again
        (project / f"other_{index}.py").write_text(f"def f_{index}(x):\n    return x + {index}\n")
    modules = sorted(project.rglob("*.py"))
    reads: list[str] = []
    real = zerograd.io.reading.read_source
    monkeypatch.setattr(zerograd.io.reading, "read_source", lambda path: reads.append(path) or real(path))
    found = []
    for module in modules:
        text = module.read_text()
        lines = text.splitlines(keepends=True)
        found += [f"{module.name}:{line}:{col + 1} {message.split()[0]}"
                  for line, col, message, _ in ZeroGradPlugin(ast.parse(text), lines, str(module)).run()]
    assert sorted(found) == ["train_leak.py:11:9 ZG001", "train_lost.py:11:9 ZG002"]
    # Once each; a module whose text the run does not keep (it cannot hold a finding alone) is
    # read once more when the plan or its group's build asks for it.
    assert sorted(set(reads)) == sorted(map(str, modules))
    assert max(Counter(reads).values()) <= 2


def test_a_file_with_windows_line_ends_is_answered_from_the_snapshot(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """flake8 reads lines with universal newlines: a file written with CRLF reached the plugin as
    other bytes than the snapshot read, and each such file ran its whole project again (issue
    43: 43 files of a real package, quadratic). The same text is answered from the snapshot,
    with the CLI's findings; a file edited since is still checked afresh."""
    import ast

    from zerograd.flake8_plugin import ZeroGradPlugin
    from zerograd.io import files

    (tmp_path / "pyproject.toml").write_text("[tool.zerograd]\n")
    leak = "import torch\n\n\ndef train(model, opt, loader):\n    for x in loader:\n" \
           "        model(x).sum().backward()\n        opt.step()\n"
    (tmp_path / "leak.py").write_bytes(leak.replace("\n", "\r\n").encode())
    (tmp_path / "other.py").write_bytes(b"def f(x):\r\n    return x\r\n")
    runs: list[list[str]] = []
    real = files.lint_paths
    monkeypatch.setattr(files, "lint_paths", lambda paths, *a, **k: runs.append(paths) or real(paths, *a, **k))

    def check(text: str) -> list[str]:
        lines = text.splitlines(keepends=True)
        return [f"{line}:{col + 1} {message.split()[0]}"
                for line, col, message, _ in ZeroGradPlugin(ast.parse(text), lines, str(tmp_path / "leak.py")).run()]

    assert check(leak) == ["7:9 ZG001"]
    assert runs == []
    assert zerograd(str(tmp_path / "leak.py")).stdout.decode().split(":")[1:3] == ["7", "9"]
    assert check(leak.replace("opt.step()", "opt.step()\n        opt.zero_grad()")) == []  # an edit: a run of its own
    assert len(runs) == 1


def test_a_run_that_deselects_zg_pays_nothing_for_the_plugin(tmp_path: Path) -> None:
    """flake8 runs every installed plugin and filters what it yields: `--extend-ignore ZG` (or a
    --select without ZG) used to run the whole analysis for nothing. Such a run now does none."""
    (tmp_path / "t.py").write_text("import torch\nfor b in loader:\n    model(b).sum().backward()\n    opt.step()\n")
    spy = ("import sys, zerograd.flake8_plugin as p\n"
           "p.ZeroGradPlugin._in_project = lambda *a, **k: sys.exit('analysed')\n"
           "from flake8.main.cli import main\n"
           "sys.exit(main(sys.argv[1:]))\n")
    for args, analysed in ((["--extend-ignore", "ZG"], False), (["--select", "E,W"], False), (["--select", "ZG"], True)):
        done = subprocess.run([sys.executable, "-c", spy, *args, "t.py"], capture_output=True, cwd=tmp_path,
                              timeout=120)
        assert (b"analysed" in done.stderr) == analysed, (args, done)


def test_the_plugin_scans_a_module_alone_from_flake8s_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 43: flake8 has parsed every file it hands the plugin; a module checked alone (one
    that cannot step, one no other module links with) is read from that tree, not parsed again
    with CPython's ast, and its findings are the same."""
    import ast

    import zerograd.front.relevance
    from zerograd.flake8_plugin import ZeroGradPlugin

    (tmp_path / "pyproject.toml").write_text("[tool.zerograd]\n")
    (tmp_path / "leak.py").write_text("def train(model, opt, loader):\n    for x in loader:\n"
                                      "        model(x).sum().backward()\n        opt.step()\n")
    (tmp_path / "probe.py").write_text("def grads(model, x):\n    model(x).sum().backward()\n    return model.weight.grad\n")
    scanned: list[str] = []
    real = zerograd.front.relevance.scan_text
    monkeypatch.setattr(zerograd.front.relevance, "scan_text",
                        lambda source, *a, **k: scanned.append(source) or real(source, *a, **k))
    found = []
    for module in sorted(tmp_path.glob("*.py")):
        text = module.read_text()
        found += [f"{module.name}:{line} {message.split()[0]}" for line, _, message, _ in
                  ZeroGradPlugin(ast.parse(text), text.splitlines(keepends=True), str(module)).run()]
    assert found == ["leak.py:4 ZG001"]
    assert scanned == []
