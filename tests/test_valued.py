"""What a function's return value reaches, summarised for the modules that call it (front/valued.py,
issue 45), and the summary put in a caller's terms (analysis/reach.instantiate)."""

from __future__ import annotations

from zerograd.analysis.model import Reach, Settings
from zerograd.analysis.reach import instantiate
from zerograd.engine import Front, front_end

LOSSES = '''
import torch
import torch.nn.functional as F
from torch import nn

NET = nn.Linear(4, 1)


def clamp_log(x, C=1, clip_val=1e-5):
    return torch.log(torch.clamp(x, min=clip_val) * C)


def generator_loss(D, fake):
    return -clamp_log(torch.sigmoid(D(fake))).mean()


def hinge(D, fake, real, for_generator):
    if for_generator:
        return -D(fake).mean()
    return (1 - D(real)).relu().mean() + (1 + D(fake.detach())).relu().mean()


def labelled(D, x, is_real):
    logits = D(x)
    target = logits.new_ones(logits.shape) if is_real else logits.new_zeros(logits.shape)
    return F.binary_cross_entropy_with_logits(logits, target)


def global_net(fake):
    return NET(fake).mean()


class GANLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(1.0))
        self.loss = nn.BCEWithLogitsLoss()

    def forward(self, prediction, target_is_real):
        target = self.real_label if target_is_real else self.real_label * 0
        return self.loss(prediction, target.expand_as(prediction))
'''


def summaries(*names: str) -> dict[str, tuple[tuple[str, ...], int, Reach]]:
    front = front_end(LOSSES, Settings(), values=frozenset(names))
    assert isinstance(front, Front)
    return front.exports.values


def test_a_loss_helper_reaches_its_parameters_and_a_constant_default_carries_no_graph() -> None:
    names, count, reach = summaries("generator_loss")["generator_loss"]
    assert (names, count) == (("D", "fake"), 2)
    assert reach.modules == {"D", "fake"} and ("fake", "D") in reach.chained
    assert not reach.opaque  # clamp_log's `C=1`, `clip_val=1e-5` are constants


def test_a_flag_that_changes_what_the_loss_runs_is_not_summarised_one_that_picks_a_label_is() -> None:
    found = summaries("hinge", "labelled", "GANLoss.forward")
    assert "hinge" not in found  # the union of both branches would make D's loss reach G
    assert found["labelled"][2].modules >= {"D", "x"} and not found["labelled"][2].opaque
    assert found["GANLoss.forward"][0][0] == "self"


def test_a_global_the_function_calls_may_be_any_module() -> None:
    assert summaries("global_net")["global_net"][2].opaque


def test_a_caller_puts_its_modules_and_values_in_the_parameters_place() -> None:
    summary = Reach(frozenset({"D.enc", "fake"}), frozenset({"real"}), False, frozenset({("fake", "D.enc")}))
    bound = {"fake": Reach(frozenset({"G"}), frozenset(), False), "real": Reach(frozenset({"E"}), frozenset(), True)}
    got = instantiate(summary, bound, {"D": "self.netD"})
    assert got == Reach(frozenset({"self.netD.enc", "G"}), frozenset({"E"}), False, frozenset({("G", "self.netD.enc")}))
    assert instantiate(Reach(frozenset({"other"}), frozenset(), False), {}, {}).opaque
