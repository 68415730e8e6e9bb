"""Source text in, findings out: parse once, extract units, run the dataflow, apply the rules.

libcst is imported only when a file can hold a finding (its text calls a `backward`, or clears
and defines a framework's hook), so checking a tree of unrelated files never pays for the import
or the parse.
"""

from __future__ import annotations

import ast
import gc
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

from .analysis.graph import MAX_NODES, Chain, TooBig
from .analysis.keys import HANDED
from .analysis.model import Call, Event, Finding, Function, Kind, Loop, Node, Settings, Span, calls_of, children
from .analysis.rules import CLEAR_KINDS, HOOK_KINDS, Hook, code_for, message
from .analysis.summaries import CapReached
from .analysis.verdicts import Verdict
from .front.lines import split_lines
from .front.size import TooLarge, check_lines, check_statement
from .knowledge.frameworks import ALONE, HOOKS, Outside, named

SHARE_LINES = 10_000  # a file this long shares its whitespace nodes (compact.py)

if TYPE_CHECKING:
    from .analysis.model import Program
    from .analysis.summaries import Analyzer
    from .front.calls import Link
    from .front.program import Exports
    from .front.relevance import Scan
    from .front.sites import Sites


class Locator(Protocol):
    def locate(self, site: int) -> Span: ...

    def text(self, site: int) -> str: ...

# Every BACKWARD form of rules.md is a call whose name ends in `backward` (`.backward(`,
# `manual_backward(`, `torch.autograd.backward(`, `backward (`): without one, no finding is
# possible. `def backward(` (autograd Functions, everywhere in torch) is not a call.
PREFILTER = "backward"
_CALL = re.compile(r"backward\s*\(")
_DEFINITION = re.compile(r"\bdef\s+$")


# A framework's hooks (rules.md section 7) can hold a finding with no backward in the file: a
# clear, or an override of the framework's clear hook, in a module that defines a hook.
_HOOK_CLEAR = ("zero_grad", ".grad")
_HOOK = re.compile(rf"\bdef\s+(?:{'|'.join(sorted(HOOKS))})\s*\(|Events\.ITERATION_")


def may_hold_findings(source: str) -> bool:
    """The cheap, sound test that decides whether a file is parsed at all."""
    if PREFILTER in source:
        for match in _CALL.finditer(source):
            if not _DEFINITION.search(source, max(0, match.start() - 12), match.start()):
                return True
    return _may_hook(source)


def _may_hook(source: str) -> bool:
    return any(word in source for word in _HOOK_CLEAR) and _HOOK.search(source) is not None


def driven(source: str, scan: Scan) -> bool:
    """Whether a framework it imports may run the module's functions around its own events."""
    return (_HOOK.search(source) is not None or "create_supervised_trainer" in source) and scan.framed()


# Every finding is placed by a STEP (rules.md section 2): a call whose name ends in `step`
# (`opt.step(`, `scaler.step(`, `xm.optimizer_step(`, a helper `train_step(` of this module), a
# hand-over of `.grad` to another module's parameters (`s._grad = p.grad`), or a framework's
# driver around the hooks a module defines. A module checked alone (no callee in another module
# is followed) with none of them can hold no finding, whatever it backpropagates; the plan still
# links such a module with callers that step (project/index.py reads may_hold_findings).
_STEP = re.compile(r"step\s*\(|\._?grad\s*=(?!=)|Events\.ITERATION_|create_supervised_trainer")
_NAMED = re.compile(r"\bdef\s+\w*$")  # `def train_step(` defines, it does not call


def may_step(source: str) -> bool:
    """The cheap, sound test that a module alone can perform a STEP."""
    for match in _STEP.finditer(source):
        if not _NAMED.search(source, max(0, match.start() - 64), match.start()):
            return True
    return _HOOK.search(source) is not None


@dataclass(frozen=True)
class Report:
    findings: list[Finding]
    scopes: int = 0  # scopes analysed (module bodies, functions: those that backpropagate and step)
    step_functions: int = 0  # of which step functions (rules.md section 3)
    capped: int = 0  # scopes a cap stopped: they report nothing
    hooked: tuple[str, ...] = ()  # of the scopes, the drivers of framework hooks: each one's framework


def lint_source(source: str, settings: Settings = Settings(), tree: Optional[ast.Module] = None) -> list[Finding]:
    """Findings for one module's source, sorted by position; no `# noqa` applied. `tree` is
    `ast.parse(source)` when the caller has it already (flake8 does)."""
    return inspect_source(source, settings, tree=tree).findings


