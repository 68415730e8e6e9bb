"""Property-based fuzzing (bounded here; benchmarks/fuzz.py runs it long): random valid Python
from hypothesmith, and random training loops from a grammar of loop fragments."""

from __future__ import annotations

import sys
from pathlib import Path

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


def test_a_chunked_fuzz_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    """issue 32: benchmarks/fuzz.py --state splits a run into seeded chunks recorded as they
    finish; a second run with more examples runs only the chunks not yet done."""
    import json
    import subprocess

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz.py"
    state = tmp_path / "state.json"
    command = [sys.executable, str(script), "--chunk", "3", "--state", str(state),
               "--generator", "training-loop fragments", "--examples"]
    first = subprocess.run([*command, "6"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert sorted(json.loads(state.read_text())["generators"]["training-loop fragments"]) == ["0", "1"]
    second = subprocess.run([*command, "9"], capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "chunk   2" in second.stdout and "chunk   0" not in second.stdout
    assert "9 of 9 examples in 3 chunks" in second.stdout
    assert not list(tmp_path.glob(".*.tmp"))
