"""Module names and imports of a project's files, read from text alone (no parse, no libcst):
what a run needs to tell whether the cached plan still holds (io/files.py), and what the
planner (plan.py) starts from."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import NamedTuple, Optional

from ..engine import may_hold_findings
from ..knowledge.frameworks import SETTINGS

# `import a.b as c, d` and `from .a import (b as c, d)` at the start of a line.
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w. \t,]+)", re.M)
# A module that steps, clears or reads `.grad` somewhere: one the plan links with a caller.
_EVENT = re.compile(r"\.(?:step|zero_grad|clear_grad|clear_gradients|zero_)\s*\(|\.grad\b")
# The names run on past a backslash that ends a line (`import a, b,\` then `c`).
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]*(\([^)]*\)|(?:[^\n#;\\]|\\\r?\n|\\)*)", re.M)


class Imported(NamedTuple):  # a tuple: every module of a project keeps its imports
    module: str  # as written: `pkg.mod`, `.mod`, `..`
    name: Optional[str]  # `from module import name`; None for `import module`
    local: str  # the name it is bound to here


class Facts(NamedTuple):
    """What the plan reads of every module's text before it starts; the rest of a text is read
    when the plan first asks for it (issue 43: a plan that held every text grew with the
    project, 3 KB a module, while it reads few of them past these)."""

    imports: tuple[Imported, ...]  # a tuple: exact size, and one empty tuple for all
    holds: bool  # may_hold_findings: it can hold a finding alone
    events: bool  # it steps, clears or reads `.grad` somewhere (_EVENT)
    settings: bool  # it names a framework's accumulation setting

    @classmethod
    def of(cls, text: str) -> Facts:
        return cls(imports_of(text), may_hold_findings(text), _EVENT.search(text) is not None,
                   any(keyword in text for keyword in SETTINGS))


def imports_of(text: str) -> tuple[Imported, ...]:
    """The module-level and nested imports of a text, without parsing it."""
    plain, froms = _matches(text)
    found = []
    for match in plain:
        for part in match.group(1).split(","):
            words = part.split()
            if words:
                local = words[2] if len(words) == 3 and words[1] == "as" else words[0].split(".")[0]
                found.append(_shared(Imported(words[0], None, local)))
    for match in froms:
        for part in match.group(2).strip("()").replace("\\", " ").split(","):
            words = part.split()
            if words and words[0] != "*":
                found.append(_shared(Imported(match.group(1), words[0], words[2] if len(words) == 3 else words[0])))
    return tuple(found)


# The same import in many modules (`import torch`, `from .utils import helper`) is one object:
# every module of a project keeps its imports for the whole run.
_IMPORTS: dict[Imported, Imported] = {}


def _shared(imported: Imported) -> Imported:
    return _IMPORTS.setdefault(imported, imported)


def _matches(text: str) -> tuple[list[re.Match[str]], list[re.Match[str]]]:
    """What `_IMPORT.finditer` and `_FROM.finditer` find, tried only at the starts of lines that
    hold `import` (a search from every position costs most of a plan's time)."""
    plain: list[re.Match[str]] = []
    froms: list[re.Match[str]] = []
    end = 0  # of the last `from` match: finditer does not look inside a match
    at = text.find("import")
    while at != -1:
        start = text.rfind("\n", 0, at) + 1
        match = _IMPORT.match(text, start)
        if match is not None:
            plain.append(match)
        match = _FROM.match(text, start) if start >= end else None
        if match is not None:
            froms.append(match)
            end = match.end()
        following = text.find("\n", at)
        at = -1 if following == -1 else text.find("import", following)
    return plain, froms


def import_root(folder: str, is_package: Callable[[str], bool]) -> tuple[str, list[str]]:
    """The folder Python imports a module of `folder` from, and the packages between (outermost
    first): `a/b/c` with `__init__.py` in `b` and `c` only is (`a`, [`b`, `c`])."""
    packages: list[str] = []
    while is_package(folder) and os.path.dirname(folder) != folder:
        folder, package = os.path.split(folder)
        packages.insert(0, package)
    return folder, packages


_INIT = os.sep + "__init__.py"
_NAMESPACE_HOPS = 4  # folders above an importer where a namespace package is looked for


def _joined(folder: str, parts: list[str]) -> str:
    """os.path.join for an absolute, normalised folder and plain names (a third of its time)."""
    return os.sep.join([folder.rstrip(os.sep), *parts]) if parts else folder


class Index:
    """Module names of the project's files: `a/b/c.py` is `b.c` when `a/b` holds an
    `__init__.py` and `a` does not, and `c` for a script; relative imports go by folders.

    A name is resolved as Python resolves it, by the files it could be (no table of every
    module's name: at 20,000 modules such tables were a tenth of a run's memory, issue 43)."""

    def __init__(self, paths: Iterable[str], absolute: Optional[dict[str, str]] = None) -> None:
        """`absolute`: absolute path -> path as given, when the caller made it already (its
        strings then serve both: a project's paths are much of what a run keeps of it)."""
        self.paths = absolute if absolute is not None else {os.path.abspath(p): p for p in paths if p.endswith(".py")}
        self.packages: dict[str, bool] = {}
        self._roots: dict[str, str] = {}  # folder -> the import root of its modules
        self.heads: dict[str, set[str]] = {}  # a module name's first part -> the roots it starts from
        self.folders: set[str] = set()  # the names of the folders the files are in (_namespaced)
        for absolute_path in self.paths:
            folder, base = os.path.split(absolute_path)
            self.folders.update(folder.split(os.sep))
            root, packages = self._root(folder)
            head = packages[0] if packages else base[:-3]
            if head != "__init__":
                self.heads.setdefault(head, set()).add(root)

    def _is_package(self, folder: str) -> bool:
        if folder not in self.packages:
            self.packages[folder] = os.path.isfile(os.path.join(folder, "__init__.py"))
        return self.packages[folder]

    def _root(self, folder: str) -> tuple[str, list[str]]:
        root, packages = import_root(folder, self._is_package)
        self._roots[folder] = sys.intern(root)  # the modules of one tree share one root
        return self._roots[folder], packages

    def root_of(self, absolute: str) -> str:
        """The folder `absolute`'s module is imported from."""
        folder = os.path.dirname(absolute)
        return self._roots[folder] if folder in self._roots else self._root(folder)[0]

    def module(self, importer: str, name: str) -> Optional[str]:
        """The project file (absolute path) that `name`, imported in `importer`, refers to."""
        level = len(name) - len(name.lstrip("."))
        if level:
            folder = os.path.dirname(importer)
            for _ in range(level - 1):
                folder = os.path.dirname(folder)
            return self._file(_joined(folder, [p for p in name[level:].split(".") if p]))
        parts = name.split(".")
        found = [path for root in self.heads.get(parts[0], ()) for path in [self._file(_joined(root, parts))]
                 if path is not None and self.root_of(path) == root]
        if len(found) > 1:  # the same name in two trees: the importer's own
            found = [p for p in found if self.root_of(p) == self.root_of(importer)]
        if not found and len(parts) > 1:
            return self._namespaced(importer, parts)
        return found[0] if len(found) == 1 else None

    def _namespaced(self, importer: str, parts: list[str]) -> Optional[str]:
        """`core.ppo` in `examples/train.py`, `core/` a folder without `__init__.py`: a namespace
        package, found when a script puts the folder above it on sys.path (research code's
        `sys.path.append(os.path.join(os.path.dirname(__file__), '..'))`). The nearest folder
        above the importer that holds the module, if one does."""
        if parts[0] not in self.folders:
            return None  # `torch.nn`: most names are not the project's, and this is cheap to know
        folder = os.path.dirname(importer)
        for _ in range(_NAMESPACE_HOPS):
            if not self._is_package(_joined(folder, parts[:1])):
                found = self._file(_joined(folder, parts))
                if found is not None:
                    return found
            above = os.path.dirname(folder)
            if above == folder:
                return None
            folder = above
        return None

    def _file(self, base: str) -> Optional[str]:
        """The module file at `base` (no suffix): `base.py`, else the package `base/__init__.py`."""
        if base + ".py" in self.paths:
            return base + ".py"
        package = base + _INIT
        return package if package in self.paths else None

    def split(self, importer: str, qualified: str) -> Optional[tuple[str, list[str]]]:
        """`pkg.mod.f` -> (the file of `pkg.mod`, ["f"]): the longest prefix that is a module."""
        level = len(qualified) - len(qualified.lstrip("."))
        parts = qualified[level:].split(".")
        for cut in range(len(parts), -1 if level else 0, -1):
            found = self.module(importer, "." * level + ".".join(parts[:cut]))
            if found is not None:
                return found, parts[cut:]
        return None
