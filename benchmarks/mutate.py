"""Mutation self-check: break correct training code of the real corpus, count what is caught.

    python benchmarks/mutate.py [packages...]            # the table per mutation kind and scope
    python benchmarks/mutate.py --missed [packages...]   # and every mutant that was not detected
    python benchmarks/mutate.py --kind KIND [...]        # only the mutants of one kind

The sites are found on the CST by benchmarks/mutants.py, from the calls alone (not with
zerograd's analysis, which is what is being tested): loops and functions that hold a backward,
`X.step()` and `X.zero_grad()`. Only sites on which zerograd reports nothing are mutated; each
mutant must be reported with the expected code on a line of the (mutated) site.

Mutants that delete an optimizer's clears (delete-clear, drop-one-optimizer, hoist-clear,
function-delete-clear) are not made for an optimizer built over a module another optimizer of the
file is built over too: the other's clears clear its gradients, so its own are not the only ones
(what both then apply twice is another bug, fixtures/zg001_two_optimizers_one_module.py).
Loops:
- delete-clear: remove every `X.zero_grad()` of the loop (ZG001)
- clear-before-step: move the clear to just before `X.step()`, after a backward (ZG002)
- hoist-clear: move the clear above the loop (ZG001)
- accumulation-every-iteration: a clear under an accumulation condition (`%`, `accum`) moves to
  the top of the loop body, so it runs every iteration while the step does not (ZG003)
- drop-one-optimizer: in a loop stepping several optimizers, remove one optimizer's clears (ZG001)
- dedent-step: a step that is a statement of the loop body moves after the loop; the clear stays
  inside and runs every iteration for one step (ZG003)
- accumulation-clear-before-last-backward: the conditional clear moves, under a copy of its
  condition, to just before the statement of the first backward: the accumulated gradients are
  wiped before the step that should apply them (ZG003)
- clear-one-module: the optimizer is built by an optimizer class over the parameters of several
  modules (and only so in this file; a local name in the loop's own function); its clears become
  the clear of the first of those modules only (ZG001: the others are never cleared)
- build-over-one-more-module: an optimizer built (once in the file) over one module's
  parameters, `Adam(m.parameters(), ...)`, is built over those of another module too, one the loop
  calls (not under `no_grad`), that no optimizer of the file holds and the file does not
  freeze; the loop's clears of the
  optimizer become `m.zero_grad()`: the other module's gradients are never cleared (ZG001)
- backward-before-loop: in a loop that clears only after its step, a copy of the first backward
  (a statement of the loop body) goes right before the loop: its gradients reach the loop's
  first step with the loop's own (rules.md v3 LEAK: ZG001)
- second-optimizer-same-parameters: an optimizer built once over one module's parameters gets a
  twin of the same class over the same parameters, built right after it, which steps right
  after the loop's step: one backward applied twice to the same weights (issue 47: ZG001)
- epoch-start-clear: in a loop whose every clear and some step of the target sit under an
  accumulation test, inside an enclosing (epoch) loop, the clears move to the start of the
  enclosing loop's iteration: right after a reset of a counter the window tests (`step = 0`) when
  one comes before the loop, else right before the statement holding the loop. Gradients are
  then cleared once per epoch, and each window's step applies every earlier window's gradients
  again (issue 47, rules.md v3 LEAK: ZG001 or ZG004)
Functions (a backward, clear and step outside any loop of their own):
- function-clear-before-step: the clear moves to just before the step (ZG002)
- function-delete-clear: a step function (`train_step`, `update`, ... nobody here calls) loses
  its clear (ZG005)
- window-setting-every-call: in a per-step function whose clear and step are both gated by an
  accumulation window whose size is a setting (`% self.accum`, `% args.gradient_accumulation_steps`,
  a parameter, `micro == self.grad_accum`), the clear moves out of its window to just before the
  statement of the first backward, so it runs on every call while the step waits for the window
  (ZG003 at any size above 1, rules.md section 4). The finding may be at the function's lines or
  at a call of this file that leads to it (a caller's loop is where the calls repeat).
Two loops in sequence (a function or module body):
- two-phase-drop-clear: L1 clears before its backward and so ends with gradients in place; a
  clear between L1 and L2 is all that protects L2, which clears only after its step; the mutant
  deletes that clear (ZG004 or ZG001 at L2's step)
Two GAN losses: remove-detach (ZG006), clear-before-other-backward (ZG006), below; and
remove-detach-phased (ZG006): remove-detach in a site that clears every optimizer, then
backpropagates every loss, then steps every optimizer (issue 47), whatever the order of the steps
(remove-detach is then not made there); remove-detach-in-method (ZG006, loops and functions): the
generator output's `.detach()` is in a function or method of the file that the site calls
(`d_loss(D, real, fake)`, `self.fake.detach()`), and goes there (issue 45: reach through calls);
drop-clear-between-losses (ZG006): an optimizer cleared twice loses the clear that sits after
another optimizer's loss reaching its module and stepping it, before its own backward.
Classes whose hooks a framework calls (scope: the framework; benchmarks/hook_mutants.py):
hook-clear-between (ZG002), hook-clear-every-batch (ZG003), hook-drop-clear (ZG001).
For each detected mutant it also asks whether a fix is offered (fixable) and whether `--fix` then
removes the finding (repaired). An exception raised by zerograd is counted as a crash.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import libcst as cst
from corpus import CACHE, extract_repo, fetch, load_lock, python_files
from corpus import extract as unpack
from hook_mutants import CLEAR_BETWEEN, DROP_CLEAR, EVERY_BATCH, TARGETS, hook_edits, hook_sites
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider
from mutants import (
    STEP_FUNCTION,
    Edit,
    Line,
    Scan,
    Site,
    accumulates,
    apply,
    assigned_in,
    called_here,
    clears_after_step,
    clears_first,
    code,
    index_of,
    lines_of,
    moved,
    names_in,
    scan,
    unstable,
)

from zerograd.engine import lint_source
from zerograd.io.fix import describe, fix_source

Finding = Any  # zerograd's Finding (code, line, fix): its module is not part of the interface used here

Row = tuple[str, str]  # (kind, scope)
WINDOW_SETTING = "window-setting-every-call"
SECOND_OPTIMIZER = "second-optimizer-same-parameters"
EPOCH_START = "epoch-start-clear"
PHASED = "remove-detach-phased"
IN_METHOD = "remove-detach-in-method"
CLEAR_BETWEEN_LOSSES = "drop-clear-between-losses"
HOOKED = re.compile(r"(?:LightningModule|Callback|Trainer)\b")  # a class a framework may call (hook_mutants.py)
# rules.md v3: ZG001 and ZG004 name one bug (old gradients reach a step, STALE or LEAK); ZG004 is
# for a loop where some path clears (a possible clear the mutant left, a `continue`), so either
# code reports a mutant that leaves gradients for a later step.
LEAK = ("ZG001", "ZG004")
# The codes of which one must be reported, per row of the table, in the table's order.
ROWS: dict[Row, tuple[str, ...]] = {
    ("delete-clear", "loop"): LEAK,
    ("clear-before-step", "loop"): ("ZG002",),
    ("hoist-clear", "loop"): LEAK,
    ("accumulation-every-iteration", "loop"): ("ZG003",),
    ("drop-one-optimizer", "loop"): LEAK,
    ("dedent-step", "loop"): ("ZG003",),
    ("accumulation-clear-before-last-backward", "loop"): ("ZG003",),
    ("backward-before-loop", "loop"): LEAK,
    ("clear-one-module", "loop"): LEAK,
    ("build-over-one-more-module", "loop"): LEAK,
    (SECOND_OPTIMIZER, "loop"): ("ZG001",),
    (EPOCH_START, "loop"): LEAK,
    ("function-clear-before-step", "function"): ("ZG002",),
    ("function-delete-clear", "function"): ("ZG005",),
    (WINDOW_SETTING, "function"): ("ZG003",),
    ("two-phase-drop-clear", "function"): ("ZG004", "ZG001"),
    ("two-phase-drop-clear", "module"): ("ZG004", "ZG001"),
    ("remove-detach", "loop"): ("ZG006",),
    (PHASED, "loop"): ("ZG006",),
    ("clear-before-other-backward", "loop"): ("ZG006",),
    (IN_METHOD, "loop"): ("ZG006",),
    (CLEAR_BETWEEN_LOSSES, "loop"): ("ZG006",),
    (IN_METHOD, "function"): ("ZG006",),
    **{(CLEAR_BETWEEN, t.name): ("ZG002",) for t in TARGETS if t.between[0]},
    **{(EVERY_BATCH, t.name): ("ZG003",) for t in TARGETS if t.every_batch[0]},
    **{(DROP_CLEAR, t.name): ("ZG001",) for t in TARGETS if t.drop},
}


@dataclass
class Mutant:
    kind: str
    scope: str
    source: str
    first: int  # the site's lines in the mutant
    last: int
    what: str
    callers: str = ""  # the function mutated: a finding at a line calling it counts too

    @property
    def expect(self) -> tuple[str, ...]:
        return ROWS[(self.kind, self.scope)]


@dataclass
class File:
    """One module being mutated: its tree, positions, sites and the lines zerograd flags."""

    path: Path
    module: cst.Module
    positions: Mapping[cst.CSTNode, CodeRange]
    sites: Scan
    flagged: set[int]
    several: dict[str, tuple[list[str], Optional[cst.FunctionDef]]] = field(default_factory=dict)  # -> modules, builder
    built_over_one: dict[str, tuple[cst.SimpleStatementLine, cst.Call, str]] = field(default_factory=dict)
    parameter_owners: set[str] = field(default_factory=set)  # every `X` of an `X.parameters()`
    held: set[str] = field(default_factory=set)  # modules an optimizer of the file is built over, or frozen
    # Optimizers built over a module another optimizer of the file is built over too: the other's
    # clears clear theirs, so deleting their own clears leaves no "never cleared" to find.
    shared: set[str] = field(default_factory=set)
    kinds: frozenset[str] = frozenset()  # make only these (all when empty)
    functions: Optional[list[cst.FunctionDef]] = None  # every def of the module, when first asked

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        where = self.positions[node]
        return where.start.line, where.end.line

    def clean(self, first: cst.CSTNode, last: Optional[cst.CSTNode] = None) -> bool:
        """zerograd reports nothing from the start of `first` to the end of `last`."""
        start, end = self.span(first)[0], self.span(last or first)[1]
        return not any(start <= line <= end for line in self.flagged)

    def mutant(self, kind: str, scope: str, site: cst.CSTNode, edit: Edit, what: str,
               inserted: Sequence[cst.CSTNode] = ()) -> Optional[Mutant]:
        """Apply the edit; the site's span is that of the edited site and what was inserted."""
        if self.kinds and kind not in self.kinds:
            return None  # not asked for: no edit, parse or positions
        edited, tracked = apply(self.module, edit, [site, *inserted])
        source = edited.code
        try:
            with warnings.catch_warnings():  # the corpus's own invalid escapes and the like
                warnings.simplefilter("ignore")
                compile(source, str(self.path), "exec")
        except (SyntaxError, ValueError):
            return None  # a mutant that does not parse tests nothing
        positions = MetadataWrapper(edited, unsafe_skip_copy=True).resolve(PositionProvider)
        first = min(positions[node].start.line for node in tracked)
        last = max(positions[node].end.line for node in tracked)
        return Mutant(kind, scope, source, first, last, what)


