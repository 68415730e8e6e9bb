"""The `zerograd` command: argparse, config, stdin, selection, output, exit codes (0/1/2)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Optional, TextIO

from .analysis.rules import RULES, rule_page
from .io.config import Config, ConfigError, Selection, discover_config, parse_codes
from .io.files import check_bytes, lint_paths
from .io.reading import MAX_SOURCE_BYTES, FileResult, too_large
from .io.report import DESCRIBED, FORMATS, Style, printable, show_settings, shown, statistics, summary
from .project.cache import Cache, project_cache
from .version import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zerograd",
        description="Find missing and misplaced optimizer.zero_grad() in PyTorch training code.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="other commands:\n"
               "  zerograd server [--stdio]   the language server for editors (pip install 'zerograd[server]')\n\n"
               "exit codes:\n"
               "  0  no findings (or --exit-zero)\n"
               "  1  findings reported (--diff: a fix would change a file)\n"
               "  2  an error: a bad option or config, a file that cannot be read, an internal error (ZG901),\n"
               "     output that could not be written (a closed pipe)",
    )
    add = parser.add_argument
    add("paths", nargs="*", default=["."], metavar="PATH", help="files or directories; - for stdin")
    add("--stdin-filename", metavar="NAME", help="the name to report for stdin")
    add("--select", default=None, help="comma-separated codes or prefixes (default: ZG)")
    add("--ignore", default="", help="codes or prefixes to leave out")
    add("--extend-select", default="", help="codes or prefixes to add to --select")
    add("--format", "--output-format", dest="format", choices=sorted(FORMATS), default="text",
        help="output format (--output-format: ruff's name)")
    add("--output-file", "-o", metavar="FILE", help="write the report to FILE instead of standard output")
    add("-q", "--quiet", action="store_true", help="print the findings and errors, nothing else")
    add("--fix", action="store_true", help="apply the safe fixes in place, then report what is left")
    add("--diff", action="store_true", help="print the safe fixes as a unified diff; write nothing")
    add("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    add("--statistics", action="store_true", help="print the count per code")
    add("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes")
    add("--config", metavar="FILE", help="a pyproject.toml to read [tool.zerograd] from")
    add("--no-cache", action="store_true", help="neither read nor write the cache")
    add("--cache-dir", metavar="DIR", help="the cache folder (default: .zerograd_cache beside the config)")
    add("--exclude", metavar="GLOBS", help="comma-separated globs to skip, replacing the config's exclude")
    add("--extend-exclude", metavar="GLOBS", default="", help="comma-separated globs to skip as well")
    add("--force-exclude", action="store_true", help="apply exclude to files named explicitly too")
    add("--respect-gitignore", action=argparse.BooleanOptionalAction, default=None,
        help="skip what .gitignore and .ignore files name (default: on; config: respect-gitignore)")
    add("--optimizer-names", default="", help="extra glob patterns of optimizer names")
    add("--not-optimizer-names", default="", help="glob patterns that are never optimizers")
    add("--explain", metavar="CODE", help="print the documentation of a rule and exit")
    add("--show-settings", action="store_true", help="print the settings a run here would use, and exit")
    add("--version", action="version", version=f"zerograd {__version__}")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`zerograd . | head -1`): no traceback, and no second one when
        # Python flushes stdout at exit (the recipe of the signal module's documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


def _main(argv: Optional[Sequence[str]]) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["server"]:
        return _server(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.explain is not None:
        return _explain(args.explain.upper())
    try:
        # Standard input belongs to the project of the file it stands for, wherever the command
        # runs from (editors run it from anywhere; ruff reads settings from the stdin filename).
        named = [args.stdin_filename if p == "-" and args.stdin_filename else p for p in args.paths]
        config = _merge(discover_config(named, args.config), args)
        selection = Selection(config.select or Selection().select, config.ignore, config.extend_select)
    except ConfigError as error:
        print(printable(f"zerograd: error: {error}"), file=sys.stderr)
        return EXIT_ERROR
    if args.show_settings:
        cache = None if args.no_cache else project_cache(args.cache_dir, config.cache_dir, str(config.root),
                                                         config.settings).folder
        sys.stdout.write(show_settings(config, selection, cache))
        return EXIT_CLEAN
    try:
        out = open(args.output_file, "w", encoding="utf-8") if args.output_file else sys.stdout
    except OSError as error:
        print(printable(f"zerograd: error: cannot write {args.output_file}: {error.strerror}"), file=sys.stderr)
        return EXIT_ERROR
    try:
        return _run(args, config, selection, out)
    finally:
        if out is not sys.stdout:
            out.close()


def _run(args: argparse.Namespace, config: Config, selection: Selection, out: TextIO) -> int:
    files = [p for p in args.paths if p != "-"]
    cache = None if args.no_cache else project_cache(args.cache_dir, config.cache_dir, str(config.root),
                                                     config.settings)
    jobs = max(1, args.jobs)
    failed = False
    if args.fix or args.diff:
        changed, failed = _fix(files, config, args, cache, jobs, out)
        if args.diff:
            return EXIT_ERROR if failed else EXIT_FINDINGS if changed else EXIT_CLEAN
    describe = args.format in DESCRIBED
    results = lint_paths(files, config.settings, jobs, config, args.force_exclude, describe, cache) if files else []
    if "-" in args.paths:
        results += _stdin_results(args.stdin_filename or "-", config, describe, cache)
    code = _report(results, selection, args, out)
    return EXIT_ERROR if failed else code  # a file --fix could not write is still reported


def _server(argv: list[str]) -> int:
    """`zerograd server`: the language server, from the optional `server` extra."""
    if argv and argv[0] in ("-h", "--help"):
        print("usage: zerograd server [--stdio]\n\nThe zerograd language server: LSP over standard input and output "
              "(--stdio, which editors' presets pass, is the default and only transport).")
        return EXIT_CLEAN
    extra = [arg for arg in argv if arg != "--stdio"]
    if extra:
        print(f"zerograd: error: server takes no arguments but --stdio (got {' '.join(extra)})", file=sys.stderr)
        return EXIT_ERROR
    try:
        from .server import main as serve
    except ImportError as error:
        print(f"zerograd: error: the language server needs pygls ({error}); "
              "install it with: pip install 'zerograd[server]'", file=sys.stderr)
        return EXIT_ERROR
    return serve()


def _fix(files: list[str], config: Config, args: argparse.Namespace, cache: Optional[Cache],
         jobs: int, out: TextIO) -> tuple[bool, bool]:
    """Fix (or, with --diff, show the fixes of) every file: whether any changed, and whether one
    could not be read, fixed or written. Only what a file's project says is wrong in it is fixed
    (interface.md v3)."""
    from .io.fix import key as fix_key
    from .io.writing import fix_file, sweep_leftovers

    changed, failed = False, False
    found = lint_paths(files, config.settings, jobs, config, args.force_exclude, describe=False, cache=cache)
    for checked in found:
        path = checked.path
        if checked.error is not None:
            if args.diff:  # with --fix, the report that follows names it
                print(printable(f"zerograd: error: {checked.error}"), file=sys.stderr)
            failed = True
            continue
        wanted = {fix_key(f.code, f.message) for f in checked.findings}
        result = fix_file(path, config.settings, write=args.fix and not args.diff, wanted=wanted,
                          within=_walked_from(path, files))
        for warning in result.warnings:
            print(printable(f"zerograd: warning: {shown(path)}: {warning}"), file=sys.stderr)
        if result.error:
            print(printable(f"zerograd: error: {result.error}"), file=sys.stderr)
            failed = True
        elif result.changed:
            changed = True
            if args.diff:
                out.write(result.diff())
            elif not args.quiet:
                print(printable(f"zerograd: fixed {len(result.fixed)} in {shown(path)}"), file=sys.stderr)
    if args.fix and not args.diff:
        sweep_leftovers(checked.path for checked in found)
    return changed, failed


def _merge(config: Config, args: argparse.Namespace) -> Config:
    """Command-line options win: --select replaces the config's; the others add to it."""
    return replace(
        config,
        select=parse_codes(args.select, "--select") if args.select is not None else config.select,
        ignore=config.ignore + parse_codes(args.ignore, "--ignore"),
        extend_select=config.extend_select + parse_codes(args.extend_select, "--extend-select"),
        optimizer_names=config.optimizer_names + _split(args.optimizer_names),
        not_optimizer_names=config.not_optimizer_names + _split(args.not_optimizer_names),
        respect_gitignore=config.respect_gitignore if args.respect_gitignore is None else args.respect_gitignore,
        exclude=_split(args.exclude) if args.exclude is not None else config.exclude,
        extend_exclude=config.extend_exclude + _split(args.extend_exclude),
    )


