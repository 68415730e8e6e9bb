"""project.py: module names, import scan, and linked groups that never lose a module's findings."""

from __future__ import annotations

from pathlib import Path

from zerograd.analysis.model import Settings, Span
from zerograd.io.files import lint_paths
from zerograd.project.cache import content_hash
from zerograd.project.index import Index, imports_of
from zerograd.project.plan import Project


def test_imports_of_reads_every_form() -> None:
    text = "import a.b as c, d\nfrom .x import (y as z,\n    w)\nfrom .. import v\n    from p.q import r  # nested\n"
    got = {(i.module, i.name, i.local) for i in imports_of(text)}
    assert got == {("a.b", None, "c"), ("d", None, "d"), (".x", "y", "z"), (".x", "w", "w"),
                   ("..", "v", "v"), ("p.q", "r", "r")}


def test_imports_of_follows_a_backslash_continuation() -> None:
    # hifi-gan's train.py: `from models import Generator, ..., generator_loss,\` then `discriminator_loss`.
    text = "from models import Generator, generator_loss,\\\n    discriminator_loss\nx = 1\n"
    got = {(i.module, i.name, i.local) for i in imports_of(text)}
    assert got == {("models", "Generator", "Generator"), ("models", "generator_loss", "generator_loss"),
                   ("models", "discriminator_loss", "discriminator_loss")}


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


def test_a_name_in_two_trees_is_the_importer_s_own(tmp_path: Path) -> None:
    """Resolved by the files a name could be (no table of every module's name, issue 43): each
    tree's `pkg.util` for its own scripts; a folder that is no package is no part of a name."""
    names = ("a/pkg/__init__.py", "a/pkg/util.py", "a/train.py", "b/pkg/__init__.py", "b/pkg/util.py", "b/train.py",
             "c/tools/util.py")
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    index = Index(str(tmp_path / n) for n in names)
    assert index.module(str(tmp_path / "a/train.py"), "pkg.util") == str(tmp_path / "a/pkg/util.py")
    assert index.module(str(tmp_path / "b/train.py"), "pkg.util") == str(tmp_path / "b/pkg/util.py")
    assert index.module(str(tmp_path / "c/tools/util.py"), "util") == str(tmp_path / "c/tools/util.py")
    assert index.module(str(tmp_path / "a/train.py"), "tools.util") is None  # `tools` is no package


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


def test_a_namespace_package_above_a_script_is_found(tmp_path: Path) -> None:
    """`from core.ppo import step` in examples/train.py, core/ without `__init__.py`: research
    code puts the folder above on sys.path; the nearest folder above that holds the module."""
    names = ("core/ppo.py", "examples/train.py", "examples/core/other.py", "pkg/__init__.py", "pkg/ppo.py")
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    index = Index(str(tmp_path / n) for n in names)
    train = str(tmp_path / "examples/train.py")
    assert index.module(train, "core.ppo") == str(tmp_path / "core/ppo.py")
    assert index.module(train, "core.other") == str(tmp_path / "examples/core/other.py")
    assert index.module(train, "pkg.ppo") == str(tmp_path / "pkg/ppo.py")  # a package, as before
    assert index.module(train, "core.missing") is None


