"""What library calls do to a loss's graph (knowledge/values.py, issue 45): the decisions the
reach of a loss rests on where the code reads no module."""

from __future__ import annotations

import pytest

from zerograd.knowledge.values import makes_leaf, runs_only_itself


@pytest.mark.parametrize("qualified", ["torch.zeros", "torch.ones_like", "torch.tensor", "torch.Tensor", "numpy.mean",
                                       "math.sqrt", "random.random", "len", "float", "copy.deepcopy"])
def test_these_make_values_with_no_graph(qualified: str) -> None:
    assert makes_leaf(qualified)


@pytest.mark.parametrize("qualified", ["torch.as_tensor", "torch.cat", "torch.split", "torch.nn.functional.mse_loss",
                                       "copy.copy", "mylib.zeros", "round", "sum"])
def test_these_may_carry_their_arguments_graph(qualified: str) -> None:
    """`as_tensor` may hand its argument back, `copy.copy` of a module shares its parameters,
    `round`/`sum` of tensors are tensors; `zeros` of a library not known is not torch's."""
    assert not makes_leaf(qualified)


def test_a_torch_nn_loss_reaches_only_its_arguments_a_wrapper_what_it_holds() -> None:
    assert runs_only_itself("torch.nn.BCELoss") and runs_only_itself("torch.nn.modules.MSELoss")
    for wrapper in ("torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.DataParallel", "torch.nn.Module",
                    "mylib.BCELoss", ""):
        assert not runs_only_itself(wrapper)