def _explain(code: str) -> int:
    page = rule_page(code).text if code in RULES else ""
    if not page:
        print(f"zerograd: error: unknown rule '{code}' (known: {', '.join(sorted(RULES))})", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(page)
    return EXIT_CLEAN


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _walked_from(path: str, arguments: list[str]) -> Optional[str]:
    """The folder argument whose walk found `path`; None when the user named the file itself."""
    if path in arguments:
        return None
    absolute = os.path.abspath(path)
    folders = [a for a in arguments if os.path.isdir(a) and absolute.startswith(os.path.join(os.path.abspath(a), ""))]
    return min(folders, key=len) if folders else None  # the widest folder the user handed over


def _stdin_results(name: str, config: Config, describe: bool, cache: Optional[Cache]) -> list[FileResult]:
    """Standard input as the file `name` of its project (the modules it links with read from
    disk, interface.md v3); without a name, a module alone."""
    try:
        data = sys.stdin.buffer.read(MAX_SOURCE_BYTES + 1)  # no more than a file would be read
    except (OSError, ValueError, AttributeError) as error:
        return [FileResult(name, error=f"cannot read standard input: {error}")]
    if len(data) > MAX_SOURCE_BYTES:
        return [FileResult(name, [too_large(len(data))])]
    if name != "-":
        return lint_paths([name], config.settings, 1, config, False, describe, cache, overrides={name: data})
    result = check_bytes(name, data, config.settings, describe)
    ignored = config.ignored_for(name)
    result.findings = [f for f in result.findings if not (ignored and f.code.startswith(ignored))]
    return [result]


def _skipped(results: list[FileResult]) -> str:
    """What was read but not checked: notebook cells under a cell magic that is not Python."""
    cells = [f"{r.path}: {cell}" for r in results for cell in r.skipped]
    if not cells:
        return ""
    return f"not checked: {len(cells)} notebook cell{'s' if len(cells) != 1 else ''} not Python\n" + "".join(
        f"  {printable(cell)}\n" for cell in cells)


def _report(results: list[FileResult], selection: Selection, args: argparse.Namespace, out: TextIO) -> int:
    located = [(shown(r.path), f) for r in results for f in r.findings if selection.allows(f.code)]
    located.sort(key=lambda item: (item[0], item[1].line, item[1].col, item[1].code))
    text = args.format == "text"  # json and sarif must stay parseable, github's lines commands
    style = Style.for_stream(out) if text else Style()
    out.write(style.text(located) if text else FORMATS[args.format](located))
    if args.statistics:
        (out if text else sys.stderr).write(statistics(located) + _skipped(results))
    errors = [r.error for r in results if r.error]
    if text and not args.quiet and (located or not errors):
        # As ruff: the closing count on stdout, and a line that says so when there is nothing.
        out.write(summary(located) if located else "All checks passed!\n")
    if not results and not args.quiet:
        print("zerograd: warning: no Python files found", file=sys.stderr)
    for error in errors:
        print(printable(f"zerograd: error: {error}"), file=sys.stderr)
    if errors or any(f.code == "ZG901" for _, f in located):
        return EXIT_ERROR
    return EXIT_FINDINGS if located and not args.exit_zero else EXIT_CLEAN
