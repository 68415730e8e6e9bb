"""Safe autofixes (interface.md, Autofix): line-level edits planned on the CST, checked by linting.

A fix is offered only where the intent is unambiguous:
- ZG001: insert `o.zero_grad()` as the first statement of the block holding the loop's first
  backward, or right after the step when the step is under an accumulation condition;
- ZG002: move the misplaced clear to just before the loop's first backward;
- ZG003: move an every-iteration clear to right after the conditional step, inside its block.
The events must be statements of the loop itself (not inside a helper). Every fix is applied to
the text, re-parsed and re-linted: it is kept only if it removes its finding and adds none.
Edits insert and delete whole lines, so every other byte (comments, line endings, tabs) stays.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from ..analysis.model import Finding, Settings
from ..analysis.rules import FIXABLE
from ..engine import lint_source
from ..front.conditions import classify
from ..front.lines import split_lines
from ..front.naming import receiver_key
from ..front.parse import parse_module
from ..front.walk import calls_in


@dataclass(frozen=True)
class Edit:
    """Delete lines `delete` (inclusive, 1-based), then put `text` on a new line at `line`
    (before it, or after it when `after`), indented like line `indent_from`."""

    line: int
    text: str
    indent_from: int
    after: bool = False
    delete: Optional[tuple[int, int]] = None
    description: str = ""


@dataclass
class _Statement:
    node: cst.SimpleStatementLine
    first: int
    last: int
    ancestors: tuple[cst.CSTNode, ...]  # outermost first, up to the enclosing function


class _Index(cst.CSTVisitor):
    """Every simple statement line with its position (after `offset` lines) and the compound
    statements around it."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, offset: int) -> None:
        self.statements: list[_Statement] = []
        self.stack: list[cst.CSTNode] = []
        self.offset = offset

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.SimpleStatementLine):
            where = self.get_metadata(PositionProvider, node)
            self.statements.append(_Statement(node, where.start.line + self.offset, where.end.line + self.offset,
                                              self._scope()))
            return False
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if not isinstance(original_node, cst.SimpleStatementLine):
            self.stack.pop()

    def _scope(self) -> tuple[cst.CSTNode, ...]:
        """The ancestors up to the enclosing function: loops outside it are not its loops."""
        for index in range(len(self.stack) - 1, -1, -1):
            if isinstance(self.stack[index], (cst.FunctionDef, cst.ClassDef)):
                return tuple(self.stack[index:])
        return tuple(self.stack)


@dataclass
class _Piece:
    """One top-level statement, parsed: its simple statements and its nodes' positions."""

    statements: list[_Statement]
    positions: Mapping[cst.CSTNode, CodeRange]
    offset: int  # lines of the file before it


