"""Mutation self-check: break correct training loops of the real corpus, count what is caught.

    python benchmarks/mutate.py            # the table per mutation kind
    python benchmarks/mutate.py --missed   # and every mutant that was not detected

For every training loop of the pinned packages (realcode.lock.json) on which zerograd reports
nothing, it writes buggy variants of the file and expects a finding with the given code whose
line lies in the loop:
- delete-clear: remove every `o.zero_grad()` statement of the loop (ZG001)
- clear-before-step: move the clear to just before `o.step()` (ZG002)
- hoist-clear: move the clear above the loop (ZG001)
- accumulation-every-iteration: a clear under an accumulation condition is moved to the top of
  the loop body, so it runs every iteration while the step does not (ZG003)
- drop-one-optimizer: in a loop with several optimizers, remove one optimizer's clears (ZG001)
For each detected mutant it also asks whether a fix is offered (fixable) and whether `--fix`
then removes the finding (repaired).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import libcst as cst  # noqa: E402
from libcst.metadata import MetadataWrapper, PositionProvider  # noqa: E402

from corpus import CACHE, extract as unpack, fetch, load_lock, python_files  # noqa: E402

from zerograd.engine import lint_source  # noqa: E402
from zerograd.fix import describe, fix_source  # noqa: E402
from zerograd.events import classify, extract, receiver_key  # noqa: E402
from zerograd.flow import analyse  # noqa: E402
from zerograd.model import Kind, Settings  # noqa: E402

KINDS = {
    "delete-clear": "ZG001",
    "clear-before-step": "ZG002",
    "hoist-clear": "ZG001",
    "accumulation-every-iteration": "ZG003",
    "drop-one-optimizer": "ZG001",
}


@dataclass
class Statement:
    line: int  # 1-based line of the statement
    indent: str
    text: str  # the statement's own line
    receiver: str
    under_accumulation: bool


@dataclass
class Mutant:
    kind: str
    path: Path
    source: str
    first: int  # the loop's lines in the mutant
    last: int
    what: str


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--missed", action="store_true", help="list every mutant not detected")
    parser.add_argument("packages", nargs="*")
    args = parser.parse_args()
    lock = load_lock("realcode.lock.json")
    made: Counter[str] = Counter()
    caught: Counter[str] = Counter()
    claimed: Counter[str] = Counter()
    repaired: Counter[str] = Counter()
    missed: list[str] = []
    report_only: list[str] = []
    loops = 0
    for package in args.packages or list(lock):
        root = unpack(fetch(package, lock[package]))
        for path in python_files(root):
            try:
                source = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if "backward" not in source:
                continue
            for mutant in mutants(path, source):
                made[mutant.kind] += 1
                found = [f for f in lint_source(mutant.source) if mutant.first <= f.line <= mutant.last]
                if any(f.code == KINDS[mutant.kind] for f in found):
                    caught[mutant.kind] += 1
                    if _claims_fix(mutant, found):
                        claimed[mutant.kind] += 1
                        repaired[mutant.kind] += _repaired(mutant)
                    else:
                        report_only.append(f"{mutant.kind}: {path.relative_to(CACHE / 'src')}:{mutant.first} "
                                           f"({mutant.what})")
                else:
                    got = ",".join(sorted({f.code for f in found})) or "nothing"
                    missed.append(f"{mutant.kind}: {path.relative_to(CACHE / 'src')}:{mutant.first} "
                                  f"({mutant.what}) -> {got}")
            loops += 1
    print(f"{'mutation':<30} {'expect':>6} {'mutants':>8} {'detected':>9} {'share':>7} {'fixable':>8} {'repaired':>9}")
    for kind, code in KINDS.items():
        share = f"{100 * caught[kind] / made[kind]:.1f}%" if made[kind] else "-"
        print(f"{kind:<30} {code:>6} {made[kind]:>8} {caught[kind]:>9} {share:>7} {claimed[kind]:>8} {repaired[kind]:>9}")
    total_made, total_caught = sum(made.values()), sum(caught.values())
    print(f"{'total':<30} {'':>6} {total_made:>8} {total_caught:>9} "
          f"{100 * total_caught / max(total_made, 1):>6.1f}% {sum(claimed.values()):>8} {sum(repaired.values()):>9}")
    if args.missed and missed:
        print("\nmissed:")
        print("\n".join(missed))
    if args.missed and report_only:
        print("\ndetected, but no fix offered (report-only):")
        print("\n".join(report_only))
    return 0


def _claims_fix(mutant: Mutant, found: list) -> bool:  # type: ignore[type-arg]
    """zerograd offers a fix for the expected finding (JSON's "fix" is not null)."""
    marked = describe(mutant.source, lint_source(mutant.source))
    return any(f.code == KINDS[mutant.kind] and f.fix and mutant.first <= f.line <= mutant.last for f in marked)


def _repaired(mutant: Mutant) -> int:
    """--fix removes every finding of the expected code from the file and adds none."""
    fixed = fix_source(mutant.source)
    after = lint_source(fixed.source)
    return int(not any(f.code == KINDS[mutant.kind] for f in after) and len(after) <= len(lint_source(mutant.source)))


def mutants(path: Path, source: str) -> Iterator[Mutant]:
    """Mutants of every correct training loop in one file."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return
    analysis = extract(module, Settings())
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    lines = source.splitlines(keepends=True)
    for unit, targets in analysis.units:
        loop = analysis.node(unit.site)
        if unit.is_function or not isinstance(loop, (cst.For, cst.While)) or analyse(unit, targets):
            continue
        span = positions[loop]
        clears = _clear_statements(loop, positions, lines)
        steps = _step_lines(loop, positions)
        direct = {t: [c for c in clears if _clears(c.receiver, t, analysis)] for t in targets}
        for target in targets:
            events = _count_clears(unit.body, target)
            if not direct[target] or events != len(direct[target]):
                continue  # a clear through a helper or a module we cannot attribute: skip
            yield from _mutate(path, lines, span.start.line, span.end.line, target, direct[target],
                               steps.get(target, []), len(targets) > 1, positions[loop].start.column)


def _mutate(path: Path, lines: list[str], first: int, last: int, target: str, clears: list[Statement],
            steps: list[int], several: bool, column: int) -> Iterator[Mutant]:
    deleted = _replace(lines, {c.line: c.indent + "pass\n" for c in clears})
    yield Mutant("delete-clear", path, deleted, first, last, f"delete {target}.zero_grad()")
    if several:
        yield Mutant("drop-one-optimizer", path, deleted, first, last, f"drop {target}")
    clear = clears[0]
    if steps:
        step_line = steps[0]
        indent = lines[step_line - 1][: len(lines[step_line - 1]) - len(lines[step_line - 1].lstrip())]
        moved = _replace(lines, {c.line: c.indent + "pass\n" for c in clears},
                         {step_line: indent + clear.text.lstrip()})
        yield Mutant("clear-before-step", path, moved, first, last + 1, f"move {target}.zero_grad() before step")
    hoisted = _replace(lines, {c.line: c.indent + "pass\n" for c in clears},
                       {first: " " * column + clear.text.lstrip()})
    yield Mutant("hoist-clear", path, hoisted, first + 1, last + 1, f"hoist {target}.zero_grad()")
    accumulated = [c for c in clears if c.under_accumulation]
    body_line = _first_body_line(lines, first)
    if accumulated and body_line is not None:
        indent = lines[body_line - 1][: len(lines[body_line - 1]) - len(lines[body_line - 1].lstrip())]
        every = _replace(lines, {c.line: c.indent + "pass\n" for c in clears},
                         {body_line: indent + clear.text.lstrip()})
        yield Mutant("accumulation-every-iteration", path, every, first, last + 1,
                     f"clear {target} every iteration")


def _replace(lines: list[str], replaced: dict[int, str], inserted: Optional[dict[int, str]] = None) -> str:
    out = []
    for number, line in enumerate(lines, start=1):
        if inserted and number in inserted:
            out.append(inserted[number] if inserted[number].endswith("\n") else inserted[number] + "\n")
        out.append(replaced.get(number, line))
    return "".join(out)


def _first_body_line(lines: list[str], first: int) -> Optional[int]:
    """The first statement line of the loop body (the header may span lines: find its colon)."""
    number = first
    while number <= len(lines) and not lines[number - 1].split("#")[0].rstrip().endswith(":"):
        number += 1
    for candidate in range(number + 1, min(number + 30, len(lines)) + 1):
        text = lines[candidate - 1].strip()
        if text and not text.startswith("#"):
            return candidate
    return None


class _Finder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[tuple[cst.SimpleStatementLine, bool]] = []
        self.accumulation = 0

    def visit_If(self, node: cst.If) -> None:
        self.accumulation += _accumulates(node)

    def leave_If(self, original_node: cst.If) -> None:
        self.accumulation -= _accumulates(original_node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.found.append((node, self.accumulation > 0))


def _accumulates(node: cst.If) -> bool:
    """An accumulation condition around a step, with the backward outside it (a block that also
    does its own backward, like TD3's delayed actor update, is no accumulation)."""
    if not classify(node.test).accumulation:
        return False
    return ".backward(" not in cst.Module(body=[]).code_for_node(node.body)


def _statements(loop: cst.CSTNode) -> list[tuple[cst.SimpleStatementLine, bool]]:
    finder = _Finder()
    loop.body.visit(finder)  # type: ignore[attr-defined]
    return finder.found


def _call(statement: cst.SimpleStatementLine, method: str) -> Optional[cst.Call]:
    if len(statement.body) != 1 or not isinstance(statement.body[0], cst.Expr):
        return None
    call = statement.body[0].value
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == method:
        return call
    return None


def _clear_statements(loop: cst.CSTNode, positions, lines: list[str]) -> list[Statement]:  # type: ignore[no-untyped-def]
    found = []
    for statement, accumulated in _statements(loop):
        call = _call(statement, "zero_grad")
        if call is None:
            continue
        line = positions[statement].start.line
        text = lines[line - 1]
        if text.strip().startswith(("if ", "for ", "while ", "with ", "try", "else", "elif")):
            continue  # a one-line suite: not a line of its own
        indent = text[: len(text) - len(text.lstrip())]
        found.append(Statement(line, indent, text, receiver_key(call.func.value), accumulated))  # type: ignore[attr-defined]
    return found


def _step_lines(loop: cst.CSTNode, positions) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    steps: dict[str, list[int]] = {}
    for statement, _ in _statements(loop):
        call = _call(statement, "step")
        if call is None:
            continue
        receiver = receiver_key(call.func.value)  # type: ignore[attr-defined]
        if "scaler" in receiver.lower() and call.args:
            receiver = receiver_key(call.args[0].value)
        steps.setdefault(receiver, []).append(positions[statement].start.line)
    return steps


def _clears(receiver: str, target: str, analysis) -> bool:  # type: ignore[no-untyped-def]
    return receiver == target


def _count_clears(node, target: str) -> int:  # type: ignore[no-untyped-def]
    from zerograd.model import Event, Inline, children

    if isinstance(node, Event):
        return int(node.kind in (Kind.CLEAR, Kind.MAYBE_CLEAR) and node.target in (target, None))
    if isinstance(node, Inline):
        return 99  # events of a helper: not a statement we can move
    return sum(_count_clears(child, target) for child in children(node))


if __name__ == "__main__":
    raise SystemExit(main())
