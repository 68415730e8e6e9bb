"""One answer on every route (interface.md v3, issue 30): for every file of a multi-module
project, the CLI on the file alone, the CLI on random batches of files, flake8, `--stdin-filename`
and the language server give exactly what `zerograd .` gives for it, cold and with a warm cache;
and an edit in one open buffer changes the findings of another it is linked with.

Each tree of fixtures/projects/ is copied into a folder of its own with a pyproject.toml, so that
the copy is its project (the repository's own pyproject.toml would make this repository the
project of the fixtures in place)."""

from __future__ import annotations

import io
import os
import random
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_lsp
from flake8.main import cli as flake8_cli
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from zerograd.analysis.model import Settings
from zerograd.cli import main
from zerograd.io.files import check_source, lint_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
TREES = sorted(p.name for p in PROJECTS.iterdir() if p.is_dir())
Found = dict[str, list[str]]  # module (relative path) -> "line:col CODE" of each finding


def project(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(PROJECTS / name, root)
    (root / "pyproject.toml").write_text("[tool.zerograd]\n")
    return root


def modules(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))


def parse(output: str, into: Found) -> Found:
    """`path:line:col: CODE message` lines (the CLI's and flake8's text) into `into`."""
    for line in output.splitlines():
        path, number, col, rest = line.split(":", 3)
        into.setdefault(os.path.normpath(path), []).append(f"{number}:{col} {rest.split()[0]}")
    return into


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    main(["-j", "1", "-q", *args])  # findings only
    return capsys.readouterr().out


def flake8(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    flake8_cli.main(["--select", "ZG", *args])
    return capsys.readouterr().out


def whole(capsys: pytest.CaptureFixture[str], root: Path) -> Found:
    found = parse(cli(capsys, "--no-cache", "."), {})
    return {module: sorted(found.get(module, [])) for module in modules(root)}


def normal(found: Found, root: Path) -> Found:
    return {module: sorted(found.get(module, [])) for module in modules(root)}


@pytest.mark.parametrize("name", TREES)
def test_every_cli_and_flake8_route_gives_the_whole_projects_findings(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, name)
    monkeypatch.chdir(root)
    expected = whole(capsys, root)
    assert any(expected.values())
    for warmth in ("cold", "warm"):  # the first pass fills the test's own cache, the second reads it
        alone: Found = {}
        for module in modules(root):
            parse(cli(capsys, module), alone)
        assert normal(alone, root) == expected, f"{warmth}: zerograd FILE"
        on_flake8: Found = {}
        for module in modules(root):
            parse(flake8(capsys, module), on_flake8)
        assert normal(on_flake8, root) == expected, f"{warmth}: flake8 FILE"
        piped: Found = {}
        for module in modules(root):
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((root / module).read_bytes())))
            parse(cli(capsys, "--stdin-filename", module, "-"), piped)
        assert normal(piped, root) == expected, f"{warmth}: --stdin-filename"
    for seed in range(3):  # pre-commit's batches: any split of the files, in any order
        files = modules(root)
        random.Random(seed).shuffle(files)
        batched: Found = {}
        while files:
            size = random.Random(seed + len(files)).randint(1, len(files))
            batch, files = files[:size], files[size:]
            parse(cli(capsys, *batch), batched)
        assert normal(batched, root) == expected, f"batches, seed {seed}"


