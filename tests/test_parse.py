"""front/parse.py: LibCST's parse without node validation makes the same trees, and restores it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest

from zerograd.engine import inspect_source
from zerograd.front.parse import Trees, keep_trees, parse_module

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "fixtures").rglob("*.py")) + sorted((ROOT / "src").rglob("*.py"))


def test_the_trees_are_libcsts_own() -> None:
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        tree = parse_module(text)
        assert tree.deep_equals(cst.parse_module(text)), path.name
        assert tree.code == text, path.name


def test_validation_is_back_after_a_parse_and_after_a_syntax_error() -> None:
    parse_module("x = 1\n")
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def f(:\n")
    with pytest.raises(cst.CSTValidationError):  # a node built by hand is checked again
        cst.Name("x", lpar=[cst.LeftParen()])


def test_overlapping_parses_in_threads_leave_validation_on() -> None:
    text = (ROOT / "src" / "zerograd" / "engine.py").read_text(encoding="utf-8")
    threads = [threading.Thread(target=parse_module, args=(text,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with pytest.raises(cst.CSTValidationError):
        cst.Name("x", lpar=[cst.LeftParen()])


@pytest.fixture
def kept() -> Iterator[None]:
    keep_trees(100_000)
    yield
    keep_trees(0)


FIXTURES = sorted(p for p in (ROOT / "fixtures").rglob("*.py") if "projects" not in p.parts)


def test_kept_trees_find_what_fresh_ones_do_wherever_the_text_moves(kept: None) -> None:
    """The language server keeps each statement's tree (Trees): the findings and positions of
    every fixture are those of a fresh parse, at a first lint, at a second one reading only kept
    trees, and with lines added above every statement (kept trees at new lines)."""
    for path in FIXTURES:
        text = path.read_text(encoding="utf-8")
        keep_trees(0)
        fresh = inspect_source(text)
        moved = inspect_source("# one\n\n" + text.replace("\ndef ", "\n\ndef "))
        keep_trees(100_000)
        assert inspect_source(text) == fresh, path.name
        assert inspect_source(text) == fresh, path.name
        assert inspect_source("# one\n\n" + text.replace("\ndef ", "\n\ndef ")) == moved, path.name


def test_kept_trees_hold_at_most_their_lines() -> None:
    trees = Trees(10)
    first, _ = trees.parse("x = 1\n" * 6)
    assert trees.parse("x = 1\n" * 6)[0] is first  # the same text: the same tree
    trees.parse("y = 2\n" * 6)  # 12 lines: the least recently parsed goes
    assert trees.parse("x = 1\n" * 6)[0] is not first
    assert trees._held <= 10 or len(trees._known) == 1
