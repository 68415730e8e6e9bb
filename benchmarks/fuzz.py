"""Long fuzzing runs of the properties in tests/test_fuzz.py.

    python benchmarks/fuzz.py --examples 20000
    python benchmarks/fuzz.py --examples 20000 --state benchmarks/fuzz.state.json --minutes 60

Three generators (training-loop fragments, hypothesmith's grammar, hypothesmith's nodes) each
get `--examples` examples. Every example must lint without an exception, deterministically, with
the same findings through the flake8 adapter, and any --fix must parse and re-lint cleaner.

With `--state`, a run is split into chunks of `--chunk` examples, each drawn from its own seed
(SEED + chunk number, so a chunk is the same examples on any machine), and every finished chunk
is written to the state file at once: a run stopped anywhere (`--minutes`, a session's end, a
kill) resumes with the next chunk, and the file keeps the figures and any failing example.
`--database DIR` keeps hypothesis's own database of failing examples there, to replay them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import hypothesmith
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from zerograd._fuzz import check_program, training_programs

warnings.filterwarnings("ignore", category=SyntaxWarning)  # hypothesmith compiles odd programs

GENERATORS = {
    "training-loop fragments": (training_programs(), ""),
    "hypothesmith.from_grammar": (hypothesmith.from_grammar(), "\nloss.backward()\n"),
    "hypothesmith.from_node": (hypothesmith.from_node(), "\nfor b in loader:\n    loss.backward()\n    opt.step()\n"),
}


SEED = 20_000
# The code a chunk ran (a state file gathers chunks from several sessions).
COMMIT = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"],
                        capture_output=True, text=True).stdout.strip() or "unknown"


def run_chunk(name: str, examples: int, chunk: Optional[int], database: Optional[str]) -> dict[str, Any]:
    """`examples` examples of generator `name` (from seed SEED + `chunk` when given): how many
    ran, in how long, and the verdict (the first failing example's source, when one fails)."""
    strategy, suffix = GENERATORS[name]
    count = 0
    failing: list[str] = []
    started = time.perf_counter()

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
              database=DirectoryBasedExampleDatabase(database) if database else None)
    @given(strategy)
    def run(source: str) -> None:
        nonlocal count
        count += 1
        try:
            check_program(source + suffix)
        except Exception:
            failing[:] = [source + suffix]
            raise

    test: Callable[[], None] = run if chunk is None else seed(SEED + chunk)(run)
    try:
        test()
        verdict = "ok"
    except Exception as error:  # noqa: BLE001 - report and go on with the next chunk
        verdict = f"FAILED: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    found = {"examples": count, "seconds": round(time.perf_counter() - started, 1), "verdict": verdict,
             "commit": COMMIT}
    if failing:
        found["example"] = failing[0][:4000]
    return found


def _save(path: Path, state: dict[str, Any]) -> None:
    """Write the state whole or not at all (a run may be killed at any moment)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        json.dump(state, out, indent=1, sort_keys=True)
        out.write("\n")
    os.replace(temporary, path)


def chunked(args: argparse.Namespace, names: list[str]) -> int:
    path = Path(args.state)
    state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if state.get("chunk", args.chunk) != args.chunk:
        raise SystemExit(f"{path} was made with --chunk {state['chunk']}")
    state["chunk"] = args.chunk
    deadline = time.time() + 60 * args.minutes if args.minutes else float("inf")
    for name in names:
        done = state.setdefault("generators", {}).setdefault(name, {})
        for number in range(-(-args.examples // args.chunk)):
            if str(number) in done:
                continue
            if time.time() >= deadline:
                print("time is up: run again to resume")
                return summary(json.loads(path.read_text()) if path.exists() else state, names, args.examples)
            done[str(number)] = run_chunk(name, args.chunk, number, args.database)
            # Merged into the file as it is now: a run per generator may share it.
            fresh = json.loads(path.read_text()) if path.exists() else {"chunk": args.chunk}
            fresh.setdefault("generators", {}).setdefault(name, {})[str(number)] = done[str(number)]
            _save(path, fresh)
            print(f"{name:<28} chunk {number:>3}: {done[str(number)]['examples']:>5} examples "
                  f"{done[str(number)]['seconds']:>7.1f} s  {done[str(number)]['verdict']}", flush=True)
    return summary(json.loads(path.read_text()), names, args.examples)


def summary(state: dict[str, Any], names: list[str], wanted: int) -> int:
    """The figures of the chunks done so far, per generator; non-zero when one failed."""
    failures = 0
    for name in names:
        chunks = state.get("generators", {}).get(name, {}).values()
        count = sum(c["examples"] for c in chunks)
        failed = [c for c in chunks if c["verdict"] != "ok"]
        failures += len(failed)
        hours = sum(c["seconds"] for c in chunks) / 3600
        print(f"{name:<28} {count:>6} of {wanted} examples in {len(chunks)} chunks, {hours:.1f} h, "
              f"{len(failed)} failed")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000, help="examples per generator")
    parser.add_argument("--generator", action="append", choices=sorted(GENERATORS),
                        help="run only these generators (repeatable; default all)")
    parser.add_argument("--state", help="split the run into resumable chunks, recorded in this JSON file")
    parser.add_argument("--chunk", type=int, default=500, help="examples per chunk (with --state)")
    parser.add_argument("--minutes", type=float, default=0, help="start no chunk after this long (with --state)")
    parser.add_argument("--database", help="keep hypothesis's database of failing examples in this folder")
    args = parser.parse_args()
    names = args.generator or list(GENERATORS)
    if args.state:
        return chunked(args, names)
    failures = 0
    for name in names:
        found = run_chunk(name, args.examples, None, args.database)
        failures += found["verdict"] != "ok"
        print(f"{name:<28} {found['examples']:>7} examples  {found['seconds']:>7.1f} s  {found['verdict']}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {peak:.0f} MiB; internal errors and property failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
