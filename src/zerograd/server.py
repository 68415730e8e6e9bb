"""`zerograd server`: the language server (interface.md, Editors), on pygls over stdio.

Diagnostics on open and save, and on change after a pause in typing; a `quickfix` per fixable
finding and `source.fixAll.zerograd`; `[tool.zerograd]` from the nearest pyproject.toml of each
document; notebooks through notebook-document sync (their code cells joined as `.ipynb` files
are). A document is checked as `zerograd FILE` checks its file (interface.md v3): in its
project's context, every open buffer's unsaved text standing in for its file; so a change in one
buffer re-checks the other open documents, and those whose findings changed are re-published.
Linting never raises (check_source turns an internal error into ZG901), and a handler that fails
anyway logs and leaves the session running. A broken client does not stop it either (issue 42):
a frame whose Content-Length lies is cut at the next header, a request whose params do not fit
gets -32602, and one after `shutdown` gets -32600.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, BinaryIO, Callable, Optional, Union

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import RPCMessage
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from .analysis.model import Finding
from .analysis.rules import FIXABLE
from .front.lines import split_lines
from .front.parse import keep_trees
from .io.config import Config, ConfigError, Selection, find_pyproject, load_config
from .io.files import check_source, lint_paths
from .io.fix import fix_source, key, try_fix
from .io.frames import Frames
from .io.notebook import blank_magics
from .io.reading import encoded
from .io.report import rule_url
from .project.cache import project_cache
from .version import __version__

DEBOUNCE_SECONDS = 0.3  # a pause in typing this long re-lints the document
# Lines of top-level statements whose trees are kept from one lint to the next (~1.5 KB per
# line): an edit re-parses only the statements it changed (front/parse.Trees).
KEPT_LINES = 20_000
FIX_ALL = "source.fixAll.zerograd"
SOURCE = "zerograd"
CHUNK = 1 << 16  # bytes asked of stdin at a time
log = logging.getLogger(__name__)
MsgId = Union[int, str]


@dataclass(frozen=True)
class Linted:
    """What one lint of a document's text found: the actions are computed from it on request,
    and so are the descriptions of the fixes (a second parse, not paid at every keystroke)."""

    source: str
    findings: list[Finding]
    config: Config
    config_error: str = ""  # a broken [tool.zerograd] (the defaults were used): shown to the user

    @cached_property
    def described(self) -> list[Finding]:
        from .io.fix import describe

        return describe(self.source, self.findings, self.config.settings)


def config_for(uri: str) -> tuple[Config, str]:
    """The `[tool.zerograd]` that the CLI would use for this file (defaults when none, or bad),
    and the error that made it the defaults ("" when none): the CLI exits 2 on it, the server
    shows it to the user and goes on."""
    path = path_of(uri)
    try:
        found = find_pyproject(path) if path else None
        return (load_config(found) if found is not None else Config()), ""
    except ConfigError as error:
        log.warning("zerograd: %s; using the defaults", error)
        return Config(), f"zerograd: {error}; using the defaults"


def path_of(uri: str) -> str:
    """The file of a `file:` URI (pygls handles escapes and Windows drive letters); "" for others
    (an untitled buffer, a notebook cell)."""
    if not uri.startswith("file:"):
        return ""
    return to_fs_path(uri) or ""


def lint(uri: str, source: str, buffers: Optional[dict[str, str]] = None) -> Linted:
    """One document's findings; `buffers`: the open documents' text (uri -> text)."""
    return lint_all({uri: source}, buffers or {})[uri]


def lint_all(documents: dict[str, str], buffers: dict[str, str]) -> dict[str, Linted]:
    """The documents' findings, each file in its project with the open buffers standing in for
    their files; a document without a file (untitled) alone. One run per config."""
    found: dict[str, Linted] = {}
    by_config: dict[tuple[Config, str], list[str]] = {}
    for uri in documents:
        by_config.setdefault(config_for(uri), []).append(uri)
    overrides = {path_of(u): data for u, text in {**buffers, **documents}.items()
                 if path_of(u) and not path_of(u).endswith(".ipynb") and (data := encoded(text)) is not None}
    for (config, error), uris in by_config.items():
        selection = Selection(config.select or Selection().select, config.ignore, config.extend_select)
        on_disk = [u for u in uris if path_of(u) in overrides]
        results = {}
        if on_disk:
            cache = project_cache(None, config.cache_dir, str(config.root), config.settings)
            results = {r.path: r for r in lint_paths([path_of(u) for u in on_disk], config.settings, 1, config,
                                                       describe=False, cache=cache, overrides=overrides)}
        for uri in uris:
            result = results.get(path_of(uri))
            path = path_of(uri)
            ignored = config.ignored_for(path) if path else ()
            findings = check_source(documents[uri], config.settings, describe=False) if result is None else result.findings
            kept = [f for f in findings if selection.allows(f.code) and not (ignored and f.code.startswith(ignored))]
            found[uri] = Linted(documents[uri], kept, config, error)
    return found


def diagnostic(finding: Finding, lines: Sequence[str], document: Optional[TextDocument] = None,
               line_shift: int = 0) -> types.Diagnostic:
    """LSP positions are 0-based; columns go out in the client's units (UTF-16 by default)."""
    span = finding.span
    server_range = types.Range(
        types.Position(span.line - 1 - line_shift, span.col), types.Position(span.end_line - 1 - line_shift, span.end_col))
    where = document.position_codec.range_to_client_units(lines, server_range) if document is not None else server_range
    return types.Diagnostic(
        range=where,
        message=finding.message,
        severity=types.DiagnosticSeverity.Error if finding.code.startswith("ZG9") else types.DiagnosticSeverity.Warning,
        code=finding.code,
        code_description=_rule_link(finding.code),
        source=SOURCE,
    )