def mutants(path: Path, source: str, flagged: set[int], kinds: frozenset[str] = frozenset()) -> Iterator[Mutant]:
    """Every mutant of one file's correct sites."""
    try:
        module = cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError):
        return
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    owners = {code(c.func.value) for c in _nodes_of(module) if isinstance(c, cst.Call)
              and isinstance(c.func, cst.Attribute) and c.func.attr.value == "parameters"}
    file = File(path, module, positions, scan(module), flagged, _built_over_several(module),
                _built_over_one(module), owners, _held_by_optimizers(module) | _frozen(module), _shared(module),
                frozenset(kinds))
    for site in file.sites.loops:
        if file.clean(site.node):
            yield from _drop_none(loop_mutants(file, site))
    for site in file.sites.functions:
        if file.clean(site.node):
            yield from _drop_none(function_mutants(file, site))
    yield from _drop_none(two_phase_mutants(file))
    holders = _holders(module)
    for site in file.sites.loops:
        if site.several and file.clean(site.node):
            yield from _drop_none(contamination_mutants(file, site, holders))
    for site in file.sites.loops + file.sites.functions:
        if site.several and file.clean(site.node):
            yield from _drop_none(helper_detach_mutants(file, site, holders))
    for site in file.sites.loops:
        if site.several and file.clean(site.node):
            yield from _drop_none(iter([_clear_between_losses(file, site, holders)]))
    for node, target, root in hook_sites(module):
        if file.clean(node):
            for kind, edit, what, inserted in hook_edits(module, node, target, root):
                yield from _drop_none(iter([file.mutant(kind, target.name, node, edit, what, inserted)]))


