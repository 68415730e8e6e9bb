"""Speed of zerograd against flake8, ruff and the parsers, as ratios measured in one run.

    python benchmarks/bench.py                  # LARGE without torch, 3 repetitions
    python benchmarks/bench.py --with-torch     # LARGE includes torch's own Python files (slow)
    python benchmarks/bench.py --repeat 1 --skip-flake8   # a quick look
    python benchmarks/bench.py --only GROWTH --sizes 100,1000   # every route on generated projects

Corpora come from pinned releases unpacked into the cache outside the repo: LARGE is every .py
file of bench.lock.json's packages, TRAINING those files whose text contains `backward`, DENSE
every .py file of the packages of the real-code corpus (realcode.lock.json) densest in training
code (15% of their files call a backward; in LARGE it is 8%), so that the prefilter cannot hide a
slow path. Commands run
alternately, `--repeat` times; the median wall time and the peak memory (of the command's own
process) are reported, and the targets are checked as ratios of times taken in this same run,
because the machines are noisy. The targets are issue 33's: cold (`--no-cache`) against `ruff
check`, a warm run (its cache filled by a run before the timed ones) against the cold one, the
flake8 plugin's share of flake8's run, a one-file cold process, the language server's lint after
an edit; the floors beside them are CPython's parser on the prefiltered files and LibCST on what
zerograd must parse of them (the bodies it cannot use cut). Commands run with their bytecode
cached, as an installed package has it. GROWTH (issue 43, project_growth.py) runs every route (the
CLI cold and warm, flake8 with and without the plugin, pre-commit, the language server) on
generated projects of 100 to 20,000 modules (synthetic.py) and checks that time per module and
peak memory stay flat from 1,000 modules up.
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import project_growth
from corpus import extract, fetch, load_lock, python_files

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else (shutil.which(name) or name)


# A user's install has its bytecode compiled (pip compiles it); a machine that sets
# PYTHONDONTWRITEBYTECODE would make every Python command (zerograd, flake8) compile its modules
# at each start, about 0.1 s of zerograd's own.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_command(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run; the output is thrown away."""
    command, measured = project_growth._under_time(command)  # not this script's RSS (project_growth.GNU_TIME)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, _, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - started, project_growth._peak(measured, usage.ru_maxrss)


def in_process(work: Callable[[], None]) -> tuple[float, int]:
    """Wall seconds of `work` here, with the cyclic collector paused as zerograd pauses it while
    it parses (LibCST's trees are acyclic; with the collector on, a floor would cost more than
    zerograd's own parse)."""
    enabled = gc.isenabled()
    gc.disable()
    started = time.perf_counter()
    try:
        work()
    finally:
        if enabled:
            gc.enable()
    return time.perf_counter() - started, 0


# Chosen once from realcode.lock.json by the share of files that call a backward (each >= 10%),
# largest first, until the corpus passed 600k lines.
DENSE = ("spikingjelly colossalai agilerl simpletransformers norse crypten machin torchbearer litgpt "
         "openrlhf solo-learn torchattacks snntorch nanotron").split()


def files_of(lock_name: str, names: list[str]) -> list[str]:
    lock = load_lock(lock_name)
    found: list[str] = []
    for name in names:
        found += [str(p) for p in python_files(extract(fetch(name, lock[name])))]
    return found


def corpora(with_torch: bool) -> dict[str, list[str]]:
    names = [n for n in load_lock("bench.lock.json") if with_torch or n != "torch"]
    large = files_of("bench.lock.json", names)
    training = [p for p in large if "backward" in Path(p).read_text(encoding="utf-8", errors="replace")]
    return {"TRAINING": training, "LARGE": large, "DENSE": files_of("realcode.lock.json", DENSE)}


def calling_backward(paths: list[str]) -> int:
    return sum(1 for p in paths if re.search(rb"backward\s*\(", Path(p).read_bytes()))


def lines_of(paths: list[str]) -> int:
    return sum(Path(p).read_bytes().count(b"\n") for p in paths)


def ensure_ruff() -> bool:
    if (BIN / "ruff").exists() or shutil.which("ruff"):
        return True
    result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ruff"], capture_output=True)
    return result.returncode == 0