def _rule_link(code: str) -> Optional[types.CodeDescription]:
    url = rule_url(code)
    return None if url is None else types.CodeDescription(href=url)


def whole_document_edit(uri: str, old: str, new: str) -> types.WorkspaceEdit:
    """Replace the whole text: a fix moves or inserts whole lines, and one edit is always right."""
    # The start of the line after the last: the end of the text whatever the position encoding
    # (the protocol clamps a line past the end to the document's end).
    end = types.Position(line=len(split_lines(old)) + 1, character=0)  # CR-only line ends too
    return types.WorkspaceEdit(changes={uri: [types.TextEdit(types.Range(types.Position(0, 0), end), new)]})


def code_actions(uri: str, linted: Linted, wanted: Sequence[types.Diagnostic],
                 only: Optional[Sequence[str]]) -> list[types.CodeAction]:
    """A quickfix per fixable finding among the diagnostics asked about, and fix-all."""
    actions: list[types.CodeAction] = []
    kinds = set(only or ())
    if not kinds or types.CodeActionKind.QuickFix in kinds:
        asked = {(d.code, d.range.start.line) for d in wanted if d.source == SOURCE}
        fixable = [f for f in linted.findings if f.code in FIXABLE and (f.code, f.line - 1) in asked]
        for finding in linted.described if fixable else ():
            if finding.fix is None or (finding.code, finding.line - 1) not in asked:
                continue
            fixed = try_fix(linted.source, finding, linted.findings, linted.config.settings)
            if isinstance(fixed, str) and fixed != linted.source:
                matching = [d for d in wanted if d.code == finding.code and d.range.start.line == finding.line - 1]
                actions.append(types.CodeAction(
                    title=f"zerograd: {finding.fix} ({finding.code})", kind=types.CodeActionKind.QuickFix,
                    diagnostics=matching, is_preferred=True, edit=whole_document_edit(uri, linted.source, fixed)))
    if not kinds or any(FIX_ALL.startswith(k) for k in kinds):
        outcome = fix_source(linted.source, linted.config.settings,
                             wanted={key(f.code, f.message) for f in linted.findings})
        if outcome.fixed:
            actions.append(types.CodeAction(
                title="zerograd: fix all", kind=FIX_ALL, edit=whole_document_edit(uri, linted.source, outcome.source)))
    return actions


@dataclass(frozen=True)
class Refusal:
    """A request answered with an error before any handler sees it."""

    msg_id: Optional[MsgId]
    error: JsonRpcException


def _is_id(value: object) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


