"""The v3 state's edges, on contents built by hand (rules.md v3 section 4)."""

from __future__ import annotations

from zerograd.analysis.flow import BEFORE, HERE, Grad, State, cross, transfer
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


def test_a_knob_on_a_window_size_reads_as_whether_the_size_is_1() -> None:
    """Issue 46: `if k == 1:` and `if k > 1:` correlate with `i % k`; a size is at least 1."""
    from zerograd.analysis.keys import unit_window

    assert unit_window("inv:k==1", True) == ("inv:k==1", True)
    assert unit_window("inv:self.accum>1", False) == ("inv:self.accum==1", True)
    assert unit_window("inv:args.gas>=2", True) == ("inv:args.gas==1", False)
    assert unit_window("inv:k!=1", True) == ("inv:k==1", False)
    assert unit_window("inv:k<2", True) == ("inv:k==1", True)
    assert unit_window("inv:k>2", False) is None  # 1 and 2 both pass: not a question of size 1
    assert unit_window("k==1", True) is None  # not a knob: it may change between iterations


def test_a_window_of_size_1_ends_in_every_iteration() -> None:
    from zerograd.analysis.conditions import assume
    from zerograd.analysis.model import Test

    window = Test(True, "mod:i%k", -1)
    size_one = frozenset({("inv:k==1", 0, True)})
    assert assume(size_one, window, False) is None
    assert assume(size_one, window, True) is not None
    assert assume(frozenset({("inv:k==1", 0, False)}), window, False) is not None
    # The size's knob, asked the other way round, contradicts what is known of it.
    assert assume(frozenset({("inv:k==1", 0, True)}), Test(False, "inv:k>1"), True) is None


# A GAN: the generator's optimizer holds G, the discriminator's D (session 32, issue 47).
LINKS = {"opt_g": frozenset({"G"}), "opt_d": frozenset({"D"})}
TRAINED = frozenset(LINKS)


def _d_loss_through_the_fake(generator_clean: bool) -> Grad:
    """What the discriminator's undetached loss (`D(G(z))`) adds to the generator's `.grad`."""
    from zerograd.analysis.model import Event, Kind, Reach

    backward = Event(Kind.BACKWARD, 1, reach=Reach(frozenset({"D", "G"}), frozenset(), False, frozenset({("G", "D")})))
    start = State(frozenset(), None, frozenset(), generator_clean)
    (added,) = transfer(backward, start, "opt_g", LINKS, TRAINED).held
    return added


def _generator_clear_loses_it(*events: str) -> bool:
    """The contribution, held back from the generator's step by an accumulation condition, then
    the other optimizer's `events` ("clear", "step"), then the generator's own clear."""
    from zerograd.analysis.flow import ACCUM_GUARD
    from zerograd.analysis.model import Event, Kind

    s = State(frozenset({_d_loss_through_the_fake(False)._replace(hold=ACCUM_GUARD)}), None, frozenset())
    for kind in events:
        s = transfer(Event(Kind.CLEAR if kind == "clear" else Kind.STEP, 2, "opt_d"), s, "opt_g", LINKS, TRAINED)
    cleared = transfer(Event(Kind.CLEAR, 3, "opt_g"), s, "opt_g", LINKS, TRAINED)
    return cleared.removed is not None and cleared.removed.lost


def test_a_loss_that_reaches_another_optimizers_modules_is_weak_unless_cleared_for() -> None:
    assert _d_loss_through_the_fake(False).weak
    # Backpropagated right after the generator's own clear: the program cleared it for this loss.
    assert not _d_loss_through_the_fake(True).weak


def test_a_weak_loss_the_other_step_applied_is_no_window_of_this_optimizer() -> None:
    """traps/discriminator_window_through_the_fake.py: D's step applied its accumulated loss; what
    that loss left in G is no window G's clear loses. If D had cleared before its step, its step
    applied none of it, and the loss was G's to keep."""
    assert not _generator_clear_loses_it("step")
    assert _generator_clear_loses_it("clear", "step")
    assert _generator_clear_loses_it()
