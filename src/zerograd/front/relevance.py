"""What CPython's `ast` tree tells of a module before LibCST reads any of it (issue 13): the
Scan, from which kept.py decides which function bodies LibCST must parse.

LibCST's parser costs about ten times CPython's, and most functions of a training module (models,
data, metrics) give the analysis nothing: facts.mark_relevant never builds a function that
cannot perform an event, directly or through what it calls. Such a function's body is cut
(elision.py), and a body read only for its facts keeps only the statements holding them.

A body is kept when it could matter, judged as a superset of what facts.py reads:
- it can perform an event, or calls or hands over a function that can (mark_relevant's rule),
  an assignment of an object's wrapping counter included;
- it holds what the Collector records beyond the function itself: an import, a nested def or
  class, an assignment from an optimizer, scaler, engine, foreign tape, `partial` or a class of
  this module, a registration with a framework, or a framework's accumulation setting;
- it ends in `return <test>`, which a caller's analysis reads as its condition.
`benchmarks/realcode.py --compare-elision` checks that findings and analysed scopes are the same
with and without.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Optional, Union

from ..knowledge.frameworks import REGISTER_CALL, REGISTER_KEYWORD, ROOTS, SETTINGS
from ..knowledge.optimizers import (
    BACKWARD_METHODS,
    EVENT_METHODS,
    is_optimizer_callee,
)
from .lines import LINE
from .outline import Outline, closure
from .pytree import children, dotted, first_line, qualify, signature
from .size import check_lines

_VISITED = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Call, ast.Import, ast.ImportFrom,
                      ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return})
# Characters str.splitlines() takes for line ends and CPython does not: with one of them in the
# text, the engine's chunks count lines differently, so the text is left whole.
ODD_ENDS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# A file this long is parsed in pieces of about this many lines (scan_text).
PIECE_LINES = 2000
_TOP = re.compile(r"(?:async[ \t]+def|def|class)[ \t]|@")
Lines = tuple[int, int]  # the first and last line of a statement (decorators included)


def scan_text(source: str, piece_lines: Optional[int] = None, walk: bool = True) -> Scan:
    """The Scan of `source`, parsed by CPython's `ast`; raises what `ast.parse` raises. A long
    file is parsed in pieces cut before top-level definitions, each tree dropped once scanned:
    a whole tree weighs about 2.5 KB per line, more than all the rest of a run on a generated
    file of 200k lines. A cut is safe when every piece parses: a piece that parses ends outside
    any string or bracket, so the next one starts a statement, as in the whole text. Raises
    size.TooLarge, before any parse, for text too large to give CPython's parser at once."""
    check_lines(source)
    scan = Scan()
    piece_lines = piece_lines or PIECE_LINES
    with warnings.catch_warnings():  # SyntaxWarnings are the user's compiler's business
        warnings.simplefilter("ignore")
        lines = LINE.findall(source) if len(source) > piece_lines * 40 else []
        cuts = _cuts(lines, piece_lines) if lines and not ODD_ENDS.search(source) else [0]
        if len(cuts) > 1:
            try:
                for start, end in zip(cuts, cuts[1:] + [len(lines)]):
                    scan.add(ast.parse("".join(lines[start:end])), start, walk)
                return scan
            except (SyntaxError, ValueError):
                scan = Scan()  # a cut inside a string or a bracket: the whole text decides
        scan.add(ast.parse(source), 0, walk)
    return scan


def scan_of(source: str, tree: Optional[ast.Module] = None) -> Scan:
    """The Scan of `source`, from `tree` when the caller has it (flake8's); raises what
    `ast.parse` raises."""
    return Scan(tree) if tree is not None else scan_text(source)


