"""The `zerograd` command: argparse, stdin, selection, output, exit codes (0/1/2)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from . import __version__
from .config import ConfigError, Selection, parse_codes, settings_from
from .files import FileResult, check_bytes, lint_paths
from .report import FORMATS, statistics

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zerograd",
        description="Find missing and misplaced optimizer.zero_grad() in PyTorch training code.",
    )
    parser.add_argument("paths", nargs="*", default=["."], metavar="PATH", help="files or directories; - for stdin")
    parser.add_argument("--stdin-filename", metavar="NAME", help="the name to report for stdin")
    parser.add_argument("--select", default=None, help="comma-separated codes or prefixes (default: ZG)")
    parser.add_argument("--ignore", default="", help="codes or prefixes to leave out")
    parser.add_argument("--extend-select", default="", help="codes or prefixes to add to --select")
    parser.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("--statistics", action="store_true", help="print the count per code")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes")
    parser.add_argument("--optimizer-names", default="", help="extra glob patterns of optimizer names")
    parser.add_argument("--not-optimizer-names", default="", help="glob patterns that are never optimizers")
    parser.add_argument("--version", action="version", version=f"zerograd {__version__}")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        selection = Selection(
            parse_codes(args.select, "--select") if args.select is not None else Selection().select,
            parse_codes(args.ignore, "--ignore"),
            parse_codes(args.extend_select, "--extend-select"),
        )
    except ConfigError as error:
        parser.error(str(error))
    settings = settings_from(_split(args.optimizer_names), _split(args.not_optimizer_names))
    results = [r for r in lint_paths([p for p in args.paths if p != "-"], settings, max(1, args.jobs))]
    if "-" in args.paths:
        results.append(_stdin_result(args.stdin_filename or "-", settings))
    return _report(results, selection, args)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _stdin_result(name: str, settings: object) -> FileResult:
    try:
        data = sys.stdin.buffer.read()
    except (OSError, ValueError, AttributeError) as error:
        return FileResult(name, error=f"cannot read standard input: {error}")
    return check_bytes(name, data, settings)  # type: ignore[arg-type]


def _report(results: list[FileResult], selection: Selection, args: argparse.Namespace) -> int:
    located = [(r.path, f) for r in results for f in r.findings if selection.allows(f.code)]
    located.sort(key=lambda item: (item[0], item[1].line, item[1].col, item[1].code))
    sys.stdout.write(FORMATS[args.format](located))
    if args.statistics:
        sys.stdout.write(statistics(located))
    errors = [r.error for r in results if r.error]
    for error in errors:
        print(f"zerograd: error: {error}", file=sys.stderr)
    if errors or any(f.code == "ZG901" for _, f in located):
        return EXIT_ERROR
    return EXIT_FINDINGS if located and not args.exit_zero else EXIT_CLEAN
