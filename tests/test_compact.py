"""compact.py: a long file's whitespace nodes are shared, and nothing the user sees changes."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

import zerograd.engine as engine
from zerograd.front.compact import share_whitespace

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p for p in (ROOT / "fixtures").rglob("*.py") if "projects" not in p.parts)


def test_shared_whitespace_keeps_the_code_and_shrinks_the_tree() -> None:
    for path in FIXTURES[:40]:
        text = path.read_text(encoding="utf-8")
        module = cst.parse_module(text)
        before = _distinct(module)
        share_whitespace(module)
        assert module.code == text, path.name
        assert _distinct(module) < before, path.name


def test_findings_do_not_depend_on_sharing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fixture, findings and positions, with each chunk's whitespace shared and not."""
    for path in FIXTURES:
        text = path.read_text(encoding="utf-8")
        monkeypatch.setattr(engine, "SHARE_LINES", 10**9)
        alone = engine.inspect_source(text)
        monkeypatch.setattr(engine, "SHARE_LINES", 1)
        assert engine.inspect_source(text) == alone, path.name


def _distinct(module: cst.Module) -> int:
    seen: set[int] = set()
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(node.children)
    return len(seen)
