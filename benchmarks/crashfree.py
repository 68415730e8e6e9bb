"""Crash-free run over a large real corpus: every .py file of the real-code packages and
repositories, torch, and a few large general packages (crashfree.lock.json: any Python counts
for never crashing).

    python benchmarks/crashfree.py            # realcode + repos + bench (torch) + crashfree locks
    python benchmarks/crashfree.py --update-lock   # pin the general packages

Each file goes through the same path as the CLI (`files.check_file`: read, decode, parse, check,
fix descriptions). Reported: files checked, parse failures (ZG900), internal errors (ZG901 or an
exception escaping; must be 0), the slowest files, peak memory.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from corpus import CACHE, extract, extract_repo, fetch, load_lock, python_files, update_lock

from zerograd.analysis.model import Settings
from zerograd.io.files import check_file

GENERAL = ["ansible", "django", "sympy", "sqlalchemy"]  # large, varied, no training code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--without-torch", action="store_true")
    parser.add_argument("--slowest", type=int, default=5)
    parser.add_argument("--update-lock", action="store_true")
    args = parser.parse_args()
    if args.update_lock:
        update_lock("crashfree.lock.json", GENERAL)
        return 0
    pins = {**load_lock("realcode.lock.json"), **load_lock("bench.lock.json"), **load_lock("crashfree.lock.json")}
    if args.without_torch:
        pins.pop("torch")
    roots = [extract(fetch(name, pin)) for name, pin in pins.items()]
    roots += [r for r in (extract_repo(n, p) for n, p in load_lock("realcode.repos.lock.json").items()) if r]
    counts: Counter[str] = Counter()
    timings: list[tuple[float, str]] = []
    errors: list[str] = []
    unparsed: list[str] = []
    started = time.perf_counter()
    for root in roots:
        for path in python_files(root):
            counts["files"] += 1
            counts["lines"] += path.read_bytes().count(b"\n")
            begin = time.perf_counter()
            try:
                result = check_file(str(path), Settings())
            except BaseException as error:  # noqa: BLE001 - that is what this script looks for
                errors.append(f"{path}: {type(error).__name__}: {error}")
                continue
            timings.append((time.perf_counter() - begin, str(path.relative_to(CACHE / "src"))))
            for finding in result.findings:
                counts[finding.code] += 1
                if finding.code == "ZG901":
                    errors.append(f"{path}: {finding.message}")
                elif finding.code == "ZG900":
                    unparsed.append(f"{path.relative_to(CACHE / 'src')}:{finding.line}: {finding.message}")
            if result.error:
                errors.append(result.error)
    total = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"packages and repositories {len(roots)}, files {counts['files']:,}, lines {counts['lines']:,}, {total:.0f} s")
    print(f"parse failures (ZG900): {counts['ZG900']}; internal errors: {len(errors)}; peak memory {peak:.0f} MiB")
    print("findings: " + ", ".join(f"{code} {counts[code]}" for code in sorted(c for c in counts if c.startswith("ZG"))))
    print("slowest files:")
    for seconds, name in sorted(timings, reverse=True)[: args.slowest]:
        print(f"  {seconds:7.2f} s  {name}")
    for failure in unparsed:
        print(f"parse failure: {failure}")  # Python 2, templates, deliberately broken test inputs
    for error in errors:
        print(f"INTERNAL ERROR {error}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