def test_the_issues_project_shows_what_each_module_alone_would_miss(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree of the issue: alone, helpers.py would get a false ZG005, train.py would lose its
    ZG001 and ZG003, lib/loop.py would get a false ZG001; its project gives neither."""
    root = project(tmp_path, "helpers")
    monkeypatch.chdir(root)
    assert whole(capsys, root) == {
        "data.py": [], "helpers.py": [], "lib/__init__.py": [], "lib/loop.py": [], "lib/zeroing.py": [],
        "script.py": ["8:5 ZG002"], "train.py": ["11:9 ZG001", "17:9 ZG003"], "train_ok.py": []}
    (root / "pyproject.toml").unlink()  # no project marker: the folder the run is pointed at
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert parse(cli(capsys, str(root / "helpers.py")), {}) == {}
    assert parse(cli(capsys, str(root / "lib" / "loop.py")), {}) == {}  # the project: above package lib
    alone = check_source((root / "helpers.py").read_text(), Settings())
    assert [f.code for f in alone] == ["ZG005"]


# --- the language server --------------------------------------------------------------------

@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "zerograd", "server", "--stdio"]))
async def client(lsp_client: LanguageClient, tmp_path: Path) -> AsyncIterator[None]:
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=tmp_path.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="projects")]))
    yield
    await lsp_client.shutdown_session()


async def published(client: LanguageClient, uri: str) -> list[str]:
    for _ in range(200):
        if uri in client.diagnostics:
            return sorted(f"{d.range.start.line + 1}:{d.range.start.character + 1} {d.code}"
                          for d in client.diagnostics.pop(uri))
        await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    raise AssertionError(f"no diagnostics for {uri}")


def opened(client: LanguageClient, path: Path, version: int = 1) -> str:
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri=path.as_uri(), language_id="python", version=version, text=path.read_text())))
    return path.as_uri()


@pytest.mark.asyncio
async def test_the_server_gives_each_document_the_whole_projects_findings(
        client: LanguageClient, tmp_path: Path) -> None:
    for name in TREES:
        root = project(tmp_path, name)
        expected = {os.path.relpath(r.path, root): sorted(f"{f.line}:{f.col + 1} {f.code}" for f in r.findings)
                    for r in lint_paths([str(root)])}
        for warmth in ("cold", "warm"):
            got = {}
            for module in modules(root):
                uri = opened(client, root / module)
                got[module] = await published(client, uri)
                client.text_document_did_close(types.DidCloseTextDocumentParams(
                    text_document=types.TextDocumentIdentifier(uri=uri)))
                await published(client, uri)  # the close clears its diagnostics
            assert got == expected, f"{name}, {warmth}"


@pytest.mark.asyncio
async def test_an_edit_in_one_buffer_changes_the_findings_of_another(client: LanguageClient, tmp_path: Path) -> None:
    """helpers.py edited, unsaved, so that backward_and_step clears first: train.py's ZG001
    goes, as `zerograd .` would say once the file is saved; undoing the edit brings it back."""
    root = project(tmp_path, "helpers")
    train = opened(client, root / "train.py")
    assert await published(client, train) == ["11:9 ZG001", "17:9 ZG003"]
    helpers = opened(client, root / "helpers.py")
    assert await published(client, helpers) == []
    text = (root / "helpers.py").read_text()
    at = text.index("    loss.backward()")
    line = text[:at].count("\n")
    for version, inserted in ((2, "    optimizer.zero_grad()\n"), (3, "")):
        start = types.Position(line, 0)
        end = types.Position(line + 1, 0) if not inserted else start
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=helpers, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start, end), text=inserted)]))
        expected = ["17:9 ZG003"] if inserted else ["11:9 ZG001", "17:9 ZG003"]
        assert await published(client, train) == expected


def test_fix_repairs_only_what_the_project_says_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Alone, lib/loop.py looks like it never clears (its clear is a helper of another module)
    and --fix would add a zero_grad() there; in its project it is right, so --fix leaves it, and
    repairs script.py's misplaced clear (a finding it has alone and in the project)."""
    root = project(tmp_path, "helpers")
    monkeypatch.chdir(root)
    loop = (root / "lib" / "loop.py").read_text()
    assert check_source(loop, Settings())[0].code == "ZG001"
    diff = cli(capsys, "--diff", "lib/loop.py", "script.py")
    assert "script.py" in diff and "loop.py" not in diff
    cli(capsys, "--fix", ".")
    assert (root / "lib" / "loop.py").read_text() == loop
    assert parse(cli(capsys, "--no-cache", "."), {}) == {"train.py": ["11:9 ZG001", "17:9 ZG003"]}


def test_a_file_named_alone_without_a_marker_reads_what_python_imports_beside_it(tmp_path: Path) -> None:
    """A script in a folder with no project marker (a home or downloads folder): its context is
    what Python imports from its folder, the modules and packages there, not every folder below
    it (a run in /tmp read the whole of /tmp: 3.4 s and 265 MB for a 39-line file)."""
    from zerograd.io.config import Config
    from zerograd.io.discovery import walk as walk_folder
    from zerograd.io.projects import contexts, fallback_for

    for name in ("train.py", "helpers.py", "pkg/__init__.py", "pkg/mod.py", "pkg/inner/deep.py",
                 "downloads/other.py", "downloads/deep/x.py", "old_project/pkg/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    train = str(tmp_path / "train.py")
    memo: dict[str, str] = {}
    pairs = [(train, fallback_for(train, train, memo))]

    def walk(root: str, packages_only: bool) -> Iterator[str]:
        return walk_folder(root, Config(), packages_only)

    alone = contexts(pairs, walk, imported=set(memo.values()))
    assert sorted(os.path.relpath(p, tmp_path) for p in alone[str(tmp_path)][1]) == [
        "helpers.py", os.path.join("pkg", "__init__.py"), os.path.join("pkg", "mod.py")]
    # The folder given as the argument is read whole, and a marker makes the folder a project.
    given = contexts([(train, str(tmp_path))], walk)
    assert len(given[str(tmp_path)][1]) == 7
    (tmp_path / "pyproject.toml").write_text("")
    marked = contexts([(train, fallback_for(train, train, {}))], walk, imported=set(memo.values()))
    assert len(marked[str(tmp_path)][1]) == 7
