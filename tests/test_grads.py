"""Which writes of `.grad` clear it, which put a new gradient there, and which only move or scale
the one already there (front/grads.py)."""

from __future__ import annotations

from typing import Optional

import libcst as cst
import pytest

from zerograd.front.grads import Write, grad_written


def _written(line: str) -> Optional[Write]:
    return grad_written(cst.parse_statement(line + "\n").body[0])


@pytest.mark.parametrize("line", [
    "p.grad = p.grad / n",  # scaled
    "p.grad = p.colo_attr.grad_payload",  # a gradient kept elsewhere, moved back
    "p.grad = p.main_grad",
    "p.grad += p.grad",
])
def test_moved_or_scaled_gradient_is_no_write(line: str) -> None:
    assert _written(line) is None


@pytest.mark.parametrize("line", [
    "w.grad = torch.autograd.grad(loss, w)[0]",  # GradNorm's weights: a new gradient
    "w.grad = autograd.grad(loss, [w])[0]",
    "p.grad = g",
])
def test_new_gradient_clears_and_adds(line: str) -> None:
    written = _written(line)
    assert written is not None and written.clears and written.adds


def test_none_clears_without_adding() -> None:
    written = _written("p.grad = None")
    assert written is not None and written.clears and not written.adds
