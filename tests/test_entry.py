"""What a function's parameters hold on entry (issue 45): what every call of it in the module
hands them; else a number its signature declares, or data where the function only reads it.
Each case is a variant of fixtures/zg006_parameter_every_call_hands.py: the critic's loss reads
the batch handed to `update`, and is the critic's own only if that batch carries no module's
graph."""

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
    "        self.update(other)\n",  # a second call hands a parameter of its own
    "        register(self.update)\n",  # a callback, which may be called with anything
    "        pool.map(self.update, other)\n",
    "        helper.update(other)\n",  # any `x.update(...)` may be this method
])
def test_a_parameter_the_step_only_reads_is_data_whatever_an_unseen_call_hands(more: str) -> None:
    # Session 32: what no call in view tells, a parameter `update` never calls holds data, as a
    # loader's batches do (plain.data_parameters); before, these were unknown and silent.
    assert codes(AGENT.replace(CALL, CALL + more)) == ["ZG006"]


def test_a_call_in_view_that_hands_a_modules_graph_wins() -> None:
    # Every call hands the actor's undetached output as the action: the critic's loss reaches
    # the actor too, so it is no longer known to be the critic's own (silent).
    handed = AGENT.replace(CALL, "            s, a, r = batch\n            self.update((s, self.actor(s), r))\n")
    assert codes(handed) == []
    assert codes(handed.replace("self.actor(s), r))", "self.actor(s).detach(), r))")) == ["ZG006"]


def test_a_parameter_the_step_calls_may_be_any_module() -> None:
    called = (AGENT.replace("def update(self, batch, scale=None):", "def update(self, batch, encode):")
              .replace("s, a, r = batch", "s, a, r = batch\n        s = encode(s)")
              .replace("self.update(batch)", "self.update(batch, other)"))
    assert codes(called) == []


def test_a_parameter_declared_a_number_or_only_read_holds_no_graph() -> None:
    declared = (AGENT.replace("def update(self, batch, scale=None):", "def update(self, batch, gamma: float, tau=0.5):")
                .replace("- r).pow(2)", "- gamma * r * tau).pow(2)")
                .replace("self.update(batch)", "self.update(batch, other.gamma, other.tau)"))
    undeclared = declared.replace("gamma: float, tau=0.5", "gamma, tau")
    assert codes(declared) == ["ZG006"]
    assert codes(undeclared) == ["ZG006"]


def test_a_call_handed_to_an_expression_statement_records_what_it_hands() -> None:
    # Session 33: `print(self.update(...))` hands the actor's graph as `update`'s batch as much
    # as `self.update(...)` alone does (drqv2's `metrics.update(self.update_critic(obs))`).
    handed = AGENT.replace(CALL, "            s, a, r = batch\n            print(self.update((s, self.actor(s), r)))\n")
    assert codes(handed) == []
    assert codes(handed.replace("self.actor(s), r)))", "self.actor(s).detach(), r)))")) == ["ZG006"]
