"""Which modules a run reads besides the files it reports (interface.md v3, "Whole projects and
the cache"): a file's findings depend on the modules of its project that the plan links with it,
so every route (`zerograd FILE`, a pre-commit batch, flake8, stdin, the editor) reads the whole
project as context and reports only the files it was given.

The project of a file is the nearest folder above it that holds a `pyproject.toml`, `setup.cfg`,
`setup.py` or `.git`; without one, the folder the run was pointed at (the directory argument the
file was found under; for a file named on its own, the folder above its top package). In that
last case the project is what Python imports from that folder, its modules and its packages
(folders with `__init__.py`), not every folder below it: a script in a home or downloads folder
is not linked with whatever else lies there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ..project.index import import_root

MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")
# A "project" this large is a home folder under git or a monorepo root, not a training project:
# reading it on every one-file run would make the route unusable, so its files are linked only
# with each other (the files given), and the run says so.
MAX_CONTEXT = 20_000


@dataclass
class Projects:
    """The roots found in one run, each folder looked up once."""

    roots: dict[str, str] = field(default_factory=dict)  # folder -> its project's root ("" : none)

    def root_of(self, path: str, fallback: str) -> str:
        return self.marked(path) or os.path.abspath(fallback)

    def marked(self, path: str) -> str:
        """The project root a marker names for `path`, or ""."""
        return self._marked(os.path.dirname(os.path.abspath(path)))

    def _marked(self, folder: str) -> str:
        seen = []
        found = ""
        while True:
            if folder in self.roots:
                found = self.roots[folder]
                break
            seen.append(folder)
            if any(os.path.exists(os.path.join(folder, marker)) for marker in MARKERS):
                found = folder
                break
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        for visited in seen:
            self.roots[visited] = found
        return found


def fallback_for(path: str, argument: str, memo: dict[str, str]) -> str:
    """The folder a file's project falls back to without a marker: the directory argument it was
    found under; for a file named on its own, its import root (the folder above its top package,
    as project.index names modules), so that a package's modules named one by one link as when
    its folder is given (the working directory could be a home folder)."""
    if argument != path:
        return argument
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in memo:
        memo[folder] = import_root(folder, lambda f: os.path.isfile(os.path.join(f, "__init__.py")))[0]
    return memo[folder]


def contexts(given: Iterable[tuple[str, str]], walk: Callable[[str, bool], Iterator[str]],
             imported: AbstractSet[str] = frozenset()) -> dict[str, tuple[list[str], list[str]]]:
    """Root -> (the given files of its project, the project's other Python modules), for the
    given (path, fallback) pairs; `walk(root, packages_only)` lists a folder's files without the
    excluded ones, entering only packages for a fallback in `imported` (an import root, see
    above). A project over MAX_CONTEXT modules gets no context (see above)."""
    projects = Projects()
    found: dict[str, tuple[list[str], list[str]]] = {}
    packages_only: set[str] = set()
    for path, fallback in given:
        root = projects.root_of(path, fallback)
        if root not in found:
            found[root] = ([], [])
        found[root][0].append(path)
        if fallback in imported and not projects.marked(path):
            packages_only.add(root)
    for root, (files, context) in found.items():
        named = {os.path.abspath(path) for path in files}
        for module in walk(root, root in packages_only):
            if module.endswith(".py") and os.path.abspath(module) not in named:
                context.append(module)
                if len(context) > MAX_CONTEXT:
                    print(f"zerograd: warning: {root} holds over {MAX_CONTEXT} Python files; "
                          "only the files given are linked with each other", file=sys.stderr)
                    context.clear()
                    break
    return found
