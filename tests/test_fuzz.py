"""Property-based fuzzing (bounded here; benchmarks/fuzz.py runs it long): random valid Python
from hypothesmith, and random training loops from a grammar of loop fragments."""

from __future__ import annotations

import hypothesmith
from hypothesis import HealthCheck, given, settings

from zerograd._fuzz import check_program, training_programs

FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@FAST
@given(training_programs())
def test_training_loop_fragments(source: str) -> None:
    check_program(source)


@FAST
@given(hypothesmith.from_grammar())
def test_random_programs_from_the_grammar(source: str) -> None:
    check_program(source + "\nloss.backward()\n")


@FAST
@given(hypothesmith.from_node())
def test_random_programs_from_nodes(source: str) -> None:
    check_program(source + "\nfor b in loader:\n    loss.backward()\n    opt.step()\n")