def _handed_names(call: ast.Call) -> frozenset[str]:
    """The local names and `self.` attributes an optimizer may be built over, when the call may
    build one (a class, a factory: the aliases are known only once the tree is walked):
    `Adam([self.w])`, `Adam(params)`, `Adam(chain(self.actor.parameters(), extra))`."""
    callee = dotted(call.func)
    last = callee[-1] if callee else ""
    if not (last[:1].isupper() or "optim" in last.lower()):
        return frozenset()
    found: set[str] = set()
    pending: list[ast.expr] = [*call.args, *(k.value for k in call.keywords if k.arg in ("params", "model"))]
    while pending:
        value = pending.pop()
        name = qualify(dotted(value), {}) if isinstance(value, (ast.Name, ast.Attribute)) else None
        if name is not None:
            if name != "self" and name.count(".") <= 1 and (name.startswith("self.") or "." not in name):
                found.add(name)
            elif isinstance(value, ast.Attribute):
                pending.append(value.value)  # `self.actor.weight`: self.actor
        elif isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            pending.extend(value.elts)
        elif isinstance(value, ast.Starred):
            pending.append(value.value)
        elif isinstance(value, ast.BinOp):
            pending.extend((value.left, value.right))
        elif isinstance(value, ast.Call):  # `list(params)`, `self.actor.parameters()`
            pending.extend((*value.args, *(k.value for k in value.keywords)))
            if isinstance(value.func, ast.Attribute):
                pending.append(value.func.value)
    return frozenset(found)


