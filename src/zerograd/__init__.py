"""zerograd: finds missing and misplaced optimizer.zero_grad() in PyTorch training code.

Public API: lint_source(), lint_paths(), Finding, RULES, __version__.
libcst is imported only when a file needs parsing.
"""

from __future__ import annotations

from .analysis.model import Finding, Settings, Span
from .analysis.rules import RULES
from .engine import lint_source
from .io.files import lint_paths
from .version import __version__

__all__ = ["Finding", "RULES", "Settings", "Span", "__version__", "lint_paths", "lint_source"]
