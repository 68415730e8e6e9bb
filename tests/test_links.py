"""Which modules an optimizer holds is read in the scope that builds it (rules.md v3 section 4).

Found on apex's multi-optimizer test (benchmarks/mutate.py, delete-clear): `optimizer0` built over
`model0` and `model1` in one test made `optimizer1.zero_grad()` a possible clear of another test's
`optimizer0`, built over `model0` alone, and the mutant's ZG001 went unreported."""

from __future__ import annotations

from pathlib import Path

from zerograd.analysis.model import Settings
from zerograd.engine import Front, front_end

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "zg001_links_per_scope.py"


def _links(name: str) -> dict[str, frozenset[str]]:
    front = front_end(FIXTURE.read_text(encoding="utf-8"), Settings())
    assert isinstance(front, Front)
    program = front.program
    fid = next(i for i, f in enumerate(program.functions) if f.name == name)
    return program.links_of(fid)


def test_a_scope_reads_its_own_constructions() -> None:
    links = _links("two_optimizers")
    assert links["optimizer0"] == {"model0"}
    assert links["optimizer1"] == {"model1"}


def test_the_other_scope_keeps_its_own() -> None:
    assert _links("one_optimizer_over_two")["optimizer0"] == {"model0", "model1"}


def test_a_scope_that_builds_nothing_reads_the_module_table() -> None:
    assert _links("<module>")["optimizer0"] == {"model0", "model1"}
