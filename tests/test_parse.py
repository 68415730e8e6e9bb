"""front/parse.py: LibCST's parse without node validation makes the same trees, and restores it."""

from __future__ import annotations

import threading
from pathlib import Path

import libcst as cst
import pytest

from zerograd.front.parse import parse_module

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
