"""What a function's parameters hold on entry (issue 45): what every call of it in the module
hands them, or a number its signature declares. Each case is a variant of
fixtures/zg006_parameter_every_call_hands.py: the critic's loss reads the batch handed to
`update`, and is the critic's own only if that batch is known to carry no module's graph."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerograd.engine import lint_source

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "zg006_parameter_every_call_hands.py"
AGENT = FIXTURE.read_text(encoding="utf-8").replace("def train(self, loader):", "def train(self, loader, other):")
CALL = "            self.update(batch)\n"


def codes(source: str) -> list[str]:
    return [finding.code for finding in lint_source(source)]


def test_a_batch_every_call_hands_from_a_loader_is_data() -> None:
    assert codes(AGENT) == ["ZG006"]


@pytest.mark.parametrize("more", [
    "        self.update(other)\n",  # a second call hands a parameter of its own: anything
    "        register(self.update)\n",  # a callback, which may be called with anything
    "        pool.map(self.update, other)\n",
    "        helper.update(other)\n",  # any `x.update(...)` may be this method
])
def test_a_parameter_some_call_may_hand_anything_stays_unknown(more: str) -> None:
    assert codes(AGENT.replace(CALL, CALL + more)) == []


def test_a_parameter_declared_a_number_holds_no_graph() -> None:
    declared = (AGENT.replace("def update(self, batch, scale=None):", "def update(self, batch, gamma: float, tau=0.5):")
                .replace("- r).pow(2)", "- gamma * r * tau).pow(2)")
                .replace("self.update(batch)", "self.update(batch, other.gamma, other.tau)"))
    undeclared = declared.replace("gamma: float, tau=0.5", "gamma, tau")
    assert codes(declared) == ["ZG006"]
    assert codes(undeclared) == []
