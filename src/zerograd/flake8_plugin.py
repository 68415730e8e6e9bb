"""The flake8 adapter: the engine knows nothing of flake8; this maps findings to flake8 tuples.

libcst is imported inside run() only (through the engine's prefilter), so flake8 starts as fast
with the plugin installed as without it. flake8 hands over one file at a time; the file is
checked as `zerograd FILE` checks it (interface.md v3): in its project's context, flake8's text
standing in for the file's, with the cache the CLI run from the file's project uses. The
project is read, hashed and planned once per flake8 process, not once per file (io/snapshot.py).

The file's `[tool.zerograd]` (the pyproject.toml found from the file up) applies as it does to the
CLI: its `optimizer-names` and `not-optimizer-names` unless flake8's own `--zerograd-*` options
are given (those win), and its `per-file-ignores`.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Optional

from .analysis.model import Finding, Settings
from .io.config import Config, settings_from
from .version import __version__

if TYPE_CHECKING:
    from .project.cache import Cache

Result = tuple[int, int, str, type]


class ZeroGradPlugin:
    name = "zerograd"
    version = __version__
    settings = Settings()  # flake8's own options, when given
    enabled = True  # whether flake8 reports any ZG code (parse_options)

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
        cls.enabled = _selects_any(options)

    def run(self) -> Iterator[Result]:
        if not self.enabled:
            return
        from .engine import lint_source

        on_disk = bool(self.filename) and self.filename not in ("-", "stdin")
        config = self._config() if on_disk else None
        settings = self._settings(config)
        # A notebook's Python (nbQA, editors) is no module of the project: checked alone, as the
        # CLI checks notebooks.
        linked = on_disk and not self.filename.endswith(".ipynb")
        try:
            findings = self._in_project(config, settings) if linked else None
            if findings is None:
                findings = lint_source("".join(self.lines), settings, self.tree)
        except Exception as error:  # noqa: BLE001 - flake8 must never see a traceback from us
            yield 1, 0, f"ZG901 internal error: {type(error).__name__}: {error}".splitlines()[0], type(self)
            return
        ignored = config.ignored_for(self.filename) if config is not None else ()
        if findings:  # flake8 skips a file by its own file-level comment, not by ruff's
            from .io.suppress import file_exempt

            ignored += file_exempt(self.lines)
        for finding in findings:
            if not (ignored and finding.code.startswith(ignored)):
                yield finding.line, finding.col, f"{finding.code} {finding.message}", type(self)

    def _config(self) -> Optional[Config]:
        """The file's [tool.zerograd]. A broken one stops the run as it stops the CLI's (issue
        48): flake8 prints this error, which names the file and the key, on one line and exits 1."""
        from .io.config import ConfigError

        try:
            return _config(os.path.dirname(os.path.abspath(self.filename)))
        except ConfigError as error:
            from flake8.exceptions import PluginExecutionFailed  # type: ignore[import-untyped]

            raise PluginExecutionFailed(self.filename, "zerograd", error) from None

    def _settings(self, config: Optional[Config]) -> Settings:
        """flake8's options where given, else the file's [tool.zerograd]."""
        if config is None:
            return self.settings
        return Settings(self.settings.optimizer_names or config.optimizer_names,
                        self.settings.not_optimizer_names or config.not_optimizer_names)

    def _in_project(self, config: Optional[Config], settings: Settings) -> Optional[list[Finding]]:
        """The file's findings in its project, as the CLI gives them; None when flake8's text
        cannot be given the file's encoding (then it is analysed alone)."""
        from .io.files import lint_paths
        from .io.reading import encoded
        from .io.snapshot import lint_in_snapshot

        data = encoded("".join(self.lines))
        if data is None:
            return None
        cache = _cache(os.path.dirname(os.path.abspath(self.filename)), settings)
        found = lint_in_snapshot(self.filename, data, settings, config or Config(), cache, self.tree)
        if found is None:  # flake8's text is not the file's: a run of its own
            results = lint_paths([self.filename], settings, 1, config or Config(), describe=False, cache=cache,
                                 overrides={self.filename: data})
            found = next((result for result in results if result.path == self.filename), None)
        return list(found.findings) if found is not None and found.error is None else None


def _selects_any(options: Any) -> bool:
    """Whether flake8's --select/--ignore (and their extend- forms) leave any ZG code reported:
    flake8 runs every installed plugin and filters what it yields, so a run that deselects
    zerograd (`--extend-ignore ZG`) would otherwise pay for the whole analysis. Per-file ignores
    are flake8's per file: those runs analyse as before."""
    from .analysis.rules import RULES

    try:
        from flake8.style_guide import Decision, DecisionEngine  # type: ignore[import-untyped]

        engine = DecisionEngine(options)
        return any(engine.decision_for(code) == Decision.Selected for code in RULES)
    except Exception:  # noqa: BLE001 - another flake8's internals: analyse, as before
        return True


@cache
def _config(folder: str) -> Optional[Config]:
    """The [tool.zerograd] of the pyproject.toml found from `folder` up (None: none); a broken one
    raises ConfigError."""
    from .io.config import find_pyproject, load_config

    found = find_pyproject(folder)
    return load_config(found) if found is not None else None


def _cache(folder: str, settings: Settings) -> Cache:
    """The cache the CLI run from the same place uses (config found from the file up; the
    environment read each time, as the CLI reads it)."""
    from .project.cache import project_cache

    config = _config(folder)
    root = str(config.root) if config is not None else os.getcwd()
    return project_cache(None, config.cache_dir if config is not None else None, root, settings)