def inspect_source(source: str, settings: Settings = Settings(), elide: bool = True,
                   tree: Optional[ast.Module] = None, scan: Optional[Scan] = None) -> Report:
    """Findings plus how many units were analysed (for the real-code benchmarks); `elide=False`
    has LibCST parse every function body (relevance.py), to check that cutting changes nothing;
    `scan`: relevance.scan_text(source), when the caller has it already (the project plan)."""
    if not may_hold_findings(source):
        return Report([])
    # The trees are acyclic and freed by reference counting; the cyclic collector would only
    # rescan them again and again, which made the time per line grow with the file's size.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _inspect(source, settings, elide, tree, scan)
    finally:
        if enabled:
            gc.enable()


def _inspect(source: str, settings: Settings, elide: bool, tree: Optional[ast.Module],
             scan: Optional[Scan]) -> Report:
    from .front.relevance import scan_of, scan_text

    if not may_step(source):
        # No finding, but what does not parse, or is too large to, is still ZG900 on every route:
        # parsed (unless flake8 did), not walked, and never given to LibCST.
        try:
            if scan is None and tree is None:
                scan_text(source, walk=False)  # its line check included
            elif scan is None:
                check_lines(source)  # flake8 parsed it; a plan's scan was checked when made
            return Report([])
        except TooLarge as error:
            return Report([_too_large(error)])
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            pass  # front_end reports it
    if scan is None:
        try:
            scan = scan_of(source, tree)
        except TooLarge as error:
            return Report([_too_large(error)])
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            pass  # front_end reports it
    # A module alone that calls no backward can hold no finding (may_hold_findings), nor one
    # whose backwards and steps no function or module statement reaches both of, unless a
    # framework drives its hooks: LibCST (three quarters of the cost) is spared.
    if scan is not None and (not scan.calls_backward() and not _may_hook(source)
                             or not scan.scopes() and not driven(source, scan)):
        return Report([])
    front = front_end(source, settings, elide, tree, scan=scan)
    if isinstance(front, Report):
        return front
    try:
        return analyse(front.program, front.sites)[0]
    except RecursionError:
        return _too_deep()


@dataclass
class Front:
    """One module through the front end: its IR, where its sites are, what others may call."""

    program: Program
    sites: Sites
    exports: Exports


def front_end(source: str, settings: Settings, elide: bool = True, tree: Optional[ast.Module] = None,
              link: Optional[Link] = None, linked: frozenset[str] = frozenset(),
              outside: Outside = ALONE, scan: Optional[Scan] = None, values: frozenset[str] = frozenset()) -> Front | Report:
    """Parse and build one module (a Report holds its syntax error); `link` and `linked` name
    the functions of the other modules of the project (project.py); `scan`: the plan's scan of
    `tree`, used up (Scan.release); `values`: its functions whose return values other modules
    of the project trace (program.build_module)."""
    import libcst

    from .front.compact import Shared, share_whitespace
    from .front.elision import elide as cut
    from .front.parse import Unreadable, kept_trees, parse_statement
    from .front.program import build_module
    from .front.relevance import scan_of
    from .front.sites import Chunk

    try:
        if scan is None:  # CPython's parser: fast, and rejects pathological input early
            scan = scan_of(source, tree)
        trees = kept_trees()
        pieces = chunk_source(cut(source, scan, linked, values) if elide else source, scan.starts)
        pieces.reverse()
        fields = scan.fields()
        # The scan and the cut text are not needed past this point: on a long file they weigh
        # as much as the LibCST trees, so they go before those are built. The callers that
        # handed the scan over still hold it (the plan, check_source): it is emptied, not only
        # let go (issue 43: 67 MiB of a 200k-line file's 2 KB per function).
        scan.release()
        tree = scan = None
        chunks = []
        # A kept tree is shared as it is; one file's whitespace is shared across its statements.
        shared: Optional[Shared] = {} if trees is None and source.count("\n") >= SHARE_LINES else None
        while pieces:
            text, offset, starts = pieces.pop()
            check_statement(text, starts[0] if starts else offset + 1)
            try:
                module, known, indents = parse_statement(text, trees)
            except libcst.ParserSyntaxError as error:  # its line is the statement's: after `offset` lines
                return Report([_syntax_error(source, error.message, offset + error.raw_line, error.raw_column)])
            except Unreadable as error:
                return Report([_syntax_error(source, error.reason, offset + error.line, error.col)])
            if shared is not None:  # never while trees are kept (a kept tree is shared as it is)
                share_whitespace(module, shared)
            chunks.append(Chunk(module, offset, starts, known, indents))
    except TooLarge as error:  # valid, maybe: no "invalid syntax" from a parse of the whole text
        return Report([_too_large(error)])
    except (SyntaxError, RecursionError, MemoryError, ValueError) as error:
        return Report([_syntax_error(source, str(error) or type(error).__name__, 1, 0)])
    try:
        return Front(*build_module(chunks, settings, link, linked, outside, fields, values))
    except RecursionError:
        return _too_deep()


