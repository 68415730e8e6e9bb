"""The CST side of mutate.py: find the mutation sites of a module and edit whole statements.

Deliberately independent of zerograd's own analysis (which is what the mutants test): a site is
found from the text of the calls alone.
- A *loop site* is a `for`/`while` loop whose body holds a backward call, `X.step(...)` (or
  `scaler.step(X)`) and `X.zero_grad()` for one receiver X that looks like an optimizer, with no
  loop nested inside it doing both the backward and the step.
- A *function site* is a `def` holding a backward, `X.zero_grad()` and `X.step()` outside any
  loop of its own.
Nested `def`s, classes and lambdas belong to nobody here: a closure handed to `X.step(closure)` is
not a statement of the loop around it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

import libcst as cst

Block = Union[cst.IndentedBlock, cst.Module]
Loop = Union[cst.For, cst.While]

_EMPTY = cst.Module(body=[])
# rules.md's step functions: the names that run once per iteration of somebody else's loop.
# Step-function names (rules.md section 3); a `test_*` function never is one.
STEP_FUNCTION = re.compile(
    r"(?!test_)(?:train_step|training_step|learn|optimize_model|train_batch|update\w*|\w*_update|\w*_step)")


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


@dataclass
class Line:
    """One simple statement of a site, with where it sits inside the site."""

    node: cst.CSTNode  # a SimpleStatementLine, or the compound statement owning a one-line suite
    movable: bool  # a line of its own in an indented block holding one bare call: can be moved
    conditions: tuple[cst.If, ...]  # the ifs inside the site the line depends on, outermost first
    loop: Optional[cst.CSTNode]  # the outermost loop nested in the site that holds the line
    top: cst.CSTNode  # the statement of the site's own body that holds the line
    backward: bool = False
    steps: list[str] = field(default_factory=list)  # receivers stepped
    clears: list[str] = field(default_factory=list)  # receivers cleared
    called: set[str] = field(default_factory=set)  # functions called by name or as `self.name(...)`
    other_clear: bool = False  # clears gradients some other way: `model.zero_grad()`, `p.grad = None`

    @property
    def nested(self) -> bool:
        return self.loop is not None


class _Calls(cst.CSTVisitor):
    """The calls of one statement, not those of a lambda in it."""

    def __init__(self, line: Line) -> None:
        self.line = line

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else ""
        name = func.value if isinstance(func, cst.Name) else name  # `fns[0]()` and the like: no name
        if isinstance(func, cst.Name) or code(getattr(func, "value", func)) in ("self", "cls"):
            self.line.called.add(name)  # what may be a helper of this module (`scaler.update()` is not)
        if name.endswith("backward"):  # `.backward(`, `manual_backward(`, `accelerator.backward(`
            self.line.backward = True
        if not isinstance(func, cst.Attribute):
            return
        receiver = code(func.value)
        if name in ("zero_", "detach_") and ".grad" in receiver:
            self.line.other_clear = True  # `p.grad.zero_()`, `p.grad.data.zero_()`
        if name not in ("step", "zero_grad"):
            return
        if name == "step" and "scaler" in receiver.lower() and node.args:
            receiver = code(node.args[0].value)  # `scaler.step(optimizer)` steps the optimizer
        if "opt" in receiver.lower():  # `optimizer`, `self._optim`, `opt_g`: looks like an optimizer
            (self.line.steps if name == "step" else self.line.clears).append(receiver)
        elif name == "zero_grad":
            self.line.other_clear = True  # `model.zero_grad()` clears the same parameters

    def visit_Assign(self, node: cst.Assign) -> None:
        # `p.grad = None`, `p.grad = torch.zeros_like(p)` clear; `d.grad = torch.sign(d.grad)` does not
        value = code(node.value)
        if value == "None" or "zero" in value:
            for target in node.targets:
                if isinstance(target.target, cst.Attribute) and target.target.attr.value == "grad":
                    self.line.other_clear = True


def _bare_call(statement: cst.SimpleStatementLine) -> bool:
    return len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr) and isinstance(
        statement.body[0].value, cst.Call)


def _suites(statement: cst.BaseCompoundStatement) -> Iterator[tuple[cst.BaseSuite, bool, tuple[cst.If, ...]]]:
    """(suite, opens a loop, the ifs it depends on) for each suite of a compound statement."""
    if isinstance(statement, cst.If):
        chain: tuple[cst.If, ...] = (statement,)
        yield statement.body, False, chain
        branch = statement.orelse
        while isinstance(branch, cst.If):  # an `elif` depends on every test before it
            chain += (branch,)
            yield branch.body, False, chain
            branch = branch.orelse
        if branch is not None:
            yield branch.body, False, chain
        return
    if not isinstance(statement, cst.Match):  # a `match` has only its cases' suites
        yield statement.body, isinstance(statement, (cst.For, cst.While)), ()
    extras = [handler.body for handler in getattr(statement, "handlers", ())]
    extras += [case.body for case in getattr(statement, "cases", ())]  # `match`
    for name in ("orelse", "finalbody"):  # a loop's or a try's `else:`, a try's `finally:`
        extra = getattr(statement, name, None)
        if extra is not None:
            extras.append(extra.body)
    for suite in extras:
        yield suite, False, ()


def lines_of(block: Union[cst.BaseSuite, cst.Module],
             statements: Optional[Sequence[cst.CSTNode]] = None) -> list[Line]:
    """Every simple statement of a block (or of some of its statements), in source order."""
    found: list[Line] = []
    for top in getattr(block, "body", ()) if statements is None else statements:
        _collect(top, top, block, (), None, found)
    return found


def _collect(statement: cst.CSTNode, top: cst.CSTNode, block: Union[cst.BaseSuite, cst.Module],
             conditions: tuple[cst.If, ...], loop: Optional[cst.CSTNode], found: list[Line]) -> None:
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return  # runs when called, not here
    if isinstance(statement, cst.SimpleStatementLine):
        movable = _bare_call(statement) and isinstance(block, (cst.IndentedBlock, cst.Module))
        line = Line(statement, movable, conditions, loop, top)
        statement.visit(_Calls(line))
        found.append(line)
        return
    if not isinstance(statement, cst.BaseCompoundStatement):
        return
    for suite, opens_loop, tests in _suites(statement):
        inner = conditions + tests
        inner_loop = loop if loop is not None or not opens_loop else statement
        if isinstance(suite, cst.SimpleStatementSuite):  # `if x: a; b`: no line of its own
            line = Line(statement, False, inner, inner_loop, top)
            suite.visit(_Calls(line))
            found.append(line)
        else:
            for child in suite.body:  # type: ignore[attr-defined]
                _collect(child, top, suite, inner, inner_loop, found)


def accumulates(condition: cst.If) -> bool:
    """An accumulation condition: `%` or a name about accumulation in the test, and no backward of
    its own in the body (TD3's delayed actor update `if it % 2 == 0: loss.backward(); ...` is not
    accumulation, it is a second training step)."""
    accumulating = any(isinstance(node, cst.Modulo) or "accum" in getattr(node, "value", "").lower()
                       for node in _nodes(condition.test) if isinstance(node, (cst.Modulo, cst.Name)))
    return accumulating and not any(line.backward for line in lines_of(condition.body))


def _nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _nodes(child)


def names_in(node: cst.CSTNode) -> set[str]:
    """The texts of the names and attribute chains of an expression (`a.b.c`, `a.b`, `a`)."""
    return {code(n) for n in _nodes(node) if isinstance(n, (cst.Name, cst.Attribute))}


# The nodes that bind names, and the field holding what they bind.
_BINDERS = {cst.AssignTarget: "target", cst.AugAssign: "target", cst.AnnAssign: "target",
            cst.NamedExpr: "target", cst.For: "target", cst.AsName: "name"}


def assigned_in(statements: Sequence[cst.CSTNode]) -> set[str]:
    """The texts of every name, attribute or subscript the statements assign or rebind."""
    names: set[str] = set()
    for node in (n for statement in statements for n in _nodes(statement)):
        field_name = _BINDERS.get(type(node))
        if field_name is not None:
            target = getattr(node, field_name)
            elements = target.elements if isinstance(target, (cst.Tuple, cst.List)) else ()
            names.update(code(t) for t in [target, *(e.value for e in elements)])
    return names


def unstable(test: cst.BaseExpression, statements: Sequence[cst.CSTNode]) -> bool:
    """The test could read differently when evaluated before `statements`: a call in it, or a
    name in it that they assign (`global_step += 1` after the backward)."""
    has_call = any(isinstance(node, cst.Call) for node in _nodes(test))
    return has_call or bool(names_in(test) & assigned_in(statements))


def index_of(body: Sequence[cst.CSTNode], statement: cst.CSTNode) -> int:
    return next(i for i, s in enumerate(body) if s is statement)


# --- sites ----------------------------------------------------------------------------------


@dataclass
class Site:
    scope: str  # "loop" or "function"
    node: Union[Loop, cst.FunctionDef]
    target: str  # the optimizer's receiver text
    lines: list[Line]
    several: bool  # the site steps more than one optimizer

    def clears(self) -> list[Line]:
        return [line for line in self.lines if self.target in line.clears]

    def steps(self) -> list[Line]:
        return [line for line in self.lines if self.target in line.steps]


@dataclass
class Pair:
    """Two loops in a row of one body, training the same optimizer, with a clear between them."""

    scope: str  # "function" or "module"
    first: Loop
    second: Loop
    clear: cst.SimpleStatementLine  # a statement of the body, between the loops
    target: str


@dataclass
class Scan:
    """The sites of one module, and what the mutants need to know about the rest of it."""

    loops: list[Site] = field(default_factory=list)
    functions: list[Site] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    blocks: list[tuple[str, Block]] = field(default_factory=list)  # function and module bodies
    clearing_helpers: set[str] = field(default_factory=set)  # functions here that mention zero_grad
    references: dict[str, int] = field(default_factory=dict)  # name -> uses, definitions excluded


class _Finder(cst.CSTVisitor):
    def __init__(self, module: cst.Module) -> None:
        self.scan = Scan(blocks=[("module", module)])

    def visit_Name(self, node: cst.Name) -> None:
        self.scan.references[node.value] = self.scan.references.get(node.value, 0) + 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scan.references[node.name.value] = self.scan.references.get(node.name.value, 0) - 1
        if "zero_grad" in code(node) and node.name.value not in ("zero_grad", "step"):
            self.scan.clearing_helpers.add(node.name.value)  # an optimizer wrapper's own methods are events
        if isinstance(node.body, cst.IndentedBlock):
            self.scan.blocks.append(("function", node.body))
        self.scan.functions.extend(_sites("function", node))

    def visit_For(self, node: cst.For) -> None:
        self.scan.loops.extend(_sites("loop", node))

    def visit_While(self, node: cst.While) -> None:
        self.scan.loops.extend(_sites("loop", node))


def _sites(scope: str, node: Union[Loop, cst.FunctionDef]) -> Iterator[Site]:
    if not isinstance(node.body, cst.IndentedBlock):
        return
    lines = lines_of(node.body)
    if not any(line.backward for line in lines):
        return
    stepped = {t for line in lines if not line.nested for t in line.steps}
    for target in sorted(stepped):
        if not any(target in line.clears for line in lines) or _inner_loop_trains(lines, target):
            continue
        yield Site(scope, node, target, lines, several=len(stepped) > 1)


def _inner_loop_trains(lines: list[Line], target: str) -> bool:
    """A loop nested in the site does both the backward and the step: that loop is the site."""
    nested: dict[int, list[Line]] = {}
    for line in lines:
        if line.loop is not None:
            nested.setdefault(id(line.loop), []).append(line)
    return any(any(line.backward for line in group) and any(target in line.steps for line in group)
               for group in nested.values())


def scan(module: cst.Module) -> Scan:
    finder = _Finder(module)
    module.visit(finder)
    result = finder.scan
    result.loops = [s for s in result.loops if _usable(s, result)]
    result.functions = [s for s in result.functions if _usable(s, result)]
    result.pairs = [pair for scope, block in result.blocks for pair in _pairs(scope, block, result)]
    return result


def _usable(site: Site, module: Scan) -> bool:
    """Every clear of the target is a statement of the site we can move, and nothing else in the
    site might clear the target's gradients behind our back: a helper of this module that
    mentions zero_grad, `model.zero_grad()`, `p.grad = None`, or the clear of an optimizer the
    site never steps (likely another name for the target: `self._optimizer` / `self.optimizer`)."""
    if any(not line.movable or line.nested for line in site.clears()):
        return False
    return not interference(site.lines, module)


def interference(lines: Sequence[Line], module: Scan) -> bool:
    stepped = {target for line in lines for target in line.steps}
    return any(line.other_clear or line.called & module.clearing_helpers or set(line.clears) - stepped
               for line in lines)


def _pairs(scope: str, block: Block, module: Scan) -> Iterator[Pair]:
    """Sibling loops L1, L2 of a body where L1 clears before its backward (so it ends with its
    last gradients in place), L2 clears only after its step, and one unconditional clear between
    them is all that keeps L1's gradients out of L2's first step."""
    body = list(block.body)
    loops = [(i, lines_of(s.body)) for i, s in enumerate(body) if isinstance(s, (cst.For, cst.While))]
    for (i, first), (j, second) in zip(loops, loops[1:]):
        between = lines_of(block, body[i + 1:j])
        for target in sorted(_trained(first) & _trained(second)):
            clears = [line for line in between if target in line.clears]
            if len(clears) != 1 or not clears[0].movable or not any(clears[0].node is s for s in body):
                continue  # the one clear between them must be a statement of the body itself
            if not (clears_first(first, target) and clears_after_step(second, target)):
                continue
            if not (interference(first, module) or interference(second + between, module)):
                yield Pair(scope, body[i], body[j], clears[0].node, target)  # type: ignore[arg-type]


def _trained(lines: list[Line]) -> set[str]:
    """The optimizers stepped, when there is a backward."""
    if not any(line.backward for line in lines):
        return set()
    return {target for line in lines for target in line.steps}


def clears_first(lines: list[Line], target: str) -> bool:
    """The loop clears the target only before its first backward: its last gradients stay."""
    backwards = [i for i, line in enumerate(lines) if line.backward]
    clears = [i for i, line in enumerate(lines) if target in line.clears]
    return bool(clears and backwards) and max(clears) < backwards[0]


def clears_after_step(lines: list[Line], target: str) -> bool:
    """The loop backpropagates, steps and only then clears."""
    backwards = [i for i, line in enumerate(lines) if line.backward]
    steps = [i for i, line in enumerate(lines) if target in line.steps]
    clears = [i for i, line in enumerate(lines) if target in line.clears]
    return bool(clears and backwards and steps) and backwards[0] < steps[0] < min(clears)


def called_here(module: Scan, name: str) -> bool:
    return module.references.get(name, 0) > 0


# --- edits ----------------------------------------------------------------------------------


@dataclass
class Edit:
    """Whole-statement edits on the original tree: delete statements, insert new ones before or
    after a statement of the same block. A block left empty gets a `pass`."""

    delete: set[int] = field(default_factory=set)  # id() of statements
    before: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)
    after: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)

    def insert(self, anchor: cst.CSTNode, statement: cst.BaseStatement,
               after: bool = False) -> cst.BaseStatement:
        (self.after if after else self.before).setdefault(id(anchor), []).append(statement)
        return statement


class _Apply(cst.CSTTransformer):
    def __init__(self, edit: Edit, track: Sequence[cst.CSTNode]) -> None:
        self.edit = edit
        self.track = {id(node) for node in track}
        self.tracked: dict[int, cst.CSTNode] = {}

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        result = super().on_leave(original_node, updated_node)
        if id(original_node) in self.track:
            self.tracked[id(original_node)] = result
        return result

    def _body(self, original: Sequence[cst.CSTNode], updated: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
        out: list[cst.CSTNode] = []
        for old, new in zip(original, updated):
            out.extend(self.edit.before.get(id(old), []))
            if id(old) not in self.edit.delete:
                out.append(new)
            out.extend(self.edit.after.get(id(old), []))
        return out

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body = self._body(original_node.body, updated_node.body) or [cst.SimpleStatementLine([cst.Pass()])]
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node.with_changes(body=self._body(original_node.body, updated_node.body))


def apply(module: cst.Module, edit: Edit,
          track: Sequence[cst.CSTNode]) -> tuple[cst.Module, list[cst.CSTNode]]:
    """The edited module, and the nodes of `track` (original nodes) as they are in it."""
    transformer = _Apply(edit, track)
    edited = module.visit(transformer)
    return edited, [transformer.tracked.get(id(node), node) for node in track]


def moved(statement: cst.CSTNode) -> cst.SimpleStatementLine:
    """A fresh copy of a line to insert elsewhere (no node shared with the original, so positions
    stay unambiguous); the comment lines above it stay behind."""
    assert isinstance(statement, cst.SimpleStatementLine)
    return statement.deep_clone().with_changes(leading_lines=())