class Planner:
    """Plans a finding's edit on the CST of the top-level statement that holds it, parsed when
    first asked (an edit never leaves the loop of its finding): a whole-module parse of a long
    file costs the whole file's CST, in time and in memory, to fix a few lines."""

    KEEP = 4  # statements kept parsed: findings come in order

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = split_lines(source, keepends=True)
        self.starts = _top_lines(source)
        self._pieces: dict[int, _Piece] = {}
        self.statements: list[_Statement] = []
        self.positions: Mapping[cst.CSTNode, CodeRange] = {}
        self.offset = 0

    def plan(self, finding: Finding) -> Optional[Edit]:
        """Raises cst.ParserSyntaxError (or RecursionError) when the statement does not parse."""
        if finding.code not in FIXABLE:
            return None
        piece = self._piece(finding.line)
        self.statements, self.positions, self.offset = piece.statements, piece.positions, piece.offset
        statement = self._statement_at(finding.line)
        if statement is None:
            return None
        loop = _innermost_loop(statement)
        if loop is None:
            return None
        if finding.code == "ZG001":
            return self._insert_clear(statement, loop)
        if finding.code == "ZG002":
            return self._move_before_backward(statement, loop)
        return self._move_after_conditional_step(statement, loop)

    def _piece(self, line: int) -> _Piece:
        number = max(0, bisect_right(self.starts, line) - 1)
        if number not in self._pieces:
            first = self.starts[number]
            end = self.starts[number + 1] - 1 if number + 1 < len(self.starts) else len(self.lines)
            wrapper = MetadataWrapper(parse_module("".join(self.lines[first - 1:end])), unsafe_skip_copy=True)
            index = _Index(first - 1)
            wrapper.visit(index)
            if len(self._pieces) >= self.KEEP:
                del self._pieces[next(iter(self._pieces))]
            self._pieces[number] = _Piece(index.statements, wrapper.resolve(PositionProvider), first - 1)
        return self._pieces[number]

    def _statement_at(self, line: int) -> Optional[_Statement]:
        found = [s for s in self.statements if s.first == line and len(s.node.body) == 1]
        return found[0] if len(found) == 1 else None

    def _in_loop(self, loop: cst.CSTNode) -> list[_Statement]:
        return [s for s in self.statements if any(a is loop for a in s.ancestors)]

    def _first_backward(self, loop: cst.CSTNode) -> Optional[_Statement]:
        for statement in self._in_loop(loop):
            if _method_call(statement, ("backward", "manual_backward")) is not None:
                return statement
        return None

    def _insert_clear(self, step: _Statement, loop: cst.CSTNode) -> Optional[Edit]:
        optimizer = _stepped(step)
        backward = self._first_backward(loop)
        if optimizer is None or backward is None:
            return None
        text = f"{optimizer}.zero_grad()"
        if _under_accumulation(step, loop):
            return Edit(step.last, text, step.first, after=True, description=f"insert {text} after the step")
        block_start = self._block_start(backward)
        if block_start is None:
            return None
        return Edit(block_start, text, block_start, description=f"insert {text} at line {block_start}")

    def _block_start(self, statement: _Statement) -> Optional[int]:
        """The first line of the first statement of the block that holds `statement`."""
        parent = statement.ancestors[-1] if statement.ancestors else None
        if not isinstance(parent, cst.IndentedBlock) or not parent.body:
            return None
        return self.positions[parent.body[0]].start.line + self.offset

    def _move_before_backward(self, clear: _Statement, loop: cst.CSTNode) -> Optional[Edit]:
        backward = self._first_backward(loop)
        cleared = _cleared(clear)
        if cleared is None or backward is None or backward.first == clear.first:
            return None
        # Another receiver's clear between them (`model.zero_grad()`) may clear the same
        # gradients: moving this one alone would not be the fix, so none is offered.
        if any(backward.first < s.first < clear.first and _cleared(s) not in (None, cleared) for s in self._in_loop(loop)):
            return None
        return Edit(backward.first, _own_text(self.source, clear), backward.first, delete=(clear.first, clear.last),
                    description=f"move the clear before line {backward.first}")

    def _move_after_conditional_step(self, clear: _Statement, loop: cst.CSTNode) -> Optional[Edit]:
        optimizer = _cleared(clear)
        if optimizer is None or _under_condition(clear, loop):
            return None
        steps = [s for s in self._in_loop(loop) if _stepped(s) == optimizer and _under_accumulation(s, loop)]
        if len(steps) != 1:
            return None
        step = steps[0]
        return Edit(step.last, _own_text(self.source, clear), step.first, after=True,
                    delete=(clear.first, clear.last), description="move the clear right after the conditional step")


def _innermost_loop(statement: _Statement) -> Optional[cst.CSTNode]:
    for node in reversed(statement.ancestors):
        if isinstance(node, (cst.For, cst.While)):
            return node
    return None


def _between(statement: _Statement, loop: cst.CSTNode) -> list[cst.CSTNode]:
    index = next(i for i, a in enumerate(statement.ancestors) if a is loop)
    return list(statement.ancestors[index + 1:])


def _under_accumulation(statement: _Statement, loop: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.If) and classify(n.test).accumulation for n in _between(statement, loop))


def _under_condition(statement: _Statement, loop: cst.CSTNode) -> bool:
    return any(isinstance(n, (cst.If, cst.Try, cst.For, cst.While, cst.Match, cst.Else)) for n in _between(statement, loop))


def _method_call(statement: _Statement, names: tuple[str, ...]) -> Optional[cst.Call]:
    for call in calls_in(statement.node):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in names:
            return call
    return None


def _only_call(statement: _Statement, name: str) -> Optional[cst.Call]:
    small = statement.node.body[0]
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        func = small.value.func
        if isinstance(func, cst.Attribute) and func.attr.value == name:
            return small.value
    return None


def _stepped(statement: _Statement) -> Optional[str]:
    """The optimizer a `o.step()` / `scaler.step(o)` statement steps, as written."""
    call = _only_call(statement, "step")
    if call is None:
        return None
    receiver = call.func.value  # type: ignore[attr-defined]
    if "scaler" in receiver_key(receiver).lower() and call.args:
        receiver = call.args[0].value
    return _written(receiver)


