"""Which codes are reported (flake8's select/ignore semantics) and analysis settings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from .model import Settings

CODE_PREFIX = re.compile(r"^ZG[0-9]{0,3}$")
DEFAULT_SELECT = ("ZG",)


class ConfigError(ValueError):
    """A bad option value; the CLI prints it and exits 2."""


def parse_codes(value: str, option: str) -> tuple[str, ...]:
    codes = tuple(c.strip().upper() for c in re.split(r"[,\s]+", value) if c.strip())
    for code in codes:
        if not CODE_PREFIX.match(code):
            raise ConfigError(f"{option}: '{code}' is not a zerograd code or prefix (ZG, ZG0, ZG001)")
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
