"""Messages that say more than their code's usual line (rules.md v2 section 4)."""

from __future__ import annotations

from pathlib import Path

from zerograd import lint_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def messages(name: str) -> dict[int, str]:
    return {f.line: f.message for f in lint_source((FIXTURES / name).read_text(encoding="utf-8"))}


def test_partial_clear_is_named() -> None:
    found = messages("zg001_scopes.py")
    text = next(m for m in found.values() if "some of its parameters" in m)
    assert "the .grad write at line 58 clears only some of its parameters" in text


def test_in_place_clear_under_a_guard_says_to_set_none() -> None:
    found = messages("zg002_scopes.py")
    assert "zeroed in place" in found[82] and "set_to_none=True" in found[82]
    assert "zeroed in place" not in found[16]


def test_a_helper_bug_is_reported_once_at_the_helper() -> None:
    """update_alpha is called from two methods; its own clear is reported once, nowhere else."""
    found = messages("zg002_scopes.py")
    assert [line for line, text in found.items() if "alpha_optim" in text] == [16]


def test_a_leak_names_the_backward_before_the_loop() -> None:
    """rules.md v3: the message says which backward (its line) left the gradients the first step applies."""
    found = messages("zg001_leak_before_loop.py")
    assert "the backward() at line 16, before the loop" in found[20]
    assert "the backward() at line 28, before the loop" in found[32]


def test_a_hand_over_names_its_mechanism() -> None:
    """A hand-over of the local .grad itself is unbound by the shared optimizer's set_to_none
    clear (PyTorch 2.0); one of a copy (`p.grad.clone()`) carries the local accumulation."""
    shared = messages("zg001_handed_gradients.py")[48]
    assert "since PyTorch 2.0" in shared and "copy" not in shared
    copies = messages("zg001_handed_copies.py")[30]
    assert "a copy of them is handed" in copies and "PyTorch 2.0" not in copies


def test_another_optimizers_loss_is_named_as_written() -> None:
    """ZG006 names the backward call and the optimizer that stepped first after it as the code
    writes them: `self.manual_backward(g_loss)`, not `g_loss.backward()`; `self._actor_optimizer`,
    not the key `self.actor_optimizer`."""
    lightning = messages("zg006_lightning_optimizers.py")[30]
    assert "the gradients that self.manual_backward(g_loss) (line 28, stepped by 'g_opt')" in lightning
    handed = messages("zg006_optimizer_class_argument.py")[29]
    assert "actor_loss.backward() (line 27, stepped by 'self._actor_optimizer')" in handed
    scaled = messages("zg006_library_values.py")[34]
    assert "that self.scaler.scale(actor_loss).backward() (line 32" in scaled


def test_whose_loss_it_is_says_how_it_is_known() -> None:
    """ZG006 says "stepped by" only where the other optimizer stepped first; where this one
    stepped first and the loss is the other's by what it reaches (clear all, backpropagate all,
    step all), it names the optimizer the loss was meant for; where this one's own loss was
    cleared before its step, it says so."""
    meant = messages("zg006_criterion_handed_to_the_step.py")[28]
    assert "(line 27, the loss meant for 's_opt')" in meant and "stepped by" not in meant
    instead = messages("zg006_own_loss_cleared_before_the_step.py")[53]
    assert "none of its own loss's: a clear removed those before this step" in instead
