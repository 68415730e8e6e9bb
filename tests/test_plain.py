"""Which parameters of a training step hold no graph of their own (front/plain.py, issue 45):
those declared numbers, and those the step only reads (data), as against the modules handed in."""

from __future__ import annotations

import libcst as cst

from zerograd.front.naming import dotted
from zerograd.front.plain import data_parameters, plain, plain_parameters


def _function(source: str) -> cst.FunctionDef:
    node = cst.parse_module(source).body[0]
    assert isinstance(node, cst.FunctionDef)
    return node


STEP = '''
def update(self, batch, replay_buffer, model, nets, critic, encoder, gamma=0.99, tau: float = 0.005):
    obs, act = batch["obs"], batch["act"]
    state, reward = replay_buffer.sample(256)
    q = model(obs) + nets[0](obs) + critic.q1(obs, act)
    encoder.requires_grad_(False)
    return q, state, reward, gamma, tau
'''


def test_a_step_reads_its_batch_and_buffer_as_data_and_calls_its_modules() -> None:
    found = data_parameters(_function(STEP))
    assert {"batch", "replay_buffer", "gamma", "tau"} <= found
    # Called, called by index, or used as a module (`requires_grad_`): modules handed in.
    assert not {"model", "nets", "encoder", "self"} & found
    # A method called on a parameter is no sign of a module (`replay_buffer.sample`), so an
    # attribute module called (`critic.q1`) is read as data too: the caller's optimizer holds it
    # under its own name, or no optimizer of the scope does.
    assert "critic" in found


def test_numbers_are_plain_whatever_the_step_does_with_them() -> None:
    assert plain_parameters(_function(STEP)) == {"gamma", "tau"}


def _plain(expression: str) -> bool:
    return plain(cst.parse_expression(expression), frozenset({"gamma"}), dotted)


def test_tensors_computed_from_values_without_a_graph_carry_none() -> None:
    for expression in ("self.log_alpha.detach()", "self.log_alpha.detach().exp()",
                       "torch.clamp(self.log_alpha.detach().exp(), 0.0, 1.0)", "torch.zeros(3).to(device)",
                       "torch.tensor(gamma).log()", "loss.item() * gamma"):
        assert _plain(expression), expression


def test_a_graph_or_a_leaf_that_gathers_gradients_is_not_plain() -> None:
    for expression in ("self.log_alpha.exp()", "torch.clamp(self.log_alpha.exp(), 0.0, 1.0)",
                       "torch.zeros(3).requires_grad_()", "torch.zeros(3, requires_grad=True)",
                       "torch.zeros(3).mul(self.scale)", "torch.nn.Parameter(torch.zeros(3))"):
        assert not _plain(expression), expression
