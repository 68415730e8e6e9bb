"""How keys relate (analysis/keys.py): a difference of parameter sets (issue 45,
`set(vae.parameters()) - set(vae.discr.parameters())` is `vae[-vae.discr]`)."""

from __future__ import annotations

from zerograd.analysis.keys import difference, moved, related, within


def test_a_difference_holds_the_rest_of_its_module_and_not_what_it_removes() -> None:
    rest = "vae[-vae.discr]"
    assert within("vae.encoder", rest) and within("vae.encoder.conv", rest)
    assert not within("vae.discr", rest) and not within("vae.discr.head", rest)
    assert not within("vae", rest)  # the whole holds the discriminator too
    assert within(rest, "vae")  # a clear of `vae` reaches all of it
    assert related("vae", frozenset({rest})) and not related("vae.discr", frozenset({rest}))


def test_an_entry_picked_by_a_negative_index_is_no_difference() -> None:
    assert difference("nets[-1]") == (None, [])
    assert within("nets[-1]", "nets") and not within("nets[0]", "nets[-1]")


def test_moving_a_difference_moves_what_it_removes() -> None:
    assert moved("self.vae[-self.vae.discr]", "self.vae", "self") == "self[-self.discr]"
    assert moved("self.vae.enc", "self.vae", "self") == "self.enc"
    assert moved("self.g", "self.vae", "self") is None