def _too_large(error: TooLarge) -> Finding:
    return Finding("ZG900", message("ZG900", error.reason), Span(error.line, 0, error.line, 0))


def _too_deep() -> Report:
    """Nesting too deep to walk safely: no guess at findings, and a ZG901 that says so."""
    reason = "not analysed: nested too deeply to walk"
    return Report([Finding("ZG901", message("ZG901", reason), Span(1, 0, 1, 0))], capped=1)


def chunk_source(source: str, firsts: list[int]) -> list[tuple[str, int, tuple[int, ...]]]:
    """Cut a module before each top-level statement (`firsts`: the first line of each): each
    piece with the number of lines before it and the first line of its statement, without the
    blank lines that end it (a cut body's). LibCST's parser slows down on long inputs (a
    100k-line file costs far more than 100 files of 1k lines), blank lines cost it as much as
    short statements, and a statement parsed on its own is found again after an edit elsewhere
    (parse.Trees)."""
    lines = split_lines(source, keepends=True)  # numbered as `firsts` are, by CPython
    starts = sorted(set(firsts)) or [0]  # no statement: one piece, of comments
    cuts = [0, *(first - 1 for first in starts[1:]), len(lines)]
    pieces: list[tuple[str, int, tuple[int, ...]]] = []
    for a, b, first in zip(cuts, cuts[1:], starts):
        while b > a + 1 and not lines[b - 1].strip():
            b -= 1
        if b > a:
            pieces.append(("".join(lines[a:b]), a, (first,) if first else ()))
    return pieces


def analyse(program: Program, sites: Locator) -> tuple[Report, list[tuple[int, Finding]]]:
    """The dataflow over every scope of `program`, and the rules on its verdicts; each finding
    also with the site it is reported at (to tell linked modules apart)."""
    from .analysis.summaries import Analyzer

    analyzer = Analyzer(program)
    found: dict[int, list[Verdict]] = {}
    scopes = steppers = capped = 0
    hooked: list[str] = []
    # Functions some call can reach (directly, or handed over as an argument): what was built to
    # analyse any other is dropped once it is analysed, so memory stays per function.
    called = {fid for f in program.functions for call in calls_of(f.body)
              for fid in (call.callee, *(handed for _, handed, _ in call.funcs))}
    stopped: list[tuple[int, Finding]] = []
    for fid, function in enumerate(program.functions):
        targets = analyzer.targets(fid)
        if not targets:
            continue
        scopes += 1
        if function.driver:
            hooked.append(function.driver)
        steppers += function.step_function
        try:
            found[fid] = _analyse_scope(analyzer, fid, targets)
        except (CapReached, TooBig, RecursionError) as error:
            capped += 1  # no silent budget: the scope's verdicts are dropped, and it says so
            found[fid] = []
            stopped.append(_not_analysed(function, error, sites))
        if fid not in called:
            analyzer.forget(fid)
    sited = _findings(program, analyzer, found, sites) + stopped
    sited.sort(key=lambda f: (f[1].line, f[1].col, f[1].code))
    return Report([finding for _, finding in sited], scopes, steppers, capped, tuple(hooked)), sited


