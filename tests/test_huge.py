"""Issue 43: a statement too large to parse is a ZG900 that says so (front/size.py), on every
route; a huge file keeps bounded state per function."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zerograd.analysis.model import Settings
from zerograd.engine import lint_source
from zerograd.front import size
from zerograd.io.files import check_source

LOOP = "for b in loader:\n    loss = model(b).sum()\n    loss.backward()\n    optimizer.step()\n"


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Limits of 1,000 tokens for CPython's parser and 500 for LibCST: the same paths as the
    real limits, on texts that take milliseconds."""
    monkeypatch.setattr(size, "LINE_TOKENS", 1000)
    monkeypatch.setattr(size, "STATEMENT_TOKENS", 500)


def codes(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in lint_source(source)]


@pytest.mark.usefixtures("small_limits")
def test_a_line_too_large_is_said_so_never_invalid_syntax() -> None:
    """The issue's 50 MB line, small: valid code, reported as too large at its line."""
    source = "import torch\nx = [" + "1, " * 2000 + "1]; loss.backward()\n"
    ((line, code, text),) = codes(source)
    assert (line, code) == (2, "ZG900")
    assert text == "cannot parse: too large to analyse (a line of 6 KB, over 1,000 tokens; the limit is 1,000 tokens)"


@pytest.mark.usefixtures("small_limits")
def test_indented_lines_count_with_the_line_they_continue() -> None:
    """A literal written one element a line (as a formatter lays it out) is one statement."""
    source = "x = [\n" + "    1,\n" * 1200 + "]\n" + LOOP
    ((line, code, text),) = codes(source)
    assert (line, code) == (1, "ZG900") and "(a statement of 8 KB, over 1,000 tokens;" in text


@pytest.mark.usefixtures("small_limits")
def test_a_statement_too_large_for_libcst_is_found_after_the_scan() -> None:
    """Lines at column 0 inside brackets hide a statement's size from the text; CPython's scan
    finds where it ends, and LibCST is not given it."""
    source = "import torch\n" + LOOP + "x = [\n" + "1,\n" * 600 + "]\n"
    ((line, code, text),) = codes(source)
    assert (line, code) == (6, "ZG900")
    assert text.endswith("(a statement of 2 KB, over 500 tokens; the limit is 500 tokens)")


@pytest.mark.usefixtures("small_limits")
def test_a_body_the_cut_removes_does_not_count() -> None:
    """A function the analysis cannot use is cut before LibCST (relevance.py): only what LibCST
    is given counts against its limit. The same body in a function that backpropagates is kept
    whole, and is too large."""
    body = "".join(f"    a{i} = {i}\n" for i in range(200))  # 600 tokens: under 1,000, over 500
    assert [code for _, code, _ in codes("def table():\n" + body + LOOP)] == ["ZG001"]
    kept = "def train():\n" + body + "".join("    " + line + "\n" for line in LOOP.splitlines())
    ((line, code, text),) = codes(kept)
    assert (line, code) == (1, "ZG900") and "(a statement of" in text


def test_below_the_limits_findings_are_as_usual() -> None:
    source = "x = [" + "1, " * 20_000 + "1]\n" + LOOP
    assert [(line, code) for line, code, _ in codes(source)] == [(5, "ZG001")]


@pytest.mark.usefixtures("small_limits")
def test_every_route_gets_it() -> None:
    """check_source (the CLI's and the language server's way in) and the flake8 adapter's
    (lint_source with flake8's tree: no text check, LibCST's limit only)."""
    import ast

    source = "import torch\nx = [" + "1, " * 2000 + "1]; loss.backward(); opt.step()\n"
    (found,) = check_source(source, Settings())
    assert found.code == "ZG900" and "too large" in found.message
    (found,) = lint_source(source, tree=ast.parse(source))
    assert found.code == "ZG900" and "a statement of 6 KB, over 500 tokens" in found.message
    # A module that cannot step is never given to LibCST: the line's limit, on both routes.
    source = source.replace("; opt.step()", "")
    assert check_source(source, Settings()) == lint_source(source, tree=ast.parse(source))
    (found,) = lint_source(source, tree=ast.parse(source))
    assert found.code == "ZG900" and "a line of 6 KB, over 1,000 tokens" in found.message


