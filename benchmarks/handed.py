"""Labels for gradients that arrive by assignment (an A3C worker's `shared_p._grad = p.grad`),
which ../shared/tools/oracle.py cannot see: a weight comparison. Runs a script's main() with
every backward and every torch optimizer step watched, and counts the parameter updates whose
.grad is not the gradient of the latest loss alone (what a correct worker hands over).

Needs torch (never a dependency of zerograd): `<venv with torch>/bin/python benchmarks/handed.py
fixtures/zg001_handed_gradients.py`.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import torch
import torch.nn as nn

MODULES: list[nn.Module] = []
LATEST: dict[int, torch.Tensor] = {}  # id(parameter) -> the latest loss's own gradient
UPDATES: list[bool] = []  # per parameter update: was it the latest loss's gradient alone?


def _watch_modules() -> None:
    init = nn.Module.__init__

    def watched(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        MODULES.append(self)

    nn.Module.__init__ = watched  # type: ignore[method-assign]


def _watch_backward() -> None:
    backward = torch.Tensor.backward

    def watched(self: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        params = {id(p): p for m in MODULES for p in m.parameters(recurse=False)}
        before = {k: None if p.grad is None else p.grad.clone() for k, p in params.items()}
        backward(self, *args, **kwargs)
        LATEST.clear()
        for k, p in params.items():
            if p.grad is not None:
                old = before[k]
                LATEST[k] = p.grad.clone() if old is None else p.grad - old

    torch.Tensor.backward = watched  # type: ignore[method-assign]


def _watch_steps() -> None:
    for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop):
        step = cls.step

        def watched(self: torch.optim.Optimizer, closure: Any = None, _step: Any = step) -> Any:
            own = list(LATEST.values())
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        UPDATES.append(any(g.shape == p.grad.shape and torch.allclose(g, p.grad, atol=1e-6) for g in own))
            return _step(self, closure)

        cls.step = watched  # type: ignore[method-assign]


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: handed.py SCRIPT", file=sys.stderr)
        return 2
    _watch_modules()
    _watch_backward()
    _watch_steps()
    spec = importlib.util.spec_from_file_location("case", sys.argv[1])
    assert spec is not None and spec.loader is not None
    case = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(case)
    case.main()
    print(f"{sys.argv[1]}: {len(UPDATES)} parameter updates, {UPDATES.count(False)} applied more than "
          "the gradient of the latest loss")
    return 0


if __name__ == "__main__":
    sys.exit(main())
