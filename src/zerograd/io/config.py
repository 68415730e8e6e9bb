"""Which codes are reported (flake8's select/ignore semantics), and `[tool.zerograd]` config.

The config is looked for in `pyproject.toml` files from the first path upwards: the first one
with a `[tool.zerograd]` table wins (`--config FILE` names it instead). Every key and value is
checked; a bad one is an error that names the key and the file (the CLI exits 2).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..analysis.model import Settings
from ..analysis.rules import RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on older Pythons only
    import tomli as tomllib

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

CODE_PREFIX = re.compile(r"^ZG[0-9]{0,3}$")
DEFAULT_SELECT = ("ZG",)
DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "__pycache__", "build", "dist",
    "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".zerograd_cache", ".eggs", "site-packages",
)
LIST_KEYS = ("select", "ignore", "extend-select", "exclude", "extend-exclude", "optimizer-names",
             "not-optimizer-names")


class ConfigError(ValueError):
    """A bad option value; the CLI prints it and exits 2."""


def parse_codes(value: str, option: str) -> tuple[str, ...]:
    return _codes(re.split(r"[,\s]+", value), option)


def _codes(items: Iterable[str], option: str) -> tuple[str, ...]:
    codes = tuple(c.strip().upper() for c in items if c.strip())
    for code in codes:
        if not CODE_PREFIX.match(code):
            raise ConfigError(f"{option}: '{code}' is not a zerograd code or prefix (ZG, ZG0, ZG001)")
        if not any(rule.startswith(code) for rule in RULES):
            # `--select ZG7` would check nothing and let CI pass: a typo must not look like success.
            raise ConfigError(f"{option}: '{code}' matches no rule (known: {', '.join(sorted(RULES))})")
    return codes


@dataclass(frozen=True)
class Selection:
    select: tuple[str, ...] = DEFAULT_SELECT
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()

    def allows(self, code: str) -> bool:
        """The longest matching prefix decides, as in flake8: `--ignore ZG --select ZG002`."""
        chosen = _longest(code, self.select + self.extend_select)
        ignored = _longest(code, self.ignore)
        return chosen > ignored


def _longest(code: str, prefixes: Iterable[str]) -> int:
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


@dataclass(frozen=True)
class Config:
    """`[tool.zerograd]`, with paths relative to `root` (the folder of the pyproject.toml)."""

    root: Path = field(default_factory=Path.cwd)
    source: Optional[Path] = None
    select: Optional[tuple[str, ...]] = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    optimizer_names: tuple[str, ...] = ()
    not_optimizer_names: tuple[str, ...] = ()
    cache_dir: Optional[str] = None  # relative to root
    respect_gitignore: bool = True  # skip what .gitignore and .ignore files name (ignore.py)

    @property
    def settings(self) -> Settings:
        return Settings(self.optimizer_names, self.not_optimizer_names)

    def is_excluded(self, path: str) -> bool:
        """Like ruff: a pattern matches a file or folder name, or its path below the root."""
        return self._excludes.matches(path)

    def ignored_for(self, path: str) -> tuple[str, ...]:
        return tuple(code for patterns, codes in self._ignores if patterns.matches(path) for code in codes)

    @cached_property
    def _excludes(self) -> Patterns:
        return Patterns(self.exclude + self.extend_exclude, self.root)

    @cached_property
    def _ignores(self) -> tuple[tuple[Patterns, tuple[str, ...]], ...]:
        return tuple((Patterns((pattern,), self.root), codes) for pattern, codes in self.per_file_ignores)


class Patterns:
    """Exclude or per-file-ignore patterns, matched with string operations only: discovery asks
    once per file and folder, and resolving each path (symlinks, a system call per component)
    was most of a run's time on a tree of mostly unrelated files. Symlinks are therefore not
    followed: a path is matched as written, made absolute against the working directory.

    A bare name matches a file or folder of that name anywhere; a glob has gitignore's semantics
    through pathspec (issue 48), as ruff's users expect: without a slash it matches a name at any
    depth, with one it is anchored at the root, `*` stays within a folder and `**` crosses them,
    and a matched folder takes everything below it."""

    def __init__(self, patterns: Sequence[str], root: Path) -> None:
        stripped = [p.rstrip("/") for p in patterns]
        self.names = frozenset(p for p in stripped if not any(c in p for c in "*?[/"))
        globs = [p for p in stripped if p not in self.names]
        self.spec: Optional[GitIgnoreSpec] = None
        if globs:
            from pathspec import GitIgnoreSpec  # only configs with globs pay for the import

            self.spec = GitIgnoreSpec.from_lines(globs)
        # The root as given and resolved (the working directory is already resolved by the system).
        self.roots = tuple(dict.fromkeys(os.path.join(os.path.abspath(r), "") for r in (root, os.path.realpath(root))))

    def matches(self, path: str) -> bool:
        absolute = os.path.abspath(path)
        root = next((r for r in self.roots if absolute.startswith(r)), None)
        relative = (absolute[len(root):] if root is not None else path).replace(os.sep, "/")
        if self.names and not self.names.isdisjoint(path.replace(os.sep, "/").split("/") + relative.split("/")):
            return True
        return self.spec is not None and self.spec.match_file(relative)


def find_pyproject(start: str) -> Optional[Path]:
    """The nearest pyproject.toml with a [tool.zerograd] table, from `start` upwards."""
    folder = Path(start).resolve()
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file() and "zerograd" in _read_toml(path).get("tool", {}):
            return path
    return None


# A pyproject.toml larger than this is an error, not read: real ones are a few KB, and tomllib
# holds several times the text while it parses (a 2 GiB file ended in MemoryError).
MAX_CONFIG_BYTES = 16 << 20


def _read_toml(path: Path) -> dict[str, Any]:
    """The TOML table of `path`; a ConfigError naming the file for anything that is not one."""
    data = _read_bytes(path)
    try:
        return tomllib.loads(data.decode("utf-8"))  # as tomllib.load decodes
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: cannot read: not UTF-8 ({error.reason} at byte {error.start})") from error
    except RecursionError as error:
        raise ConfigError(f"{path}: cannot read: nested too deeply") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: cannot read: {error}") from error
    except ValueError as error:  # an integer longer than int() reads (sys.get_int_max_str_digits)
        raise ConfigError(f"{path}: cannot read: {str(error).split(';')[0]}") from error


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, its size checked on the open file before it is read."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(MAX_CONFIG_BYTES + 1) if size <= MAX_CONFIG_BYTES else b""
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error}") from error
    if size > MAX_CONFIG_BYTES or len(data) > MAX_CONFIG_BYTES:  # or it grew since fstat
        mib = -(-max(size, len(data)) // (1 << 20))
        raise ConfigError(f"{path}: too large for a config file ({mib:,} MiB; the limit is {MAX_CONFIG_BYTES >> 20} MiB)")
    return data


def _inside(folder: str) -> bool:
    """Whether a relative folder name stays below the folder it is relative to (as written:
    links are the cache's own check, project/cache.py)."""
    normal = os.path.normpath(folder)
    return not (os.path.isabs(normal) or folder.startswith("~") or normal in (".", "..") or normal.startswith(".." + os.sep)
                or os.path.splitdrive(normal)[0])


def load_config(path: Path) -> Config:
    table = _read_toml(path).get("tool", {}).get("zerograd", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.zerograd] must be a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{path}: [tool.zerograd] {key}"
        if key in LIST_KEYS:
            values[key.replace("-", "_")] = _strings(value, where)
        elif key == "per-file-ignores":
            values["per_file_ignores"] = _per_file_ignores(value, where)
        elif key == "cache-dir":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where}: expected a folder name, got {value!r}")
            if not _inside(value):  # a repository's config must not aim the run's writes anywhere
                raise ConfigError(f"{where}: expected a folder inside the project, got {value!r} (a folder "
                                  "elsewhere is chosen with --cache-dir or ZEROGRAD_CACHE_DIR)")
            values["cache_dir"] = value
        elif key == "respect-gitignore":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: expected true or false, got {value!r}")
            values["respect_gitignore"] = value
        else:
            known = ", ".join(LIST_KEYS + ("per-file-ignores", "cache-dir", "respect-gitignore"))
            raise ConfigError(f"{where}: unknown key (known: {known})")
    for key in ("select", "ignore", "extend_select"):
        if key in values:
            values[key] = _codes(values[key], f"{path}: [tool.zerograd] {key.replace('_', '-')}")
    return Config(root=path.parent.resolve(), source=path, **values)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _per_file_ignores(value: Any, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table of glob = [codes]")
    return tuple((glob, _codes(_strings(codes, f"{where}.{glob}"), f"{where}.{glob}")) for glob, codes in value.items())


def discover_config(paths: Sequence[str], explicit: Optional[str]) -> Config:
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"{explicit}: config file not found")
        return load_config(path)
    found = find_pyproject(paths[0] if paths else ".")
    return load_config(found) if found is not None else Config()


def parse_inline_options(text: str) -> Settings:
    """`# zerograd: optimizer-names=a,b not-optimizer-names=c` (first line of a fixture)."""
    values: dict[str, tuple[str, ...]] = {}
    for item in text.split():
        key, _, raw = item.partition("=")
        if key not in ("optimizer-names", "not-optimizer-names"):
            raise ConfigError(f"unknown option '{key}'")
        values[key] = tuple(v for v in raw.split(",") if v)
    return settings_from(values.get("optimizer-names", ()), values.get("not-optimizer-names", ()))


def settings_from(optimizer_names: Sequence[str], not_optimizer_names: Sequence[str]) -> Settings:
    return Settings(tuple(optimizer_names), tuple(not_optimizer_names))
