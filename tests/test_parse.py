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


# Issue 42, item 9: the loop's body is indented "  \t  " (10 columns to CPython, deeper than the
# `for` at 4) under a `for` indented with spaces. CPython accepts it; LibCST wants a block's
# indentation to begin with its parent's as written, and rejected the whole file (ZG900).
MIXED = (
    "import torch\n"
    "\n"
    "\n"
    "def warm_up(model, opt):\n"
    "    opt.zero_grad()\n"
    "\n"
    "\n"
    "def train(model, opt, loader):\n"
    "    for x in loader:\n"
    "  \t  loss = model(x).sum()\n"
    "  \t  loss.backward()\n"
    "  \t  opt.step()\n"
)
STEP_LINE, STEP_COL = 12, 5  # `opt.step()` as written: after the 5 characters "  \t  " (0-based)


def test_a_loop_indented_with_spaces_then_a_tab_is_analysed(kept: None) -> None:
    """The ZG001 at its line, at the column of the line as written (not of the re-indented
    view LibCST read), through the library, the flake8 adapter and kept trees."""
    import ast

    from zerograd.flake8_plugin import ZeroGradPlugin

    keep_trees(0)
    lints = [inspect_source(MIXED)]
    keep_trees(100_000)
    lints += [inspect_source(MIXED), inspect_source(MIXED)]  # a first lint keeping trees, one reading them
    for report in lints:
        assert [(f.code, f.line, f.col) for f in report.findings] == [("ZG001", STEP_LINE, STEP_COL)]
    plugin = ZeroGradPlugin(ast.parse(MIXED), MIXED.splitlines(keepends=True), "mixed.py")
    assert [(line, col, text.split()[0]) for line, col, text, _ in plugin.run()] == [(STEP_LINE, STEP_COL, "ZG001")]


def test_a_correct_loop_indented_with_spaces_then_a_tab_stays_silent() -> None:
    """The trap: the same indentation around a loop that clears finds nothing (no ZG900)."""
    cleared = MIXED.replace("  \t  loss = ", "  \t  opt.zero_grad()\n  \t  loss = ")
    compile(cleared, "<trap>", "exec")
    assert inspect_source(cleared).findings == []


def test_mixed_indentation_cpython_rejects_keeps_its_reason() -> None:
    """A body CPython rejects (10 columns counting tabs to 8, but 5 counting them to 1: fewer
    than the `for`'s 8) is ZG900 with CPython's own reason, at its line."""
    rejected = MIXED.replace("    for x", "        for x").replace("def train(model, opt, loader):\n",
                                                                  "def train(model, opt, loader):\n    if 1:\n")
    with pytest.raises(TabError):
        compile(rejected, "<rejected>", "exec")
    [finding] = inspect_source(rejected).findings
    assert (finding.code, finding.line) == ("ZG900", 11)
    assert "inconsistent use of tabs and spaces in indentation" in finding.message


def test_fix_never_writes_the_reindented_view_of_tabs(tmp_path: Path) -> None:
    """io/fix.py plans its edits on the original text, and cannot parse the statement whose
    indentation LibCST cannot read: no fix there, and not a byte of the file changes."""
    import subprocess
    import sys

    from zerograd.io.fix import fix_source

    outcome = fix_source(MIXED)
    assert outcome.source == MIXED and not outcome.fixed
    path = tmp_path / "mixed.py"
    path.write_bytes(MIXED.replace("\n", "\r\n").encode())
    subprocess.run([sys.executable, "-m", "zerograd", "--fix", "--no-cache", str(path)], capture_output=True,
                   timeout=120, check=False)
    assert path.read_bytes() == MIXED.replace("\n", "\r\n").encode()


def test_fix_elsewhere_in_a_file_mixing_tabs_keeps_its_tabs() -> None:
    """A fixable finding in a statement written with spaces only is fixed on the text as
    written: the re-indented lines of the other statement keep their tabs."""
    from zerograd.io.fix import fix_source

    spaces = "\n\ndef other(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"
    outcome = fix_source(MIXED + spaces)
    assert [f.line for f in outcome.fixed] == [18]
    assert outcome.source == MIXED + spaces.replace("    for x in loader:\n", "    for x in loader:\n        opt.zero_grad()\n")


def test_the_view_keeps_strings_and_counts_tabs_as_cpython_does() -> None:
    """Only indentation changes: a line that starts inside a string keeps its tab, and each
    column of the view maps back into the line as written."""
    from zerograd.front.indentation import reindented, width, written_column

    text = 'def f():\n  \tdoc = """a\n\tb"""\n  \t  return doc\n'
    view = reindented(text)
    assert view == ('def f():\n        doc = """a\n\tb"""\n          return doc\n', {2: "  \t", 4: "  \t  "})
    assert (width("  \t  "), width("\t"), width("       \t"), width(" \t\t")) == (10, 8, 8, 16)
    assert [written_column("  \t  ", c) for c in (0, 2, 3, 8, 9, 10, 14)] == [0, 2, 3, 3, 4, 5, 9]


def test_a_statement_that_cannot_be_read_re_indented_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """No bare "invalid syntax": the ZG900 names the indentation, at the statement's first line
    indented with a tab; or where LibCST fails in the re-indented text, with its reason (with
    only spaces left, the indentation is not what fails)."""
    import zerograd.front.parse as parse

    monkeypatch.setattr(parse, "reindented", lambda text: None)  # the text does not tokenize
    [finding] = inspect_source(MIXED).findings
    assert (finding.code, finding.line, finding.col) == ("ZG900", 10, 0)
    assert finding.message == "cannot parse: indentation mixes tabs and spaces in a way LibCST cannot read"
    monkeypatch.undo()

    def failing(text: str) -> cst.Module:
        if "\t" not in text and "step" in text:
            raise cst.ParserSyntaxError("no, not that", lines=text.splitlines(), raw_line=4, raw_column=12)
        return cst.parse_module(text)

    monkeypatch.setattr(parse, "parse_module", failing)
    [finding] = inspect_source(MIXED).findings
    assert (finding.code, finding.line, finding.col) == ("ZG900", 11, 7)  # column 12 of "          loss..."
    assert finding.message == "cannot parse: no, not that (read re-indented, as its indentation mixes tabs and spaces)"


def test_libcsts_own_error_is_placed_in_its_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement CPython reads and LibCST does not (no tab in it) keeps LibCST's reason, at
    its line in the file (LibCST counts from the statement's first line)."""
    import zerograd.front.parse as parse

    def failing(text: str) -> cst.Module:
        if "def train" in text:
            raise cst.ParserSyntaxError("not for LibCST", lines=text.splitlines(), raw_line=2, raw_column=4)
        return cst.parse_module(text)

    monkeypatch.setattr(parse, "parse_module", failing)
    spaces = MIXED.replace("  \t  ", "        ")
    [finding] = inspect_source(spaces).findings
    assert (finding.code, finding.line, finding.col, finding.message) == ("ZG900", 9, 4, "cannot parse: not for LibCST")
