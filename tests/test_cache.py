"""The on-disk cache: a warm run parses nothing and prints what a cold run prints; an edited
callee changes its caller's finding; bad, foreign and unwritable entries are never trusted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zerograd.engine
import zerograd.io.files
import zerograd.project.linking
import zerograd.project.plan
from zerograd.analysis.model import Settings
from zerograd.cli import main
from zerograd.project.cache import Cache

ROOT = Path(__file__).resolve().parent.parent
SPLIT = ROOT / "fixtures" / "projects" / "split"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["-q", *args])  # findings only: no closing line
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the split project, the working directory, its cache in `.zerograd_cache`."""
    shutil.copytree(SPLIT, tmp_path / "split")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZEROGRAD_CACHE_DIR")
    return tmp_path / "split"


def _broken(*_: object, **__: object) -> None:
    raise AssertionError("a warm run parsed or planned")


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("form", ["text", "json"])
def test_warm_run_prints_the_cold_run_and_parses_nothing(capsys: pytest.CaptureFixture[str], jobs: str, form: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("--format", form, "-j", jobs, str(ROOT / "fixtures"))
    cold = cli(capsys, "--no-cache", *args)
    assert cli(capsys, *args) == cold  # fills the cache
    for module, name in ((zerograd.io.files, "check_bytes"), (zerograd.project.linking, "check_group"),
                         (zerograd.project.plan.Project, "plan"), (zerograd.engine, "lint_source")):
        monkeypatch.setattr(module, name, _broken)
    warm = cli(capsys, *args)
    assert warm == cold and cold[0] == 1 and cold[1].count("ZG0") > 40


def test_editing_a_callee_changes_the_callers_finding(capsys: pytest.CaptureFixture[str], split: Path) -> None:
    def leaks() -> list[str]:
        return [line for line in cli(capsys, "split")[1].splitlines() if "train_leak.py" in line]

    assert [line.split(": ")[1][:5] for line in leaks()] == ["ZG001"]
    steps = split / "mylib" / "steps.py"
    original = steps.read_text()
    steps.write_text(original.replace("    optimizer.step()\n\n\ndef update",
                                      "    optimizer.step()\n    optimizer.zero_grad()\n\n\ndef update"))
    assert leaks() == []  # train_leak.py is unchanged: its entry named the old steps.py
    steps.write_text(original)
    assert [line.split(": ")[1][:5] for line in leaks()] == ["ZG001"]


def test_cache_folder_carries_a_gitignore_and_no_cache_writes_nothing(capsys: pytest.CaptureFixture[str],
                                                                       split: Path) -> None:
    folder = split.parent / ".zerograd_cache"
    cli(capsys, "--no-cache", "split")
    assert not folder.exists()
    cli(capsys, "split")
    assert "*" in (folder / ".gitignore").read_text().splitlines()
    assert (folder / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    (split.parent / "pyproject.toml").write_text('[tool.zerograd]\ncache-dir = "elsewhere"\n')
    cli(capsys, "split")
    assert (split.parent / "elsewhere" / ".gitignore").exists()


def test_a_file_the_prefilter_clears_gets_no_entry(capsys: pytest.CaptureFixture[str], split: Path) -> None:
    """issue 43: an entry costs a file created (most of a cold flake8 run's cache cost), and a
    module alone that cannot backpropagate is answered faster than its entry is read; it still
    gets its finding from the group it is linked in, and an undecodable one its ZG900."""
    (split / "plain.py").write_text("def f(x):\n    return x + 1\n")
    (split / "latin.py").write_bytes(b"x = '\xe9'\n")
    (split / "model_only.py").write_text("import torch\nclass M(torch.nn.Module):\n    pass\n")
    cold = cli(capsys, "split")
    written = len(list((split.parent / ".zerograd_cache" / "file").glob("*.json")))
    checked = [p for p in split.rglob("*.py") if "backward" in p.read_text(errors="replace")]
    assert written <= len(checked) + 2 < len(list(split.rglob("*.py")))
    assert cli(capsys, "split") == cold and "latin.py:1:1: ZG900" in cold[1]


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/*.json"))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "checksum", "swapped"])
def test_bad_entries_are_ignored_and_rewritten(capsys: pytest.CaptureFixture[str], split: Path, damage: str) -> None:
    folder = split.parent / ".zerograd_cache"
    cold = cli(capsys, "split")
    entries = _entries(folder)
    assert len(entries) == 11  # five modules, the five outlines the plan read, and the plan
    contents = [e.read_bytes() for e in entries]
    for number, entry in enumerate(entries):
        data = contents[number]
        entry.write_bytes({
            "truncated": data[: len(data) // 2],
            "garbage": os.urandom(64),
            "empty": b"",
            "checksum": data.replace(b"ZG00", b"ZG99") if b"ZG00" in data else data[:-2] + b"}}",
            "swapped": contents[(number + 1) % len(contents)],  # intact, but another file's entry
        }[damage])
    assert cli(capsys, "split") == cold
    cache = Cache(str(folder), Settings())
    for path in sorted(split.rglob("*.py")):
        entry = cache.entry(str(path))
        assert entry is not None, path  # rewritten
    assert cli(capsys, "split") == cold


def test_unwritable_cache_warns_once_and_checks_anyway(capsys: pytest.CaptureFixture[str], split: Path) -> None:
    blocker = split.parent / "file"
    blocker.write_text("not a folder")
    code, out, err = cli(capsys, "--cache-dir", str(blocker / "cache"), "split")
    assert code == 1 and out.count("ZG00") == 2
    assert err.count("warning: cannot write the cache") == 1


def test_settings_are_part_of_the_key(capsys: pytest.CaptureFixture[str], split: Path) -> None:
    assert cli(capsys, "split")[1].count("ZG00") == 2
    assert cli(capsys, "--not-optimizer-names", "optimizer", "split")[1] == ""
    assert cli(capsys, "split")[1].count("ZG00") == 2


def test_fix_descriptions_are_not_lost_by_a_run_that_did_not_describe(capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    fixes = str(ROOT / "fixtures" / "fixes")
    cold = cli(capsys, "--no-cache", "--format", "json", fixes)
    assert any(item.get("fix") for item in json.loads(cold[1]))
    cli(capsys, "--format", "text", fixes)  # entries without descriptions
    assert cli(capsys, "--format", "json", fixes) == cold
    assert cli(capsys, "--format", "json", fixes) == cold  # now described entries


def test_two_runs_at_once_share_one_cache(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "zerograd", "-j", "2", "--cache-dir", str(tmp_path / "c"), "fixtures"]
    expected = subprocess.run([*command, "--no-cache"], capture_output=True, cwd=ROOT, timeout=300).stdout
    for _ in range(2):
        runs = [subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT) for _ in range(2)]
        assert [run.communicate(timeout=300)[0] for run in runs] == [expected, expected]
    assert not list((tmp_path / "c").glob("*/.tmp-*"))  # no temporary file left behind


def test_a_module_linked_with_others_is_not_served_its_entry_of_another_group(
        capsys: pytest.CaptureFixture[str], split: Path) -> None:
    """train_ok.py calls update(), so steps.py has no step function; a run given a subset of the
    files sees them in the project's context (interface.md v3) and answers the same. With
    train_ok.py gone, the same unchanged steps.py has one (ZG005): its entry names its group."""
    assert "ZG005" not in cli(capsys, "split")[1]
    subset = ["split/mylib/__init__.py", "split/mylib/steps.py", "split/train_leak.py"]
    assert "ZG005" not in cli(capsys, *subset)[1]
    (split / "train_ok.py").unlink()
    assert [line.split(": ")[0] for line in cli(capsys, *subset)[1].splitlines() if "ZG005" in line] == [
        "split/mylib/steps.py:19:5"]
    assert [line.split(": ")[0] for line in cli(capsys, "split")[1].splitlines() if "ZG005" in line] == [
        "split/mylib/steps.py:19:5"]


def test_an_entry_answers_only_the_file_and_settings_it_was_written_for(tmp_path: Path) -> None:
    cache = Cache(str(tmp_path), Settings())
    cache.store("/a.py", "same", (), False, [])
    written = Path(cache._file("file", "/a.py"))
    for other, settings in (("/b.py", Settings()), ("/a.py", Settings(("opt",)))):
        target = Path(Cache(str(tmp_path), settings)._file("file", other))
        shutil.copy(written, target)
        assert Cache(str(tmp_path), settings).entry(other) is None
    assert cache.entry("/a.py") is not None


def test_editing_an_imported_class_changes_the_callers_finding(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "fixtures" / "projects" / "classes", tmp_path / "classes")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZEROGRAD_CACHE_DIR")

    def leaks() -> list[str]:
        return [line.split(": ")[1][:5] for line in cli(capsys, "classes")[1].splitlines() if "train_leak.py" in line]

    assert leaks() == ["ZG001"]
    trainer = tmp_path / "classes" / "trainlib" / "trainer.py"
    original = trainer.read_text()
    fixed = original.replace("    def apply(self):\n        self.optimizer.step()\n",
                             "    def apply(self):\n        self.optimizer.step()\n        self.optimizer.zero_grad()\n")
    assert fixed != original
    trainer.write_text(fixed)
    assert leaks() == []  # the method now clears after its step: t.apply() in the caller is fine
    trainer.write_text(original)
    assert leaks() == ["ZG001"]


def test_editing_the_trainers_accumulation_changes_a_hooks_finding(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "fixtures" / "projects" / "frameworks", tmp_path / "frameworks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZEROGRAD_CACHE_DIR")

    def codes() -> list[str]:
        return sorted(line.split(": ")[1][:5] for line in cli(capsys, "frameworks")[1].splitlines() if "models.py" in line)

    assert codes() == ["ZG002", "ZG003"]
    train = tmp_path / "frameworks" / "train.py"
    original = train.read_text()
    train.write_text(original.replace("accumulate_grad_batches=4", "accumulate_grad_batches=1"))
    assert codes() == ["ZG002"]  # models.py is unchanged: its cached findings are its group's
    train.write_text(original)
    assert codes() == ["ZG002", "ZG003"]


HOSTILE = ["dev-zero", "fifo", "folder", "huge", "symlink-out"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_entry_is_a_miss_with_one_warning(tmp_path: Path, hostile: str) -> None:
    """issue 32: a repository can ship `.zerograd_cache`. An entry that is a link to /dev/zero,
    a FIFO, a folder, a file far larger than what it describes, or a cache folder that links
    outside the project: a miss, one warning line, the same findings, never a hang or a
    traceback (a link to /dev/zero read until memory ran out; a FIFO blocked forever)."""
    import resource

    project = tmp_path / "split"
    shutil.copytree(SPLIT, project)
    env = {k: v for k, v in os.environ.items() if k != "ZEROGRAD_CACHE_DIR"}
    run = [sys.executable, "-m", "zerograd", "split"]

    def limited() -> None:  # a read of /dev/zero must not take the machine with it
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    cold = subprocess.run(run, capture_output=True, cwd=tmp_path, env=env, timeout=120)
    folder = tmp_path / ".zerograd_cache"
    entries = sorted((folder / "file").glob("*.json"))
    assert entries
    if hostile == "symlink-out":
        outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"  # outside the project
        shutil.move(str(folder), str(outside))
        folder.symlink_to(outside)
    for entry in entries if hostile != "symlink-out" else []:
        entry.unlink()
        if hostile == "dev-zero":
            entry.symlink_to("/dev/zero")
        elif hostile == "fifo":
            os.mkfifo(entry)
        elif hostile == "folder":
            entry.mkdir()
        else:
            with open(entry, "wb") as out:
                out.truncate(64 << 20)  # sparse: 64 MiB of zeros
    warm = subprocess.run(run, capture_output=True, cwd=tmp_path, env=env, timeout=60, preexec_fn=limited)
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout)
    err = warm.stderr.decode()
    assert "Traceback" not in err and err.count("zerograd: warning:") == 1, err
    if hostile == "symlink-out":
        written = sorted(p.name for p in (tmp_path.parent / f"{tmp_path.name}-elsewhere" / "file").iterdir())
        assert written == sorted(e.name for e in entries)  # nothing written through the link


def _quiet_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ZEROGRAD_CACHE_DIR"}


def _hostile_repository(tmp_path: Path) -> tuple[Path, Path, Path]:
    """issue 42: a repository that commits `.zerograd_cache/CACHEDIR.TAG` as a link to a file of
    the user's and `.zerograd_cache/.gitignore` as a dangling link (what it would create)."""
    repo = tmp_path / "repo"
    shutil.copytree(SPLIT, repo)
    (repo / "pyproject.toml").write_text("[tool.zerograd]\n")
    folder = repo / ".zerograd_cache"
    folder.mkdir()
    victim, created = tmp_path / "victim", tmp_path / "created"
    victim.write_text("precious\n")
    (folder / "CACHEDIR.TAG").symlink_to(victim)
    (folder / ".gitignore").symlink_to(created)
    return repo, victim, created


def _lsp_diagnostics(repo: Path, path: Path) -> list[str]:
    """The codes `zerograd server` publishes for `path`, opened as it is on disk."""
    import select
    import time

    def frame(message: dict[str, object]) -> bytes:
        body = json.dumps(message).encode()
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    opened = {"textDocument": {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": path.read_text()}}
    process = subprocess.Popen([sys.executable, "-m", "zerograd", "server"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=repo, env=_quiet_env())
    assert process.stdin is not None and process.stdout is not None
    for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": {"capabilities": {}, "processId": None, "rootUri": repo.as_uri()}},
                    {"jsonrpc": "2.0", "method": "initialized", "params": {}},
                    {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": opened}):
        process.stdin.write(frame(message))
    process.stdin.flush()
    received, deadline = b"", time.time() + 60
    while time.time() < deadline and b"publishDiagnostics" not in received:
        if select.select([process.stdout], [], [], 0.2)[0]:
            received += os.read(process.stdout.fileno(), 1 << 16)
    process.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))
    process.stdin.close()
    process.wait(timeout=20)
    answers = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in received.split(b"Content-Length")[1:]]
    (published,) = [a for a in answers if a.get("method") == "textDocument/publishDiagnostics"]
    return [d["code"] for d in published["params"]["diagnostics"]]


@pytest.mark.parametrize("route", ["cli", "flake8", "server"])
def test_a_repository_cannot_make_any_route_write_through_its_cache_folder(tmp_path: Path, route: str) -> None:
    """issue 42: `zerograd .`, flake8 and the editor each overwrote the link's target and created
    the dangling link's (markers were written with open(..., "w"), which follows links). Now a
    cache folder that holds links is not used: the findings of a run without a cache, nothing
    written in or through the folder."""
    repo, victim, created = _hostile_repository(tmp_path)
    train = repo / "train_leak.py"
    if route == "cli":
        run = subprocess.run([sys.executable, "-m", "zerograd", "train_leak.py"], capture_output=True, cwd=repo,
                             env=_quiet_env(), timeout=120)
        assert run.stdout.decode().count(": ZG001") == 1 and run.returncode == 1
        assert run.stderr.decode().count("zerograd: warning: the cache folder") == 1, run.stderr
    elif route == "flake8":
        run = subprocess.run([sys.executable, "-m", "flake8", "--select", "ZG", "train_leak.py"], capture_output=True,
                             cwd=repo, env=_quiet_env(), timeout=120)
        assert run.stdout.decode().count(" ZG001 ") == 1 and b"Traceback" not in run.stderr
    else:
        assert _lsp_diagnostics(repo, train) == ["ZG001"]
    assert victim.read_text() == "precious\n" and not os.path.lexists(created)
    assert sorted(os.listdir(repo / ".zerograd_cache")) == [".gitignore", "CACHEDIR.TAG"]


def _sign_like_before(entry: Path, payload: bytes) -> None:
    """An entry as a repository can forge it: the body's sha256 on the first line (what the
    cache checked before issue 42; anyone can compute it)."""
    import hashlib

    entry.write_bytes(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)


def test_a_forged_entry_is_a_miss(capsys: pytest.CaptureFixture[str], split: Path) -> None:
    """issue 42: an entry whose checksum holds but which nobody on this machine wrote replaced
    three real findings by one fake one carrying raw terminal escapes. Entries carry an HMAC
    under the user's own key: a forged one is a miss, and the real findings are printed."""
    folder = split.parent / ".zerograd_cache"
    cold = cli(capsys, "split")
    for entry in sorted((folder / "file").glob("*.json")):
        body = json.loads(entry.read_bytes().partition(b"\n")[2])
        body["findings"] = [["ZG001", "\x1b[31mforged\x1b[0m", 1, 0, 1, 1, None, None]]
        _sign_like_before(entry, json.dumps(body, separators=(",", ":")).encode())
    assert cli(capsys, "split") == cold
    assert "forged" not in cli(capsys, "split")[1]


def test_the_key_is_the_users_own(capsys: pytest.CaptureFixture[str], split: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is made on first use with mode 0600; a key others can write is not trusted (one
    warning, a run without a cache)."""
    import stat

    from zerograd.project import key

    folder = tmp_path / "keys"
    monkeypatch.setenv("ZEROGRAD_KEY_DIR", str(folder))
    key.secret.cache_clear()
    cold = cli(capsys, "split")
    assert stat.S_IMODE((folder / "key").stat().st_mode) == 0o600 and os.listdir(folder) == ["key"]
    (folder / "key").chmod(0o666)
    key.secret.cache_clear()
    zerograd.project.cache._warned.clear()
    code, out, err = cli(capsys, "split")
    assert (code, out) == cold[:2] and err.count("zerograd: warning: the cache key") == 1, err
    key.secret.cache_clear()


@pytest.mark.parametrize("where", ["~", "/tmp/elsewhere", "../outside"])
def test_cache_dir_from_the_project_stays_in_the_project(capsys: pytest.CaptureFixture[str], split: Path,
                                                         where: str) -> None:
    """issue 42: `cache-dir = "~"` in a checked repository's pyproject.toml wrote CACHEDIR.TAG
    and a `*` .gitignore into the home folder. A folder outside the project comes only from
    the command line or the environment; in the project's config it is a bad value."""
    (split.parent / "pyproject.toml").write_text(f'[tool.zerograd]\ncache-dir = "{where}"\n')
    code, out, err = cli(capsys, "split")
    assert code == 2 and out == "" and "cache-dir" in err and "inside the project" in err, err


def test_a_cache_folder_reached_through_a_link_or_tracked_by_git_is_not_used(
        capsys: pytest.CaptureFixture[str], split: Path, tmp_path: Path) -> None:
    root = split.parent
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (root / "linked").symlink_to(outside)
    (root / "pyproject.toml").write_text('[tool.zerograd]\ncache-dir = "linked/cache"\n')
    code, out, err = cli(capsys, "split")
    assert code == 1 and out.count("ZG00") == 2 and "outside its project" in err, err
    assert os.listdir(outside) == []

    (root / "pyproject.toml").write_text("[tool.zerograd]\n")
    folder = root / ".zerograd_cache"
    folder.mkdir()
    (folder / "shipped").write_text("x")
    for command in (["init", "-q"], ["add", "-f", ".zerograd_cache/shipped"]):
        subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)
    zerograd.project.cache._warned.clear()
    code, out, err = cli(capsys, "split")
    assert code == 1 and out.count("ZG00") == 2 and "tracked by git" in err, err
    assert os.listdir(folder) == ["shipped"]


def test_a_module_read_again_after_a_change_is_checked_as_it_is_and_not_cached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 43: a run keeps the text of a module that can hold a finding, steps, clears or sets
    a framework's accumulation, and reads any other again when the plan asks for it. A module
    changed in between is read as it is now, and no finding resting on it is stored: the plan
    was made from its old text."""
    from zerograd.io.files import _Stored
    from zerograd.io.reading import FileResult, Read

    library, train = tmp_path / "lib.py", tmp_path / "train.py"
    library.write_text("def helper(x):\n    return x\n")
    train.write_text("for x in data:\n    loss(x).backward()\n    opt.step()\n")
    read = Read({})
    assert read.add(str(library)) is None and read.add(str(train)) is None
    assert str(library) in read.clean and str(library) not in read.texts and str(train) in read.texts
    assert read.text(str(library)) == "def helper(x):\n    return x\n" and not read.changed
    library.write_text("def helper(x):\n    return x + 1\n")
    assert read.text(str(library)).endswith("x + 1\n") and read.changed == {str(library)}
    cache = Cache(str(tmp_path / "cache"), Settings())
    stored = _Stored(cache, read.hashes, Settings(), True, frozenset(read.clean), read.changed)
    group = stored.group([str(library), str(train)])
    stored.put(FileResult(str(train)), group)
    assert not list((tmp_path / "cache").rglob("*.json"))
    stored.put(FileResult(str(train)), ())  # alone, it rests on its own text only
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1
    # A run names its files as given (`zerograd .`); a group names them by absolute path.
    monkeypatch.chdir(tmp_path)
    relative = _Stored(cache, {"lib.py": read.hashes[str(library)], "train2.py": read.hashes[str(train)]},
                       Settings(), True, frozenset(), {"lib.py"})
    relative.put(FileResult("train2.py"), relative.group(["lib.py", "train2.py"]))
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1