def _cleared(statement: _Statement) -> Optional[str]:
    call = _only_call(statement, "zero_grad")
    return None if call is None else _written(call.func.value)  # type: ignore[attr-defined]


def _written(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)):
        return cst.Module(body=[]).code_for_node(node)
    return None


def _own_text(source: str, statement: _Statement) -> str:
    lines = split_lines(source, keepends=True)[statement.first - 1: statement.last]
    return "".join(lines).strip()


def apply(source: str, edit: Edit) -> str:
    return apply_all(source, [edit])


def apply_all(source: str, edits: Sequence[Edit]) -> str:
    """`edits` applied together, from the bottom up (an edit moves no line above it); their
    spans (_span) must not interleave."""
    lines = split_lines(source, keepends=True)
    for edit in sorted(edits, key=_span, reverse=True):
        _apply(lines, edit)
    return "".join(lines)


def _apply(lines: list[str], edit: Edit) -> None:
    anchor = lines[edit.indent_from - 1]
    indent = _indentation(anchor)
    ending = "\r\n" if anchor.endswith("\r\n") else "\r" if anchor.endswith("\r") else "\n"
    new = [indent + line + ending for line in split_lines(_reindent(edit.text, indent))]
    position = edit.line if edit.after else edit.line - 1
    if lines and not lines[-1].endswith(("\n", "\r")) and position >= len(lines):
        lines[-1] += ending
    lines[position:position] = new
    if edit.delete is not None:
        first, last = edit.delete
        shift = len(new) if position < first else 0
        del lines[first - 1 + shift: last + shift]


def _indentation(line: str) -> str:
    """The indentation of `line` as CPython reads it: a form feed in it sets the column back to
    0 (the tokenizer's "for Emacs users"), so `\\f    x` is indented by four and only what
    follows the last form feed is copied."""
    leading = line[: len(line) - len(line.lstrip(" \t\f"))]
    return leading.rpartition("\f")[2]


def _reindent(text: str, indent: str) -> str:
    """Continuation lines of a multi-line statement keep their relative indentation."""
    lines = split_lines(text)
    return "\n".join([lines[0], *(indent + line.lstrip() if line.strip() else line for line in lines[1:])])


@dataclass(frozen=True)
class Outcome:
    source: str
    fixed: list[Finding]
    warnings: list[str]


# A message may name another line ("the backward() at line 16"): a fix that inserts a line
# above it shifts that number, and the finding is the same one.
_LINE_NUMBER = re.compile(r"\bline \d+")


def key(code: str, message: str) -> tuple[str, str]:
    """What identifies a finding across a fix's edit: its code and its message, line numbers aside."""
    return code, _LINE_NUMBER.sub("line #", message)


def _signature(findings: Iterable[Finding]) -> Counter[tuple[str, str]]:
    return Counter(key(f.code, f.message) for f in findings)


def fix_source(source: str, settings: Settings = Settings(), only: Sequence[str] = FIXABLE,
               wanted: Optional[Collection[tuple[str, str]]] = None) -> Outcome:
    """Apply every safe fix, each checked by re-linting; idempotent. The fixes of a module are
    tried together first (one re-lint, not one per finding: a generated file of 28k findings),
    then, if that does not hold, one at a time. `wanted`: the (code, message) of the findings
    the module has in its project (interface.md v3); a finding the module has only alone is not
    fixed (the fixes are checked on the module alone)."""
    fixed: list[Finding] = []
    warnings: list[str] = []
    tried: set[tuple[str, str, int]] = set()
    findings = lint_source(source, settings)
    while True:
        if any(f.code.startswith("ZG9") for f in findings):
            return Outcome(source, fixed, warnings)  # never touch a file that does not parse
        candidates = [f for f in findings if f.code in only and (f.code, f.message, f.line) not in tried
                      and (wanted is None or key(f.code, f.message) in wanted)]
        together = _fix_together(source, findings, candidates, settings)
        if together is not None:
            source, findings, done = together
            fixed.extend(done)
            tried.update((f.code, f.message, f.line) for f in done)
            continue
        progress = False
        for finding in candidates:
            tried.add((finding.code, finding.message, finding.line))
            result = try_fix(source, finding, findings, settings)
            if isinstance(result, str) and result != source:
                source, progress = result, True
                fixed.append(finding)
                break
            if result is not None and not isinstance(result, str):
                warnings.append(result[0])
        if not progress:
            return Outcome(source, fixed, warnings)
        findings = lint_source(source, settings)