def floors(paths: list[str], with_libcst: bool) -> dict[str, Callable[[], None]]:
    def read_all() -> None:
        for p in paths:
            _ = "backward" in Path(p).read_text(encoding="utf-8", errors="replace")

    def ast_all() -> None:
        for p in paths:
            try:
                ast.parse(Path(p).read_bytes())
            except (SyntaxError, ValueError):
                pass

    def libcst_all() -> None:
        import libcst

        for p in paths:
            try:
                libcst.parse_module(Path(p).read_bytes())
            except Exception:  # noqa: BLE001 - a floor, not a checker
                pass

    def ast_needed() -> None:
        # The least any CPython-hosted checker pays: parse the files that pass the prefilter.
        from zerograd.engine import may_hold_findings

        for p in paths:
            text = Path(p).read_text(encoding="utf-8", errors="replace")
            if may_hold_findings(text):
                try:
                    ast.parse(text)
                except (SyntaxError, ValueError):
                    pass

    def needed_pieces() -> list[str]:
        # What LibCST must parse at least: the modules that may call a backward (or define a
        # hook), with the bodies the analysis cannot use cut (elision.elide), in the engine's
        # pieces (issue 33's floor); cut once, before the parser is timed.
        from zerograd.engine import _may_hook, chunk_source, may_hold_findings
        from zerograd.front.elision import elide
        from zerograd.front.relevance import scan_text

        pieces = []
        for p in paths:
            text = Path(p).read_text(encoding="utf-8", errors="replace")
            if not may_hold_findings(text):
                continue
            try:
                scan = scan_text(text)
            except (SyntaxError, ValueError, RecursionError):
                continue
            if scan.calls_backward() or _may_hook(text):
                pieces += [piece for piece, _, _ in chunk_source(elide(text, scan), scan.starts)]
        return pieces

    pieces: list[str] = needed_pieces() if with_libcst else []

    def libcst_needed() -> None:
        from zerograd.front.parse import parse_module  # unvalidated, as the engine parses

        for piece in pieces:
            try:
                parse_module(piece)
            except Exception:  # noqa: BLE001 - a floor, not a checker
                pass

    found = {"read": read_all, "ast.parse": ast_all, "ast.parse, prefiltered": ast_needed}
    if with_libcst:
        found["libcst.parse_module"] = libcst_all
        found["libcst, prefiltered and cut"] = libcst_needed
    return found


def measure(label: str, corpus: list[str], args: argparse.Namespace) -> dict[str, tuple[float, int]]:
    listing = Path(tempfile.mkdtemp()) / "files.txt"
    listing.write_text("\n".join(corpus))
    cache = Path(tempfile.mkdtemp()) / "cache"
    warm = [tool("zerograd"), "--cache-dir", str(cache), "--exit-zero", *corpus]
    filled = subprocess.run(warm, capture_output=True).stdout  # a cold run that fills the cache
    if subprocess.run(warm, capture_output=True).stdout != filled:
        raise SystemExit(f"{label}: a warm run printed something else than the cold run that filled its cache")
    commands: dict[str, list[str]] = {
        "zerograd -j1": [tool("zerograd"), "-j", "1", "--no-cache", "--exit-zero", *corpus],
        "zerograd": [tool("zerograd"), "--no-cache", "--exit-zero", *corpus],
        "zerograd, warm cache": warm,
    }
    if not args.skip_flake8:
        commands.update({
            "flake8 -j1": [tool("flake8"), "-j", "1", "--exit-zero", *corpus],
            "flake8 --select ZG -j1": [tool("flake8"), "-j", "1", "--select", "ZG", "--exit-zero", *corpus],
            "flake8 +ZG -j1": [tool("flake8"), "-j", "1", "--extend-select", "ZG", "--exit-zero", *corpus],
        })
    if ensure_ruff():
        commands["ruff check"] = [tool("ruff"), "check", "--no-cache", "--exit-zero", "--quiet", *corpus]
    work = {name: (lambda c=c: run_command(c)) for name, c in commands.items()}
    for name, job in floors(corpus, with_libcst=label != "LARGE").items():
        work[f"floor: {name}"] = lambda job=job: in_process(job)
    times: dict[str, list[float]] = {name: [] for name in work}
    memory: dict[str, int] = {name: 0 for name in work}
    for _ in range(args.repeat):
        for name, job in work.items():  # alternate the commands in every repetition
            seconds, peak = job()
            times[name].append(seconds)
            memory[name] = max(memory[name], peak)
    return {name: (statistics.median(values), memory[name]) for name, values in times.items()}


