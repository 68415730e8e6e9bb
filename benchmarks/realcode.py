"""Run zerograd over the pinned real packages of realcode.lock.json and print what it finds.

    python benchmarks/realcode.py              # the table
    python benchmarks/realcode.py --findings   # and every finding, path:line:col: CODE message
    python benchmarks/realcode.py --update-lock  # re-pin the newest releases (then review)

Every finding printed here must be listed in benchmarks/REALCODE.md as a real bug; a false
positive is fixed in the analysis with a fixture instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from corpus import CACHE, extract, fetch, load_lock, python_files, update_lock  # noqa: E402

from zerograd.engine import inspect_source  # noqa: E402
from zerograd.files import decode  # noqa: E402
from zerograd.suppress import unsuppressed  # noqa: E402

LOCK = "realcode.lock.json"
PACKAGES = [
    "transformers", "lightning", "fastai", "skorch", "speechbrain", "trl", "mmengine", "recbole",
    "adversarial-robustness-toolbox", "snntorch", "pytorch-metric-learning", "lightly", "torchtune",
    "mosaicml", "pytorch-pfn-extras", "alibi-detect", "deepspeed", "normflows", "pytorch-forecasting",
    "fairseq",
    # Beyond the list: textbook loops, GANs (several optimizers), RL, training frameworks.
    # (pytorch-ignite, poutyne, stable-baselines3, d2l and cleanrl were here: they are reserved for
    # independent measurement, ../shared/heldout-corpus.txt; the fixtures their review gave stay.)
    "torchgan", "pythae", "lightning-bolts", "torchbearer",
]
CODES = ["ZG001", "ZG002", "ZG003", "ZG004", "ZG005", "ZG900", "ZG901"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--findings", action="store_true", help="print every finding")
    parser.add_argument("--update-lock", action="store_true", help="pin the newest releases")
    parser.add_argument("packages", nargs="*", help="only these packages")
    args = parser.parse_args()
    if args.update_lock:
        update_lock(LOCK, PACKAGES)
        return 0
    lock = load_lock(LOCK)
    chosen = args.packages or list(lock)
    header = (f"{'package':<32} {'files':>6} {'scopes':>6} {'stepfn':>6} {'capped':>6} "
              + " ".join(f"{c:>5}" for c in CODES))
    print(header)
    totals: Counter[str] = Counter()
    details = []
    started = time.perf_counter()
    for package in chosen:
        root = extract(fetch(package, lock[package]))
        row: Counter[str] = Counter()
        for path in python_files(root):
            row["files"] += 1
            source = decode(path.read_bytes()) if _decodable(path) else None
            if source is None:
                continue
            report = inspect_source(source)
            row["scopes"] += report.scopes
            row["stepfn"] += report.step_functions
            row["capped"] += report.capped
            for finding in unsuppressed(report.findings, source.splitlines()):
                row[finding.code] += 1
                relative = path.relative_to(CACHE / "src")
                details.append(f"{relative}:{finding.line}:{finding.col + 1}: {finding.code} {finding.message}")
        totals.update(row)
        name = f"{package}=={lock[package]['version']}"
        print(_row(name, row))
    print(_row("total", totals))
    print(f"({time.perf_counter() - started:.1f} s)")
    if args.findings:
        print("\n".join(details))
    return 0


def _row(name: str, row: "Counter[str]") -> str:
    counts = [row[c] for c in ("files", "scopes", "stepfn", "capped")]
    return f"{name:<32} " + " ".join(f"{n:>6}" for n in counts) + " " + " ".join(f"{row[c]:>5}" for c in CODES)


def _decodable(path: Path) -> bool:
    try:
        decode(path.read_bytes())
        return True
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return False


if __name__ == "__main__":
    raise SystemExit(main())