def test_a_module_alone_is_not_grouped(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import torch\nloss.backward()\n")
    (tmp_path / "b.py").write_text("import a\nprint(a)\n")
    texts = {str(p): p.read_text() for p in tmp_path.iterdir()}
    assert Project(texts).plan() == []


def test_imports_are_found_as_a_search_from_every_position_finds_them() -> None:
    """index._matches tries only the starts of lines holding `import`; it must find what
    finditer finds: continued parentheses, two on a line, CRLF, `import` inside other words."""
    from zerograd.project.index import _FROM, _IMPORT, _matches

    text = ("import a, b as c\r\nfrom .x import (y,\n    z as w)\nx = 'reimport'; import q\n"
            "  from p.q import r  # nested\nfrom s import (t,\nimport u)\nimportlib = 1\nfrom v import *\n")
    plain, froms = _matches(text)
    assert [m.group(0) for m in plain] == [m.group(0) for m in _IMPORT.finditer(text)]
    assert [m.group(0) for m in froms] == [m.group(0) for m in _FROM.finditer(text)]
    assert len(plain) == 2 and len(froms) == 4


def test_calls_on_a_prefix_need_a_word_boundary() -> None:
    from zerograd.project.unit import Unit

    text = "steps.update(x)\nmysteps.other(y)\nself.steps.clear ()\nsteps.attr\nlib.steps.run(z)\n"
    unit = Unit("/m.py", text, [])
    assert Project({})._called_on(unit, "steps") == {"update", "clear", "run"}
    assert Project({})._called_on(unit, "lib.steps") == {"run"}


def test_a_plan_from_cached_outlines_is_the_plan_from_parsing(tmp_path: Path) -> None:
    """The cache keeps what the plan read of each module (relevance.Outline): a second plan reads
    it instead of parsing, and must plan the same groups; a damaged outline is parsed again."""
    from zerograd.analysis.model import Settings
    from zerograd.front.outline import Outline
    from zerograd.project.cache import Cache

    root = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
    cache = Cache(str(tmp_path), Settings())
    for tree in sorted(p for p in root.iterdir() if p.is_dir()):
        texts = {str(p): p.read_text() for p in tree.rglob("*.py")}
        parsed = Project(texts, cache)
        groups = parsed.plan()
        outlined = Project(texts, cache)
        assert outlined.plan() == groups == Project(texts).plan(), tree.name
        assert all(u.scan is None for u in outlined.units.values())  # nothing parsed
        for unit in (u for u in parsed.units.values() if u.outline is not None):
            assert Outline.from_json(unit.outline.to_json()) == unit.outline
    text = "def f(opt):\n    opt.step()\n"
    outline = Project({"/a.py": text}, cache)
    outline.relevant(outline.units["/a.py"])
    path = Path(cache._file("outline", content_hash(text.encode())))
    payload = path.read_bytes().split(b"\n", 1)[1]
    assert b'"start":[0]' in payload
    payload = payload.replace(b'"start":[0]', b'"start":[7]')  # checksum right, content wrong
    path.write_bytes(cache._sign(payload) + b"\n" + payload)
    assert cache.outline(text) is None  # an index out of range: a miss, not a crash


def test_scans_made_in_parallel_before_the_plan_change_nothing(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Run with jobs, a project's modules that may hold a finding are scanned in a pool before
    the plan (files._prescan); the plan and the lone checks read those scans: the same findings."""
    import zerograd.io.files as files

    (tmp_path / "steps.py").write_text("def backprop(loss):\n    loss.backward()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom steps import backprop\n\ndef run(model, loader):\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for b in loader:\n"
        "        backprop(model(b).sum())\n        opt.step()\n")
    for index in range(files.PARALLEL_THRESHOLD):
        (tmp_path / f"alone{index}.py").write_text(
            "def fit(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n"
            + ("        opt.step()\n" if index % 2 else "        opt.zero_grad()\n        opt.step()\n"))
    (tmp_path / "broken.py").write_text("x.backward(\n")
    made: list[int] = []
    prescan = files._prescan
    monkeypatch.setattr(files, "_prescan", lambda *args: made.append(len(found := prescan(*args))) or found)
    serial = [(r.path, r.findings) for r in lint_paths([str(tmp_path)], jobs=1)]
    assert made == [0]
    parallel = [(r.path, r.findings) for r in lint_paths([str(tmp_path)], jobs=2)]
    assert made[1] == files.PARALLEL_THRESHOLD + 1  # the modules that call a backward and parse (steps.py)
    assert parallel == serial
    assert sum(f.code == "ZG001" for _, found in serial for f in found) == files.PARALLEL_THRESHOLD // 2 + 1


def _chain(tmp_path: Path, length: int) -> None:
    """steps0.py ... steps{length-1}.py, each calling the one before it, and train.py calling the
    last one in a loop that never clears: one group, one finding, in train.py."""
    (tmp_path / "steps0.py").write_text("import torch\n\ndef backprop0(loss):\n    loss.backward()\n")
    for k in range(1, length):
        (tmp_path / f"steps{k}.py").write_text(
            f"import torch\nfrom steps{k - 1} import backprop{k - 1}\n\n"
            f"def backprop{k}(loss):\n    backprop{k - 1}(loss)\n")
    (tmp_path / "train.py").write_text(
        f"import torch\nfrom steps{length - 1} import backprop{length - 1}\n\ndef run(model, loader):\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for b in loader:\n"
        f"        backprop{length - 1}(model(b).sum())\n        opt.step()\n")


def test_a_linked_group_holds_one_module_s_trees_at_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """issue 43: a group's modules are built one after another and each one's LibCST trees and
    sites go once its IR is linked in; a finding is located by building its module again. Each
    build finds no earlier module's sites still alive, and the finding is where it was."""
    import weakref

    from zerograd.project import linking

    _chain(tmp_path, 12)
    built: list[weakref.ref[object]] = []
    alive: list[int] = []
    front_end = linking.front_end

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        alive.append(sum(ref() is not None for ref in built))
        front = front_end(*args, **kwargs)
        built.append(weakref.ref(front.sites))
        return front

    monkeypatch.setattr(linking, "front_end", counting)
    texts = {str(p): p.read_text() for p in tmp_path.iterdir()}
    project = Project(texts)
    groups = project.plan()
    assert [len(g) for g in groups] == [13]
    found = linking.check_group(project, groups[0], Settings())
    assert len(alive) == 14  # 13 builds, and train.py's again to locate its finding
    assert max(alive) == 0
    assert {Path(p).name: [(f.line, f.code) for f in fs] for p, fs in found.items() if fs} == {"train.py": [(8, "ZG001")]}


def test_shared_subtrees_stay_shared_when_linked(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`if a and b: ... else: rest` is built with `rest` in both arms (scopes._choice): a ladder
    of such `elif`s is a DAG whose tree is exponential. Linking moves each shared node once
    (torch's linked IR was four times its modules' own, and the analysis's per-node summaries
    followed)."""
    from zerograd.analysis.model import Program, children
    from zerograd.project import linking

    rungs = "".join(f"        {'el' if k else ''}if a[{k}] and b[{k}]:\n            print({k})\n" for k in range(16))
    (tmp_path / "steps.py").write_text("import torch\n\ndef backprop(loss):\n    loss.backward()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom steps import backprop\n\ndef run(model, loader, a, b):\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for x in loader:\n"
        "        backprop(model(x).sum())\n        opt.step()\n" + rungs)
    seen: list[Program] = []
    analyse = linking.analyse
    monkeypatch.setattr(linking, "analyse", lambda program, sites: (seen.append(program), analyse(program, sites))[1])
    texts = {str(p): p.read_text() for p in tmp_path.iterdir()}
    project = Project(texts)
    found = linking.check_group(project, project.plan()[0], Settings())
    assert [(f.line, f.code) for f in found[str(tmp_path / "train.py")]] == [(8, "ZG001")]
    distinct, total, stack = set(), 0, [f.body for f in seen[0].functions]
    while stack:
        node = stack.pop()
        total += 1
        distinct.add(id(node))
        stack.extend(children(node))
    assert total > 2 ** 16 and len(distinct) < 200


def test_node_summaries_go_unless_recursion_read_them_unfinished() -> None:
    """issue 43: what a function can do (its static summary) stays; the summaries of its nodes
    go once it is made, and a graph makes them again. Those that read a summary still under way
    (f calls g calls f) are kept: made again they would read the finished one."""
    from zerograd.analysis.model import Call, Event, Function, Kind, Loop, Program, Seq
    from zerograd.analysis.summaries import Analyzer
    from zerograd.engine import analyse

    class Here:
        def locate(self, site: int) -> Span:
            return Span(site, 0, site, 0)

        def text(self, site: int) -> str:
            return ""

    step, backward = Event(Kind.STEP, 1, "opt", "opt"), Event(Kind.BACKWARD, 2)
    program = Program([
        Function("<module>", Seq((Loop(Seq((Call(3, 1), Call(4, 3))), 5),)), -1),
        Function("f", Seq((backward, Call(6, 2))), 7),
        Function("g", Seq((Call(8, 1),)), 9),
        Function("h", Seq((step,)), 10),
    ], {})
    analyzer = Analyzer(program)
    assert analyzer.targets(0) == ["opt"]
    assert set(analyzer.caches) == analyzer.pinned == {(2, ())}  # g read f's while f's was under way
    assert [(f.line, f.code) for f in analyse(program, Here())[0].findings] == [(4, "ZG001")]  # at the step's call


def test_a_helper_read_for_its_values_that_does_not_parse_is_no_finding(tmp_path: Path) -> None:
    """A training module building two optimizers joins the modules whose functions it calls
    (plan._valued); one of them in Python 2, which performs and calls no event, is there only
    for the values it returns: its failed build is no ZG900 (unlike a module that calls an
    event function, test_bad_modules_in_a_group_keep_their_own_findings)."""
    from zerograd.analysis.model import Settings
    from zerograd.io.files import lint_paths

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helpers.py").write_text('def noise(n):\n    print "noise", n\n    return n\n')
    (tmp_path / "pkg" / "train.py").write_text(
        "import torch\n\nfrom .helpers import noise\n\n\ndef train(G, D, data):\n"
        "    opt_g = torch.optim.Adam(G.parameters())\n    opt_d = torch.optim.Adam(D.parameters())\n"
        "    for real in data:\n        fake = G(torch.randn(noise(real.shape[0]), 8))\n"
        "        opt_g.zero_grad()\n        (-D(fake).mean()).backward()\n        opt_g.step()\n"
        "        opt_d.zero_grad()\n        (D(fake.detach()).mean() - D(real).mean()).backward()\n        opt_d.step()\n")
    texts = {str(p): p.read_text() for p in (tmp_path / "pkg").rglob("*.py")}
    assert Project(texts).plan()  # helpers.py is in train.py's group
    results = lint_paths([str(tmp_path / "pkg")], Settings())
    assert [f for r in results for f in r.findings] == []