def growth() -> list[tuple[int, float]]:
    """Seconds per 1k lines of zerograd on synthetic training files of 1k, 10k and 100k lines."""
    from zerograd.engine import lint_source

    lint_source("loss.backward()")  # import libcst before timing
    unit = (
        "def train_{i}(model, loader, optimizer):\n"
        "    for x, y in loader:\n"
        "        optimizer.zero_grad()\n"
        "        loss = model(x).sum()\n"
        "        if loss.isnan():\n"
        "            continue\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "\n\n"
    )
    rows = []
    for lines in (1_000, 10_000, 100_000):
        source = "import torch\n\n\n" + "".join(unit.format(i=i) for i in range(lines // 10))
        best = min(in_process(lambda text=source: lint_source(text))[0] for _ in range(3 if lines < 100_000 else 1))
        rows.append((lines, best * 1000 * 1000 / lines))  # milliseconds per 1,000 lines
    return rows


HUGE_UNIT = ("def train_{i}(model, loader, optimizer):\n    for x, y in loader:\n{clear}        loss = model(x).sum()\n"
             "        loss.backward()\n        optimizer.step()\n\n\n")
# How many functions in a thousand forget to clear (a ZG001 each): thousands of findings, a few, none.
HUGE_KINDS = {"a finding per function": 1000, "a few findings": 1, "no finding": 0}


def huge_file(lines: int, leaks: int) -> Path:
    """A generated file of `lines` lines of training functions, `leaks` in a thousand of them
    never clearing."""
    path = Path(tempfile.mkdtemp()) / "huge.py"
    clear = "        optimizer.zero_grad()\n"
    path.write_text("import torch\n\n\n" + "".join(
        HUGE_UNIT.format(i=i, clear="        pass\n" if i % 1000 < leaks else clear) for i in range(lines // 8)))
    return path


def huge_files() -> list[tuple[str, int, float, int]]:
    """Issue 32: (kind, lines, ms per 1k lines, peak KiB) of a cold process on one generated
    file of training functions of 1k to 200k lines, for each kind of HUGE_KINDS (in the github
    format, which prints findings only), then the 200k file with a finding per function in the
    formats that describe each fix (one more lint of the fixed text) and under --fix."""
    rows = []
    for kind, leaks in HUGE_KINDS.items():
        for lines in (1_000, 10_000, 100_000, 200_000):
            path = huge_file(lines, leaks)
            seconds, peak = run_command([tool("zerograd"), "--no-cache", "--format", "github", "-j", "1",
                                         "--exit-zero", str(path)])
            rows.append((kind, lines, seconds * 1000 * 1000 / lines, peak))
    path = huge_file(200_000, 1000)
    for route in (["--format", "text"], ["--format", "json"], ["--format", "sarif"], ["--fix"]):
        seconds, peak = run_command([tool("zerograd"), "--no-cache", *route, "-j", "1", "--exit-zero", str(path)])
        rows.append((" ".join(route), 200_000, seconds * 1000 * 1000 / 200_000, peak))
    return rows


def training_script(lines: int) -> str:
    """A training script of about `lines` lines: model, data and helpers around loops that
    train (one clears, one forgets to)."""
    head = "import torch\nfrom torch import nn\n\n\n"
    unit = (
        "class Block{i}(nn.Module):\n"
        "    def __init__(self, width):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(width, width)\n"
        "        self.norm = nn.LayerNorm(width)\n\n"
        "    def forward(self, x):\n"
        "        return self.norm(torch.relu(self.fc(x)) + x)\n\n\n"
        "def train_{i}(model, loader, epochs, log_every=100):\n"
        "    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)\n"
        "    for epoch in range(epochs):\n"
        "        for step, (x, y) in enumerate(loader):\n"
        "            {clear}\n"
        "            loss = nn.functional.cross_entropy(model(x), y)\n"
        "            loss.backward()\n"
        "            optimizer.step()\n"
        "            if step % log_every == 0:\n"
        "                print(epoch, step, loss.item())\n"
        "    return model\n\n\n"
    )
    body = "".join(unit.format(i=i, clear="optimizer.zero_grad()" if i % 2 else "pass")
                   for i in range(max(1, lines // 23)))
    return head + body


def one_file(args: argparse.Namespace) -> dict[str, float]:
    """Issue 33's start-up and editor figures: a 400-line training script checked by a cold
    process (alone in a folder), and the language server's lint of a 1,000-line one after an
    edit in its middle (lint_all: the time from a change to its diagnostics, beyond the
    debounce), its trees kept as the server keeps them."""
    folder = Path(tempfile.mkdtemp())
    script = folder / "train.py"
    script.write_text(training_script(400))
    runs = [run_command([tool("zerograd"), "--no-cache", "--exit-zero", str(script)])[0] for _ in range(max(3, args.repeat))]
    figures = {"one file, cold process (400 lines)": statistics.median(runs)}
    try:
        from zerograd.front.parse import keep_trees
        from zerograd.server import KEPT_LINES, lint_all
    except ImportError:
        return figures
    keep_trees(KEPT_LINES)  # as the server's main does: an edit re-parses what it changed
    big = folder / "big.py"
    text = training_script(1000)
    big.write_text(text)
    uri = big.as_uri()
    lint_all({uri: text}, {uri: text})  # the server's first lint, which imports what it needs
    edits = []
    for n in range(max(3, args.repeat)):
        lines = text.splitlines(keepends=True)  # a line typed in the middle: what follows moves down
        edited = "".join(lines[:len(lines) // 2] + [f"# edit {n}\n"] + lines[len(lines) // 2:])
        started = time.perf_counter()  # the collector as the server has it
        lint_all({uri: edited}, {uri: edited})
        edits.append(time.perf_counter() - started)
    figures["language server, lint after an edit (1,000 lines)"] = statistics.median(edits)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--with-torch", action="store_true", help="add torch's Python files to LARGE")
    parser.add_argument("--skip-flake8", action="store_true", help="leave out the (slow) flake8 runs")
    parser.add_argument("--skip-huge", action="store_true",
                        help="leave out the growth, project growth and huge-file figures (a quicker look at one corpus)")
    parser.add_argument("--only", choices=("TRAINING", "LARGE", "DENSE", "HUGE", "GROWTH"), action="append",
                        help="measure only these corpora (repeatable); HUGE: only the generated huge files; "
                             "GROWTH: only every route on generated projects (--sizes)")
    parser.add_argument("--sizes", default=",".join(map(str, project_growth.SIZES)),
                        type=lambda text: [int(n) for n in text.split(",")],
                        help="GROWTH: project sizes in modules, comma-separated (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="GROWTH: seconds a command may take before it is killed and given up (default %(default)s)")
    args = parser.parse_args()
    if args.only and set(args.only) <= {"HUGE", "GROWTH"}:
        checks = project_growth_checks(args) if "GROWTH" in args.only else []
        return report_huge(checks, generate="HUGE" in args.only)
    sets = {label: files for label, files in corpora(args.with_torch).items() if not args.only or label in args.only}
    for label, files in sets.items():
        print(f"{label}: {len(files):,} files, {lines_of(files):,} lines, "
              f"{calling_backward(files):,} files call a backward")
    print(f"{args.repeat} repetitions, medians")
    results = {label: measure(label, files, args) for label, files in sets.items()}
    print(f"\n{'command':<28}" + "".join(f" {label + ' s':>11}" for label in results) + f" {'peak MiB':>9}")
    for name in dict.fromkeys(n for r in results.values() for n in r):
        cells = [results[label].get(name, (float("nan"), 0)) for label in results]
        peak = max(c[1] for c in cells) / 1024
        print(f"{name:<28}" + "".join(f" {c[0]:>11.2f}" for c in cells) + f" {peak:>9.0f}")
    single = one_file(args)
    for name, seconds in single.items():
        print(f"{name:<52} {seconds:>6.2f} s")
    print("\nratios (targets of issue 33; the moonshot for DENSE stays 1.0x ruff):")
    checks = []
    for name, seconds in single.items():
        limit = 0.25 if name.startswith("one file") else 0.1
        checks.append((name, f"{seconds:.2f} s", seconds <= limit))
    for label, limit_default, limit_j1 in (("DENSE", 3.0, 5.0), ("LARGE", 0.8, None)):
        got = results.get(label)
        if got is None or "ruff check" not in got:
            continue
        ratio = got["zerograd"][0] / got["ruff check"][0]
        checks.append((f"zerograd / ruff check on {label}", f"{ratio:.2f}x", ratio <= limit_default))
        if limit_j1 is not None:
            ratio = got["zerograd -j1"][0] / got["ruff check"][0]
            checks.append((f"zerograd -j1 / ruff check on {label}", f"{ratio:.2f}x", ratio <= limit_j1))
    if "DENSE" in results:
        ratio = results["DENSE"]["zerograd, warm cache"][0] / results["DENSE"]["zerograd"][0]
        checks.append(("zerograd warm / cold on DENSE", f"{ratio:.2f}x", ratio <= 0.1))
    for label in ("DENSE", "LARGE"):
        got = results.get(label)
        if got is not None and "flake8 -j1" in got:
            overhead = got["flake8 +ZG -j1"][0] / got["flake8 -j1"][0] - 1
            checks.append((f"flake8 plugin overhead on {label}", f"{100 * overhead:+.1f}%", overhead <= 0.05))
    if "TRAINING" in results:
        train = results["TRAINING"]
        ratio = train["zerograd -j1"][0] / train["floor: libcst.parse_module"][0]
        checks.append(("zerograd -j1 on TRAINING / libcst parse of it all", f"{ratio:.2f}x", ratio <= 1.3))
    if args.skip_huge:
        return report_huge(checks, generate=False)
    if not args.only or "GROWTH" in args.only:
        checks += project_growth_checks(args)
    rows = growth()
    spread = max(r[1] for r in rows) / min(r[1] for r in rows) - 1
    checks.append(("time per line, 1k..100k lines: spread", f"{100 * spread:.0f}%", spread <= 0.2))
    print("  growth: " + ", ".join(f"{n:,} lines {ms:.2f} ms/1k lines" for n, ms in rows))
    return report_huge(checks)


def project_growth_checks(args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """Issue 43's table (project_growth.py), printed; its checks, returned."""
    print(f"\nproject growth: every route on generated projects of {', '.join(f'{n:,}' for n in args.sizes)} modules")
    return project_growth.report(args.sizes, args.repeat, args.skip_flake8, args.timeout)


def report_huge(checks: list[tuple[str, str, bool]], generate: bool = True) -> int:
    """Issue 32's figures (huge_files), with the checks so far."""
    if not generate:
        for name, value, met in checks:
            print(f"  {name:<50} {value:>8}  {'met' if met else 'NOT met'}")
        return 0
    huge = huge_files()
    for kind in HUGE_KINDS:
        per_line = [ms for k, lines, ms, _ in huge if k == kind and lines >= 10_000]  # 1k: mostly start-up
        spread = max(per_line) / min(per_line)
        checks.append((f"huge files, {kind}: time per line spread", f"{spread:.2f}x", spread <= 1.5))
    described = ("--format text", "--format json", "--format sarif", "--fix")
    for label, routes in (("github", HUGE_KINDS), ("text, json, sarif, --fix", described)):
        peak = max(kib for k, lines, _, kib in huge if lines == 200_000 and k in routes) / 1024
        checks.append((f"huge files, 200k lines, {label}: peak memory", f"{peak:.0f} MiB", peak < 400))
    for name, value, met in checks:
        print(f"  {name:<50} {value:>8}  {'met' if met else 'NOT met'}")
    print("  huge files (cold process, ms per 1k lines, peak MiB):")
    for kind in dict.fromkeys(k for k, _, _, _ in huge):
        print(f"    {kind:<24} " + ", ".join(f"{n // 1000}k {ms:.0f} ms {kib / 1024:.0f} MiB"
                                             for k, n, ms, kib in huge if k == kind))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
