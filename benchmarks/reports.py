"""Measure a checker on the reproduced real bug reports in benchmarks/reports/ (issue 44).

    python benchmarks/reports.py                      # zerograd on both halves
    python benchmarks/reports.py --split check        # the check half only
    python benchmarks/reports.py --compare "torch-preflight check -f github --select TG003"

Each case's header says what a checker should report (benchmarks/reports/README.md). A bug case
is *found* when every expected finding is matched by a finding of an accepted code on a line of
its range; a trap is *silent* when the checker reports nothing in it. Finding precision counts
every finding in every case: one that matches no expectation is false.

A checker is any command that takes file paths and prints findings in GitHub's workflow-command
form (`::warning file=F,line=N,...::CODE ...`) or as `path:line:col: CODE ...` lines. Another
tool's codes are not zerograd's, so `--compare` scores it by lines only (any finding in a bug's
range counts) and prints zerograd scored the same way beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CASES = Path(__file__).resolve().parent / "reports"
CODES = ("ZG001", "ZG002", "ZG003", "ZG004", "ZG005", "ZG006")
FIELDS = ("source", "pattern", "case", "expect", "spread", "label")
ZEROGRAD = [sys.executable, "-m", "zerograd", "--format", "github", "--no-cache", "--exit-zero"]

_HEADER = re.compile(r"#\s*(\w+):\s*(.*)")
_TOKEN = re.compile(r"((?:[A-Z]+\d+\|)*[A-Z]+\d+)@(\d+)-(\d+)")
_GITHUB = re.compile(r"::\w+ ([^:]*)::(.*)")  # ::warning file=F,line=N,title=...::message
_CODE = re.compile(r"\b([A-Z]+\d+)\b")
_TEXT = re.compile(r"(.+?):(\d+):(?:\d+:)?\s*([A-Z]+\d+)\b")


class CaseError(Exception):
    """A case whose header does not follow the format."""


@dataclass(frozen=True)
class Expect:
    codes: tuple[str, ...]
    first: int
    last: int

    def matches(self, line: int, code: str | None) -> bool:
        return self.first <= line <= self.last and (code is None or code in self.codes)


@dataclass(frozen=True)
class Case:
    path: Path
    source: str
    bug: bool
    expects: tuple[Expect, ...]
    spread: str
    label: str

    @property
    def half(self) -> str:
        return half_of(self.source)


def half_of(url: str) -> str:
    """tune or check, from the source alone (fixed before any case was run)."""
    digest = hashlib.sha256(url.strip().lower().rstrip("/").encode()).hexdigest()
    return "tune" if int(digest[0], 16) % 2 == 0 else "check"


def read_case(path: Path) -> Case:
    header: dict[str, list[str]] = defaultdict(list)
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        if not line.startswith("#"):
            break
        m = _HEADER.match(line)
        if m:
            header[m.group(1)].append(m.group(2).strip())
    missing = [name for name in FIELDS if not header.get(name)]
    if missing:
        raise CaseError(f"{path.name}: header lacks {', '.join(missing)}")
    kind = header["case"][0]
    if kind not in ("bug", "trap"):
        raise CaseError(f"{path.name}: case is {kind!r}, not bug or trap")
    if header["spread"][0] not in ("single", "multi"):
        raise CaseError(f"{path.name}: spread is {header['spread'][0]!r}, not single or multi")
    tokens = " ".join(header["expect"]).split()
    expects = tuple(_expect(path.name, token, len(lines)) for token in tokens if token != "clean")
    if (kind == "bug") != bool(expects) or (kind == "trap") != (tokens == ["clean"]):
        raise CaseError(f"{path.name}: a bug expects findings, a trap expects 'clean'")
    return Case(path, header["source"][0], kind == "bug", expects, header["spread"][0],
                header["label"][0])


def _expect(name: str, token: str, length: int) -> Expect:
    m = _TOKEN.fullmatch(token)
    if not m:
        raise CaseError(f"{name}: expect token {token!r} is not CODE@FIRST-LAST")
    codes = tuple(m.group(1).split("|"))
    first, last = int(m.group(2)), int(m.group(3))
    if not set(codes) <= set(CODES) or not 1 <= first <= last <= length:
        raise CaseError(f"{name}: expect token {token!r} names no rule or lies outside the file")
    return Expect(codes, first, last)


def load(split: str, folder: Path = CASES) -> list[Case]:
    cases = [read_case(path) for path in sorted(folder.glob("*.py"))]
    return [case for case in cases if split == "both" or case.half == split]


Findings = dict[Path, list[tuple[int, str]]]


def run_checker(command: Sequence[str], cases: Sequence[Case]) -> Findings:
    """Run a checker once over every case; its findings by case file."""
    paths = [str(case.path) for case in cases]
    done = subprocess.run([*command, *paths], capture_output=True, text=True, check=False)
    known = {case.path.resolve(): case.path for case in cases}
    found: Findings = {case.path: [] for case in cases}
    for path, line, code in parse_output(done.stdout):
        case = known.get(Path(path).resolve())
        if case is not None:
            found[case].append((line, code))
    if done.returncode not in (0, 1) or (not any(found.values()) and done.stderr.strip()):
        sys.stderr.write(f"reports.py: {shlex.join(command)} exited {done.returncode}: "
                         f"{done.stderr.strip()[-500:]}\n")
    return found


def parse_output(text: str) -> Iterable[tuple[str, int, str]]:
    for line in text.splitlines():
        if m := _GITHUB.match(line):
            fields = dict(part.partition("=")[::2] for part in m.group(1).split(","))
            # The code is the title's first word (zerograd, torch-preflight) or the message's.
            code = _CODE.search(fields.get("title", "")) or _CODE.search(m.group(2))
            if "file" in fields and fields.get("line", "").isdigit() and code:
                yield fields["file"], int(fields["line"]), code.group(1)
        elif m := _TEXT.match(line):
            yield m.group(1), int(m.group(2)), m.group(3)


@dataclass
class Score:
    bugs: int = 0
    found: int = 0
    traps: int = 0
    silent: int = 0
    findings: int = 0
    correct: int = 0
    failing: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        return (f"{name:<8}{self.bugs + self.traps:>6}{self.bugs:>6}{self.found:>7}"
                f"{_ratio(self.found, self.bugs):>8}{self.traps:>7}{self.silent:>7}"
                f"{_ratio(self.silent, self.traps):>10}{self.findings:>10}{self.correct:>9}"
                f"{_ratio(self.correct, self.findings):>13}")


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f}" if whole else "-"


def score(cases: Iterable[Case], found: Findings, by_code: bool = True) -> Score:
    """by_code False: any finding on a line of an expected range counts (another tool's codes)."""
    total = Score()
    for case in cases:
        reported = found.get(case.path, [])
        correct = [(line, code) for line, code in reported
                   if any(e.matches(line, code if by_code else None) for e in case.expects)]
        total.findings += len(reported)
        total.correct += len(correct)
        if case.bug:
            total.bugs += 1
            hit = all(any(e.matches(line, code if by_code else None) for line, code in reported)
                      for e in case.expects)
            total.found += hit
        else:
            total.traps += 1
            hit = not reported
            total.silent += hit
        if not hit or len(correct) < len(reported):
            total.failing.append(_failure(case, reported))
    return total


def _failure(case: Case, reported: list[tuple[int, str]]) -> str:
    wanted = " ".join(f"{'|'.join(e.codes)}@{e.first}-{e.last}" for e in case.expects) or "clean"
    got = " ".join(f"{code}@{line}" for line, code in sorted(reported)) or "nothing"
    return f"{case.half:<6} {case.path.name:<44} {'bug' if case.bug else 'trap':<5} " \
           f"{case.spread:<7} expect {wanted:<22} got {got}"


def per_code(cases: Sequence[Case], found: Findings) -> list[str]:
    """Recall of the bug cases whose first expected code is c; precision of the findings of c."""
    rows = []
    for code in CODES:
        bugs = [c for c in cases if c.bug and c.expects[0].codes[0] == code]
        hits = score(bugs, found).found
        findings = correct = 0
        for case in cases:
            mine = [line for line, got in found.get(case.path, []) if got == code]
            findings += len(mine)
            correct += sum(any(e.matches(line, code) for e in case.expects) for line in mine)
        rows.append(f"  {code}: bugs {len(bugs):>3} found {hits:>3} ({_ratio(hits, len(bugs))})"
                    f"   findings {findings:>3} correct {correct:>3} ({_ratio(correct, findings)})")
    return rows


TABLE = (f"{'half':<8}{'cases':>6}{'bugs':>6}{'found':>7}{'recall':>8}{'traps':>7}{'silent':>7}"
         f"{'trap-prec':>10}{'findings':>10}{'correct':>9}{'finding-prec':>13}")


def report(title: str, cases: Sequence[Case], found: Findings, by_code: bool) -> list[str]:
    out = [title, TABLE]
    halves = [h for h in ("tune", "check") if any(c.half == h for c in cases)]
    for half in halves:
        out.append(score([c for c in cases if c.half == half], found, by_code).line(half))
    if len(halves) > 1:
        out.append(score(cases, found, by_code).line("both"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("tune", "check", "both"), default="both")
    parser.add_argument("--checker", help="the command to measure (default: zerograd)")
    parser.add_argument("--compare", help="another checker, scored by lines only")
    parser.add_argument("--cases", type=Path, default=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        cases = load(args.split, args.cases)
    except CaseError as exc:
        print(f"reports.py: {exc}", file=sys.stderr)
        return 2
    command = shlex.split(args.checker) if args.checker else ZEROGRAD
    found = run_checker(command, cases)
    multi = sum(c.spread == "multi" for c in cases)
    sources = len({c.source for c in cases})
    print(f"{len(cases)} cases from {sources} sources ({args.split}); {multi} spread over "
          f"several functions or classes; checker: {shlex.join(command)}")
    print("\n".join(report("\nby code and line:", cases, found, True)))
    halves = [h for h in ("tune", "check") if any(c.half == h for c in cases)]
    for half in halves + (["both"] if len(halves) > 1 else []):
        mine = [c for c in cases if half in ("both", c.half)]
        print(f"\nper class, {half} (bug cases by expected code; findings by reported code):")
        print("\n".join(per_code(mine, found)))
    scored = score(cases, found)
    print(f"\nfailing cases ({len(scored.failing)}):")
    print("\n".join(f"  {line}" for line in scored.failing) or "  none")
    if args.compare:
        other = run_checker(shlex.split(args.compare), cases)
        print("\n".join(report(f"\n{args.compare}, by line only:", cases, other, False)))
        print("\n".join(report("\nthe checker above, by line only:", cases, found, False)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
