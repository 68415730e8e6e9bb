"""relevance.py: bodies LibCST does not need are cut without moving a position or a finding."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerograd.engine import inspect_source
from zerograd.front.relevance import elide, scan_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").rglob("*.py"))

MODULE = '''import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.other = nn.Linear(1, 1)

    def forward(self, x):
        y = self.layer(x)
        y = self.other(y)
        return y.relu()


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.period = 2

    def should_step(self, i):
        """Last micro-batch of a window."""
        period = self.period
        return i % period == period - 1

    def run(self, loader):
        for i, batch in enumerate(loader):
            self.model(batch).sum().backward()
            if self.should_step(i):
                self.optimizer.step()
                self.optimizer.zero_grad()

    def fit(self, loader):
        for _ in range(3):
            self.run(loader)
            self.log_epoch()

    def log_epoch(self):
        total = 0
        for value in range(10):
            total += value
        print(total)
'''


def test_cuts_what_holds_nothing_and_keeps_every_line_in_place() -> None:
    cut = elide(MODULE, scan_text(MODULE))
    assert cut.count("\n") == MODULE.count("\n")
    kept = [line for line in cut.splitlines() if line.strip()]
    assert "        y = self.layer(x)" not in kept  # forward: no event, calls nothing that has one
    assert "        print(total)" not in kept  # log_epoch: likewise
    assert "        super().__init__()" not in kept  # Net.__init__ builds nothing the analysis records
    for line in ("        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",  # an optimizer
                 "        return i % period == period - 1",  # a test the caller reads
                 "            self.model(batch).sum().backward()",  # events
                 "            self.run(loader)"):  # calls a function with events
        assert line in kept
    for original, after in zip(MODULE.splitlines(), cut.splitlines()):
        assert after.strip() in ("", "pass") or after == original


def test_short_bodies_continued_headers_and_odd_line_ends_are_left_alone() -> None:
    for source in ("def f(x):\n    return x\n",
                   "def f(a,\\\n      b): return a\n",
                   "def f(x):\n    y = x\n    z = y\x0c\n    return z\n\nloss.backward()\n"):
        assert elide(source, scan_text(source)) == source


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_fixtures_report_the_same_with_and_without_cutting(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert inspect_source(source) == inspect_source(source, elide=False)


def test_the_module_above_reports_the_same() -> None:
    assert inspect_source(MODULE) == inspect_source(MODULE, elide=False)
