"""Issue 43: how every route grows with the project, on synthetic projects (synthetic.py) of 100 to
20,000 modules. bench.py --only GROWTH prints the table and its checks.

The routes, each run from the project's root with its output kept to count the findings:
- `zerograd --no-cache -j 1 .` (cold) and `zerograd -j 1 .` with its cache (ZEROGRAD_CACHE_DIR)
  filled by one untimed run before (warm; its output must equal the cold one's);
- flake8 `-j 1` without and with the plugin: `--select E,F,W` against `--select E,F,W,ZG`. flake8
  runs every installed plugin whatever is selected (it only drops the unselected codes: with
  `--select E,F,W` the plugin still fills its cache), so the baseline runs flake8 with the plugin
  hidden from flake8's plugin finder (FLAKE8 below), in the same environment; the plugin's run goes
  through the same wrapper with nothing hidden, so both pay the same start-up. Each flake8 run gets
  a new, empty ZEROGRAD_CACHE_DIR;
- pre-commit: `pre-commit run --all-files` in a git repository of the project, with the repo's
  own `zerograd` hook of .pre-commit-hooks.yaml as a local hook (`language: system`, the entry
  pointed at this environment's `zerograd`, so nothing is installed), a new cache folder per run:
  pre-commit's own batching (xargs, about 128 KiB of arguments per batch, run one after another
  as `require_serial` asks) and its own overhead (git, file identification) included;
- the language server: `zerograd server` started, initialized, then the time from `didOpen` of
  the first training module with a planted bug to its `publishDiagnostics` (a new cache folder
  per run); peak memory is the server's whole run.
Time per module is the median wall time over the modules of the project (every .py file, the
__init__.py files too); peak memory is GNU time's %M (ru_maxrss of the command it forked: the
largest of the command's process and the processes it waited for, pre-commit's hook runs;
flake8 -j 1 starts none), or wait4's where there is no /usr/bin/time.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from synthetic import write_project

HERE = Path(__file__).resolve().parent
SIZES = (100, 1_000, 5_000, 20_000)
# flake8 alone takes ~15 s of CPU per 1,000 of these modules: at the larger sizes its routes (and
# pre-commit's) run fewer times than --repeat asks.
SLOW_REPEATS = {5_000: 2, 20_000: 1}
SLOW = ("flake8 -j1, plugin hidden", "flake8 -j1 +ZG", "pre-commit run --all-files")

# flake8's own main, with the plugins of the distribution named in argv[1] ("-": none) left out
# of what flake8's plugin finder found.
FLAKE8 = """import sys
from flake8.main import cli
from flake8.plugins import finder
hidden, found = sys.argv[1], finder.find_plugins
finder.find_plugins = lambda *a, **k: [p for p in found(*a, **k) if p.package != hidden]
sys.exit(cli.main(sys.argv[2:]))
"""

Row = dict[str, tuple[float, int, Optional[int]]]  # route -> (median seconds, peak KiB, findings)


# Linux counts in a process's peak RSS the pages of the process it was forked from, until its
# exec (the old mm's high-water mark is kept): a command started from this script, which holds
# the 20,000-module project it wrote, reported this script's 96 MiB as its own peak. GNU time,
# a small program, forks the command itself and reports its own child's peak.
GNU_TIME = "/usr/bin/time"


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float,
        output: Optional[Path] = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run (inf seconds when killed at the timeout)."""
    command, measured = _under_time(command)
    with open(output or os.devnull, "wb") as sink:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.DEVNULL)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            process.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        timer.cancel()
    process.returncode = status  # reaped: Popen must not wait for it again
    return (float("inf") if killed.is_set() else seconds), _peak(measured, usage.ru_maxrss)


def _under_time(command: list[str]) -> tuple[list[str], Optional[str]]:
    """The command run by GNU time where there is one, and the file it writes the peak to."""
    if not os.path.exists(GNU_TIME):
        return command, None
    handle, measured = tempfile.mkstemp(suffix=".rss")
    os.close(handle)
    return [GNU_TIME, "-f", "%M", "-o", measured, *command], measured


def _peak(measured: Optional[str], fallback: int) -> int:
    """The peak RSS (KiB) GNU time wrote, else what wait4 said."""
    if measured is None:
        return fallback
    try:
        return int(Path(measured).read_text().split()[-1])
    except (ValueError, IndexError, OSError):
        return fallback  # killed at the timeout: time wrote nothing
    finally:
        os.unlink(measured)


