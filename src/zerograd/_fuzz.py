"""Strategies and checks shared by the fuzz tests and benchmarks/fuzz.py (test-only: imports
hypothesis, which zerograd itself never needs)."""

from __future__ import annotations

import ast
import warnings

from hypothesis import strategies as st

from .analysis.model import Settings
from .analysis.rules import FIXABLE
from .engine import inspect_source, lint_source
from .flake8_plugin import ZeroGradPlugin
from .front.relevance import Scan, scan_text
from .io.files import check_source
from .io.fix import fix_source

OPTIMIZERS = ["optimizer", "opt_d", "self.optimizer", "optimizers[0]"]
SIMPLE = [
    "loss.backward()",
    "scaler.scale(loss).backward()",
    "{o}.step()",
    "scaler.step({o})",
    "{o}.zero_grad()",
    "{o}.zero_grad(set_to_none=True)",
    "model.zero_grad()",
    "helper({o})",
    "self._update()",
    "scheduler.step()",
    "env.step(action)",
    "loss = model(batch).sum()",
    "continue",
    "break",
    "pass",
]
CONDITIONS = ["(i + 1) % accum == 0", "i % accum == 0", "loss.isnan()", "flag", "not flag",
              "micro >= grad_accum", "accelerator.sync_gradients"]
PRELUDE = (
    "import torch\n"
    "from torch import optim\n\n"
    "def helper(o):\n    o.zero_grad()\n\n"
)


def _block(draw: st.DrawFn, depth: int, optimizer: str) -> list[str]:
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["simple"] * 5 + (["if", "for", "while", "try", "with"] if depth < 3 else [])))
        o = draw(st.sampled_from([optimizer, *OPTIMIZERS]))
        if kind == "simple":
            lines.append(draw(st.sampled_from(SIMPLE)).format(o=o))
            continue
        body = ["    " + line for line in _block(draw, depth + 1, optimizer)]
        if kind == "if":
            lines += [f"if {draw(st.sampled_from(CONDITIONS))}:", *body]
            if draw(st.booleans()):
                lines += ["else:", *("    " + line for line in _block(draw, depth + 1, optimizer))]
        elif kind == "for":
            lines += ["for micro in range(4):", *body]
        elif kind == "while":
            lines += ["while step < 10:", *body]
        elif kind == "with":
            lines += ["with accelerator.accumulate(model):", *body]
        else:
            lines += ["try:", *body, "except RuntimeError:", "    pass"]
    return lines


@st.composite
def training_programs(draw: st.DrawFn) -> str:
    """A loop (or a step function) made of backward / step / clear / if / for / while / try /
    continue / helper calls in random order and nesting."""
    optimizer = draw(st.sampled_from(OPTIMIZERS))
    body = _block(draw, 1, optimizer)
    header = draw(st.sampled_from(["for i, batch in enumerate(loader):", "while True:", None]))
    if header is None:
        return PRELUDE + "def train_step(self, batch):\n" + "".join(f"    {line}\n" for line in body)
    inner = "".join(f"        {line}\n" for line in body)
    return PRELUDE + f"def train(self, model, loader, accum):\n    {header}\n{inner}"


def _check_pieces(source: str) -> None:
    """Parsed in pieces cut before every top-level definition, a text scans as it does whole."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            whole = Scan(ast.parse(source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return
    assert scan_text(source, piece_lines=1).same(whole), "parsing in pieces changed the scan"


def check_program(source: str) -> None:
    """The properties every input must have (raises AssertionError otherwise)."""
    first = lint_source(source)
    assert lint_source(source) == first, "not deterministic"
    assert inspect_source(source) == inspect_source(source, elide=False), "cutting bodies changed the report"
    _check_pieces(source)
    # A stated limit (a scope too large or too deep, issue 42) is no failure; any other ZG901 is.
    assert not [f for f in first if f.code == "ZG901" and not f.message.startswith("internal error: not analysed:")]
    cli = sorted((f.line, f.col, f.code) for f in check_source(source, Settings()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    plugin = ZeroGradPlugin(tree, source.splitlines(keepends=True), "x.py")
    flake8 = sorted((line, col, text.split()[0]) for line, col, text, _ in plugin.run())
    noqa_free = "noqa" not in source
    assert not noqa_free or cli == flake8, (cli, flake8)
    outcome = fix_source(source)
    if outcome.source != source:
        compile(outcome.source, "<fixed>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        after = lint_source(outcome.source)
        for fixed in outcome.fixed:
            assert fixed.code in FIXABLE
        assert not [f for f in after if f.code.startswith("ZG9")]
        assert len([f for f in after if f.code in FIXABLE]) < len([f for f in first if f.code in FIXABLE])
