"""Walks fixtures/: every `# expect: CODE[:col]` must be found, and nothing else.

Each fixture runs through the library API and through the flake8 adapter, and the two complete
sorted lists must equal the expectations.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from zerograd.analysis.model import Settings
from zerograd.flake8_plugin import ZeroGradPlugin
from zerograd.io.config import parse_inline_options
from zerograd.io.files import check_source

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>[A-Z0-9:, ]+)")
FIXTURES = sorted(p for p in ROOT.rglob("*.py") if "fixes" not in p.parts and "projects" not in p.parts)
# Trees checked as one project (project.py): every module's expectations hold for one run over the tree.
PROJECTS = sorted(p for p in (ROOT / "projects").iterdir() if p.is_dir())


def expected(source: str) -> list[tuple[int, str, int | None]]:
    found = []
    for number, line in enumerate(source.splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            for item in match.group("codes").split(","):
                code, _, col = item.strip().partition(":")
                found.append((number, code, int(col) if col else None))
    return sorted(found, key=lambda x: (x[0], x[1]))


def settings_of(source: str) -> Settings:
    first = source.splitlines()[0] if source else ""
    if first.startswith("# zerograd:"):
        return parse_inline_options(first[len("# zerograd:"):])
    return Settings()


def compare(expect: list[tuple[int, str, int | None]], got: list[tuple[int, str, int]]) -> None:
    pinned = [(line, code, col if col is not None else got_col) for (line, code, col), (_, _, got_col) in zip(expect, got)]
    assert [(line, code) for line, code, _ in got] == [(line, code) for line, code, _ in expect]
    assert got == pinned


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_fixture_api(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    findings = check_source(source, settings_of(source))
    got = sorted((f.line, f.code, f.col + 1) for f in findings)
    compare(expected(source), got)


@pytest.fixture(scope="module")
def adapter_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for every case of the adapter's test: the adapter checks a fixture in its
    project's context (this repository), which a cold cache reads whole, 1.5 s a case; the
    first case runs cold, the others warm, as flake8 runs in CI (test_cache covers the cache)."""
    return tmp_path_factory.mktemp("adapter-cache")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT)))
def test_fixture_flake8_adapter(path: Path, adapter_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEROGRAD_CACHE_DIR", str(adapter_cache))
    source = path.read_text(encoding="utf-8")
    ZeroGradPlugin.settings = settings_of(source)
    try:
        plugin = ZeroGradPlugin(ast.parse(source), source.splitlines(keepends=True), str(path))
        results = list(plugin.run())
    finally:
        ZeroGradPlugin.settings = Settings()
    got = sorted((line, text.split()[0], col + 1) for line, col, text, _ in results)
    # flake8 itself applies noqa; the adapter reports everything, so drop noqa'd lines here.
    lines = source.splitlines()
    from zerograd.io.suppress import is_suppressed

    got = [g for g in got if not is_suppressed(g[1], lines[g[0] - 1])]
    compare(expected(source), got)


def test_there_are_fixtures_for_every_rule() -> None:
    names = {p.name for p in FIXTURES}
    for code in ("zg001", "zg002", "zg003", "zg004", "zg005"):
        assert sum(n.startswith(code) for n in names) >= 1, code


@pytest.mark.parametrize("tree", PROJECTS, ids=lambda p: p.name)
def test_project_tree(tree: Path) -> None:
    from zerograd.io.files import lint_paths

    results = {Path(r.path).resolve(): r for r in lint_paths([str(tree)], Settings())}
    modules = sorted(tree.rglob("*.py"))
    assert set(results) == {m.resolve() for m in modules}
    for module in modules:
        got = sorted((f.line, f.code, f.col + 1) for f in results[module.resolve()].findings)
        compare(expected(module.read_text(encoding="utf-8")), got)


@pytest.mark.parametrize("tree", PROJECTS, ids=lambda p: p.name)
def test_project_tree_in_parallel(tree: Path) -> None:
    """The same findings with a process pool: linked groups are checked in the parent."""
    from zerograd.io.files import lint_paths

    one = [(r.path, r.findings) for r in lint_paths([str(tree)], Settings(), jobs=1)]
    assert one == [(r.path, r.findings) for r in lint_paths([str(tree)], Settings(), jobs=2)]