def _on_grad(node: ast.expr) -> bool:
    """`p.grad`, `p.grad.data`."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def _is_super(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _cuts(lines: list[str], piece_lines: int) -> list[int]:
    """Where pieces of about `piece_lines` lines may start: before a top-level `def`, `class` or
    first decorator, not after a line continued with a backslash."""
    cuts = [0]
    for number in range(piece_lines, len(lines)):
        if number - cuts[-1] >= piece_lines and _TOP.match(lines[number]):
            before = lines[number - 1]
            if not before.startswith("@") and not before.rstrip("\r\n").endswith("\\"):
                cuts.append(number)
    return cuts


class Def(NamedTuple):
    """A function as the cut reads it: its name and lines (in the whole file)."""

    name: str
    line: int  # `def`
    first: int  # its body's first statement
    last: int
    col: int  # of its body's first statement
    signature: str  # `name(a, /, b, *c, d, **e)`: its header without annotations and defaults


class Scan:
    """One walk over the tree (or the trees of a file's pieces): per function, whether it
    performs an event, what it calls or hands over, and whether it holds facts (facts.py reads
    them from every body). Functions are keyed by their position in `functions` from 1 (0:
    none), and nothing of the trees is kept."""

    def __init__(self, tree: Optional[ast.Module] = None) -> None:
        self.functions: list[Def] = []
        self.events: set[int] = set()
        self.facts: set[int] = set()
        self.callees: dict[int, set[str]] = {0: set()}  # 0: the module's own statements
        self.parameters: dict[int, set[str]] = {}
        self.aliases: dict[str, str] = {}
        self.classes: set[str] = set()
        self.members: dict[str, tuple[list[int], list[str]]] = {}  # class -> (methods, bases)
        self.assigned: list[tuple[int, Optional[tuple[str, ...]]]] = []  # (function, dotted callee of an assigned call)
        self.assigned_in: list[Optional[Lines]] = []  # the statement of its body each of those is in
        self.assigned_to: list[Optional[tuple[str, ...]]] = []  # the dotted name each is assigned to (one target)
        # The names an argument of each of those is (`Adam([self.w])`: self.w), when it may build an optimizer.
        self.assigned_over: list[frozenset[str]] = []
        # (function, its return statement, the dotted callees in the value): what a builder returns.
        self.returns: list[tuple[int, Lines, tuple[Optional[tuple[str, ...]], ...]]] = []
        # Where each function's facts are: the statements of its body that hold them; `loose`:
        # functions with a fact outside them (a decorator) or statements sharing a line.
        self.held: dict[int, list[Lines]] = {}
        self.loose: set[int] = set()
        self.wraps: set[str] = set()  # `self.n = (self.n + 1) % k`: a wrapping counter (counters.py)
        # `self.n += c` with `self.n % k` somewhere: a stepped counter (counters.py), unless `spoilt`.
        self.steps: set[str] = set()
        self.spoilt: set[str] = set()  # `self.x` assigned otherwise than a step or an int literal
        self.moduli: set[str] = set()  # `self.x` in `self.x % k` or `(self.x + c) % k`
        # A call that may be a BACKWARD (`x.backward(`, `backward(` imported), anywhere.
        self.backward = False
        # The functions (0: the module's statements) that may perform a BACKWARD, and a STEP (an
        # optimizer's, a wrapper's `optimizer_step`, a hand-over to `.grad`): scopes() reads them.
        self.backwards: set[int] = set()
        self.steppers: set[int] = set()
        self.counts: list[tuple[int, str]] = []  # (function, `self.x` it assigns)
        self.counted_in: list[Optional[Lines]] = []  # the statement of its body each of those is in
        self.starts: list[int] = []  # the first line of each top-level statement, decorators included
        self.keeping: set[int] = set()  # `__init__`s that hand their base's constructor some
        self.kept: dict[int, dict[str, str]] = {}  # `__init__` -> `self.opt = optimizer`: opt -> optimizer
        self.bases: dict[str, list[tuple[Optional[tuple[str, ...]], bool]]] = {}  # module-level class -> its bases
        self.offset = 0  # lines before the piece being scanned
        self.pieces = 0  # trees scanned
        if tree is not None:
            self.add(tree)

    def fields(self) -> dict[str, dict[str, str]]:
        """Per class, what its `__init__` keeps of its parameters (`self.opt = optimizer`: opt ->
        optimizer), read whether LibCST reads its body or not (ModuleInfo's ClassInfo.fields)."""
        found: dict[str, dict[str, str]] = {}
        for cls, (methods, _) in self.members.items():
            for key in methods:
                if key in self.kept:
                    found.setdefault(cls, {}).update(self.kept[key])
        return found

    def release(self) -> None:
        """Drop all it learnt once the engine has cut the text and found the statements: it is
        read no more, and a read after this fails loudly (AttributeError) instead of finding
        nothing."""
        self.__dict__.clear()

    def same(self, other: Scan) -> bool:
        """Whether two scans learnt the same (one of a whole tree, one of its pieces): the same,
        function for function, whatever order they were met in."""
        return self._canonical() == other._canonical()

    def _canonical(self) -> tuple[Any, ...]:
        named: list[Any] = [None, *self.functions]  # key -> the function (0: none)
        by_function = [{named[k]: v for k, v in d.items()} for d in (self.callees, self.parameters)]
        return (Counter(self.functions), self.starts, self.backward, self.aliases, self.classes, self.wraps, self.bases,
                self.steps, self.spoilt, self.moduli,
                *({named[k] for k in owners} for owners in (self.events, self.facts, self.backwards, self.steppers)),
                *by_function,
                {c: (Counter(named[k] for k in m), b) for c, (m, b) in self.members.items()},
                Counter((named[k], d, t, o) for (k, d), t, o in zip(self.assigned, self.assigned_to, self.assigned_over)),
                Counter((named[k], n, t) for (k, n), t in zip(self.counts, self.counted_in)),
                Counter((named[k], t, c) for k, t, c in self.returns))

    def add(self, tree: ast.Module, offset: int = 0, walk: bool = True) -> None:
        """Scan the tree of the piece of the file after its first `offset` lines (without
        `walk`, only its top-level statements: where they start, what classes are based on)."""
        self.offset = offset
        self.pieces += 1
        for statement in tree.body:
            self.starts.append(first_line(statement) + offset)
            if isinstance(statement, ast.ClassDef):
                self.bases.setdefault(statement.name, []).extend(
                    (dotted(b), isinstance(b, ast.Name)) for b in statement.bases)
        stack: list[tuple[ast.AST, int, Optional[str], Optional[Lines]]] = (
            [(node, 0, None, None) for node in tree.body] if walk else [])
        while stack:
            node, owner, cls, top = stack.pop()
            kind = type(node)
            inner = self.visit(node, owner, cls, top) if kind in _VISITED else owner
            if kind is ast.BinOp and type(node.op) is ast.Mod:  # type: ignore[attr-defined]
                self._modulo(node)  # type: ignore[arg-type]
            within = node.name if kind is ast.ClassDef else None  # type: ignore[attr-defined]
            below = children(node)
            if inner and inner != owner:  # a function: each statement of its body is where its facts are
                tops = {id(s): (first_line(s) + offset, (s.end_lineno or 0) + offset) for s in node.body}  # type: ignore[attr-defined]
                stack.extend((child, inner, within, tops.get(id(child))) for child in below)
            else:
                stack.extend((child, inner, within, top) for child in below)

    def visit(self, node: ast.AST, owner: int, cls: Optional[str] = None, top: Optional[Lines] = None) -> int:
        """Record what `node` tells about the function `owner` (0: none), a statement of class
        `cls`'s body, within statement `top` of the owner's body; the owner of its children."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._fact(owner, top)  # a nested def is a fact of its enclosing function
            shift = self.offset
            self.functions.append(Def(node.name, node.lineno + shift, node.body[0].lineno + shift,
                                      (node.end_lineno or 0) + shift, node.body[0].col_offset, signature(node)))
            key = len(self.functions)
            if cls is not None:
                self.members[cls][0].append(key)
            arguments = node.args
            self.parameters[key] = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
            self.callees[key] = set()
            last = node.body[-1]
            if isinstance(last, ast.Return) and isinstance(last.value, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
                # A caller's analysis reads the test it returns (Builder._returned_test).
                self._fact(key, (last.lineno + shift, (last.end_lineno or 0) + shift))
            if any(first_line(b) <= (a.end_lineno or 0) for a, b in zip(node.body, node.body[1:])):
                self.loose.add(key)  # `a; b`: its statements cannot be kept apart by line
            return key
        if isinstance(node, ast.ClassDef):
            self._fact(owner, top)
            self.classes.add(node.name)
            # Two classes of one name (a redefinition) pool their members: a superset, whatever
            # order the walk meets them in.
            self.members.setdefault(node.name, ([], []))[1].extend(b.id for b in node.bases if isinstance(b, ast.Name))
            return 0
        if isinstance(node, ast.Call):
            self._call(node, owner, top)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self._fact(owner, top)
            self._import(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr in ("grad", "_grad") for t in targets):
                self.events.add(owner)
                self.steppers.add(owner)  # a hand-over (`s._grad = p.grad`)
                self.backwards.add(owner)  # a gradient written (`p.grad = g`, grads.py)
            if not isinstance(node, ast.AugAssign) and isinstance(node.value, ast.Call):
                self.assigned.append((owner, dotted(node.value.func)))
                self.assigned_in.append(top)
                self.assigned_to.append(dotted(targets[0]) if len(targets) == 1 else None)
                self.assigned_over.append(_handed_names(node.value))
            elif not isinstance(node, ast.AugAssign):
                # A constructor keeps what it is handed: read here, its body may be cut (fields).
                for target, value in _paired(targets, node.value):
                    if (isinstance(target, ast.Attribute) and isinstance(value, ast.Name)
                            and self._field(owner, [target], value.id)):
                        self.kept.setdefault(owner, {})[target.attr] = value.id  # the walk is LIFO: the first wins
            self._count(targets, node.value, owner, node, top)
        elif isinstance(node, ast.Return) and node.value is not None and owner and top is not None:
            self.returns.append((owner, top, tuple(dotted(c.func) for c in ast.walk(node.value)
                                                   if isinstance(c, ast.Call))))
        return owner

    def _field(self, owner: int, targets: Sequence[ast.expr], value: str) -> bool:
        """`self.opt = optimizer` in an `__init__` handed `optimizer`."""
        return (owner > 0 and self.functions[owner - 1].name == "__init__" and value in self.parameters.get(owner, ())
                and any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                        for t in targets))

    def _modulo(self, node: ast.BinOp) -> None:
        """`self.n % k`, `(self.n + c) % k`: `self.n` is tested modularly."""
        left = node.left.left if isinstance(node.left, ast.BinOp) else node.left
        name = qualify(dotted(left), {})
        if name is not None and name.startswith("self."):
            self.moduli.add(name)

    def _fact(self, owner: int, top: Optional[Lines]) -> None:
        self.facts.add(owner)
        if top is None:
            self.loose.add(owner)
        else:
            self.held.setdefault(owner, []).append(top)

    def _call(self, node: ast.Call, owner: int, top: Optional[Lines]) -> None:
        func = node.func
        callees = self.callees.get(owner)
        if isinstance(func, ast.Attribute):
            name = func.attr
            if name == "__init__" and (node.args or node.keywords) and _is_super(func.value):
                self.keeping.add(owner)  # `super().__init__(actor, ...)`: its base may keep them
            if name in EVENT_METHODS:
                self.events.add(owner)
                self.backward |= name in BACKWARD_METHODS
            # A closure handed to `step()` that cannot be seen is read as a backward (clears.py),
            # as a gradient written (`p.grad.copy_(g)`, grads.py) is.
            if (name in BACKWARD_METHODS or name == "step" and (node.args or any(k.arg == "closure" for k in node.keywords))
                    or name in ("copy_", "fill_") and _on_grad(func.value)):
                self.backwards.add(owner)
            if name in ("step", "optimizer_step"):
                self.steppers.add(owner)
        elif isinstance(func, ast.Name):
            name = func.id
            if name == "backward" or name in self.parameters.get(owner, ()):
                self.events.add(owner)
            self.backward |= name.endswith("backward")
            if name.endswith("backward"):
                self.backwards.add(owner)
        else:
            name = ""
        if REGISTER_CALL.match(name) or any(k.arg and (REGISTER_KEYWORD.match(k.arg) or k.arg in SETTINGS)
                                            for k in node.keywords):
            self._fact(owner, top)
        if callees is None:
            return
        callees.add(name)
        for value in (*node.args, *(k.value for k in node.keywords)):
            if isinstance(value, ast.Starred):
                value = value.value
            if isinstance(value, ast.Name):
                callees.add(value.id)
            elif isinstance(value, ast.Attribute):
                callees.add(value.attr)

    def _count(self, targets: Sequence[ast.expr], value: Optional[ast.expr], owner: int, node: ast.AST,
               top: Optional[Lines]) -> None:
        """Assignments of `self.x` (counters.Counters.record): those of a wrapping or a stepped
        counter are events."""
        for target in targets:
            name = qualify(dotted(target), {})
            if name is None or not name.startswith("self."):
                continue
            self.counts.append((owner, name))
            self.counted_in.append(top)
            left = value.left if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod) else None
            if isinstance(left, ast.BinOp) and qualify(dotted(left.left), {}) == name:
                self.wraps.add(name)
            elif _steps(node, name):
                self.steps.add(name)
            elif not (isinstance(value, ast.Constant) and type(value.value) is int):
                self.spoilt.add(name)

    def _import(self, node: Union[ast.Import, ast.ImportFrom]) -> None:
        """Local name -> what it was imported as (as facts.py records it)."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                self.aliases[local] = alias.name if alias.asname else local
            return
        base = "." * node.level + (node.module or "")
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{base}.{alias.name}" if node.module else f"{base}{alias.name}"

    def calls_backward(self) -> bool:
        """Whether the module may call a backward: the prefilter's text test made exact on the
        tree (`backward(` in a comment, a string or `ctx.save_for_backward(` is none); with an
        import of one under another name (`from torch.autograd import backward as bw`)."""
        return self.backward or any(name.endswith("backward") for name in self.aliases.values())

    def scopes(self) -> bool:
        """Whether the module alone may have a scope to analyse: the module's statements or a
        function that reach, themselves or by calling by name (mark_relevant's closure), both a
        BACKWARD and a STEP (summaries.Analyzer.targets). Without one it can hold no finding,
        and LibCST need not read it."""
        names = [d.name for d in self.functions]
        count = len(names)
        callees = [self.callees[k] for k in range(1, count + 1)]
        # `from torch.autograd import backward as bw`: the aliases are complete only now.
        aliased = {local for local, name in self.aliases.items() if name.endswith("backward")}
        backwards = self.backwards | {k for k, called in self.callees.items() if not called.isdisjoint(aliased)}
        reach = []
        for performers in (backwards, self.steppers):
            found = closure(names, {k - 1 for k in performers if 0 < k <= count}, callees, frozenset())
            reach.append((found, 0 in performers or not self.callees[0].isdisjoint(names[i] for i in found)))
        (backwards, top_backward), (steppers, top_step) = reach
        return bool(backwards & steppers) or (top_backward and top_step)

    def framed(self) -> bool:
        """Whether the module imports a framework that may drive its hooks (drivers.hooked, for
        a module alone), or imports with a star what may be one."""
        return "*" in self.aliases or not ROOTS.isdisjoint(n.lstrip(".").split(".")[0] for n in self.aliases.values())

    def relevant(self, linked: frozenset[str] = frozenset()) -> set[int]:
        """mark_relevant's closure: the functions that can perform an event."""
        count = len(self.functions)
        found = closure([d.name for d in self.functions], {k - 1 for k in self._performing() if 0 < k <= count},
                        [self.callees[k] for k in range(1, count + 1)], linked)
        return {i + 1 for i in found}

    def _performing(self) -> set[int]:
        """The functions that perform an event themselves (a wrapping counter's assignment is one)."""
        stepped = (self.steps - self.spoilt) & self.moduli
        return self.events | {owner for owner, name in self.counts if name in self.wraps or name in stepped}

    def optimizers(self) -> int:
        """How many optimizers the module builds, by name: `optimizer = AdamW(...)` on one branch
        and `optimizer = Adafactor(...)` on the other are one (a local by its function, an
        attribute by its name); a construction not assigned to one name is one of its own."""
        found: set[tuple[int, Any]] = set()
        for number, ((owner, callee), target) in enumerate(zip(self.assigned, self.assigned_to)):
            if is_optimizer_callee(qualify(callee, self.aliases) or ""):
                found.add((-1, number) if target is None else (-1 if target[0] == "self" else owner, target))
        return len(found)

    def outline(self) -> Outline:
        """What the project's plan reads of this module (plan.py), as plain data."""
        count = len(self.functions)
        bases = {name: tuple((qualify(b, self.aliases) or "", local and b is not None and b[0] not in self.aliases)
                             for b, local in written) for name, written in self.bases.items()}
        return Outline(
            names=tuple(d.name for d in self.functions),
            start=frozenset(k - 1 for k in self._performing() if 0 < k <= count),
            callees=tuple(frozenset(self.callees[k]) for k in range(1, count + 1)),
            members={name: (tuple(k - 1 for k in methods), tuple(written))
                     for name, (methods, written) in self.members.items()},
            aliases=dict(self.aliases), bases=bases,
            keeps=frozenset(c for c, (methods, _) in self.members.items()
                            if self.keeping.intersection(methods) or self.kept.keys() & set(methods)),
            top=frozenset(self.callees[0]), optimizers=self.optimizers())


def _steps(node: ast.AST, name: str) -> bool:
    """`name += c`, `name -= c` or `name = name + c`, `c` an int literal (counters.counter_step)."""
    if isinstance(node, ast.AugAssign):
        op, value = node.op, node.value
    elif isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp):
        op, value = node.value.op, node.value.right
        if qualify(dotted(node.value.left), {}) != name:
            return False
    else:
        return False
    return isinstance(op, (ast.Add, ast.Sub)) and isinstance(value, ast.Constant) and type(value.value) is int


def _paired(targets: Sequence[ast.expr], value: Optional[ast.expr]) -> Iterator[tuple[ast.expr, ast.expr]]:
    """Each target with the value it is assigned (members._paired, on CPython's tree)."""
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            if len(target.elts) == len(value.elts) and not any(
                    isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
                yield from zip(target.elts, value.elts)
        elif value is not None:
            yield target, value
