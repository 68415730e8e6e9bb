"""`zerograd server` driven over stdio by a real LSP client (pytest-lsp): diagnostics, actions,
debounced changes, notebooks, bad input, shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from zerograd.io.report import rule_url

BUG = "import torch\nfor b in loader:\n    loss = model(b).sum()\n    loss.backward()\n    optimizer.step()\n"
MISPLACED = ("import torch\nfor b in loader:\n    loss = model(b).sum()\n    loss.backward()\n"
             "    optimizer.zero_grad()\n    optimizer.step()\n")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "zerograd", "server", "--stdio"]))
async def client(lsp_client: LanguageClient, tmp_path: Path) -> AsyncIterator[None]:
    (tmp_path / "pyproject.toml").write_text('[tool.zerograd]\nignore = ["ZG003"]\n')
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=tmp_path.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="project")]))
    yield
    await lsp_client.shutdown_session()


def open_document(client: LanguageClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def open_notebook(client: LanguageClient, notebook: str, cells: list[str], texts: list[str]) -> None:
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook, notebook_type="jupyter-notebook", version=1, cells=[
            types.NotebookCell(kind=types.NotebookCellKind.Code, document=cell) for cell in cells]),
        cell_text_documents=[types.TextDocumentItem(uri=cell, language_id="python", version=1, text=text)
                             for cell, text in zip(cells, texts)]))


async def diagnostics_for(client: LanguageClient, uri: str) -> list[types.Diagnostic]:
    for _ in range(100):
        if uri in client.diagnostics:
            return list(client.diagnostics.pop(uri))
        await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    raise AssertionError(f"no diagnostics for {uri}")


def apply_edit(text: str, edit: types.WorkspaceEdit, uri: str) -> str:
    assert edit.changes is not None
    (change,) = edit.changes[uri]
    assert (change.range.start.line, change.range.start.character) == (0, 0)
    assert change.range.end.line >= text.count("\n")  # the whole text is replaced
    return change.new_text


@pytest.mark.asyncio
async def test_diagnostic_quickfix_change_and_fix_all(client: LanguageClient, tmp_path: Path) -> None:
    uri = open_document(client, tmp_path / "train.py", BUG)
    (found,) = await diagnostics_for(client, uri)
    assert found.code == "ZG001" and found.source == "zerograd"
    assert (found.range.start.line, found.range.start.character) == (4, 4)  # 0-based: line 5, col 5
    assert found.code_description is not None and found.code_description.href == rule_url("ZG001")
    assert found.severity == types.DiagnosticSeverity.Warning

    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=found.range,
        context=types.CodeActionContext(diagnostics=[found])))
    assert actions is not None
    kinds = {a.kind for a in actions if isinstance(a, types.CodeAction)}
    assert kinds == {types.CodeActionKind.QuickFix, "source.fixAll.zerograd"}
    quickfix = next(a for a in actions if isinstance(a, types.CodeAction) and a.kind == types.CodeActionKind.QuickFix)
    assert quickfix.edit is not None and list(quickfix.diagnostics or ()) == [found]
    fixed = apply_edit(BUG, quickfix.edit, uri)
    assert "optimizer.zero_grad()" in fixed

    # The client applies the edit; a burst of changes is linted once typing pauses.
    for version, text in enumerate((fixed[:-5], fixed), start=2):
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
    assert await diagnostics_for(client, uri) == []


@pytest.mark.asyncio
async def test_fix_all_only_and_workspace_config(client: LanguageClient, tmp_path: Path) -> None:
    uri = open_document(client, tmp_path / "misplaced.py", MISPLACED)
    (found,) = await diagnostics_for(client, uri)
    assert found.code == "ZG002"
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=found.range,
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll"])))
    assert actions is not None and len(actions) == 1
    (fix_all,) = actions
    assert isinstance(fix_all, types.CodeAction) and fix_all.edit is not None
    fixed = apply_edit(MISPLACED, fix_all.edit, uri)
    assert fixed.index("zero_grad") < fixed.index("backward")

    # [tool.zerograd] of the workspace ignores ZG003.
    accumulation = ("import torch\nfor i, b in enumerate(loader):\n    optimizer.zero_grad()\n"
                    "    model(b).sum().backward()\n    if i % 4 == 0:\n        optimizer.step()\n")
    assert await diagnostics_for(client, open_document(client, tmp_path / "accum.py", accumulation)) == []


@pytest.mark.asyncio
async def test_bad_input_keeps_the_session(client: LanguageClient, tmp_path: Path) -> None:
    (broken,) = await diagnostics_for(client, open_document(client, tmp_path / "broken.py", "def f(:\n  loss.backward()\n"))
    assert broken.code == "ZG900" and broken.severity == types.DiagnosticSeverity.Error
    uri = open_document(client, tmp_path / "after.py", BUG)
    assert [d.code for d in await diagnostics_for(client, uri)] == ["ZG001"]


@pytest.mark.asyncio
async def test_notebook_cells_get_their_own_diagnostics(client: LanguageClient, tmp_path: Path) -> None:
    notebook = (tmp_path / "train.ipynb").as_uri()
    cells = [f"{notebook}#cell1", f"{notebook}#cell2"]
    texts = ["import torch\n%matplotlib inline\n", "for b in loader:\n    model(b).sum().backward()\n    opt.step()\n"]
    open_notebook(client, notebook, cells, texts)
    (found,) = await diagnostics_for(client, cells[1])
    assert found.code == "ZG001" and found.range.start.line == 2  # third line of the second cell
    assert await diagnostics_for(client, cells[0]) == []
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=cells[1]), range=found.range,
        context=types.CodeActionContext(diagnostics=[found])))
    assert not actions  # a fix spans the joined program, not one cell


def test_server_without_pygls_says_how_to_install_it() -> None:

    code = "import sys; sys.modules['pygls'] = None; from zerograd.cli import main; raise SystemExit(main(['server']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "pip install 'zerograd[server]'" in result.stderr



def test_uris_become_paths_through_pygls(tmp_path: Path) -> None:
    """issue 31: pygls turns URIs into paths (escapes, Windows drive letters); a buffer with no
    file (untitled, a notebook cell) has no path and is checked alone."""
    from zerograd.server import path_of

    odd = tmp_path / "a b" / "c%d é.py"
    assert path_of(odd.as_uri()) == str(odd)
    assert path_of("untitled:Untitled-1") == "" and path_of("vscode-notebook-cell:/x.ipynb#W1") == ""


def test_fix_descriptions_wait_for_a_code_action(tmp_path: Path) -> None:
    """Describing a fix re-checks the fixed text; on a 600-line file with 25 fixable findings
    that took every publish from 0.17 to 4.5 s. The publish carries none; a code action asks."""
    from zerograd.server import lint_all

    path = tmp_path / "train.py"
    path.write_text(BUG)
    linted = lint_all({path.as_uri(): BUG}, {})[path.as_uri()]
    assert [f.fix for f in linted.findings] == [None]
    assert [f.fix for f in linted.described] == ["insert optimizer.zero_grad() at line 3"]


def test_the_server_survives_a_misbehaving_client(tmp_path: Path) -> None:
    """issue 32: bytes that are not JSON, an unknown method, a change to a document never
    opened: the server answers what it can (an error for the unknown method), goes on to check
    the next document, and exits on `exit` even without `shutdown` (with 1, as LSP asks)."""
    import json
    import select
    import time

    def frame(body: bytes) -> bytes:
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    uri = (tmp_path / "y.py").as_uri()
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}, "processId": None,
                                                                        "rootUri": None}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        b"{not json",
        {"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": {}},
        {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": (tmp_path / "never.py").as_uri(), "version": 2}, "contentChanges": [{"text": "x"}]}},
        {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": BUG}}},
    ]
    process = subprocess.Popen([sys.executable, "-m", "zerograd", "server"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    for message in messages:
        process.stdin.write(frame(message if isinstance(message, bytes) else json.dumps(message).encode()))
    process.stdin.flush()
    received, deadline = b"", time.time() + 30
    while time.time() < deadline and b"publishDiagnostics" not in received:
        if select.select([process.stdout], [], [], 0.2)[0]:
            received += os.read(process.stdout.fileno(), 1 << 16)
    answers = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in received.split(b"Content-Length")[1:]]
    assert any(a.get("id") == 1 and "capabilities" in a.get("result", {}) for a in answers)
    assert any(a.get("id") == 2 and a.get("error", {}).get("code") == -32601 for a in answers)
    published = [a for a in answers if a.get("method") == "textDocument/publishDiagnostics"]
    assert published and published[0]["params"]["uri"] == uri and published[0]["params"]["diagnostics"]
    process.stdin.write(frame(json.dumps({"jsonrpc": "2.0", "method": "exit"}).encode()))
    process.stdin.flush()
    assert process.wait(timeout=20) == 1


@pytest.mark.asyncio
async def test_a_notebook_with_bad_cells(client: LanguageClient, tmp_path: Path) -> None:
    """issue 32: a cell that does not parse, a cell of another language, an empty cell and a
    cell of bytes no editor should send: the broken cell gets the ZG900 (as `zerograd` on the
    .ipynb says), the others nothing, and once the cell is mended the bug behind it shows."""
    notebook = (tmp_path / "bad.ipynb").as_uri()
    texts = ["def f(:\n    pass\n", "%%bash\necho $((1 +\n", "", "x = '\x00\ud800'\n",
             "import torch\nfor b in loader:\n    model(b).sum().backward()\n    opt.step()\n"]
    cells = [f"{notebook}#cell{n}" for n in range(len(texts))]
    open_notebook(client, notebook, cells, texts)
    # The text is encoded before it is parsed: the lone surrogate is what cannot be read first.
    (bytes_,) = await diagnostics_for(client, cells[3])
    assert bytes_.code == "ZG900" and (bytes_.range.start.line, bytes_.range.start.character) == (0, 6)
    for cell in cells[:3] + cells[4:]:
        assert await diagnostics_for(client, cell) == []
    for version, (cell, mended) in enumerate(((cells[3], "x = ''\n"), (cells[0], "def f():\n    pass\n")), start=2):
        client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=version),
            change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
                types.NotebookDocumentCellContentChanges(
                    document=types.VersionedTextDocumentIdentifier(uri=cell, version=version),
                    changes=[types.TextDocumentContentChangeWholeDocument(text=mended)])]))))
        published = [await diagnostics_for(client, each) for each in cells]  # every cell gets its list
        if version == 2:
            assert [[d.code for d in found] for found in published] == [["ZG900"], [], [], [], []]
            assert published[0][0].range.start.line == 0
    assert [[d.code for d in found] for found in published] == [[], [], [], [], ["ZG001"]]
    assert published[-1][0].range.start.line == 3


def test_a_thousand_rapid_changes_to_a_large_document(tmp_path: Path) -> None:
    """issue 32: 1,000 changes to a 2,000-line training file as fast as a client can send them:
    the server debounces them into a few lints, publishes the last version's findings, and its
    memory after is about its memory before (measured: see docs/bad-input.md)."""

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench import training_script

    text = training_script(2000)
    uri = (tmp_path / "big.py").as_uri()
    process = subprocess.Popen([sys.executable, "-m", "zerograd", "server"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    talk = _Raw(process)
    talk.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"capabilities": {}, "processId": None, "rootUri": None}})
    talk.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    talk.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
    first = talk.diagnostics(uri, version=1)
    before = _rss_kib(process.pid)
    for version in range(2, 1002):
        end = text.count("\n")
        talk.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": {"line": end, "character": 0}, "end": {"line": end, "character": 0}},
                                "text": f"# edit {version}\n"}]}})
    last = talk.diagnostics(uri, version=1001)
    after = _rss_kib(process.pid)
    talk.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    talk.send({"jsonrpc": "2.0", "method": "exit"})
    assert process.wait(timeout=30) == 0
    assert last == first and len(first) == 2000 // 23 // 2
    assert talk.published < 50  # debounced: not a lint per change
    print(f"server RSS before {before / 1024:.0f} MiB, after 1,000 changes {after / 1024:.0f} MiB")
    assert after - before < 64 * 1024, (before, after)


@pytest.fixture
def raw() -> Iterator[_Raw]:
    """A server over raw bytes, initialized; killed after the test if it is still running."""
    process = subprocess.Popen([sys.executable, "-m", "zerograd", "server"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    talk = _Raw(process)
    talk.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"capabilities": {}, "processId": None, "rootUri": None}})
    assert "capabilities" in talk.answer(1)["result"]
    talk.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    yield talk
    if process.poll() is None:
        process.kill()
        process.wait()


def test_frames_whose_length_lies_do_not_stall_the_server(raw: _Raw) -> None:
    """issue 42: a Content-Length larger than the body made the server wait for bytes that were
    the next frames (it never answered again, nor heard `exit`); smaller, it lost the next
    frame's header. The server now drops the broken frame at the next header and answers what
    follows; a body that still parses is handled (the client only miscounted)."""
    unknown = b'{"jsonrpc": "2.0", "id": %d, "method": "no/such/method", "params": {}}'
    raw.write(_frame(unknown[:30], length=500))  # cut short: the rest never comes
    raw.send({"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": {}})
    assert raw.answer(2)["error"]["code"] == -32601
    raw.write(b"no header here\r\n\r\n" * 10_000)
    raw.write(_frame(unknown % 3, length=len(unknown) - 10))  # the tail is left over
    raw.send({"jsonrpc": "2.0", "id": 4, "method": "no/such/method", "params": {}})
    assert raw.answer(4)["error"]["code"] == -32601
    # Whole, but claiming a terabyte: it is known to have ended only when the next frame comes.
    raw.write(_frame(unknown % 5, length=10**12))
    raw.send({"jsonrpc": "2.0", "id": 6, "method": "shutdown"})
    assert raw.answer(5)["error"]["code"] == -32601
    assert raw.answer(6) == {"jsonrpc": "2.0", "id": 6, "result": None}
    raw.send({"jsonrpc": "2.0", "method": "exit"})
    assert raw.process.wait(timeout=20) == 0


@pytest.mark.parametrize("size", [1, 7, 1 << 16])
def test_frames_cut_a_body_at_the_next_header(size: int) -> None:
    """issue 42, the reader alone, fed `size` bytes at a time (a header split between reads):
    exact frames, one that overruns by a header ending past its claimed end, one claiming too
    little (its tail skipped), another header before the length, and the end of input mid-body."""
    import asyncio

    from zerograd.io.frames import Frames

    one, two, three = b'{"a": 1}', b'{"b": [2, 3]}', b'{"c": "Content-Length: 9"}'
    stream = (_frame(one) + _frame(two, length=len(two) + 12) + _frame(three, length=len(three) - 3)
              + b"Content-Type: x\r\n" + _frame(one) + _frame(two, length=100))
    chunks = [stream[i:i + size] for i in range(0, len(stream), size)]

    async def read() -> bytes:
        return chunks.pop(0) if chunks else b""

    async def bodies() -> list[Optional[bytes]]:
        frames = Frames(read)
        return [await frames.next() for _ in range(6)]

    assert asyncio.run(bodies()) == [one, two, three[:-3], one, two, None]


def test_exit_after_a_frame_cut_short_ends_the_server(raw: _Raw) -> None:
    """issue 42: a frame cut short then `exit` ends the server at once (with 1: no shutdown)."""
    raw.write(_frame(b'{"jsonrpc": "2.0", "id": 2, "meth', length=400))
    raw.send({"jsonrpc": "2.0", "method": "exit"})
    assert raw.process.wait(timeout=20) == 1


def test_the_end_of_input_inside_a_frame_ends_the_server(raw: _Raw) -> None:
    """issue 42: the input closing in the middle of a body ends the server too."""
    raw.write(_frame(b'{"jsonrpc": "2.0", "id": 2, "meth', length=400))
    assert raw.process.stdin is not None
    raw.process.stdin.close()
    assert raw.process.wait(timeout=20) == 1


def test_every_request_with_an_id_is_answered(raw: _Raw) -> None:
    """issue 42: a request whose params do not fit its method (missing, wrong type) got no answer
    at all; JSON-RPC asks for -32602 Invalid params, and for -32600 Invalid request when the
    message is no JSON-RPC 2.0 request. A notification with bad params is dropped quietly."""
    uri = "file:///nowhere/x.py"
    position = {"line": 0, "character": 0}
    whole = {"start": position, "end": position}
    raw.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": 7}})
    invalid_params: list[object] = [
        {},
        {"textDocument": {"uri": uri}, "range": whole},  # no context
        {"textDocument": 5, "range": whole, "context": {"diagnostics": []}},
        {"textDocument": {"uri": uri}, "range": "all", "context": {"diagnostics": []}},
        "params as a string",
        None,
    ]
    for msg_id, params in enumerate(invalid_params, start=2):
        raw.send({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/codeAction", "params": params})
        assert raw.answer(msg_id)["error"]["code"] == -32602, params
    raw.send({"id": 20, "method": "shutdown"})  # no "jsonrpc"
    raw.send({"jsonrpc": "1.0", "id": 21, "method": "shutdown"})
    raw.send({"jsonrpc": "2.0", "id": 22, "method": 42})
    raw.send({"jsonrpc": "2.0", "id": [23], "method": "shutdown"})  # answered with "id": null
    for msg_id in (20, 21, 22, None):
        assert raw.answer(msg_id)["error"]["code"] == -32600
    raw.send({"jsonrpc": "2.0", "id": 24, "method": "shutdown"})
    assert raw.answer(24)["result"] is None
    raw.send({"jsonrpc": "2.0", "method": "exit"})
    assert raw.process.wait(timeout=20) == 0


def test_requests_after_shutdown_are_refused(raw: _Raw) -> None:
    """issue 42: after `shutdown` a request got no answer at all; LSP asks for -32600 Invalid
    request. Notifications are dropped, and `exit` still exits 0."""
    raw.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    assert raw.answer(2)["result"] is None
    raw.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": "file:///nowhere/x.py", "languageId": "python", "version": 1, "text": BUG}}})
    raw.send({"jsonrpc": "2.0", "id": 3, "method": "textDocument/codeAction", "params": {
        "textDocument": {"uri": "file:///nowhere/x.py"}, "range": {"start": {"line": 0, "character": 0},
                                                                   "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": []}}})
    raw.send({"jsonrpc": "2.0", "id": 4, "method": "no/such/method", "params": {}})
    raw.send({"jsonrpc": "2.0", "id": 5, "method": "shutdown"})
    raw.send({"jsonrpc": "2.0", "id": 6, "method": "textDocument/codeAction", "params": {}})
    for msg_id in (3, 4, 5, 6):
        assert raw.answer(msg_id)["error"]["code"] == -32600
    raw.send({"jsonrpc": "2.0", "method": "exit"})
    assert raw.process.wait(timeout=20) == 0


class _Raw:
    """A client that writes JSON-RPC frames to the server's stdin as fast as it can."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.buffer = b""
        self.published = 0

    def send(self, message: dict[str, object]) -> None:
        import json

        self.write(_frame(json.dumps(message).encode()))

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def receive(self, deadline: float) -> dict[str, Any]:
        """The server's next message; an AssertionError once `deadline` (time.time()) passes,
        so a server that stops answering fails the test instead of hanging it."""
        import json
        import select
        import time

        assert self.process.stdout is not None
        while True:
            if b"\r\n\r\n" in self.buffer:
                head, rest = self.buffer.split(b"\r\n\r\n", 1)
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                if len(rest) >= length:
                    message, self.buffer = json.loads(rest[:length]), rest[length:]
                    self.published += message.get("method") == "textDocument/publishDiagnostics"
                    return dict(message)
            if time.time() > deadline:
                raise AssertionError("the server did not answer in time")
            if select.select([self.process.stdout], [], [], 0.2)[0]:
                chunk = os.read(self.process.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise AssertionError("the server closed its output")
                self.buffer += chunk

    def answer(self, msg_id: Optional[int], timeout: float = 20) -> dict[str, Any]:
        """The response to request `msg_id` (messages before it are skipped); None: to a request
        whose id could not be read."""
        import time

        deadline = time.time() + timeout
        while True:
            message = self.receive(deadline)
            if "id" in message and message["id"] == msg_id and "method" not in message:
                return message

    def diagnostics(self, uri: str, version: int) -> list[object]:
        """The diagnostics published for `uri` at `version` (waiting up to a minute)."""
        import time

        deadline = time.time() + 60
        while True:
            message = self.receive(deadline)
            params = message.get("params") or {}
            if message.get("method") == "textDocument/publishDiagnostics" and params["uri"] == uri \
                    and params.get("version") == version:
                return list(params["diagnostics"])


def _frame(body: bytes, length: Optional[int] = None) -> bytes:
    """One JSON-RPC frame; `length` lies about the body's length."""
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_a_whole_document_edit_covers_text_with_cr_line_ends() -> None:
    """A file saved with CR line ends (old Mac) is one line to `split("\\n")`: the fix-all edit
    replaced only its first line. Lines are counted as the parsers count them."""
    from zerograd.server import whole_document_edit

    old = "import torch\rfor b in loader:\r    loss.backward()\r    opt.step()\r"
    edit = whole_document_edit("file:///x.py", old, "new")
    assert edit.changes is not None
    (change,) = edit.changes["file:///x.py"]
    assert change.range.end.line >= 4


@pytest.mark.asyncio
async def test_a_broken_config_is_shown_once_and_the_defaults_used(client: LanguageClient, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.zerograd]\nignore = ["ZG003"]\nselectt = ["ZG001"]\n')
    first = open_document(client, tmp_path / "train.py", BUG)
    assert [d.code for d in await diagnostics_for(client, first)] == ["ZG001"]
    second = open_document(client, tmp_path / "other.py", BUG)
    assert [d.code for d in await diagnostics_for(client, second)] == ["ZG001"]
    shown = [m for m in client.messages if "selectt: unknown key" in m.message]
    assert len(shown) == 1 and shown[0].type == types.MessageType.Error
