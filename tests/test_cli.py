"""The zerograd command: formats, selection, noqa, stdin, exit codes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zerograd import __version__
from zerograd.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train.py"
BUG = "import torch\nfor b in loader:\n    loss.backward()\n    optimizer.step()\n"
CLEAN = "import torch\nfor b in loader:\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"


def run(*args: str, stdin: bytes = b"", cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "zerograd", *args], input=stdin, capture_output=True, cwd=cwd, timeout=120
    )


def test_example_prints_findings_in_text_format() -> None:
    result = run("examples/")
    *lines, closing = result.stdout.decode().splitlines()
    assert result.returncode == 1
    assert [line.split(": ")[1].split()[0] for line in lines] == ["ZG001", "ZG002", "ZG003"]
    assert lines[0].startswith("examples/train.py:12:13: ZG001 [*] gradients of 'optimizer' are never cleared")
    assert (closing, result.stderr) == ("Found 3 findings (3 fixable with `zerograd --fix`).", b"")  # as ruff


def test_json_format(tmp_path: Path) -> None:
    (tmp_path / "bug.py").write_text(BUG)
    result = run("--format", "json", "bug.py", cwd=tmp_path)
    assert result.returncode == 1
    assert json.loads(result.stdout) == [
        {
            "path": "bug.py",
            "line": 4,
            "col": 5,
            "end_line": 4,
            "end_col": 21,
            "code": "ZG001",
            "message": "gradients of 'optimizer' are never cleared in this loop; "
            "call optimizer.zero_grad() before backward() or after step()",
            "fix": "insert optimizer.zero_grad() at line 3",
        }
    ]


def test_clean_file_exits_zero_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(CLEAN)
    result = run("ok.py", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"All checks passed!\n", b"")
    assert run("-q", "ok.py", cwd=tmp_path).stdout == b""


def test_exit_zero_and_statistics(tmp_path: Path) -> None:
    (tmp_path / "bug.py").write_text(BUG)
    result = run("--exit-zero", "--statistics", "bug.py", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.decode().splitlines()[-2:] == ["1     ZG001 gradients-never-cleared",
                                                        "Found 1 finding (1 fixable with `zerograd --fix`)."]


@pytest.mark.parametrize(
    ("options", "codes"),
    [
        ((), ["ZG001", "ZG002", "ZG003"]),
        (("--select", "ZG002"), ["ZG002"]),
        (("--ignore", "ZG00"), []),
        (("--ignore", "ZG", "--extend-select", "ZG003"), ["ZG003"]),
        (("--select", "ZG001,ZG003"), ["ZG001", "ZG003"]),
    ],
)
def test_select_ignore(options: tuple[str, ...], codes: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    main(["-q", *options, str(EXAMPLE)])
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == codes


def test_bad_code_is_a_usage_error() -> None:
    result = run("--select", "E501", "examples/")
    assert result.returncode == 2
    assert b"not a zerograd code" in result.stderr


def test_noqa_like_flake8(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BUG.replace("step()", "step()  # noqa: ZG001"))
    (tmp_path / "b.py").write_text(BUG.replace("step()", "step()  # noqa:ZG0"))
    (tmp_path / "c.py").write_text(BUG.replace("step()", "step()  # NOQA"))
    (tmp_path / "d.py").write_text(BUG.replace("step()", "step()  # noqa: ZG002"))
    result = run("-q", ".", cwd=tmp_path)
    assert result.stdout.decode().splitlines() == [
        "d.py:4:5: ZG001 [*] gradients of 'optimizer' are never cleared in this loop; "
        "call optimizer.zero_grad() before backward() or after step()"
    ]


def test_stdin_with_filename() -> None:
    result = run("-", "--stdin-filename", "src/train.py", stdin=BUG.encode())
    assert result.returncode == 1
    assert result.stdout.decode().startswith("src/train.py:4:5: ZG001 ")


def test_stdin_without_filename() -> None:
    result = run("-q", "-", stdin=CLEAN.encode())
    assert (result.returncode, result.stdout) == (0, b"")


def test_version() -> None:
    result = run("--version")
    assert result.stdout.decode().strip() == f"zerograd {__version__}"


def test_directory_walk_skips_virtualenvs_and_build(tmp_path: Path) -> None:
    for folder in ("pkg", ".venv/lib", "build", "env_like"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "t.py").write_text(BUG)
    (tmp_path / "env_like" / "pyvenv.cfg").write_text("home = /usr\n")
    result = run("-q", ".", cwd=tmp_path)
    assert [line.split(":")[0] for line in result.stdout.decode().splitlines()] == ["pkg/t.py"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"def f(:\n    loss.backward()\n", "bad.py:1:7: ZG900 cannot parse: invalid syntax"),
        (b"x = '\xff'\nloss.backward()\n", "bad.py:1:1: ZG900 cannot parse: undecodable bytes"),
        (b"loss.backward()\x00\n", "bad.py:1:16: ZG900 cannot parse: source code string cannot contain null bytes"),
    ],
)
def test_unparseable_input_is_zg900_not_a_traceback(tmp_path: Path, content: bytes, expected: str) -> None:
    (tmp_path / "bad.py").write_bytes(content)
    result = run("bad.py", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.decode().startswith(expected)
    assert b"Traceback" not in result.stderr


def test_empty_file_and_missing_path(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_bytes(b"")
    result = run("empty.py", "missing.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.decode().strip() == "zerograd: error: missing.py: no such file or directory"


def test_latin1_cookie_and_bom_decode(tmp_path: Path) -> None:
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + BUG.encode())
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + BUG.encode())
    (tmp_path / "crlf.py").write_bytes(BUG.replace("\n", "\r\n").encode())
    result = run("-q", "latin.py", "bom.py", "crlf.py", cwd=tmp_path)
    assert [line.split(": ")[0] for line in result.stdout.decode().splitlines()] == [
        "bom.py:4:5",
        "crlf.py:4:5",
        "latin.py:6:5",
    ]


def test_parallel_output_equals_serial(tmp_path: Path) -> None:
    for index in range(40):
        (tmp_path / f"f{index:02}.py").write_text(BUG if index % 3 else CLEAN)
    # Files the parent checks itself (no `backward`): undecodable bytes are still ZG900.
    (tmp_path / "undecodable.py").write_bytes(b"x = '\xff'\n")
    (tmp_path / "plain.py").write_text("x = 1\n")
    serial = run("-j", "1", ".", cwd=tmp_path)
    parallel = run("-j", "2", ".", cwd=tmp_path)
    assert serial.stdout == parallel.stdout and serial.stdout.count(b"ZG001") == 26
    assert b"undecodable.py:1:1: ZG900" in parallel.stdout


def test_fixes_are_described_only_for_the_formats_that_print_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bug.py").write_text(BUG)
    path = str(tmp_path / "bug.py")
    assert main(["--format", "json", path]) == 1
    assert json.loads(capsys.readouterr().out)[0]["fix"]  # described
    import zerograd.io.fix

    def refuse(*args: object) -> None:
        raise AssertionError("describe() called for a format that prints no fix")

    monkeypatch.setattr(zerograd.io.fix, "describe", refuse)
    for fmt in ("text", "github"):
        assert main(["--format", fmt, path]) == 1
        out = capsys.readouterr().out
        assert "ZG001" in out and "ZG901" not in out


def test_server_accepts_stdio_and_refuses_other_arguments() -> None:
    """Editors' presets start language servers with `--stdio` (tests/test_server.py runs it so);
    anything else is an error, not ignored."""
    refused = run("server", "--tcp")
    assert refused.returncode == 2 and b"--tcp" in refused.stderr
    helped = run("server", "--help")
    assert helped.returncode == 0 and b"--stdio" in helped.stdout


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_statistics_keep_every_format_parseable(tmp_path: Path, fmt: str) -> None:
    """issue 31: with json and sarif the counts go to stderr, so stdout stays one JSON document."""
    (tmp_path / "bug.py").write_text(BUG)
    result = run("--statistics", "--format", fmt, "bug.py", cwd=tmp_path)
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 1
    if fmt in ("json", "sarif"):
        json.loads(out)
    elif fmt == "github":
        assert all(line.startswith("::") for line in out.splitlines())
    counts = out if fmt == "text" else err
    assert "1     ZG001 gradients-never-cleared" in counts.splitlines()


@pytest.mark.parametrize("option", ["--select", "--ignore", "--extend-select"])
def test_a_prefix_that_matches_no_rule_is_an_error(tmp_path: Path, option: str) -> None:
    """`--select ZG7` checked nothing and CI went green: a typo must fail loudly (exit 2)."""
    (tmp_path / "bug.py").write_text(BUG)
    result = run(option, "ZG7", "bug.py", cwd=tmp_path)
    assert result.returncode == 2 and b"'ZG7' matches no rule" in result.stderr
    assert run(option, "ZG00,ZG9", "bug.py", cwd=tmp_path).returncode in (0, 1)


@pytest.mark.parametrize("table", ['select = ["ZG010"]', '[tool.zerograd.per-file-ignores]\n"a/*" = ["ZG8"]'])
def test_a_config_code_that_matches_no_rule_is_an_error(tmp_path: Path, table: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.zerograd]\n{table}\n")
    (tmp_path / "bug.py").write_text(BUG)
    result = run("bug.py", cwd=tmp_path)
    assert result.returncode == 2 and b"matches no rule" in result.stderr


def test_text_closes_with_a_count_and_marks_what_fix_repairs(tmp_path: Path) -> None:
    step_function = "\n\ndef update(model, opt, batch):\n    model(batch).sum().backward()\n    opt.step()\n"
    (tmp_path / "bug.py").write_text(BUG + step_function)
    result = run("bug.py", cwd=tmp_path)
    *lines, closing = result.stdout.decode().splitlines()
    assert [line.split()[1:3] for line in lines] == [["ZG001", "[*]"], ["ZG005", "this"]]  # ZG005: report-only
    assert (closing, result.stderr) == ("Found 2 findings (1 fixable with `zerograd --fix`).", b"")


def test_a_run_that_finds_no_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = run("empty", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, b"zerograd: warning: no Python files found\n")


def test_help_names_the_server_and_the_exit_codes() -> None:
    out = run("--help").stdout.decode()
    assert "zerograd server" in out and "exit codes:" in out and "  2  an error" in out


def _ignoring_tree(root: Path) -> None:
    """A repository whose .gitignore files name wandb's copies of the code and local scripts."""
    (root / ".git").mkdir()
    (root / ".gitignore").write_text("wandb/\n*_copy.py\n!keep_copy.py\n")
    for name in ("train.py", "x_copy.py", "keep_copy.py", "wandb/run-1/files/code/train.py", "sub/ok.py",
                 "sub/local.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(BUG)
    (root / "sub" / ".ignore").write_text("local.py\n")


def _reported(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    return sorted({line.split(":")[0] for line in result.stdout.decode().splitlines() if ": ZG" in line})


def test_discovery_respects_gitignore(tmp_path: Path) -> None:
    """issue 31: wandb's copies of the code were reported twice. As in ruff: .gitignore and
    .ignore files (negations, folder patterns, the root's file when a subfolder is walked) are
    respected; a file named on the command line is still checked; the option turns it off."""
    _ignoring_tree(tmp_path)
    assert _reported(run(".", cwd=tmp_path)) == ["keep_copy.py", "sub/ok.py", "train.py"]
    assert _reported(run("sub", cwd=tmp_path)) == ["sub/ok.py"]
    assert _reported(run("x_copy.py", cwd=tmp_path)) == ["x_copy.py"]
    everything = ["keep_copy.py", "sub/local.py", "sub/ok.py", "train.py",
                  "wandb/run-1/files/code/train.py", "x_copy.py"]
    assert _reported(run("--no-respect-gitignore", ".", cwd=tmp_path)) == everything
    (tmp_path / "pyproject.toml").write_text("[tool.zerograd]\nrespect-gitignore = false\n")
    assert _reported(run(".", cwd=tmp_path)) == everything
    assert _reported(run("--respect-gitignore", ".", cwd=tmp_path)) == ["keep_copy.py", "sub/ok.py", "train.py"]


def test_a_folder_named_is_checked_though_ignored(tmp_path: Path) -> None:
    """issue 48: `zerograd wandb` checked nothing ("no Python files found", exit 0); ruff checks
    what it is told to check. --force-exclude keeps what it means: exclusions apply to it too."""
    _ignoring_tree(tmp_path)
    (tmp_path / "wandb" / ".gitignore").write_text("skipped.py\n")
    (tmp_path / "wandb" / "skipped.py").write_text(BUG)
    assert _reported(run("wandb", cwd=tmp_path)) == ["wandb/run-1/files/code/train.py"]
    assert _reported(run("wandb/run-1", cwd=tmp_path)) == ["wandb/run-1/files/code/train.py"]
    forced = run("--force-exclude", "wandb", cwd=tmp_path)
    assert (_reported(forced), forced.returncode) == ([], 0)


def test_a_reader_that_goes_away_gets_no_traceback() -> None:
    """`zerograd . | head -1`, `zerograd server --help | head -1`: the pipe closes before the
    output is written; a one-line exit, never a traceback."""
    import os

    for args in (["server", "--help"], ["--explain", "ZG001"], ["examples/"]):
        read, write = os.pipe()
        os.close(read)
        try:
            result = subprocess.run([sys.executable, "-m", "zerograd", *args], stdout=write, stderr=subprocess.PIPE,
                                    cwd=Path(__file__).resolve().parent.parent, timeout=60)
        finally:
            os.close(write)
        assert b"Traceback" not in result.stderr and result.returncode == 2, result.stderr.decode()


def test_ruffs_habits(tmp_path: Path) -> None:
    """issue 48: ruff's names and habits, which exited 2 or printed otherwise."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bug.py").write_text(BUG)
    (tmp_path / "pkg" / "gen_pb2.py").write_text(BUG)
    plain = run("--output-format", "json", ".", cwd=tmp_path)
    assert [row["path"] for row in json.loads(plain.stdout)] == ["pkg/bug.py", "pkg/gen_pb2.py"]  # no ./
    assert run("-q", "--extend-exclude", "*_pb2.py", ".", cwd=tmp_path).stdout.decode().splitlines() == [
        line for line in run("-q", "pkg/bug.py", cwd=tmp_path).stdout.decode().splitlines()]
    assert run("-q", "--exclude", "pkg", ".", cwd=tmp_path).stdout == b""
    written = run("-o", "report.txt", "pkg/bug.py", cwd=tmp_path)
    assert (written.returncode, written.stdout) == (1, b"")
    assert (tmp_path / "report.txt").read_text().splitlines()[-1].startswith("Found 1 finding")
    assert run("-o", "no/such/folder/r.txt", "pkg", cwd=tmp_path).returncode == 2
    (tmp_path / "pyproject.toml").write_text('[tool.zerograd]\nignore = ["ZG003"]\n')
    settings = run("--show-settings", "--extend-exclude", "gen", cwd=tmp_path).stdout.decode()
    assert f"Settings path: {tmp_path / 'pyproject.toml'}" in settings
    assert 'ignore = ["ZG003"]' in settings and 'extend-exclude = ["gen"]' in settings
    diff = run("--diff", ".", cwd=tmp_path).stdout.decode()
    assert "--- a/pkg/bug.py\n+++ b/pkg/bug.py\n" in diff


def test_colours_on_a_terminal_only(tmp_path: Path) -> None:
    """Colour when asked by FORCE_COLOR (a pipe is no terminal), never with NO_COLOR."""
    import os

    (tmp_path / "bug.py").write_text(BUG)

    def with_env(**env: str) -> bytes:
        base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
        return subprocess.run([sys.executable, "-m", "zerograd", "bug.py"], cwd=tmp_path, capture_output=True,
                              env={**base, **env}, timeout=120).stdout

    assert b"\x1b[" not in with_env()
    assert with_env(FORCE_COLOR="1").startswith(b"\x1b[1mbug.py\x1b[0m:4:5: \x1b[1;31mZG001\x1b[0m \x1b[36m[*]\x1b[0m ")
    assert b"\x1b[" not in with_env(FORCE_COLOR="1", NO_COLOR="1")