class Protocol(LanguageServerProtocol):
    """pygls's protocol, but every request with an id is answered (JSON-RPC): pygls dropped one
    whose params did not fit the method (-32602 here) and any after `shutdown` (-32600, as LSP
    asks). A notification that does not fit is still dropped: there is no one to tell."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        # json.loads calls this for every object, innermost first: only a request's own object
        # has "jsonrpc", "id" and "method" together.
        if not {"jsonrpc", "id", "method"} <= data.keys():
            return super().structure_message(data)
        refusal = self._vet(data)
        if refusal is not None:
            return refusal
        if "params" not in data and self.get_message_type(data["method"]) is None:
            data = {**data, "params": None}  # pygls's type for an unknown method requires params
        try:
            return super().structure_message(data)
        except JsonRpcException as error:  # the id and method are fine: the params are not
            cause = error.__cause__ or error
            return Refusal(data["id"], JsonRpcInvalidParams(f"Invalid params for {data['method']}: {cause}"))

    def _vet(self, request: dict[str, Any]) -> Optional[Refusal]:
        """-32600 for a request that is not JSON-RPC 2.0, or comes after `shutdown` (but `exit`)."""
        msg_id = request["id"] if _is_id(request["id"]) else None
        if request["jsonrpc"] != "2.0" or not isinstance(request["method"], str) or msg_id is None:
            return Refusal(msg_id, JsonRpcInvalidRequest())
        if self._shutdown and request["method"] != types.EXIT:
            return Refusal(msg_id, JsonRpcInvalidRequest("Invalid Request: the server is shut down"))
        return None

    def handle_message(self, message: RPCMessage) -> None:
        refusal = message if isinstance(message, Refusal) else _bare_request(message)
        if refusal is None:
            super().handle_message(message)
        else:
            log.warning("zerograd: refused request %s: %s", refusal.msg_id, refusal.error.message)
            # Written out: pygls's response type drops a null id, which JSON-RPC asks for when the
            # request's id cannot be read (and pygls has no public call to answer with an error).
            error = {"code": refusal.error.code, "message": refusal.error.message}
            self._send_data({"jsonrpc": "2.0", "id": refusal.msg_id, "error": error})


def _bare_request(message: object) -> Optional[Refusal]:
    """-32600 for a request without "jsonrpc" (structure_message leaves such an object a dict)."""
    if isinstance(message, dict) and "method" in message and _is_id(message.get("id")):
        return Refusal(message["id"], JsonRpcInvalidRequest())
    return None


class ZeroGradServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            SOURCE, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(notebook_selector=[
                types.NotebookDocumentFilterWithCells(
                    cells=[types.NotebookCellLanguage(language="python")], notebook="jupyter-notebook")]),
            protocol_cls=Protocol,
        )
        self.linted: dict[str, Linted] = {}
        self.pending: dict[str, asyncio.TimerHandle] = {}
        self.shut_down = False  # LSP: `exit` after `shutdown` exits 0, without it 1
        self.shown: set[str] = set()  # config errors shown to the user, once each

    def start_io(self, stdin: Optional[BinaryIO] = None, stdout: Optional[BinaryIO] = None) -> None:
        """pygls's start_io with our reader of frames (Frames); `exit` ends it by SystemExit."""
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        source = stdin or sys.stdin.buffer
        # read1: what has arrived, at most one system call; in a thread, as pygls reads
        read1: Callable[[int], bytes] = getattr(source, "read1", source.read)
        try:
            asyncio.run(self.serve(Frames(lambda: asyncio.get_running_loop().run_in_executor(
                self.thread_pool, read1, CHUNK))))
        except BrokenPipeError:
            log.error("zerograd: the client has gone; stopping")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()  # type: ignore[no-untyped-call]

    async def serve(self, frames: Frames) -> None:
        """Hand each frame to pygls's protocol, as pygls's own loop does, until the input ends."""
        while (body := await frames.next()) is not None:
            try:
                self.protocol.handle_message(json.loads(body, object_hook=self.protocol.structure_message))
            except Exception as error:
                log.exception("zerograd: cannot handle the message %r", body[:200])
                self.report_server_error(error, JsonRpcException)

    def buffers(self) -> dict[str, str]:
        """The open text documents but notebook cells (a cell is no module of the project)."""
        return {uri: document.source for uri, document in list(self.workspace.text_documents.items())
                if self.workspace.get_notebook_document(cell_uri=uri) is None}

    def publish_text(self, uri: str) -> None:
        """Lint the document with the other open ones (its text may change what they link
        with) in a worker thread, so that a long file does not hold up the other requests."""
        try:
            buffers = self.buffers()
            if uri not in buffers:
                return
        except Exception:
            log.exception("zerograd: cannot read %s", uri)
            return
        future = asyncio.get_running_loop().run_in_executor(None, lint_all, buffers, buffers)
        future.add_done_callback(lambda done: self._publish_linted(uri, buffers, done))

    def _publish_linted(self, uri: str, sources: dict[str, str], done: asyncio.Future[dict[str, Linted]]) -> None:
        """Back on the event loop: publish the document, and each other one whose findings
        changed; not one whose text has moved on (a newer lint is on its way) or was closed."""
        if done.cancelled():
            return
        if done.exception() is not None:
            log.error("zerograd: could not lint %s: %s", uri, done.exception())
            return
        for other, linted in done.result().items():
            if other not in self.workspace.text_documents:
                continue
            document = self.workspace.get_text_document(other)
            before = self.linted.get(other)
            if document.source != sources[other] or before == linted and other != uri:
                continue
            self.linted[other] = linted
            self.show_error(linted.config_error)
            found = [diagnostic(f, document.lines, document) for f in linted.findings]
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                uri=other, diagnostics=found, version=document.version))

    def show_error(self, error: str) -> None:
        """A broken config, shown once as an error message (the editor's notification)."""
        if error and error not in self.shown:
            self.shown.add(error)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=error))

    def publish_notebook(self, uri: str) -> None:
        """The code cells joined as the CLI joins an .ipynb's, diagnostics sent to each cell."""
        try:
            notebook = self.workspace.get_notebook_document(notebook_uri=uri)
            if notebook is None:
                return
            cells = [c for c in notebook.cells if c.kind == types.NotebookCellKind.Code]
            parts, starts = [], []
            line = 0
            for cell in cells:
                text = self.workspace.get_text_document(cell.document).source
                starts.append((line, cell.document))
                cell_lines = blank_magics(split_lines(text))
                parts.extend(cell_lines + [""])
                line += len(cell_lines) + 1
            linted = lint(uri, "\n".join(parts) + "\n")
            self.show_error(linted.config_error)
            by_cell: dict[str, list[types.Diagnostic]] = {c.document: [] for c in cells}
            for finding in linted.findings:
                start, cell_uri = max((s for s in starts if s[0] <= finding.line - 1), default=(0, ""))
                if cell_uri:
                    document = self.workspace.get_text_document(cell_uri)
                    by_cell[cell_uri].append(diagnostic(finding, document.lines, document, start))
        except Exception:
            log.exception("zerograd: could not lint notebook %s", uri)
            return
        for cell_uri, found in by_cell.items():
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell_uri, diagnostics=found))

    def later(self, uri: str) -> None:
        """Debounce: re-lint once typing has paused."""
        waiting = self.pending.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        self.pending[uri] = asyncio.get_running_loop().call_later(DEBOUNCE_SECONDS, self.publish_text, uri)


