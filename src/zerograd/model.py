"""Small immutable data types shared by the analysis, the rules and the reporters.

The intermediate representation (IR) below is what `events.py` produces from LibCST and what
`flow.py` consumes: a structured tree of events and control flow with no CST in it, so the
dataflow and the rules can be tested on hand-built trees.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union


class Kind(enum.Enum):
    BACKWARD = "backward"
    STEP = "step"
    CLEAR = "clear"
    MAYBE_CLEAR = "maybe_clear"  # module.zero_grad() with no known optimizer link
    BUILD = "build"  # the optimizer is built anew: nothing it stepped on lingers


@dataclass(frozen=True)
class Event:
    kind: Kind
    site: int  # index of the place to report at (the call in the analysed loop)
    target: Optional[str] = None  # optimizer key for STEP / CLEAR
    label: str = ""  # the optimizer as written in the code, for messages


@dataclass(frozen=True)
class Test:
    """The condition of a branch, as far as the dataflow cares."""

    accumulation: bool
    key: Optional[str] = None  # equal keys are the same condition (correlated outcomes)
    residue: int = 0  # modular keys ("mod:counter%modulus"): true when counter ≡ residue
    positive: bool = True  # False when arm 0 runs where the keyed condition is false


@dataclass(frozen=True)
class Seq:
    items: tuple["Node", ...] = ()


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
    targets: frozenset[str] = frozenset()  # names bound by the loop header
    orelse: Seq = Seq()
    collection: bool = False  # a `for` loop (over a collection), not a `while`
    origin: int = 0  # identity of the loop statement in the source
    own: bool = True  # False when the loop came in with an inlined function


@dataclass(frozen=True)
class Jump:
    kind: str  # "break" | "continue" | "return" | "raise"


@dataclass(frozen=True)
class Try:
    body: Seq
    handlers: tuple[Seq, ...] = ()
    orelse: Seq = Seq()
    final: Seq = Seq()


@dataclass(frozen=True)
class Inline:
    """The body of a same-module function inlined at a call: `return` ends only this body."""

    body: Seq


Node = Union[Event, Seq, Branch, Loop, Jump, Try, Inline]


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
    if isinstance(node, Inline):
        return (node.body,)
    return ()


@dataclass(frozen=True)
class Unit:
    """One thing the dataflow runs on: a training loop body or a step function body."""

    body: Seq
    site: int  # the loop statement or the function definition
    is_function: bool
    targets: frozenset[str] = frozenset()  # loop header names (counters)


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
    cell: Optional[tuple[int, int]] = None  # notebooks: (cell number, line in the cell), 1-based

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
