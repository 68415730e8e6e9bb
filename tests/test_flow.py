"""The v3 state's edges, on contents built by hand (rules.md v3 section 4)."""

from __future__ import annotations

from zerograd.analysis.flow import BEFORE, HERE, Grad, State, cross
from zerograd.analysis.graph import EnterEffect


def _entering(*held: Grad) -> set[tuple[int, str]]:
    state = cross(EnterEffect(), State(frozenset(held), None, frozenset()), "optimizer_d")
    assert state is not None
    return {(c.origin, c.first) for c in state.held}


def test_entering_a_loop_marks_what_no_step_applied_as_made_before_it() -> None:
    assert _entering(Grad("*", False)) == {(BEFORE, "")}


def test_another_optimizers_loss_is_not_a_leak_from_before_the_loop() -> None:
    """fedml's GAN trainer, one clear moved: the generator's loss left in the discriminator when
    an epoch's inner loop starts again is ZG006's, not LEAK's (it would be ZG001 and hide it)."""
    assert _entering(Grad("*", False, first="optimizer_g"), Grad("*", False)) == {
        (HERE, "optimizer_g"), (BEFORE, "")}