def _drop_none(made: Iterator[Optional[Mutant]]) -> Iterator[Mutant]:
    return (mutant for mutant in made if mutant is not None)


# --- loops ----------------------------------------------------------------------------------


def loop_mutants(file: File, site: Site) -> Iterator[Optional[Mutant]]:
    loop, target, clears = site.node, site.target, site.clears()
    deleted = {id(line.node) for line in clears}
    alone = target not in file.shared
    if alone:
        yield file.mutant("delete-clear", "loop", loop, Edit(set(deleted)), f"delete {target}.zero_grad()")
    if site.several and alone:
        yield file.mutant("drop-one-optimizer", "loop", loop, Edit(set(deleted)), f"drop {target}")
    step = _step_after_backward(site)
    if step is not None:
        edit = Edit(set(deleted))
        new = edit.insert(step.node, moved(clears[0].node))
        yield file.mutant("clear-before-step", "loop", loop, edit, f"move {target}.zero_grad() before step",
                          [new])
    if alone:
        edit = Edit(set(deleted))
        new = edit.insert(loop, moved(clears[0].node))
        yield file.mutant("hoist-clear", "loop", loop, edit, f"hoist {target}.zero_grad()", [new])
    yield _every_iteration(file, site)
    yield _dedent_step(file, site)
    yield _clear_before_last_backward(file, site)
    yield _backward_before_loop(file, site)
    yield _clear_one_module(file, site)
    yield _build_over_one_more(file, site)
    yield _second_optimizer(file, site)
    yield _epoch_start_clear(file, site)


def _epoch_start_clear(file: File, site: Site) -> Optional[Mutant]:
    """The window's clears move to the start of the enclosing loop's iteration (EPOCH_START)."""
    clears = site.clears()
    if not clears or not all(_accumulated(line) and line.movable for line in clears):
        return None
    if not any(_accumulated(line) for line in site.steps()):
        return None
    found = _enclosing_loop(file, site.node)
    if found is None:
        return None
    body, top = found
    counters = {code(n) for line in clears for condition in line.conditions for n in _nodes_of(condition.test)
                if isinstance(n, (cst.Name, cst.Attribute))}
    resets = [s for s in body[:index_of(body, top)] if isinstance(s, cst.SimpleStatementLine)
              and any(isinstance(a, cst.Assign) and isinstance(a.value, cst.Integer) and a.value.value == "0"
                      and any(code(t.target) in counters for t in a.targets) for a in s.body)]
    edit = Edit({id(line.node) for line in clears})
    if resets:
        new = edit.insert(resets[-1], moved(clears[0].node), after=True)
        where = f"beside the reset `{code(resets[-1]).strip()}`"
    else:
        new = edit.insert(top, moved(clears[0].node))
        where = "at the start of the enclosing loop's iteration"
    return file.mutant(EPOCH_START, "loop", site.node, edit, f"clear {site.target} {where}", [new])


def _enclosing_loop(file: File, node: cst.CSTNode) -> Optional[tuple[list[cst.CSTNode], cst.CSTNode]]:
    """The body of the innermost loop around `node` in its function (or the module), and the
    statement of that body holding `node`."""
    scope = _scope_of(file, node) or file.module
    first, last = file.span(node)
    loops = [n for n in _nodes_of(scope) if isinstance(n, (cst.For, cst.While)) and n is not node
             and isinstance(n.body, cst.IndentedBlock) and file.span(n)[0] < first and last <= file.span(n)[1]]
    if not loops:
        return None
    loop = max(loops, key=lambda n: file.span(n)[0])
    body = list(loop.body.body)
    top = next((s for s in body if file.span(s)[0] <= first and last <= file.span(s)[1]), None)
    return (body, top) if top is not None else None


def _built_over_several(module: cst.Module) -> dict[str, tuple[list[str], Optional[cst.FunctionDef]]]:
    """Optimizers built over the parameters of two or more modules (`Adam(list(enc.parameters()) +
    list(dec.parameters()))`) by a torch-looking class, when every assignment of the name in the
    file agrees; with the function that builds it (a local name means that function's object)."""
    found: dict[str, set[tuple[str, ...]]] = {}
    where: dict[str, Optional[cst.FunctionDef]] = {}
    for node, function in _with_functions(module):
        if (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)
                and OPTIMIZER_CALL.search(code(node.value.func))):
            owners = tuple(sorted({code(c.func.value) for c in _nodes_of(node.value) if isinstance(c, cst.Call)
                                   and isinstance(c.func, cst.Attribute) and c.func.attr.value == "parameters"}))
            if owners:
                name = code(node.targets[0].target)
                found.setdefault(name, set()).add(owners)
                where[name] = function
    return {name: (list(next(iter(sets))), where[name]) for name, sets in found.items()
            if len(sets) == 1 and len(next(iter(sets))) > 1}


def _with_functions(module: cst.Module) -> Iterator[tuple[cst.CSTNode, Optional[cst.FunctionDef]]]:
    """Every node, with the innermost function around it."""
    stack: list[tuple[cst.CSTNode, Optional[cst.FunctionDef]]] = [(module, None)]
    while stack:
        node, function = stack.pop()
        yield node, function
        inner = node if isinstance(node, cst.FunctionDef) else function
        stack.extend((child, inner) for child in node.children)


def _nodes_of(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children)


def _clear_one_module(file: File, site: Site) -> Optional[Mutant]:
    """Each clear of the optimizer goes; the first module it is built over is cleared in the first
    one's place: the optimizer's other modules are never cleared."""
    built, clears = file.several.get(site.target), site.clears()
    if built is None or not clears or any(line.other_clear for line in site.lines):
        return None
    modules, function = built
    if function is not None and not site.target.startswith("self.") and not any(
            node is site.node for node in _nodes_of(function)):
        return None  # a local name of another function: another object, maybe built otherwise
    edit = Edit({id(line.node) for line in clears})
    new = edit.insert(clears[0].node, cst.parse_statement(f"{modules[0]}.zero_grad()"))
    return file.mutant("clear-one-module", "loop", site.node, edit, f"clear {modules[0]} only of {site.target}", [new])


OPTIMIZER_CALL = re.compile(r"optim|Adam|SGD|RMSprop|Adagrad|Adadelta|LBFGS|Lion|LAMB|Lamb|Adafactor")


