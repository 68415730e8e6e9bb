"""project.py: module names, import scan, and linked groups that never lose a module's findings."""

from __future__ import annotations

from pathlib import Path

from zerograd.io.files import lint_paths
from zerograd.project.index import Index, imports_of
from zerograd.project.plan import Project


def test_imports_of_reads_every_form() -> None:
    text = "import a.b as c, d\nfrom .x import (y as z,\n    w)\nfrom .. import v\n    from p.q import r  # nested\n"
    got = {(i.module, i.name, i.local) for i in imports_of(text)}
    assert got == {("a.b", None, "c"), ("d", None, "d"), (".x", "y", "z"), (".x", "w", "w"),
                   ("..", "v", "v"), ("p.q", "r", "r")}


def test_module_names_follow_packages(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for name in ("pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/steps.py", "train.py"):
        (tmp_path / name).write_text("")
    index = Index(str(tmp_path / n) for n in ("pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/steps.py", "train.py"))
    train, steps = str(tmp_path / "train.py"), str(tmp_path / "pkg/sub/steps.py")
    assert index.module(train, "pkg.sub.steps") == steps
    assert index.module(str(tmp_path / "pkg/sub/__init__.py"), ".steps") == steps
    assert index.module(steps, "..") == str(tmp_path / "pkg/__init__.py")
    assert index.split(train, "pkg.sub.steps.update") == (steps, ["update"])
    assert index.module(train, "missing") is None


def test_bad_modules_in_a_group_keep_their_own_findings(tmp_path: Path) -> None:
    """A syntax error, undecodable bytes and an import cycle: each module still gets its result."""
    (tmp_path / "steps.py").write_text("import torch\nimport train\n\ndef backprop(loss):\n    loss.backward()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom steps import backprop\n\ndef run(model, loader):\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for b in loader:\n"
        "        backprop(model(b).sum())\n        opt.step()\n")
    (tmp_path / "broken.py").write_text("from steps import backprop\nbackprop(\n")
    (tmp_path / "bytes.py").write_bytes(b"from steps import backprop\nx = '\xff'\nbackprop(1)\n")
    results = {Path(r.path).name: [f.code for f in r.findings] for r in lint_paths([str(tmp_path)])}
    assert results == {"steps.py": [], "train.py": ["ZG001"], "broken.py": ["ZG900"], "bytes.py": ["ZG900"]}


def test_a_module_alone_is_not_grouped(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import torch\nloss.backward()\n")
    (tmp_path / "b.py").write_text("import a\nprint(a)\n")
    texts = {str(p): p.read_text() for p in tmp_path.iterdir()}
    assert Project(texts).plan() == []
