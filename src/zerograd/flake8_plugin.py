"""The flake8 adapter: the engine knows nothing of flake8; this maps findings to flake8 tuples.

libcst is imported inside run() only (through the engine's prefilter), so flake8 starts as fast
with the plugin installed as without it. flake8 hands over one file at a time: a module whose
findings depend on other modules (project.py) gets them from the cache a `zerograd` run left,
when that entry still matches the file and every module it was linked with; otherwise the
module is analysed alone.

The file's `[tool.zerograd]` (the pyproject.toml found from the file up) applies as it does to the
CLI: its `optimizer-names` and `not-optimizer-names` unless flake8's own `--zerograd-*` options
are given (those win), and its `per-file-ignores`.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any, Optional

from .analysis.model import Finding, Settings
from .io.config import Config, settings_from
from .version import __version__

Result = tuple[int, int, str, type]


class ZeroGradPlugin:
    name = "zerograd"
    version = __version__
    settings = Settings()  # flake8's own options, when given

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str = "") -> None:
        self.tree = tree if isinstance(tree, ast.Module) else None  # flake8's, reused: no second ast.parse
        self.lines = lines
        self.filename = filename

    @classmethod
    def add_options(cls, manager: Any) -> None:
        for name, what in (("optimizer-names", "extra"), ("not-optimizer-names", "excluded")):
            manager.add_option(
                f"--zerograd-{name}",
                default="",
                parse_from_config=True,
                comma_separated_list=True,
                help=f"zerograd: {what} glob patterns of optimizer names",
            )

    @classmethod
    def parse_options(cls, options: Any) -> None:
        cls.settings = settings_from(
            list(options.zerograd_optimizer_names or ()), list(options.zerograd_not_optimizer_names or ())
        )

    def run(self) -> Iterator[Result]:
        from .engine import lint_source

        on_disk = bool(self.filename) and self.filename not in ("-", "stdin")
        config = _config(os.path.dirname(os.path.abspath(self.filename))) if on_disk else None
        settings = self._settings(config)
        try:
            findings = self._cached(settings) if on_disk else None
            if findings is None:
                findings = lint_source("".join(self.lines), settings, self.tree)
        except Exception as error:  # noqa: BLE001 - flake8 must never see a traceback from us
            yield 1, 0, f"ZG901 internal error: {type(error).__name__}: {error}".splitlines()[0], type(self)
            return
        ignored = config.ignored_for(self.filename) if config is not None else ()
        for finding in findings:
            if not (ignored and finding.code.startswith(ignored)):
                yield finding.line, finding.col, f"{finding.code} {finding.message}", type(self)

    def _settings(self, config: Optional[Config]) -> Settings:
        """flake8's options where given, else the file's [tool.zerograd]."""
        if config is None:
            return self.settings
        return Settings(self.settings.optimizer_names or config.optimizer_names,
                        self.settings.not_optimizer_names or config.not_optimizer_names)

    def _cached(self, settings: Settings) -> Optional[list[Finding]]:
        """The findings a `zerograd` run cached for this file, if it and the modules it was
        linked with are unchanged on disk and flake8 checks the file as it is on disk."""
        from .io.files import decode, read_file
        from .project.cache import Cache, content_hash

        path = os.path.abspath(self.filename)
        folder = _cache_folder(os.path.dirname(path))
        entry = Cache(folder, settings).entry(path) if folder is not None else None
        if entry is None:
            return None
        data, _ = read_file(path)
        if data is None or content_hash(data) != entry.sha:
            return None
        try:
            if decode(data).lstrip("\ufeff") != "".join(self.lines).lstrip("\ufeff"):
                return None  # flake8 was given other text for this name
        except (SyntaxError, UnicodeDecodeError, LookupError):
            return None
        for member, sha in entry.group:
            other, _ = read_file(member)
            if other is None or content_hash(other) != sha:
                return None  # a module it was linked with changed since: analyse it alone
        return entry.findings


@cache
def _config(folder: str) -> Optional[Config]:
    """The [tool.zerograd] of the pyproject.toml found from `folder` up (None: none, or unreadable:
    flake8 reports the findings with its own options then)."""
    from .io.config import ConfigError, find_pyproject, load_config

    try:
        found = find_pyproject(folder)
        return load_config(found) if found is not None else None
    except (ConfigError, OSError):
        return None


@cache
def _cache_folder(folder: str) -> Optional[str]:
    """Where the CLI run from the same place keeps its cache (config found from the file up)."""
    from .project.cache import cache_folder

    config = _config(folder)
    root = str(config.root) if config is not None else os.getcwd()
    return cache_folder(None, config.cache_dir if config is not None else None, root)