def test_the_language_server_reports_a_line_too_large() -> None:
    """A document holding one line of 1.5 MB (500,000 elements, over the real limit of 480,000
    tokens): a ZG900 that says so, published like any other finding."""
    from test_server import _Raw

    text = "import torch\nx = [" + "1, " * 500_000 + "1]; loss.backward()\n"
    process = subprocess.Popen([sys.executable, "-m", "zerograd", "server"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        talk = _Raw(process)
        talk.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"capabilities": {}, "processId": None, "rootUri": None}})
        talk.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        talk.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": "untitled:big", "languageId": "python", "version": 1, "text": text}}})
        (found,) = talk.diagnostics("untitled:big", version=1)
        talk.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        talk.send({"jsonrpc": "2.0", "method": "exit"})
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert isinstance(found, dict) and found["code"] == "ZG900"
    assert found["range"]["start"] == {"line": 1, "character": 0}
    assert "too large to analyse (a line of 1.4 MB, over 480,000 tokens" in found["message"]


def test_the_engine_empties_the_scan_it_is_handed() -> None:
    """Issue 43: a scan weighs 2 KB per function (67 MiB for 200k lines of 6-line functions) and
    its callers hold it through the whole check: the front end empties it once it has cut the
    text, and a second use fails loudly instead of finding nothing."""
    from zerograd.engine import front_end, inspect_source
    from zerograd.front.relevance import scan_text

    source = "import torch\n" + LOOP
    scan = scan_text(source)
    assert inspect_source(source, scan=scan) == inspect_source(source)
    assert scan.__dict__ == {}
    with pytest.raises(AttributeError):
        front_end(source, Settings(), scan=scan)


def test_names_are_one_string_each_in_a_long_file() -> None:
    """Issue 43: the parser makes a string per name written; a long file's statements share one
    (a KB per 6-line training function), and its findings do not change."""
    import libcst as cst

    from zerograd.front.compact import share_whitespace
    from zerograd.front.parse import parse_module

    texts = ["optimizer_" + "x" * 20 + ".step()\n"] * 2  # longer than CPython interns by itself
    shared: dict[tuple[object, ...], cst.CSTNode] = {}
    modules = [parse_module(text) for text in texts]
    for module in modules:
        share_whitespace(module, shared)
    first, second = (m.body[0].body[0].value.func.value for m in modules)  # type: ignore[attr-defined]
    assert first is not second and first.value is second.value


def _fan_out(functions: int, loops: int) -> str:
    """A module with two optimizers whose losses go through a web of helpers, each calling
    eight others: what a loss reaches is followed into them (provenance.py)."""
    lines = ["import torch", "G = torch.nn.Linear(2, 2)", "D = torch.nn.Linear(2, 2)",
             "opt_g = torch.optim.SGD(G.parameters(), lr=0.1)", "opt_d = torch.optim.SGD(D.parameters(), lr=0.1)"]
    for i in range(functions):
        calls = " + ".join(f"f{(i * 7 + k) % functions}(x)" for k in range(1, 9))
        lines.append(f"def f{i}(x):\n    return {calls}\n")
    for i in range(loops):
        lines.append(f"def train{i}(batches):\n    for x in batches:\n        opt_g.zero_grad()\n"
                     f"        f{i}(G(x)).backward()\n        opt_g.step()\n        opt_d.step()\n")
    return "\n".join(lines)


@pytest.mark.parametrize("functions", [50, 400])
def test_reach_through_calls_is_traced_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch, functions: int) -> None:
    """Summaries of what functions return are shared by the module's scopes and capped by its
    size: a web of helpers costs linear work, not scopes x helpers^depth (a 600-function module
    took 147 s before the summaries were shared, 3 s after)."""
    from zerograd.front import provenance

    traced = []
    original = provenance.Tracer._traced
    monkeypatch.setattr(provenance.Tracer, "_traced", lambda self, *args: traced.append(1) or original(self, *args))
    found = lint_source(_fan_out(functions, functions // 2))
    assert {f.code for f in found} == {"ZG001"}  # opt_d is never cleared
    assert 0 < len(traced) <= provenance.SUMMARIES + 4 * (functions + functions // 2)
