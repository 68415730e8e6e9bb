"""The package's layout is its pipeline: imports run down the stages only, with no circle, and
LibCST, flake8 and pygls stay in the modules that are allowed to see them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "zerograd"

# The stages from the top (what users call) down; a module may import its own stage or a lower one.
# A folder is a stage; a top-level module is a route unless named here.
ORDER = ("routes", "io", "project", "engine", "front", "knowledge", "analysis", "version")
TOP_LEVEL = {"engine": "engine", "version": "version"}
# Third-party packages that only some modules may import (style.md: CST never leaks past the front
# end, except into the fixes that rewrite it; flake8 and pygls never past their adapters).
CONFINED = {
    "libcst": ("front/", "engine.py", "io/fix.py"),
    # io/suppress.py reads flake8.defaults' noqa patterns only (issue 48): the same suppression on
    # every route, from flake8's own definition rather than a copy of it.
    "flake8": ("flake8_plugin.py", "io/suppress.py"),
    "pygls": ("server.py",),
}


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(module: str) -> str:
    head = module.split(".")[0] if module else "__init__"
    if (PACKAGE / head).is_dir():
        return head
    return TOP_LEVEL.get(head, "routes")


def _imports(path: Path, text: str = "") -> list[tuple[int, str]]:
    """(line, module under zerograd) of every import in the file (or `text` read as that file),
    nested ones included."""
    module = _name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if not module:
        package = []
    found = []
    for node in ast.walk(ast.parse(text or path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            target = ".".join([*base, node.module] if node.module else base)
            if node.module is None or not (PACKAGE / target.replace(".", "/")).with_suffix(".py").exists():
                # `from . import x` or `from .pkg import x`: x may be a module of that package
                for alias in node.names:
                    name = f"{target}.{alias.name}" if target else alias.name
                    found.append((node.lineno, name if _exists(name) else target))
                continue
            found.append((node.lineno, target))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [(node.lineno, n.removeprefix("zerograd").lstrip(".")) for n in names
                      if n == "zerograd" or n.startswith("zerograd.")]
    return found


def _exists(module: str) -> bool:
    path = PACKAGE / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _third_party(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
    return roots


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_known_stage() -> None:
    assert {_stage(_name(p)) for p in MODULES} == set(ORDER)


def _upward(path: Path, text: str = "") -> list[str]:
    here = ORDER.index(_stage(_name(path)))
    return [f"line {line}: {target or 'zerograd'} ({_stage(target)})"
            for line, target in _imports(path, text) if ORDER.index(_stage(target)) < here]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_down_the_stages(path: Path) -> None:
    assert not _upward(path), f"{_name(path)} imports a higher stage: {_upward(path)}"


def test_no_import_circle() -> None:
    graph = {_name(p): {t for _, t in _imports(p) if t != _name(p)} for p in MODULES}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            assert state.get(target) != 1, "import circle: " + " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [])


@pytest.mark.parametrize("library", sorted(CONFINED))
def test_libraries_stay_in_their_modules(library: str) -> None:
    allowed = CONFINED[library]
    leaks = [str(p.relative_to(PACKAGE)) for p in MODULES
             if library in _third_party(p) and not str(p.relative_to(PACKAGE)).startswith(allowed)]
    assert not leaks, f"{library} imported outside {allowed}: {leaks}"


def test_the_check_sees_an_upward_import() -> None:
    """The reader resolves relative, nested and absolute imports, so the checks above can fail."""
    flow = PACKAGE / "analysis" / "flow.py"
    assert _upward(flow, "from ..front import scopes\n") == ["line 1: front.scopes (front)"]
    assert _upward(flow, "def f():\n    import zerograd.engine\n") == ["line 2: engine (engine)"]
    assert _upward(flow, "from .. import version\nfrom .graph import Graph\n") == []
    assert _upward(PACKAGE / "cli.py", "from .io.files import discover\n") == []