def findings_in(path: Path) -> int:
    return len(re.findall(rb" ZG\d\d\d ", path.read_bytes()))


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def server_open(root: Path, module: Path, env: dict[str, str], timeout: float) -> tuple[float, int, int]:
    """Seconds from didOpen of `module` to its publishDiagnostics, the server's peak RSS (KiB) and
    the number of diagnostics."""
    command, measured = _under_time([str(Path(sys.executable).parent / "zerograd"), "server"])
    process = subprocess.Popen(command, cwd=root, env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    out = process.stdout
    received = b""

    def answer(wanted: Callable[[dict[str, Any]], bool], deadline: float) -> Optional[dict[str, Any]]:
        nonlocal received
        while time.perf_counter() < deadline:
            while b"\r\n\r\n" in received:
                head, rest = received.split(b"\r\n\r\n", 1)
                length = int(re.search(rb"Content-Length:\s*(\d+)", head, re.I).group(1))  # type: ignore[union-attr]
                if len(rest) < length:
                    break
                message: dict[str, Any] = json.loads(rest[:length])
                received = rest[length:]
                if wanted(message):
                    return message
            if select.select([out], [], [], 0.1)[0]:
                chunk = os.read(out.fileno(), 1 << 16)
                if not chunk:
                    return None
                received += chunk
        return None

    uri = module.as_uri()
    process.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "capabilities": {}, "processId": None, "rootUri": root.as_uri(),
        "workspaceFolders": [{"uri": root.as_uri(), "name": "synth"}]}}))
    process.stdin.flush()
    answer(lambda m: m.get("id") == 1, time.perf_counter() + 60)
    process.stdin.write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
    opened = _frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": module.read_text()}}})
    started = time.perf_counter()
    process.stdin.write(opened)
    process.stdin.flush()
    published = answer(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                       and m["params"]["uri"] == uri, started + timeout)
    seconds = time.perf_counter() - started if published is not None else float("inf")
    count = len(published["params"]["diagnostics"]) if published is not None else 0
    try:
        process.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
        process.stdin.write(_frame({"jsonrpc": "2.0", "method": "exit"}))
        process.stdin.close()
    except BrokenPipeError:
        pass
    timer = threading.Timer(30, process.kill)
    timer.start()
    _, status, usage = os.wait4(process.pid, 0)
    timer.cancel()
    process.returncode = status
    return seconds, _peak(measured, usage.ru_maxrss), count


def precommit_repo(root: Path, env: dict[str, str]) -> None:
    """`root` as a git repository with the repo's zerograd hook as a local hook, all committed."""
    import yaml  # type: ignore[import-untyped]  # pre-commit's own dependency

    hook = next(h for h in yaml.safe_load((HERE.parent / ".pre-commit-hooks.yaml").read_text()) if h["id"] == "zerograd")
    hook.update(entry=str(Path(sys.executable).parent / hook["entry"]), language="system")
    (root / ".pre-commit-config.yaml").write_text(json.dumps({"repos": [{"repo": "local", "hooks": [hook]}]}, indent=1))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "commit.gpgsign=false"]
    for step in (["init", "-q"], ["add", "."], ["commit", "-q", "--no-verify", "-m", "synthetic project"]):
        subprocess.run(git + step, cwd=root, env=env, check=True, capture_output=True)


def batches(root: Path) -> int:
    """How many zerograd processes pre-commit starts for --all-files (its own partition)."""
    try:
        from pre_commit.xargs import partition  # type: ignore[import-untyped]
    except ImportError:
        return 0
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True).stdout.split()
    return len(partition(("zerograd",), tuple(files), 1))