server = ZeroGradServer()


@server.feature(types.SHUTDOWN)
def shutdown(ls: ZeroGradServer, params: None) -> None:
    ls.shut_down = True


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: ZeroGradServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.publish_text(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: ZeroGradServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.later(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: ZeroGradServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.publish_text(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: ZeroGradServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.linted.pop(uri, None)
    waiting = ls.pending.pop(uri, None)
    if waiting is not None:
        waiting.cancel()
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
    others = [other for other in ls.buffers() if other != uri]
    if others:  # the file on disk stands in for the closed buffer's text now
        ls.publish_text(others[0])


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def notebook_open(ls: ZeroGradServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.publish_notebook(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_change(ls: ZeroGradServer, params: types.DidChangeNotebookDocumentParams) -> None:
    ls.publish_notebook(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def notebook_save(ls: ZeroGradServer, params: types.DidSaveNotebookDocumentParams) -> None:
    ls.publish_notebook(params.notebook_document.uri)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]),
)
def code_action(ls: ZeroGradServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    try:
        if ls.workspace.get_notebook_document(cell_uri=uri) is not None:
            return []  # a cell alone is not the program the notebook's findings are about
        document = ls.workspace.get_text_document(uri)
        linted = ls.linted.get(uri)
        if linted is None or linted.source != document.source:
            linted = ls.linted[uri] = lint(uri, document.source, ls.buffers())
        return code_actions(uri, linted, params.context.diagnostics, params.context.only)
    except Exception:
        log.exception("zerograd: no code actions for %s", uri)
        return []


def main() -> int:
    keep_trees(KEPT_LINES)
    server.start_io()
    return 0 if server.shut_down else 1
