"""One module of a project as the planner sees it (plan.py), and what its text says without
parsing it: the classes and functions it can define, the names its classes' bases are written
with."""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Optional

from ..front.outline import Outline
from ..front.relevance import Scan
from .index import Facts, Imported, imports_of

_DEF = re.compile(r"\b(def|class)[ \t]+(\w+)")
_BASES = re.compile(r"^[ \t]*class[ \t]+\w+[ \t]*\(([^)]*)\)", re.M)
_EMPTY: frozenset[Any] = frozenset()  # one object: `frozenset()` makes a new one each time


class Unit:
    """One module of the project as the planner sees it. Slotted, its text read through the
    project's mapping when first asked: every module of a project has one during the plan."""

    __slots__ = ("path", "source", "texts", "given", "imports", "facts", "scan", "outline", "defs", "relevant",
                 "keep", "methods", "deps", "linked", "targets", "calls", "bases", "values")

    def __init__(self, path: str, source: Optional[str], imports: tuple[Imported, ...], facts: Optional[Facts] = None,
                 texts: Optional[Mapping[str, str]] = None, given: str = "") -> None:
        self.path = path  # absolute
        self.source = source  # its text, once read (from `texts`, by the path as given)
        self.texts, self.given = texts, given
        self.imports = imports
        self.facts = facts  # of its text (made from it when not given)
        self.scan: Optional[Scan] = None  # of its text: the elision of its build reads it again
        self.outline: Optional[Outline] = None  # what the plan reads of its functions (relevance.Outline)
        self.defs: Optional[set[tuple[str, str]]] = None  # ("def" | "class", name) in its text
        self.relevant: Optional[set[str]] = None  # its function names that can perform an event (once parsed)
        self.keep: AbstractSet[int] = _EMPTY  # the indices of those functions in `outline`
        self.methods: Optional[set[str]] = None  # names its text calls as `.name(`
        # Each of these starts empty and shared: a project of 20,000 modules has few that link.
        self.deps: frozenset[str] = _EMPTY  # the project modules whose functions it calls
        self.linked: frozenset[str] = _EMPTY  # the names it calls of those functions
        self.targets: Optional[list[tuple[str, Optional[str], str]]] = None  # Project._targets
        self.calls: Optional[dict[str, set[str]]] = None  # prefix -> names called as `prefix.name(`
        self.bases: Optional[set[str]] = None  # the names its classes' bases are written with
        # Its functions whose return values modules of its group trace (`generator_loss`).
        self.values: frozenset[str] = _EMPTY

    @property
    def text(self) -> str:
        if self.source is None:
            assert self.texts is not None
            self.source = self.texts[self.given]  # kept: the plan and the group's build read it again
        return self.source

    @property
    def known(self) -> Facts:
        if self.facts is None:
            self.facts = Facts.of(self.text)
        return self.facts


def unit_of(path: str, given: str, texts: Mapping[str, str], facts: Optional[Mapping[str, Facts]]) -> Unit:
    known = facts.get(given) if facts is not None else None
    if known is None:
        text = texts[given]
        return Unit(path, text, imports_of(text))
    return Unit(path, None, known.imports, known, texts, given)


def valued_name(unit: Unit, name: str) -> str:
    """What a module's summary of `name` is called (valued.py): a function's own name, a class's
    `forward` (calling an instance runs it); "" for neither."""
    if defines(unit, "def", name):
        return name
    return f"{name}.forward" if defines(unit, "class", name) else ""


def subclasses(unit: Unit, local: str) -> bool:
    """Whether the text defines a class with `local` among its bases (read once per module)."""
    if unit.bases is None:
        unit.bases = {word for found in _BASES.findall(unit.text) for word in re.findall(r"[\w.]+", found)}
    return local in unit.bases


def defines(unit: Unit, kind: str, name: str) -> bool:
    """Whether the text can define function or class `name`."""
    if unit.defs is None:
        unit.defs = set(_DEF.findall(unit.text))
    return (kind, name) in unit.defs