def _not_analysed(function: Function, error: Exception, sites: Locator) -> tuple[int, Finding]:
    """A ZG901 for a scope a cap stopped, at its definition (a module body: its first event).
    The verdicts reached before the cap depend on the order of the work, and a partial set
    would read as the whole: none are kept, and the finding names the cap, which is the same
    from run to run (graph size and work are functions of the program alone)."""
    scope = "the module body" if function.name == "<module>" else function.name
    if isinstance(error, TooBig):
        large = scope if error.scope == function.name else f"{scope} calls {error.scope}, which"
        reason = f"not analysed: {large} is too large (its flow graph passes the limit of {MAX_NODES:,} nodes)"
    elif isinstance(error, CapReached):
        reason = f"not analysed: {scope} has too many paths (the limit is {error.budget:,} state transfers)"
    else:
        reason = f"not analysed: {scope} is nested too deeply to walk"  # as _too_deep
    site = function.site if function.site >= 0 else _first_site(function.body)
    return site, Finding("ZG901", message("ZG901", reason), sites.locate(site))


def _first_site(body: Node) -> int:
    """The first event, call or loop of a scope (one that steps holds at least a step)."""
    stack: list[Node] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, (Event, Call, Loop)):
            return node.site
        stack.extend(reversed(children(node)))
    return -1


def _analyse_scope(analyzer: Analyzer, fid: int, targets: list[str]) -> list[Verdict]:
    """Every target's verdicts; a scope whose path facts multiply past the work cap is analysed
    again with them joined (summaries._Joins), and only a second cap stops it (ZG901)."""
    try:
        return [v for target in targets for v in _analyse_target(analyzer, fid, target)]
    except CapReached:
        analyzer.set_coarse(True)
        try:
            return [v for target in targets for v in _analyse_target(analyzer, fid, target)]
        finally:
            analyzer.set_coarse(False)


def _analyse_target(analyzer: Analyzer, fid: int, target: str) -> list[Verdict]:
    analyzer.work = 0
    return analyzer.analyse(fid, target)


def _findings(program: Program, analyzer: Analyzer, found: dict[int, list[Verdict]],
              sites: Locator) -> list[tuple[int, Finding]]:
    """rules.md section 3, Reporting: a verdict that a callee's own analysis explains is that
    callee's (reported once, at its own event); the rest are reported in the scope where the order
    goes wrong, at the call that leads to the event."""
    callees = {call.site: call.callee for function in program.functions for call in calls_of(function.body)}
    explained = {fid: {(_family(v.kind), v.chain) for v in verdicts} for fid, verdicts in found.items()}
    reported: dict[tuple[str, int], tuple[str, str, int, str, str, Optional[Hook]]] = {}
    first_step: dict[tuple[int, str], int] = {}  # (step function, optimizer) -> the step its ZG005 is at
    for fid, verdicts in found.items():
        function = program.functions[fid]
        for verdict in verdicts:
            callee = callees.get(verdict.chain[0]) if len(verdict.chain) > 1 else None
            if callee is not None and _explained(verdict, explained.get(callee, set())):
                continue
            stepper = function.step_function and not analyzer.in_loop(fid, verdict.chain[0])
            code = code_for(verdict, stepper)
            line = sites.locate(verdict.note).line if verdict.note is not None else 0
            label, kind, site, hook = verdict.label, verdict.kind, verdict.chain[0], None
            if code == "ZG001" and kind == "never_cleared" and verdict.target.endswith(HANDED):
                # The local .grad itself, or a copy of it: which clear leaves what differs.
                shares = _SHARES.search(sites.text(verdict.chain[-1])) is not None
                kind = "handed_never_cleared" if shares else "handed_copies_never_cleared"
            if function.driver:
                # A framework's order around the user's hooks (drivers.py): reported at the event
                # itself, in the hook, and a dropped clear as the override's (rules.md section 7).
                label, site = "optimizer", verdict.chain[-1]
                kind = "hook_never_cleared" if code == "ZG001" and len(verdict.chain) == 1 else kind
                hook = _hook(program, callees, verdict.chain, function.driver) if kind in HOOK_KINDS else None
                label = _as_written(sites.text(site)) if hook is not None and kind in CLEAR_KINDS else label
            if code == "ZG005":
                # One step function, one bug: reported once, at its first step (an AMP branch and
                # a plain one each stepping the optimizer are not two).
                key = (fid, verdict.target)
                if key in first_step and _position(sites, first_step[key]) <= _position(sites, site):
                    continue
                if key in first_step:
                    del reported[("ZG005", first_step[key])]
                first_step[key] = site
            other = _step_label(function, verdict.other) if code == "ZG006" else verdict.other
            reported.setdefault((code, site), (label, kind, line, other, verdict.loss, hook))
    # A clear right before the step also wipes accumulated micro-batches; ZG002 says it better.
    texts: dict[str, str] = {}  # one string per distinct message (a generated file repeats one)
    findings = [
        (site, Finding(code, _once(texts, message(code, label, kind, line, other, loss, hook)), sites.locate(site)))
        for (code, site), (label, kind, line, other, loss, hook) in reported.items()
        if not (code == "ZG003" and ("ZG002", site) in reported)
        # A step that is never cleared says first what to fix; ZG006 may follow once it is.
        and not (code == "ZG006" and any((leak, site) in reported for leak in ("ZG001", "ZG004", "ZG005")))
    ]
    return sorted(findings, key=lambda f: (f[1].line, f[1].col, f[1].code))


