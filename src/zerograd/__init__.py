"""zerograd: finds missing and misplaced optimizer.zero_grad() in PyTorch training code.

Public API: lint_source(), lint_paths(), Finding, RULES, __version__.
libcst is imported only when a file needs parsing.
"""

from __future__ import annotations

__version__ = "0.1.0"  # before the imports: cache.py keys its entries with it

from .engine import lint_source
from .files import lint_paths
from .model import Finding, Settings, Span
from .rules import RULES

__all__ = ["Finding", "RULES", "Settings", "Span", "__version__", "lint_paths", "lint_source"]