def _fix_together(source: str, findings: list[Finding], candidates: list[Finding],
                  settings: Settings) -> Optional[tuple[str, list[Finding], list[Finding]]]:
    """The source with the fixes of `candidates` applied together, its findings and those fixed,
    when there are two or more and all hold."""
    if len(candidates) < 2:
        return None
    wanted = {id(f) for f in candidates}
    edits = _plans(Planner(source), [(i, f) for i, f in enumerate(findings) if id(f) in wanted])
    held = _together(source, findings, edits, settings) if len(edits) > 1 else None
    return None if held is None else (held[0], held[1], [findings[i] for i in sorted(edits)])


def _plans(planner: Planner, findings: Iterable[tuple[int, Finding]]) -> dict[int, Edit]:
    """The edit of each finding that has one (by its index)."""
    edits = {}
    for i, finding in findings:
        try:
            edit = planner.plan(finding)
        except (cst.ParserSyntaxError, RecursionError):
            continue
        if edit is not None:
            edits[i] = edit
    return edits


def try_fix(source: str, finding: Finding, findings: list[Finding], settings: Settings,  # type: ignore[no-untyped-def]
            planner: Optional[Planner] = None):
    """The fixed source, None when no fix is offered, or (warning,) when the fix failed its check.
    `planner`: one already made of `source` (a parse with positions costs more than the lint)."""
    try:
        edit = (planner or Planner(source)).plan(finding)
    except (cst.ParserSyntaxError, RecursionError):
        return None
    if edit is None:
        return None
    candidate = apply(source, edit)
    after = lint_source(candidate, settings)
    expected = _signature(findings)
    expected[key(finding.code, finding.message)] -= 1
    if any(f.code.startswith("ZG9") for f in after) or _signature(after) - +expected:
        return (f"line {finding.line}: the {finding.code} fix ({edit.description}) did not hold; left as is",)
    return candidate


def _top_lines(source: str) -> list[int]:
    """The first line of each top-level statement: the planner's pieces. One piece when the
    text does not parse."""
    from ..front.relevance import scan_text

    try:
        return sorted(set(scan_text(source, walk=False).starts)) or [1]  # the statements' lines only
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [1]


def describe(source: str, findings: list[Finding], settings: Settings = Settings()) -> list[Finding]:
    """Mark each finding whose fix would apply and hold with a description of the edit."""
    from dataclasses import replace

    if not any(f.code in FIXABLE for f in findings):
        return findings
    edits = _plans(Planner(source), ((i, f) for i, f in enumerate(findings) if f.code in FIXABLE))
    if len(edits) > 1 and _together(source, findings, edits, settings) is not None:
        return [replace(f, fix=edits[i].description) if i in edits else f for i, f in enumerate(findings)]
    planner = Planner(source)  # not kept through the re-lint above: it holds the text's lines
    marked = []
    for i, finding in enumerate(findings):
        edit = edits.get(i)
        if edit is not None and isinstance(try_fix(source, finding, findings, settings, planner), str):
            finding = replace(finding, fix=edit.description)
        marked.append(finding)
    return marked


def _together(source: str, findings: list[Finding], edits: dict[int, Edit],
              settings: Settings) -> Optional[tuple[str, list[Finding]]]:
    """The source with every planned edit applied together and its findings, when each edit
    removes its finding and none adds one: one re-lint instead of one per finding (a file with
    25 fixable findings took 4.7 s to describe). Edits whose lines interleave are not combined;
    on any doubt the caller checks each alone."""
    spans = sorted(_span(edit) for edit in edits.values())
    if any(a[1] >= b[0] for a, b in zip(spans, spans[1:])):
        return None
    combined = apply_all(source, list(edits.values()))
    after = lint_source(combined, settings)
    expected = _signature(findings)
    for i in edits:
        expected[key(findings[i].code, findings[i].message)] -= 1
    if any(f.code.startswith("ZG9") for f in after) or _signature(after) - +expected:
        return None
    return combined, after


def _span(edit: Edit) -> tuple[int, int]:
    """The first and last line of the source an edit reads or touches (an insertion sits
    between two lines; the line its indentation is taken from counts)."""
    position = edit.line if edit.after else edit.line - 1
    first, last = min(position, edit.indent_from), max(position + 1, edit.indent_from)
    if edit.delete is not None:
        first, last = min(first, edit.delete[0]), max(last, edit.delete[1])
    return first, last
