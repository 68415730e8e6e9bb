"""What keeps a loss from a network without a detach (provenance.py): each case is a variant of
fixtures/traps/freezing_helper_and_no_grad_sampler.py, whose discriminator's loss reaches the
generator only if neither the sampler's `@torch.no_grad()` nor `toggle_grad(G, False)` stops it,
and whose generator's loss reaches the discriminator only if `toggle_grad(D, False)` does not."""

from __future__ import annotations

from pathlib import Path

from zerograd.engine import lint_source

TRAP = (Path(__file__).resolve().parent.parent / "fixtures" / "traps" / "freezing_helper_and_no_grad_sampler.py"
        ).read_text(encoding="utf-8")


def lines_of(source: str) -> list[str]:
    lines = source.splitlines()
    return [f"{f.code} {lines[f.line - 1].strip()}" for f in lint_source(source)]


def test_the_trap_is_silent() -> None:
    assert lines_of(TRAP) == []


def test_the_no_grad_sampler_alone_keeps_the_generator_out() -> None:
    unfrozen = TRAP.replace("toggle_grad(G, False)", "toggle_grad(G, True)")
    assert lines_of(unfrozen) == []
    undecorated = unfrozen.replace("@torch.no_grad()\n", "")
    assert lines_of(undecorated) == ["ZG006 opt_g.step()"]


def test_a_helper_freezes_with_the_flag_it_is_handed() -> None:
    assert lines_of(TRAP.replace("toggle_grad(D, False)", "toggle_grad(D, True)")) == ["ZG006 opt_d.step()"]
    renamed = TRAP.replace("toggle_grad", "switch")  # what the body does decides, not the name
    assert lines_of(renamed) == []
