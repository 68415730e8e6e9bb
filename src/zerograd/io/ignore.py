"""`.gitignore` and `.ignore` files, as ruff and ripgrep respect them (`respect-gitignore`).

The patterns' semantics (negation, anchoring, `**`, folder-only patterns) are git's, through
pathspec's GitIgnoreSpec. Each file applies below its own folder; a deeper file's decision wins
over a shallower one's, and `.ignore` over `.gitignore` in the same folder. The files of the
folders above the walked one count too, up to the repository's root (the folder holding `.git`),
so `zerograd src` skips what the root `.gitignore` names.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

NAMES = (".gitignore", ".ignore")  # in increasing precedence
Rules = tuple[tuple[str, "GitIgnoreSpec"], ...]  # (folder with a trailing separator, its patterns)


def rules_above(folder: str) -> Rules:
    """The rules of the folders above `folder` (itself excluded), up to the repository's root."""
    chain = []
    current = os.path.abspath(folder)
    while not os.path.exists(os.path.join(current, ".git")):
        parent = os.path.dirname(current)
        if parent == current:
            return ()  # not in a repository: only the walked folders' own files apply
        current = parent
        chain.append(current)
    rules: Rules = ()
    for above in reversed(chain):
        rules = rules_of(above, rules)
    return rules


def rules_of(folder: str, rules: Rules, names: frozenset[str] = frozenset(NAMES)) -> Rules:
    """`rules` and those of `folder`'s own ignore files (`names`: the files it holds, when known)."""
    for name in NAMES:
        if name not in names:
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        from pathspec import GitIgnoreSpec  # only trees that have ignore files pay for the import

        rules += ((os.path.join(os.path.abspath(folder), ""), GitIgnoreSpec.from_lines(lines)),)
    return rules


def ignored(rules: Rules, path: str, folder: bool) -> bool:
    """Whether the deepest rule that decides about `path` ignores it."""
    absolute = os.path.abspath(path)
    for base, spec in reversed(rules):
        if absolute.startswith(base):
            relative = absolute[len(base):].replace(os.sep, "/") + ("/" if folder else "")
            decision = spec.check_file(relative).include
            if decision is not None:
                return bool(decision)
    return False
