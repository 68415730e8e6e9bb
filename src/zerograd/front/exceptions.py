"""What an `except` clause may catch of what a backward, a step or a clear raises: a builtin
exception or torch's, not a library's own (`except Grid2OpException:` around an update), so the
exception edges of a `try` (analysis/graph.py) lead only to the handlers that may catch it."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Optional

import libcst as cst

from .naming import dotted

if TYPE_CHECKING:
    from .moduleinfo import ModuleInfo

# Builtin exception classes: what a backward or a step may raise (RuntimeError, ValueError...).
BUILTIN_EXCEPTIONS = frozenset(name for name, value in vars(builtins).items()
                               if isinstance(value, type) and issubclass(value, BaseException))


def catches_torch(caught: Optional[cst.BaseExpression], info: ModuleInfo) -> bool:
    """Whether `except <caught>:` may catch what PyTorch raises: everything but names that are
    neither builtin exceptions nor torch's (a library's own exception classes)."""
    if caught is None:
        return True
    if isinstance(caught, cst.Tuple):
        return any(catches_torch(e.value, info) for e in caught.elements)
    name = dotted(caught)
    if name is None:
        return True
    qualified = info.qualify_name(name)
    # A name neither builtin, defined nor imported here may come from a `from torch... import *`.
    starred = any(star.split(".", 1)[0] == "torch" for star in info.stars)
    return name in BUILTIN_EXCEPTIONS or qualified.split(".", 1)[0] == "torch" or starred and (
        "." not in qualified and name not in info.classes and name not in info.aliases)