def measure_size(modules: int, repeat: int, skip_flake8: bool, timeout: float,
                 given_up: set[str]) -> tuple[dict[str, int], Row]:
    """The project of `modules` modules through every route, alternated `repeat` times."""
    base = Path(tempfile.mkdtemp(prefix=f"zerograd-growth-{modules}-"))
    root = base / "synth-project"
    counts = write_project(root, modules)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "ZEROGRAD_CACHE_DIR")}
    env["PRE_COMMIT_HOME"] = str(base / "pre-commit-home")
    bin_ = Path(sys.executable).parent
    zerograd = str(bin_ / "zerograd")
    training = sorted(p for p in root.rglob("*.py") if "def train_" in p.read_text())
    first_bug = next(p for p in training if "clear(optimizer)" not in p.read_text())
    fresh = iter(range(10**6))

    def cache_env() -> dict[str, str]:
        return {**env, "ZEROGRAD_CACHE_DIR": str(base / f"cache-{next(fresh)}")}

    warm = cache_env()
    cold_out, warm_out = base / "cold.txt", base / "warm.txt"
    run([zerograd, "-j", "1", "."], root, warm, timeout, warm_out)  # fills the warm cache
    commands: dict[str, tuple[list[str], Callable[[], dict[str, str]]]] = {
        "zerograd -j1 --no-cache": ([zerograd, "--no-cache", "-j", "1", "."], lambda: env),
        "zerograd -j1, warm cache": ([zerograd, "-j", "1", "."], lambda: warm),
    }
    if not skip_flake8:
        flake8 = [sys.executable, "-c", FLAKE8]
        commands["flake8 -j1, plugin hidden"] = (flake8 + ["zerograd", "-j", "1", "--select", "E,F,W", "."], cache_env)
        commands["flake8 -j1 +ZG"] = (flake8 + ["-", "-j", "1", "--select", "E,F,W,ZG", "."], cache_env)
    precommit = bin_ / "pre-commit"
    if precommit.exists():
        precommit_repo(root, env)
        commands["pre-commit run --all-files"] = ([str(precommit), "run", "--all-files"], cache_env)
        run([str(precommit), "run", "--all-files"], root, cache_env(), timeout)  # pre-commit's first-run setup
    times: dict[str, list[float]] = {}
    peaks: dict[str, int] = {}
    found: dict[str, Optional[int]] = {}
    most = max(repeat, 1)
    for n in range(most):
        for name, (command, env_of) in commands.items():
            reps = min(repeat, SLOW_REPEATS.get(modules, repeat)) if name in SLOW else repeat
            if n >= reps or name in given_up:
                continue
            output = base / "out.txt"
            seconds, peak = run(command, root, env_of(), timeout, output)
            if n == 0:
                found[name] = findings_in(output)
                if name == "zerograd -j1 --no-cache":
                    shutil.copy(output, cold_out)
                if name == "zerograd -j1, warm cache" and output.read_bytes() != warm_out.read_bytes():
                    raise SystemExit(f"{modules} modules: a warm run printed something else than the run that filled its cache")
            times.setdefault(name, []).append(seconds)
            peaks[name] = max(peaks.get(name, 0), peak)
            if seconds == float("inf"):
                given_up.add(name)  # over the timeout: not run again, nor at the larger sizes
        name = "language server, open one module"
        if name not in given_up:
            seconds, peak, count = server_open(root, first_bug, cache_env(), timeout)
            times.setdefault(name, []).append(seconds)
            peaks[name] = max(peaks.get(name, 0), peak)
            found.setdefault(name, count)
            if seconds == float("inf"):
                given_up.add(name)
    if cold_out.exists() and cold_out.read_bytes() != warm_out.read_bytes():
        raise SystemExit(f"{modules} modules: the cold run printed something else than the run that filled the cache")
    counts["batches"] = batches(root) if precommit.exists() else 0
    shutil.rmtree(base, ignore_errors=True)
    return counts, {name: (statistics.median(values), peaks[name], found.get(name)) for name, values in times.items()}


def growth_checks(results: dict[int, Row]) -> list[tuple[str, str, bool]]:
    """Per route: time per module from 1,000 modules (or the smallest size measured, when 1,000 is
    the largest) to the largest size within 1.5x, and peak memory there at most 2x."""
    sizes = sorted(results)
    if len(sizes) < 2:
        return []
    high = sizes[-1]
    low = 1_000 if 1_000 in results and high > 1_000 else sizes[0]
    checks = []
    for route in results[high]:
        if route not in results[low]:
            continue
        (t_low, m_low, _), (t_high, m_high, _) = results[low][route], results[high][route]
        per = (t_high / high) / (t_low / low)
        checks.append((f"{route}: ms/module {low:,} -> {high:,}", f"{per:.2f}x", per <= 1.5))
        grown = m_high / m_low if m_low else float("inf")
        checks.append((f"{route}: peak MiB {low:,} -> {high:,}", f"{grown:.2f}x", grown <= 2.0))
    return checks


def report(sizes: list[int], repeat: int, skip_flake8: bool, timeout: float) -> list[tuple[str, str, bool]]:
    """Measure every size (smallest first), print the table; the checks, for the caller to print."""
    results: dict[int, Row] = {}
    given_up: set[str] = set()
    for modules in sorted(sizes):
        counts, row = measure_size(modules, repeat, skip_flake8, timeout, given_up)
        results[modules] = row
        print(f"  {modules:,} modules: {counts['lines']:,} lines, {counts['training']} training modules, "
              f"{counts['bugs']} planted bugs, {counts['batches']} pre-commit batch(es)", flush=True)
    slow = ", ".join(f"{r} at {s:,}" for s, r in SLOW_REPEATS.items() if s in results and r < repeat)
    print(f"\nproject growth, {repeat} repetitions, medians (flake8 and pre-commit: {slow or 'all'} repetition(s)); "
          "ms per module, peak MiB, ZG findings")
    print(f"{'route':<34}" + "".join(f" {f'{s:,} modules':>26}" for s in results))
    for route in dict.fromkeys(r for row in results.values() for r in row):
        cells = []
        for modules, row in results.items():
            seconds, kib, found = row.get(route, (float("nan"), 0, None))
            shown = "-" if found is None else str(found)
            cells.append(f" {1000 * seconds / modules:>11.2f} {kib / 1024:>7.0f} {shown:>6}")
        print(f"{route:<34}" + "".join(cells))
    for modules, row in results.items():
        if "flake8 -j1 +ZG" in row and "flake8 -j1, plugin hidden" in row:
            overhead = row["flake8 -j1 +ZG"][0] / row["flake8 -j1, plugin hidden"][0] - 1
            print(f"  flake8 plugin overhead at {modules:,} modules: {100 * overhead:+.0f}% "
                  f"(flake8 alone {row['flake8 -j1, plugin hidden'][0]:.1f} s)")
    return growth_checks(results)
