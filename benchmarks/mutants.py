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
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence, Union

import libcst as cst

Block = Union[cst.IndentedBlock, cst.Module]
Loop = Union[cst.For, cst.While]

_EMPTY = cst.Module(body=[])
# rules.md's step functions: the names that run once per iteration of somebody else's loop.
STEP_FUNCTION = re.compile(r"(train_step|training_step|learn|optimize_model|train_batch|update\w*|\w*_update|\w*_step)")


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def looks_like_optimizer(receiver: str) -> bool:
    return "opt" in receiver.lower()


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
    called: set[str] = field(default_factory=set)  # names of every function called
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
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        self.line.called.add(name)
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
        if looks_like_optimizer(receiver):
            (self.line.steps if name == "step" else self.line.clears).append(receiver)
        elif name == "zero_grad":
            self.line.other_clear = True  # `model.zero_grad()` clears the same parameters

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Attribute) and node.target.attr.value == "grad":
            self.line.other_clear = True  # `p.grad = None`


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
    yield statement.body, isinstance(statement, (cst.For, cst.While)), ()
    extras = [handler.body for handler in getattr(statement, "handlers", ())]
    extras += [case.body for case in getattr(statement, "cases", ())]  # `match`
    for name in ("orelse", "finalbody"):  # a loop's or a try's `else:`, a try's `finally:`
        extra = getattr(statement, name, None)
        if extra is not None:
            extras.append(extra.body)
    for suite in extras:
        yield suite, False, ()


def lines_of(block: Union[cst.BaseSuite, cst.Module], statements: Optional[Sequence[cst.CSTNode]] = None) -> list[Line]:
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
    accumulating = any(isinstance(node, cst.Modulo) or (isinstance(node, cst.Name) and "accum" in node.value.lower())
                       for node in _nodes(condition.test))
    return accumulating and not any(line.backward for line in lines_of(condition.body))


def _nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _nodes(child)


def names_in(node: cst.CSTNode) -> set[str]:
    """The texts of the names and attribute chains of an expression (`a.b.c`, `a.b`, `a`)."""
    return {code(n) for n in _nodes(node) if isinstance(n, (cst.Name, cst.Attribute))}


class _Assigned(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def _target(self, node: cst.CSTNode) -> None:
        if isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                self._target(element.value)
        else:
            self.names.add(code(node))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._target(node.name)


def assigned_in(statements: Sequence[cst.CSTNode]) -> set[str]:
    visitor = _Assigned()
    for statement in statements:
        statement.visit(visitor)
    return visitor.names


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
class Scan:
    """The sites of one module, and what the mutants need to know about the rest of it."""

    loops: list[Site] = field(default_factory=list)
    functions: list[Site] = field(default_factory=list)
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
        if "zero_grad" in code(node):
            self.scan.clearing_helpers.add(node.name.value)
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
    return any(any(l.backward for l in group) and any(target in l.steps for l in group) for group in nested.values())


def scan(module: cst.Module) -> Scan:
    finder = _Finder(module)
    module.visit(finder)
    result = finder.scan
    result.loops = [s for s in result.loops if _usable(s, result)]
    result.functions = [s for s in result.functions if _usable(s, result)]
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

    def insert(self, anchor: cst.CSTNode, statement: cst.BaseStatement, after: bool = False) -> cst.BaseStatement:
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

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body = self._body(original_node.body, updated_node.body) or [cst.SimpleStatementLine([cst.Pass()])]
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node.with_changes(body=self._body(original_node.body, updated_node.body))


def apply(module: cst.Module, edit: Edit, track: Sequence[cst.CSTNode]) -> tuple[cst.Module, list[cst.CSTNode]]:
    """The edited module, and the nodes of `track` (original nodes) as they are in it."""
    transformer = _Apply(edit, track)
    edited = module.visit(transformer)
    return edited, [transformer.tracked.get(id(node), node) for node in track]


def moved(statement: cst.CSTNode) -> cst.SimpleStatementLine:
    """A fresh copy of a line to insert elsewhere (no node shared with the original, so positions
    stay unambiguous); the comment lines above it stay behind."""
    assert isinstance(statement, cst.SimpleStatementLine)
    return statement.deep_clone().with_changes(leading_lines=())