def _built_over_one(module: cst.Module) -> dict[str, tuple[cst.SimpleStatementLine, cst.Call, str]]:
    """Optimizers built once in the file, over one module's parameters (`Adam(m.parameters(), lr)`):
    the statement, its first argument and the module."""
    found: dict[str, list[tuple[cst.SimpleStatementLine, cst.Call, str]]] = {}
    for node in _nodes_of(module):
        if not (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and isinstance(node.body[0], cst.Assign)):
            continue
        assign = node.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.value, cst.Call) or not assign.value.args:
            continue
        first = assign.value.args[0].value
        if (isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute) and first.func.attr.value == "parameters"
                and not first.args and OPTIMIZER_CALL.search(code(assign.value.func))):
            found.setdefault(code(assign.targets[0].target), []).append((node, first, code(first.func.value)))
    return {name: builds[0] for name, builds in found.items() if len(builds) == 1}


def _held_by_optimizers(module: cst.Module) -> set[str]:
    """Modules whose parameters some optimizer of the file is built over (any way)."""
    held: set[str] = set()
    for node in _nodes_of(module):
        if isinstance(node, cst.Call) and OPTIMIZER_CALL.search(code(node.func)):
            held |= {code(c.func.value) for c in _nodes_of(node) if isinstance(c, cst.Call)
                     and isinstance(c.func, cst.Attribute) and c.func.attr.value == "parameters"}
    return held


def _shared(module: cst.Module) -> set[str]:
    """Optimizers (as assigned) built over a module that another optimizer is built over as well."""
    owners: dict[str, set[str]] = {}
    for node in _nodes_of(module):
        if (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)
                and OPTIMIZER_CALL.search(code(node.value.func))):
            owners.setdefault(code(node.targets[0].target), set()).update(
                code(c.func.value) for c in _nodes_of(node.value) if isinstance(c, cst.Call)
                and isinstance(c.func, cst.Attribute) and c.func.attr.value == "parameters")
    return {name for name, mine in owners.items()
            if any(mine & theirs for other, theirs in owners.items() if other != name)}


def _frozen(module: cst.Module) -> set[str]:
    """Modules the file freezes (`for p in n.parameters(): p.requires_grad = False`,
    `n.requires_grad_(False)`): a frozen teacher never gets gradients to leave behind."""
    frozen: set[str] = set()
    for node in _nodes_of(module):
        if (isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and isinstance(node.iter.func, cst.Attribute)
                and node.iter.func.attr.value == "parameters" and re.search(r"requires_grad\s*=\s*False", code(node.body))):
            frozen.add(code(node.iter.func.value))
        if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "requires_grad_"
                and code(node).endswith("(False)")):
            frozen.add(code(node.func.value))
    return frozen


def _called_with_grad(loop: cst.CSTNode) -> set[str]:
    """What the loop calls (`n(x)`), outside `with torch.no_grad()` and the like."""
    called: set[str] = set()
    stack = [loop]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.With) and re.search(r"no_grad|inference_mode", code(node.items[0])):
            continue
        if isinstance(node, cst.Call):
            called.add(code(node.func))
        stack.extend(node.children)
    return called


def _build_over_one_more(file: File, site: Site) -> Optional[Mutant]:
    """The optimizer is built over one more module than the loop clears (rules.md v3, parameter
    sets): the other module is called in the loop, so its gradients accumulate uncleared."""
    built, clears = file.built_over_one.get(site.target), site.clears()
    if built is None or not clears or any(line.other_clear for line in site.lines):
        return None
    statement, argument, module = built
    others = sorted(n for n in _called_with_grad(site.node) & file.parameter_owners - file.held
                    if n != module and not n.startswith(module + ".") and not module.startswith(n + "."))
    if not others:
        return None
    text = code(statement).replace(code(argument), f"list({module}.parameters()) + list({others[0]}.parameters())", 1)
    edit = Edit({id(line.node) for line in clears} | {id(statement)})
    edit.insert(statement, cst.parse_statement(text.lstrip()))
    new = edit.insert(clears[0].node, cst.parse_statement(f"{module}.zero_grad()"))
    return file.mutant("build-over-one-more-module", "loop", site.node, edit,
                       f"build {site.target} over {others[0]} too, clear {module}", [new])


def _second_optimizer(file: File, site: Site) -> Optional[Mutant]:
    """A twin of the optimizer over the same parameters steps right after it (SECOND_OPTIMIZER)."""
    built, step = file.built_over_one.get(site.target), _step_after_backward(site)
    if built is None or step is None or not re.fullmatch(r"[\w.]+", site.target):
        return None
    statement, argument, module = built
    if site.target in file.shared or not site.target.startswith("self.") and (
            _scope_of(file, statement) is not _scope_of(file, site.node)):
        return None  # the twin, a local of the builder's scope, would not be the loop's to step
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call)
    twin = f"{site.target}_twin"
    edit = Edit()
    edit.insert(statement, cst.parse_statement(f"{twin} = {code(assign.value.func)}({code(argument)})"), after=True)
    new = edit.insert(step.node, cst.parse_statement(f"{twin}.step()"), after=True)
    return file.mutant(SECOND_OPTIMIZER, "loop", site.node, edit, f"a twin of {site.target} steps after it", [new])


