"""Which files a run checks: paths named, folders walked (excluded names, virtualenvs and what
`.gitignore` files name left out)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Optional

from .config import Config
from .ignore import NAMES as IGNORE_FILES
from .ignore import Rules, ignored, rules_above, rules_of

SUFFIXES = (".py", ".ipynb")


def discover(paths: Sequence[str], config: Config, force_exclude: bool = False) -> Iterator[tuple[str, Optional[str]]]:
    """(path, error) pairs: files named explicitly (unless --force-exclude excludes them), and
    *.py / *.ipynb files found under directories, minus excluded names and paths."""
    for path in paths:
        if force_exclude and config.is_excluded(path):
            continue
        if os.path.isdir(path):
            yield from ((p, None) for p in walk(path, config, named=not force_exclude))
        elif os.path.exists(path):
            yield path, None
        else:
            yield path, f"{path}: no such file or directory"


def walk(root: str, config: Config, packages_only: bool = False, named: bool = False) -> Iterator[str]:
    """Like os.walk (symlinked folders are not entered), with the file type from the directory
    entry instead of a stat per file; what `.gitignore` and `.ignore` files name is skipped
    (ignore.py) unless the config turns `respect-gitignore` off. `packages_only`: enter only
    folders with an `__init__.py` (what Python imports from `root`, projects.py). `named`: the
    user named `root`, which is checked even when the ignore files above it name it (as ruff
    does: `zerograd wandb` checks wandb/); then only its own ignore files and deeper ones apply."""
    respect = config.respect_gitignore
    above = rules_above(root) if respect else ()
    if named and above and ignored(above, root, True):
        above = ()
    folders: list[tuple[str, Rules]] = [(root, above)]
    while folders:
        folder, rules = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        names = frozenset(e.name for e in entries if e.name in IGNORE_FILES) if respect else frozenset()
        if names:
            rules = rules_of(folder, rules, names)
        inner = []
        for entry in entries:
            path = os.path.join(folder, entry.name)
            if entry.is_dir(follow_symlinks=False):
                if packages_only and not os.path.isfile(os.path.join(path, "__init__.py")):
                    continue
                if not config.is_excluded(path) and not _is_virtualenv(path) and not (rules and ignored(rules, path, True)):
                    inner.append((path, rules))
            elif (entry.name.endswith(SUFFIXES) and entry.is_file() and not config.is_excluded(path)
                  and not (rules and ignored(rules, path, False))):
                yield path
        folders.extend(reversed(inner))


def _is_virtualenv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg"))
