"""Small immutable data types shared by the analysis, the rules and the reporters.

The intermediate representation (IR) below is what `scopes.py` produces from LibCST and what
`flow.py` and `summaries.py` consume: per scope, a structured tree of events, calls and control
flow with no CST in it, so the dataflow and the rules can be tested on hand-built trees.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Union


class Kind(enum.Enum):
    BACKWARD = "backward"
    STEP = "step"
    CLEAR = "clear"
    MAYBE_CLEAR = "maybe_clear"  # a clear of a module (target) with no known optimizer link
    BUILD = "build"  # the optimizer is built anew: nothing it stepped on lingers
    PARTIAL = "partial"  # one named parameter's .grad is overwritten: no clear of the optimizer
    MOVE = "move"  # an object's wrapping counter moves on (`self.n = (self.n + 1) % k`): by `phase`
    SET = "set"  # an object's wrapping counter is set to `phase` (`self.n = 0`)


class Reach(NamedTuple):
    """What a loss reaches (provenance.py): the modules whose parameters get its gradients."""

    modules: frozenset[str]  # modules whose calls the loss is computed from
    cut: frozenset[str]  # modules cut off on the way (`.detach()`, `torch.no_grad()`, frozen)
    opaque: bool  # it reads values from outside the scope, which may carry any module
    # (upstream, downstream): a module called on what another computed (`D(G(z))`: (G, D)). A
    # module of one optimizer reached only beside another's (`model2(x) + model1(x)`), never
    # feeding it nor fed by it, is a term of its own in the loss, not the other's leak.
    chained: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Event:
    kind: Kind
    site: int  # index of the event's own node (where it is reported)
    target: Optional[str] = None  # optimizer key for STEP / CLEAR
    label: str = ""  # the optimizer as written in the code, for messages
    zeroes: bool = False  # a clear that zeroes in place (set_to_none=False, p.grad.zero_())
    reach: Optional[Reach] = None  # a BACKWARD's loss, where two or more optimizers hold modules
    phase: int = 0  # MOVE: by how much; SET: to which value (target: the counter)
    # CLEAR of a module that holds only some of its target's parameter sets: the sets it reaches,
    # and the target's other sets, which keep their gradients.
    sets: Optional[frozenset[str]] = None
    keeps: frozenset[str] = frozenset()
    restarts: bool = False  # a CLEAR beside a reset of a counter: the accumulation window restarts
    # A custom optimizer's inherited clear: the inner optimizers it holds over other parameters,
    # which that clear does not reach (keys as `target.inner`).
    spares: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Test:
    """The condition of a branch, as far as the dataflow cares."""

    accumulation: bool
    key: Optional[str] = None  # equal keys are the same condition (correlated outcomes)
    residue: int = 0  # modular keys ("mod:counter%modulus"): true when counter ≡ residue
    positive: bool = True  # False when arm 0 runs where the keyed condition is false
    invariant: bool = False  # cannot change between iterations of the loop around it (a knob)
    external: bool = False  # reads only the function's parameters: the caller's decision
    counter: Optional[str] = None  # the counter a modular part of the test reads (`i` in `i % k`)
    # Its outcome is a path fact that events set (a wrapping counter's phase, a flag's value):
    # remembered even where it is tested once.
    tracked: bool = False
    # The last test of an `if x == "a": ... elif x == "b": ...` chain on one parameter with no
    # else: its false arm runs only for values the caller may never pass (unknown, not a path).
    dispatch: bool = False
    # A test of one parameter against a literal (`if update_params:`, `mode == "disc"`,
    # `idx is None`): (parameter, operator, literal), which a call's literal argument decides.
    given: Optional[tuple[str, str, str]] = None


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Branch:
    """if/else (arms[0] when `test` holds, arms[1] otherwise), match, or any other choice."""

    arms: tuple[Seq, ...]
    test: Optional[Test] = None


@dataclass(frozen=True)
class Loop:
    body: Seq
    site: int
    infinite: bool = False  # `while True:` leaves only through break/return/raise
    targets: frozenset[str] = frozenset()  # names bound by the loop header (restart with it)
    orelse: Seq = Seq()
    collection: bool = False  # a `for` loop over a collection that is never empty
    moves: frozenset[str] = frozenset()  # names assigned in the body or header: facts on them change
    closure: bool = False  # `step(closure)` evaluating the closure one or more times
    starts: frozenset[str] = frozenset()  # targets that are 0 in the first turn (`enumerate`, `range(n)`)


@dataclass(frozen=True)
class Jump:
    kind: str  # "break" | "continue" | "return" | "raise"


@dataclass(frozen=True)
class Try:
    body: Seq
    handlers: tuple[Seq, ...] = ()
    orelse: Seq = Seq()
    final: Seq = Seq()
    # Per handler: whether it may catch what a backward, a step or a clear raises (a builtin
    # exception or torch's; not `except Grid2OpException:`). Empty: all may.
    torch: tuple[bool, ...] = ()


@dataclass(frozen=True)
class Call:
    """A call of a function of this module (or, with `external`, of another module of the
    project, bound by project.py when the modules are linked): its summary is applied here."""

    site: int  # the call's own node
    callee: int  # index of the function in Program.functions (-1: the parameter `param`)
    bindings: tuple[tuple[str, str], ...] = ()  # callee parameter (or `self`) -> caller key
    funcs: tuple[tuple[str, int, str], ...] = ()  # callee parameter -> function handed over, its `self`
    param: Optional[str] = None  # calling a parameter: whatever function the caller passed
    external: Optional[str] = None  # another module's function (bindings name positions "#0", "#1"...)
    # Callee parameters the call gives a literal (`update_params=False`, or a literal default it
    # leaves alone): parameter -> the literal's source text.
    values: tuple[tuple[str, str], ...] = ()


Node = Union[Event, Seq, Branch, Loop, Jump, Try, Call]


def children(node: Node) -> tuple[Node, ...]:
    """The IR nodes directly inside `node`."""
    if isinstance(node, Seq):
        return node.items
    if isinstance(node, Branch):
        return node.arms
    if isinstance(node, Loop):
        return (node.body, node.orelse)
    if isinstance(node, Try):
        return (node.body, *node.handlers, node.orelse, node.final)
    return ()


def nodes_of(node: Node) -> list[Node]:
    """`node` and every IR node inside it."""
    found: list[Node] = []
    stack: list[Node] = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children(current))
    return found


def calls_of(node: Node) -> list[Call]:
    """Every call node in `node`."""
    return [current for current in nodes_of(node) if isinstance(current, Call)]


@dataclass(frozen=True)
class Function:
    """One scope: the module body (index 0) or a function, method or closure."""

    name: str
    body: Seq
    site: int  # the definition (or the module's first statement)
    step_function: bool = False  # shown to run once per iteration of an unseen loop
    params: frozenset[str] = frozenset()  # including `self` / `cls`
    local: frozenset[str] = frozenset()  # names it assigns: its own, invisible to callers
    driver: str = ""  # a framework's per-batch order around a class's hooks (drivers.py): its name
    # The modules its own optimizers (local names it builds) are built over, here: another scope's
    # `optimizer` over other modules says nothing of this one's.
    links: tuple[tuple[str, frozenset[str]], ...] = ()


@dataclass
class Program:
    """What the front end hands the dataflow: every scope, and which modules each optimizer holds."""

    functions: list[Function]
    links: dict[str, frozenset[str]]  # optimizer key -> the modules it was built from
    # A linked program (project.py): each module's own table, and which one each function reads
    # (receiver keys are a module's words: `self.optimizer` of one module is not another's).
    tables: tuple[dict[str, frozenset[str]], ...] = ()
    table_of: tuple[int, ...] = ()
    # Wrapping counters' phases after `__init__` ("mod:self.n%k" -> 0): where a method analysed
    # on its own starts (its object was built before its first call).
    phases: dict[str, int] = field(default_factory=dict)
    _merged: dict[int, dict[str, frozenset[str]]] = field(default_factory=dict, repr=False, compare=False)

    def links_of(self, fid: int) -> dict[str, frozenset[str]]:
        table = self.tables[self.table_of[fid]] if self.table_of else self.links
        own = self.functions[fid].links
        if not own:
            return table
        if fid not in self._merged:
            self._merged[fid] = {**table, **dict(own)}
        return self._merged[fid]


@dataclass(frozen=True)
class Span:
    line: int  # 1-based
    col: int  # 0-based, in characters (flake8 adds 1 when printing)
    end_line: int
    end_col: int


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    span: Span
    fix: Optional[str] = None
    # Notebooks: (cell number, line in the cell, line of the .ipynb file holding it), 1-based.
    cell: Optional[tuple[int, int, int]] = None

    @property
    def line(self) -> int:
        return self.span.line

    @property
    def col(self) -> int:
        return self.span.col


@dataclass(frozen=True)
class Settings:
    """Options that change what the analysis understands (from config or flake8 options)."""

    optimizer_names: tuple[str, ...] = ()
    not_optimizer_names: tuple[str, ...] = ()
