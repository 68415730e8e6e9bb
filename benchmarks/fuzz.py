"""Long fuzzing runs of the properties in tests/test_fuzz.py.

    python benchmarks/fuzz.py --examples 20000

Three generators (training-loop fragments, hypothesmith's grammar, hypothesmith's nodes) each
get `--examples` examples. Every example must lint without an exception, deterministically, with
the same findings through the flake8 adapter, and any --fix must parse and re-lint cleaner.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import hypothesmith
from hypothesis import HealthCheck, given, settings

from zerograd._fuzz import check_program, training_programs

warnings.filterwarnings("ignore", category=SyntaxWarning)  # hypothesmith compiles odd programs

GENERATORS = {
    "training-loop fragments": (training_programs(), ""),
    "hypothesmith.from_grammar": (hypothesmith.from_grammar(), "\nloss.backward()\n"),
    "hypothesmith.from_node": (hypothesmith.from_node(), "\nfor b in loader:\n    loss.backward()\n    opt.step()\n"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000, help="examples per generator")
    parser.add_argument("--generator", action="append", choices=sorted(GENERATORS),
                        help="run only these generators (repeatable; default all)")
    args = parser.parse_args()
    failures = 0
    for name in args.generator or GENERATORS:
        strategy, suffix = GENERATORS[name]
        count = 0
        started = time.perf_counter()

        @settings(max_examples=args.examples, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        @given(strategy)
        def run(source: str) -> None:
            nonlocal count
            count += 1
            check_program(source + suffix)  # noqa: B023 - run() is called in this iteration

        try:
            run()
            verdict = "ok"
        except Exception as error:  # noqa: BLE001 - report and go on with the next generator
            failures += 1
            verdict = f"FAILED: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        print(f"{name:<28} {count:>7} examples  {time.perf_counter() - started:>7.1f} s  {verdict}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {peak:.0f} MiB; internal errors and property failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