def _once(texts: dict[str, str], text: str) -> str:
    return texts.setdefault(text, text)


def _as_written(code: str) -> str:
    """The clear as the user wrote it, when it fits in a message (`self.zero_grad()`)."""
    if "\n" not in code and len(code) <= 60:
        return code
    return "setting .grad" if ".grad" in code else "the clear here"


def _hook(program: Program, callees: dict[int, int], chain: tuple[int, ...], driver: str) -> Optional[Hook]:
    """The hook a finding of a framework's order is in: the one the driver calls on the way to
    the clear, or for a clear hook that never clears, the framework's clear hook."""
    framework = named(driver)
    runner = driver if framework is None else framework.who  # an engine's handlers (ignite)
    clear_hook = "" if framework is None else framework.clear_hook
    if len(chain) == 1:
        return Hook(clear_hook, runner, clear_hook) if clear_hook else None
    called = callees.get(chain[-2])
    return None if called is None else Hook(program.functions[called].name, runner, clear_hook)


def _position(sites: Locator, site: int) -> tuple[int, int]:
    span = sites.locate(site)
    return span.line, span.col


# A hand-over of the tensor itself (`shared._grad = local.grad`), not of a copy of it.
_SHARES = re.compile(r"\b_?grad\s*=\s*[A-Za-z_][\w.]*\.grad[ \t]*(?:[\r\n;#]|$)")


def _step_label(function: Function, key: str) -> str:
    """The optimizer `key` as a step of `function` writes it (`self._actor_optimizer`)."""
    pending: list[Node] = [function.body]
    while pending:
        node = pending.pop()
        if isinstance(node, Event) and node.kind is Kind.STEP and node.target == key and node.label:
            return node.label
        pending.extend(children(node))
    return key


def _explained(verdict: Verdict, callee: set[tuple[str, Chain]]) -> bool:
    """The callee shows this verdict on its own; a window its clear wipes (LOST) too, when the
    callee shows that clear as one before the step (ZG002 says it better, as in one scope)."""
    inner = verdict.chain[1:]
    return (_family(verdict.kind), inner) in callee or (
        verdict.kind == "frequency_mismatch" and ("cleared_before_step", inner) in callee)


def _family(kind: str) -> str:
    """Leaks are one family: whether the caller's scope has a clear elsewhere (ZG004 rather than
    ZG001) does not make a leak the callee shows on its own the caller's."""
    leaks = ("never_cleared", "skipped_clear", "partially_cleared", "part_cleared", "leaked_in", "applied_twice", "stepped_twice")
    return "leak" if kind in leaks else "contaminated" if kind.startswith("contaminated") else kind


def _line_col(source: str, offset: int) -> tuple[int, int]:
    return source.count("\n", 0, offset) + 1, offset - (source.rfind("\n", 0, offset) + 1)


def _syntax_error(source: str, reason: str, line: int, col: int) -> Finding:
    """ZG900 where CPython's own parser places the error (LibCST's position is often off)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<source>", "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as error:
        reason, line, col = error.msg, error.lineno or 1, (error.offset or 1) - 1
        if error.lineno is None and "\0" in source:  # "cannot contain null bytes": say where
            line, col = _line_col(source, source.index("\0"))
    except UnicodeEncodeError as error:  # a lone surrogate (an editor's buffer, not a file)
        reason, (line, col) = str(error), _line_col(source, error.start)
    except (ValueError, RecursionError, MemoryError) as error:
        reason, line, col = str(error), 1, 0
    reason = " ".join(reason.split()) or "invalid syntax"
    return Finding("ZG900", message("ZG900", reason), Span(max(line, 1), max(col, 0), max(line, 1), max(col, 0)))
