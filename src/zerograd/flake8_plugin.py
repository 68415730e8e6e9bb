"""The flake8 adapter: the engine knows nothing of flake8; this maps findings to flake8 tuples.

libcst is imported inside run() only (through the engine's prefilter), so flake8 starts as fast
with the plugin installed as without it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from typing import Any

from . import __version__
from .config import settings_from
from .model import Settings

Result = tuple[int, int, str, type]


class ZeroGradPlugin:
    name = "zerograd"
    version = __version__
    settings = Settings()

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

        try:
            findings = lint_source("".join(self.lines), self.settings, self.tree)
        except Exception as error:  # noqa: BLE001 - flake8 must never see a traceback from us
            yield 1, 0, f"ZG901 internal error: {type(error).__name__}: {error}".splitlines()[0], type(self)
            return
        for finding in findings:
            yield finding.line, finding.col, f"{finding.code} {finding.message}", type(self)