def _scope_of(file: File, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The innermost function whose lines hold `node` (None: the module body)."""
    if file.functions is None:  # once per file: a walk of the whole module
        file.functions = [f for f in _nodes_of(file.module) if isinstance(f, cst.FunctionDef)]
    first, last = file.span(node)
    holding = [f for f in file.functions if file.span(f)[0] <= first and last <= file.span(f)[1]]
    return max(holding, key=lambda f: file.span(f)[0], default=None)


def _backward_before_loop(file: File, site: Site) -> Optional[Mutant]:
    """The loop's first backward, an unconditional statement of its own body, is copied right
    before the loop, which clears its target only after the step and nothing else before it."""
    if not clears_after_step(site.lines, site.target):
        return None
    first = next((line for line in site.lines if line.backward), None)
    if first is None or not first.movable or first.nested or first.conditions:
        return None
    if any(line.other_clear for line in site.lines):
        return None
    edit = Edit()
    new = edit.insert(site.node, moved(first.node))
    return file.mutant("backward-before-loop", "loop", site.node, edit, f"backward before the loop of {site.target}",
                       [new])


def _step_after_backward(site: Site) -> Optional[Line]:
    """The first step of the target, a movable line with a backward before it in the site."""
    seen_backward = False
    for line in site.lines:
        seen_backward = seen_backward or line.backward
        if seen_backward and site.target in line.steps and line.movable and not line.nested:
            return line
    return None


def _accumulated(line: Line) -> bool:
    return any(accumulates(condition) for condition in line.conditions)


def _every_iteration(file: File, site: Site) -> Optional[Mutant]:
    """The clear of an accumulation loop moves to the top of the loop body."""
    accumulated = [line for line in site.clears() if _accumulated(line)]
    if not accumulated or not any(_accumulated(line) for line in site.steps()):
        return None
    edit = Edit({id(line.node) for line in site.clears()})
    new = edit.insert(site.node.body.body[0], moved(accumulated[0].node))  # type: ignore[union-attr]
    return file.mutant("accumulation-every-iteration", "loop", site.node, edit,
                       f"clear {site.target} every iteration", [new])


def _dedent_step(file: File, site: Site) -> Optional[Mutant]:
    """The only step, a statement of the loop body itself, moves right after the loop. Only in
    loops that clear before their backward: with the clear after the step, the moved step would
    follow the last clear and apply nothing, a ZG002 rather than a ZG003."""
    steps = site.steps()
    body = site.node.body.body  # type: ignore[union-attr]
    if len(steps) != 1 or not steps[0].movable or not any(steps[0].node is statement for statement in body):
        return None
    if not clears_first(site.lines, site.target):
        return None
    edit = Edit({id(steps[0].node)})
    new = edit.insert(site.node, moved(steps[0].node), after=True)
    return file.mutant("dedent-step", "loop", site.node, edit, f"move {site.target} step after the loop",
                       [new])


def _clear_before_last_backward(file: File, site: Site) -> Optional[Mutant]:
    """`if <test>: X.zero_grad()` goes before the body statement of the first backward; the
    original conditional clear goes away."""
    if not any(_accumulated(line) for line in site.steps()):
        return None
    clear = next((line for line in site.clears() if _directly_under_accumulation(line)), None)
    first_backward = next((line for line in site.lines if line.backward), None)
    if clear is None or first_backward is None:
        return None
    condition, body = clear.conditions[0], list(site.node.body.body)  # type: ignore[union-attr]
    if file.span(first_backward.top)[0] >= file.span(condition)[0]:
        return None  # the clear must move up, across the backward
    crossed = body[index_of(body, first_backward.top):index_of(body, clear.top) + 1]
    if unstable(condition.test, crossed):
        return None
    edit = Edit({id(clear.node)})
    guarded = cst.If(test=condition.test.deep_clone(), body=cst.IndentedBlock(body=[moved(clear.node)]))
    new = edit.insert(first_backward.top, guarded)
    test = " ".join(code(condition.test).split())
    return file.mutant("accumulation-clear-before-last-backward", "loop", site.node, edit,
                       f"clear {site.target} under `{test}` before the backward", [new])


def _directly_under_accumulation(line: Line) -> bool:
    """A statement of the body of the one accumulation `if` around it (not its `else`)."""
    if len(line.conditions) != 1 or not accumulates(line.conditions[0]):
        return False
    return any(line.node is statement for statement in line.conditions[0].body.body)  # type: ignore[attr-defined]


# --- functions and two-phase bodies ---------------------------------------------------------


def function_mutants(file: File, site: Site) -> Iterator[Optional[Mutant]]:
    function, target, clears = site.node, site.target, site.clears()
    name = function.name.value  # type: ignore[union-attr]
    called = called_here(file.sites, name)
    note = " (called here)" if called else ""
    step = _step_after_backward(site)
    if step is not None:
        edit = Edit({id(line.node) for line in clears})
        new = edit.insert(step.node, moved(clears[0].node))
        yield file.mutant("function-clear-before-step", "function", function, edit,
                          f"{name}: move {target}.zero_grad() before step{note}", [new])
    yield _window_setting(file, site, name)
    # ZG005 speaks of step functions no function here calls: a caller would be checked instead.
    if STEP_FUNCTION.fullmatch(name) and not called and target not in file.shared:
        edit = Edit({id(line.node) for line in clears})
        yield file.mutant("function-delete-clear", "function", function, edit,
                          f"{name}: delete {target}.zero_grad()")


def _window_setting(file: File, site: Site, name: str) -> Optional[Mutant]:
    """The window-gated clear of a per-step function whose window size is a setting moves to just
    before the statement of the first backward (WINDOW_SETTING)."""
    gated = [line for line in site.clears() if _configured_window(line)]
    first_backward = next((line for line in site.lines if line.backward), None)
    if not gated or first_backward is None or not any(_configured_window(line) for line in site.steps()):
        return None
    edit = Edit({id(line.node) for line in site.clears()})
    new = edit.insert(first_backward.top, moved(gated[0].node))
    mutant = file.mutant(WINDOW_SETTING, "function", site.node, edit, f"{name}: clear {site.target} on every call", [new])
    return None if mutant is None else replace(mutant, callers=name)


def _configured_window(line: Line) -> bool:
    """Under an accumulation condition whose window size is not a literal: `% k` with `k` a name,
    attribute, subscript or call, or a counter compared with such a size (`micro == self.accum`)."""
    for condition in line.conditions:
        if not accumulates(condition):
            continue
        modulos = [n for n in _nodes_of(condition.test)
                   if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo)]
        if any(not isinstance(m.right, cst.Integer) for m in modulos):
            return True
        if not modulos and not any(isinstance(n, cst.Integer) for n in _nodes_of(condition.test)):
            return True
    return False


def two_phase_mutants(file: File) -> Iterator[Optional[Mutant]]:
    for pair in file.sites.pairs:
        if file.clean(pair.first, pair.second):
            yield file.mutant("two-phase-drop-clear", pair.scope, pair.second, Edit({id(pair.clear)}),
                              f"delete {pair.target}.zero_grad() between two loops")


# --- two optimizers: another's loss in this one's parameters (ZG006) -------------------------


def _holders(module: cst.Module) -> dict[str, set[str]]:
    """`opt_g = Adam(G.parameters())` -> {"opt_g": {"G"}}: the modules each optimizer holds, by text."""
    found: dict[str, set[str]] = {}
    for node in _nodes_of(module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call):
            owners = {code(c.func.value) for c in _nodes_of(node.value) if isinstance(c, cst.Call)
                      and isinstance(c.func, cst.Attribute) and c.func.attr.value in ("parameters", "named_parameters")}
            if owners:
                found.setdefault(code(node.targets[0].target), set()).update(owners)
    return found


def _calls_module(node: cst.CSTNode, modules: set[str]) -> bool:
    return any(isinstance(c, cst.Call) and code(c.func) in modules for c in _nodes_of(node))


def _outputs(lines: Sequence[Line], modules: set[str]) -> set[str]:
    """Names assigned from a call of one of `modules` (`fake = G(z)`)."""
    names = set()
    for line in lines:
        for node in _nodes_of(line.node):
            if isinstance(node, cst.Assign) and _calls_module(node.value, modules):
                names |= {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
    return names


class _Undetach(cst.CSTTransformer):
    """`x.detach()` -> `x` for the names (or attribute chains: `self.fake`) given, and
    `G(z).detach()` -> `G(z)` for the modules given."""

    def __init__(self, names: set[str], modules: frozenset[str] | set[str] = frozenset()) -> None:
        self.names = names
        self.modules = modules

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = updated_node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "detach" and not updated_node.args):
            return updated_node
        inner = func.value
        if isinstance(inner, (cst.Name, cst.Attribute)) and code(inner) in self.names:
            return inner
        if isinstance(inner, cst.Call) and code(inner.func) in self.modules:
            return inner
        return updated_node


def helper_detach_mutants(file: File, site: Site, holders: dict[str, set[str]]) -> Iterator[Optional[Mutant]]:
    """remove-detach-in-method (issue 45): as remove-detach, but the `.detach()` of the generator's
    output is in a function or method of this file that the site calls (`d_loss(D, real, fake)`
    with `D(fake.detach())` inside, or `self.fake.detach()` where `self.fake = self.G(z)`): the
    detach goes there, so the other optimizer's loss reaches the generator's parameters; the
    generator's clear is hoisted before the first backward when it came after it. Expected: ZG006
    at the generator's step, which the analysis can only see by following the call."""
    lines, target = site.lines, site.target
    mine = holders.get(target)
    steps = [i for i, line in enumerate(lines) if target in line.steps]
    clears = [i for i, line in enumerate(lines) if target in line.clears]
    others = [i for i, line in enumerate(lines) if line.steps and target not in line.steps]
    backward = [i for i, line in enumerate(lines) if line.backward]
    if not mine or not steps or not clears or not others or not backward:
        return
    step = steps[0]
    phased = max(clears) < backward[0] and min(steps + others) > backward[-1]
    hoist = None
    if not phased and max(clears) > backward[0]:
        if len(clears) != 1 or not lines[clears[0]].movable or lines[backward[0]].nested or clears[0] > step:
            return
        hoist = clears[0]
    defs = _defs(file)
    outputs = _outputs(lines[:step], mine) | _attribute_outputs(file, mine)
    for i, line in enumerate(lines[:step]):
        later = [j for j in backward if i <= j and (phased or j < step and any(j < k < step for k in others))]
        # The helper's value must be backpropagated: called in that backward's line, or assigned
        # to a name it reads (not an accuracy computed beside the loss).
        later = [j for j in later if j == i or _flows(lines, i, j)]
        for call, helper in _helper_calls(line, defs) if later else ():
            names = {p for p, arg in _bound(call, helper) if code(arg) in outputs} | outputs
            statements = [h.node for h in lines_of(helper.body) if isinstance(h.node, cst.SimpleStatementLine)]
            undone = [(old, old.visit(_Undetach(names, mine))) for old in statements]
            undone = [(old, new) for old, new in undone if not new.deep_equals(old)]
            if not undone:
                continue
            edit = Edit(set())
            for old, new in undone:
                edit.delete.add(id(old))
                edit.insert(old, new)  # type: ignore[arg-type]
            first = lines[later[0]].node  # that graph is now backpropagated twice: keep it
            inserted = []
            if hoist is not None:
                edit.delete.add(id(lines[hoist].node))
                inserted.append(edit.insert(lines[backward[0]].node, moved(lines[hoist].node)))
            if isinstance(first, cst.SimpleStatementLine) and id(first) not in edit.delete:
                edit.delete.add(id(first))
                inserted.append(edit.insert(first, first.visit(_Retain())))  # type: ignore[arg-type]
            name = helper.name.value
            described = f"remove .detach() in {name}() ({target}'s module)" + (
                f", {target}.zero_grad() moved before the first backward" if hoist is not None else "")
            yield file.mutant(IN_METHOD, site.scope, site.node, edit, described, inserted)
            return


def _clear_between_losses(file: File, site: Site, holders: dict[str, set[str]]) -> Optional[Mutant]:
    """drop-clear-between-losses (issue 45): the optimizer (a discriminator's, a critic's) is
    cleared twice in the loop body; the later clear sits after another optimizer's loss whose
    backward reaches its module (`g_loss = bce(D(fake), 1)`, the generator's) and before its own
    backward and step. Deleting that clear leaves the other loss's gradients in its parameters for
    its step (ZG006), while its first clear keeps it from being never cleared."""
    lines, target = site.lines, site.target
    mine = holders.get(target)
    clears = [i for i, line in enumerate(lines) if target in line.clears and not line.nested]
    steps = [i for i, line in enumerate(lines) if target in line.steps]
    if not mine or len(clears) < 2 or not steps or not all(lines[i].movable for i in clears):
        return None
    for c in clears[1:]:
        own = [j for j in range(c + 1, len(lines)) if lines[j].backward]
        before = [j for j in range(clears[0] + 1, c) if lines[j].backward and not lines[j].nested
                  and (_calls_module(lines[j].node, mine) or _loss_calls(lines, j, mine))]
        others = [k for k in range(before[-1] + 1, c) if lines[k].steps and target not in lines[k].steps] if before else []
        if own and before and others and any(own[0] < k for k in steps) and not any(
                target in lines[k].clears for k in range(c + 1, min(k for k in steps if k > own[0]))):
            return file.mutant(CLEAR_BETWEEN_LOSSES, "loop", site.node, Edit({id(lines[c].node)}),
                               f"delete {target}.zero_grad() after another optimizer's loss that reaches it")
    return None


def _flows(lines: Sequence[Line], i: int, j: int) -> bool:
    """What line `i` assigns reaches line `j` (through the assignments of the lines between)."""
    tainted = assigned_in([lines[i].node])
    for line in lines[i + 1:j]:
        if tainted & names_in(line.node):
            tainted |= assigned_in([line.node])
    return bool(tainted & names_in(lines[j].node))


def _defs(file: File) -> dict[str, cst.FunctionDef]:
    """The functions and methods of the module by name (a name defined twice: neither)."""
    if file.functions is None:
        file.functions = [f for f in _nodes_of(file.module) if isinstance(f, cst.FunctionDef)]
    found: dict[str, Optional[cst.FunctionDef]] = {}
    for function in file.functions:
        name = function.name.value
        found[name] = None if name in found else function
    return {name: f for name, f in found.items() if f is not None and isinstance(f.body, cst.IndentedBlock)}


def _helper_calls(line: Line, defs: dict[str, cst.FunctionDef]) -> Iterator[tuple[cst.Call, cst.FunctionDef]]:
    """The calls of the line of a function of this module (`f(...)`, `self.f(...)`)."""
    for node in _nodes_of(line.node):
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        if isinstance(func, cst.Name) and func.value in defs:
            yield node, defs[func.value]
        elif isinstance(func, cst.Attribute) and code(func.value) == "self" and func.attr.value in defs:
            yield node, defs[func.attr.value]


def _bound(call: cst.Call, helper: cst.FunctionDef) -> list[tuple[str, cst.BaseExpression]]:
    """(parameter, argument) pairs of a call, positional and keyword (a method's `self` skipped)."""
    params = [p.name.value for p in helper.params.params]
    if params[:1] == ["self"] and isinstance(call.func, cst.Attribute):
        params = params[1:]
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    pairs = list(zip(params, positional))
    pairs += [(a.keyword.value, a.value) for a in call.args if a.keyword is not None]
    return pairs


def _attribute_outputs(file: File, modules: set[str]) -> set[str]:
    """`self.fake` wherever the module assigns it from a call of one of `modules`."""
    found = set()
    for node in _nodes_of(file.module):
        if isinstance(node, cst.Assign) and _calls_module(node.value, modules):
            found |= {code(t.target) for t in node.targets if isinstance(t.target, cst.Attribute)}
    return found


class _Retain(cst.CSTTransformer):
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        func = updated_node.func
        if (isinstance(func, cst.Attribute) and func.attr.value == "backward"
                and not any(a.keyword is not None and a.keyword.value == "retain_graph" for a in updated_node.args)):
            keep = cst.Arg(cst.Name("True"), keyword=cst.Name("retain_graph"),
                           equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            args = list(updated_node.args)
            if args:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return updated_node.with_changes(args=[*args, keep])
        return updated_node


def contamination_mutants(file: File, site: Site, holders: dict[str, set[str]]) -> Iterator[Optional[Mutant]]:
    """remove-detach: the optimizer (a generator's) is cleared only before the loop's first
    backward, and a later loss (the discriminator's) takes its module's output detached; the
    `.detach()` goes, so that loss, stepped by another optimizer first, reaches its parameters.
    clear-before-other-backward: the optimizer (a critic's) is cleared before its own backward;
    after its step, another optimizer's loss (the actor's) calls its module; the clear moves to
    just before that loss's backward, which then stays in its parameters for its next step."""
    lines, target = site.lines, site.target
    mine = holders.get(target)
    backward = [i for i, line in enumerate(lines) if line.backward]
    steps = [i for i, line in enumerate(lines) if target in line.steps]
    clears = [i for i, line in enumerate(lines) if target in line.clears]
    if not mine or not backward or not steps or not clears:
        return
    others = [i for i, line in enumerate(lines) if line.steps and target not in line.steps]
    step = steps[0]
    hoist = None
    # Clear all, then backpropagate all, then step all (issue 47): whose loss a step applies
    # does not depend on the order of the steps.
    phased = max(clears) < backward[0] and min(steps + others) > backward[-1] and bool(others)
    if not phased and max(clears) > backward[0]:
        # The usual order (DCGAN's: the generator cleared after the discriminator's step, so its
        # loss may reach the generator): hoisting that clear to the top is still correct while
        # the output stays detached; the mutant does both.
        first = lines[backward[0]]
        if len(clears) != 1 or not lines[clears[0]].movable or first.nested or clears[0] > step:
            return
        hoist = clears[0]
    made = _outputs(lines[:step], mine)
    for i, line in enumerate(lines[:step]):
        if not isinstance(line.node, cst.SimpleStatementLine) or not made:
            continue
        new = line.node.visit(_Undetach(made))
        later = [j for j in backward if i <= j and (phased or j < step and any(j < k < step for k in others))]
        if new.deep_equals(line.node) or not later:
            continue
        # The graph through the module is now backpropagated twice: the first backward keeps it
        # (`retain_graph=True`, as such code must to run at all).
        first = lines[later[0]].node
        edit = Edit({id(line.node)})
        described = f"remove .detach() ({target}'s module)"
        if hoist is not None:  # inserted first: it goes before whatever else lands at that line
            edit.delete.add(id(lines[hoist].node))
            edit.insert(lines[backward[0]].node, moved(lines[hoist].node))
            described += f", {target}.zero_grad() moved before the first backward"
        if first is line.node:
            new = new.visit(_Retain())
        elif isinstance(first, cst.SimpleStatementLine):
            edit.delete.add(id(first))
            edit.insert(first, first.visit(_Retain()))  # type: ignore[arg-type]
        edit.insert(line.node, new)  # type: ignore[arg-type]
        yield file.mutant(PHASED if phased else "remove-detach", "loop", site.node, edit, described, [new])
        break
    if len(clears) == 1 and clears[0] < backward[0] and lines[clears[0]].movable and len(steps) == 1:
        after = [j for j in backward if j > step and any(k > j for k in others)
                 and _calls_module(lines[j].node, mine) or j > step and _loss_calls(lines, j, mine)]
        after = [j for j in after if any(k > j for k in others) and not lines[j].nested]
        if after:
            edit = Edit({id(lines[clears[0]].node)})
            new = edit.insert(lines[after[0]].node, moved(lines[clears[0]].node))
            yield file.mutant("clear-before-other-backward", "loop", site.node, edit,
                              f"move {target}.zero_grad() before another optimizer's backward", [new])


def _loss_calls(lines: Sequence[Line], j: int, modules: set[str]) -> bool:
    """The loss of backward line `j` is assigned earlier in the site from a call of `modules`."""
    losses = {n.func.value.value for n in _nodes_of(lines[j].node) if isinstance(n, cst.Call)
              and isinstance(n.func, cst.Attribute) and n.func.attr.value == "backward" and isinstance(n.func.value, cst.Name)}
    return bool(losses) and any(
        isinstance(n, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value in losses for t in n.targets)
        and _calls_module(n.value, modules) for line in lines[:j] for n in _nodes_of(line.node))


# --- measuring ------------------------------------------------------------------------------


@dataclass
class Tally:
    made: Counter[Row] = field(default_factory=Counter)
    caught: Counter[Row] = field(default_factory=Counter)
    claimed: Counter[Row] = field(default_factory=Counter)
    repaired: Counter[Row] = field(default_factory=Counter)
    crashed: Counter[Row] = field(default_factory=Counter)
    missed: list[str] = field(default_factory=list)
    report_only: list[str] = field(default_factory=list)
    files_crashed: list[str] = field(default_factory=list)


class Crash(Exception):
    """zerograd raised, or reported its own internal error (ZG901)."""


def _lint(source: str) -> list[Finding]:
    try:
        findings = lint_source(source)
    except Exception as error:  # any failure of the checker is a crash to count
        raise Crash(repr(error)) from error
    if any(f.code == "ZG901" for f in findings):
        raise Crash("ZG901")
    return findings


def measure(mutant: Mutant, where: str, tally: Tally) -> None:
    row = (mutant.kind, mutant.scope)
    tally.made[row] += 1
    label = f"{mutant.kind}: {where}:{mutant.first} ({mutant.what})"
    try:
        every = _lint(mutant.source)
    except Crash as error:
        tally.crashed[row] += 1
        tally.missed.append(f"{label} -> crash {error}")
        return
    found = [f for f in every if mutant.first <= f.line <= mutant.last or f.line in _calling(mutant)]
    if not any(f.code in mutant.expect for f in found):
        tally.missed.append(f"{label} -> {','.join(sorted({f.code for f in found})) or 'nothing'}")
        return
    tally.caught[row] += 1
    try:
        if not _claims_fix(mutant, every):
            tally.report_only.append(label)
            return
        tally.claimed[row] += 1
        tally.repaired[row] += _repaired(mutant, every)
    except Exception as error:  # noqa: BLE001  # describe() and fix_source() may fail as well
        tally.crashed[row] += 1
        tally.report_only.append(f"{label}: crash while fixing {error!r}")


def _calling(mutant: Mutant) -> set[int]:
    """The lines of the mutant that call the mutated function, directly or through functions of
    the file that call it (by name, `f(` or `.f(`): rules.md reports a verdict that needs the
    caller's loop at the caller's call."""
    if not mutant.callers:
        return set()
    calls: dict[str, list[tuple[str, int]]] = {}  # function -> (name called, line)
    for node in ast.walk(ast.parse(mutant.source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls.setdefault(node.name, []).extend(
                (c.func.id if isinstance(c.func, ast.Name) else c.func.attr, c.lineno) for c in ast.walk(node)
                if isinstance(c, ast.Call) and isinstance(c.func, (ast.Name, ast.Attribute)))
    reaching, lines = {mutant.callers}, set()
    while True:
        found = {(caller, line) for caller, made in calls.items() for name, line in made if name in reaching}
        lines |= {line for _, line in found}
        grown = reaching | {caller for caller, _ in found}
        if grown == reaching:
            return lines
        reaching = grown


def _claims_fix(mutant: Mutant, every: list[Finding]) -> bool:
    """zerograd offers a fix for the expected finding (JSON's "fix" is not null)."""
    marked = describe(mutant.source, every)
    return any(f.code in mutant.expect and f.fix and mutant.first <= f.line <= mutant.last for f in marked)


def _repaired(mutant: Mutant, every: list[Finding]) -> int:
    """--fix removes every finding of the expected code from the file and adds none."""
    after = _lint(fix_source(mutant.source).source)
    return int(not any(f.code in mutant.expect for f in after) and len(after) <= len(every))


def _roots(names: Sequence[str]) -> list[Path]:
    """The unpacked packages and repositories of the real-code corpus (those asked for)."""
    lock, repos = load_lock("realcode.lock.json"), load_lock("realcode.repos.lock.json")
    roots = [unpack(fetch(n, p)) for n, p in lock.items() if not names or n in names]
    found = (extract_repo(n, p) for n, p in repos.items() if not names or n in names)
    return roots + [r for r in found if r is not None]


def run(packages: Sequence[str], kinds: Sequence[str] = ()) -> Tally:
    tally = Tally()
    for root in _roots(packages):
        for path in python_files(root):
            try:
                source = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if ("backward" not in source or "zero_grad" not in source) and not HOOKED.search(source):
                continue  # no site without both, or a framework's hooks
            where = str(path.relative_to(CACHE / "src"))
            try:
                flagged = {f.line for f in _lint(source)}
            except Crash as error:
                tally.files_crashed.append(f"{where}: {error}")
                continue
            for mutant in mutants(path, source, flagged, frozenset(kinds)):
                measure(mutant, where, tally)
    return tally


def print_table(tally: Tally) -> None:
    print(f"{'mutation':<40} {'scope':<9} {'expect':<11} {'mutants':>7} {'detected':>8} {'share':>7} "
          f"{'fixable':>7} {'repaired':>8} {'crash':>5}")
    for row, codes in ROWS.items():
        made, caught = tally.made[row], tally.caught[row]
        share = f"{100 * caught / made:.1f}%" if made else "-"
        print(f"{row[0]:<40} {row[1]:<9} {'/'.join(codes):<11} {made:>7} {caught:>8} {share:>7} "
              f"{tally.claimed[row]:>7} {tally.repaired[row]:>8} {tally.crashed[row]:>5}")
    made, caught = sum(tally.made.values()), sum(tally.caught.values())
    claimed, repaired, crashed = (sum(c.values()) for c in (tally.claimed, tally.repaired, tally.crashed))
    print(f"{'total':<40} {'':<9} {'':<11} {made:>7} {caught:>8} {100 * caught / max(made, 1):>6.1f}% "
          f"{claimed:>7} {repaired:>8} {crashed:>5}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--missed", action="store_true", help="list every mutant not detected")
    parser.add_argument("--kind", action="append", default=[], choices=sorted({kind for kind, _ in ROWS}),
                        help="make only mutants of this kind (repeatable)")
    parser.add_argument("packages", nargs="*")
    args = parser.parse_args()
    tally = run(args.packages, args.kind)
    print_table(tally)
    if tally.files_crashed:
        print(f"\nfiles skipped, zerograd crashed on the original ({len(tally.files_crashed)}):")
        print("\n".join(tally.files_crashed))
    if args.missed and tally.missed:
        print("\nmissed:")
        print("\n".join(tally.missed))
    if args.missed and tally.report_only:
        print("\ndetected, but no fix offered (report-only):")
        print("\n".join(tally.report_only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
