"""relevance.py: bodies LibCST does not need are cut without moving a position or a finding."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerograd.analysis.model import Settings
from zerograd.engine import inspect_source
from zerograd.front.elision import elide
from zerograd.front.relevance import scan_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").rglob("*.py"))

MODULE = '''import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.other = nn.Linear(1, 1)

    def forward(self, x):
        y = self.layer(x)
        y = self.other(y)
        return y.relu()


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.period = 2

    def should_step(self, i):
        """Last micro-batch of a window."""
        period = self.period
        return i % period == period - 1

    def run(self, loader):
        for i, batch in enumerate(loader):
            self.model(batch).sum().backward()
            if self.should_step(i):
                self.optimizer.step()
                self.optimizer.zero_grad()

    def fit(self, loader):
        for _ in range(3):
            self.run(loader)
            self.log_epoch()

    def log_epoch(self):
        total = 0
        for value in range(10):
            total += value
        print(total)
'''


def test_cuts_what_holds_nothing_and_keeps_every_line_in_place() -> None:
    cut = elide(MODULE, scan_text(MODULE))
    assert cut.count("\n") == MODULE.count("\n")
    kept = [line for line in cut.splitlines() if line.strip()]
    assert "        y = self.layer(x)" not in kept  # forward: no event, calls nothing that has one
    assert "        print(total)" not in kept  # log_epoch: likewise
    assert "        super().__init__()" not in kept  # Net.__init__ builds nothing the analysis records
    for line in ("        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",  # an optimizer
                 "        return i % period == period - 1",  # a test the caller reads
                 "            self.model(batch).sum().backward()",  # events
                 "            self.run(loader)"):  # calls a function with events
        assert line in kept
    for original, after in zip(MODULE.splitlines(), cut.splitlines()):
        header = after.endswith("): pass") and original.startswith(after.split("(")[0] + "(")
        assert after.strip() in ("", "pass") or after == original or header


def test_a_cut_function_keeps_its_decorators_name_and_parameter_names_only() -> None:
    source = ("class A:\n"
              "    @staticmethod\n"
              "    async def hook(a: int, /, b: 'T' = f(1),\n"
              "                   *rest: int, c: str = \"x\",\n"
              "                   **kw: int) -> None:  # a comment\n"
              "        x = 1\n"
              "        y = 2\n"
              "        return x + y\n"
              "\n"
              "    def run(self, *, k):\n"
              "        x = 1\n"
              "        y = 2\n"
              "        return x\n")
    cut = elide(source, scan_text(source))
    assert cut.splitlines() == ["class A:", "    @staticmethod",
                                "    async def hook(a, /, b, *rest, c, **kw): pass", "", "", "", "", "", "",
                                "    def run(self, *, k): pass", "", "", ""]


def test_short_bodies_continued_headers_and_odd_line_ends_are_left_alone() -> None:
    for source in ("def f(x):\n    return x\n",
                   "def f(a,\\\n      b): return a\n",
                   "def f(x):\n    y = x\n    z = y\x0c\n    return z\n\nloss.backward()\n"):
        assert elide(source, scan_text(source)) == source


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_fixtures_report_the_same_with_and_without_cutting(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert inspect_source(source) == inspect_source(source, elide=False)


def test_the_module_above_reports_the_same() -> None:
    assert inspect_source(MODULE) == inspect_source(MODULE, elide=False)


def _long_module() -> str:
    """Fixtures end to end, with what may sit where a piece would be cut: a definition after a
    line continued with a backslash, decorators (a definition inside a string: the test below)."""
    traps = ("TOTAL = 1 + \\\n    2\ndef after_a_continuation(model):\n    model(1).backward()\n\n\n"
             "@decorated\n@twice\ndef decorated_step(model, optimizer):\n    model(1).backward()\n    optimizer.step()\n\n\n")
    parts = [p.read_text() for p in FIXTURES if "projects" not in p.parts][:60]
    return "\n\n".join(part + "\n\n" + traps for part in parts)


def test_a_long_file_is_scanned_in_pieces_as_it_is_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """scan_text parses a long file in pieces (a whole ast tree of 200k lines weighs ~500 MB):
    what it learns must be what one parse of the whole text tells."""
    import ast

    import zerograd.front.relevance as relevance

    text = _long_module()
    whole = relevance.Scan(ast.parse(text))
    monkeypatch.setattr(relevance, "PIECE_LINES", 40)
    assert len(relevance._cuts(relevance.LINE.findall(text), 40)) > 20
    pieces = scan_text(text)
    assert pieces.pieces > 20 and pieces.same(whole)  # cut often, and no piece failed
    # The outline numbers functions in the order they were met: compare the functions themselves.
    assert ({pieces.functions[i] for i in pieces.outline().relevant()}
            == {whole.functions[i] for i in whole.outline().relevant()})
    assert elide(text, pieces) == elide(text, whole)


def test_a_cut_inside_a_string_falls_back_to_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import zerograd.front.relevance as relevance

    monkeypatch.setattr(relevance, "PIECE_LINES", 5)
    inner = "".join(f"def f{i}(o):\n    o.step()\n\n" for i in range(12))
    text = "import torch\n" + 'TEXT = """\n' + inner + '"""\n' + inner.replace("def f", "def g") * 2
    assert len(relevance._cuts(relevance.LINE.findall(text), 5)) > 3
    scan = scan_text(text)
    assert scan.pieces == 1  # a piece did not parse: the whole text did
    assert [d.name for d in scan.functions if d.name.startswith("f")] == []  # the string is text
    assert len(scan.starts) == 2 + 24


def test_findings_do_not_depend_on_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same findings, positions and scope counts, from one piece or many; and a syntax
    error far into a long file is still reported where it is."""
    import zerograd.front.relevance as relevance

    text = _long_module()
    whole = inspect_source(text)
    monkeypatch.setattr(relevance, "PIECE_LINES", 40)
    assert inspect_source(text) == whole
    assert whole.findings  # the fixtures' bugs are in there
    broken = text + "\n\ndef late(:\n    pass\n"
    (error,) = inspect_source(broken).findings
    assert (error.code, error.line) == ("ZG900", broken.count("\n") - 1)


TRAIN = "\ndef train(model, opt, loader):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"


def test_a_body_kept_for_its_facts_keeps_only_the_statements_that_hold_them() -> None:
    source = "def forward(x):\n    y = x * 2\n    import torch\n    z = y + 1\n    return z\n" + TRAIN
    cut = elide(source, scan_text(source))
    assert cut.splitlines()[:5] == ["def forward(x):", "", "    import torch", "", ""]
    assert cut.count("\n") == source.count("\n") and cut.endswith(TRAIN)
    assert inspect_source(source) == inspect_source(source, elide=False)


@pytest.mark.parametrize("body", [
    "    y = x * 2; import torch\n    z = y + 1\n    return z\n",  # statements sharing a line
    "    a = 1\n    b = 2\n    def step():\n        opt.step()\n    return step\n",  # encloses a relevant function
    "    a = 1\n    b = 2\n    class Inner:\n        def go(self):\n            opt.step()\n    return Inner\n",
])
def test_a_body_kept_for_its_facts_stays_whole_where_its_statements_cannot_be_told_apart(body: str) -> None:
    source = "def forward(x, opt):\n" + body + TRAIN
    assert elide(source, scan_text(source)).startswith("def forward(x, opt):\n" + body)


# `backward(` in the text, but no call that can be a BACKWARD: nothing for LibCST to parse.
SAYS_BACKWARD = {
    "a comment": "import torch\n\n\ndef f(opt):\n    opt.step()  # after loss.backward() elsewhere\n",
    "a docstring": '"""Call `loss.backward()` first."""\nimport torch\n\n\ndef f(opt):\n    opt.zero_grad()\n',
    "an autograd Function": ("import torch\n\n\nclass Square(torch.autograd.Function):\n    @staticmethod\n"
                             "    def forward(ctx, x):\n        ctx.save_for_backward(x)\n        return x * x\n"),
}
CALLS_BACKWARD = {
    "a method": "import torch\nloss.backward()\nopt.step()\n",
    "Lightning's": "import torch\nself.manual_backward(loss)\nopt.step()\n",
    "torch.autograd's": "import torch\ntorch.autograd.backward(loss)\nopt.step()\n",
    "one imported under another name": "from torch.autograd import backward as bw\nbw(loss)  # not backward(\nopt.step()\n",
    "a hook's module": ('"""Lightning calls loss.backward()."""\nimport lightning\n\n\n'
                        "class M(lightning.LightningModule):\n    def training_step(self, batch):\n"
                        "        self.optimizers().zero_grad()\n"),
}


@pytest.mark.parametrize("case", sorted({**SAYS_BACKWARD, **CALLS_BACKWARD}))
def test_only_a_module_that_may_call_a_backward_is_parsed_by_libcst(case: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefilter's text test, made exact on the tree: a module alone that calls no backward
    (and defines no framework hook) can hold no finding."""
    import zerograd.engine as engine

    source = {**SAYS_BACKWARD, **CALLS_BACKWARD}[case]
    built: list[str] = []
    real = engine.front_end
    monkeypatch.setattr(engine, "front_end", lambda text, *a, **k: built.append(text) or real(text, *a, **k))
    assert engine.may_hold_findings(source)  # the text's test passes them all
    assert inspect_source(source).findings == []
    assert built == ([source] if case in CALLS_BACKWARD else [])


STEPS = {
    "an optimizer's": "opt.step()",
    "a scaler's": "scaler.step (opt)",
    "a wrapper's": "xm.optimizer_step(opt)",
    "a helper of the module": "train_step(model, opt)\ndef train_step(model, opt):\n    opt.step()",
    "a hand-over (A3C)": "shared._grad = p.grad",
    "another hand-over": "s.grad = p.grad.clone()",
}
NO_STEP = {
    "a step named, not called": "scheduler = opt.step\nif p.grad == None: pass",
    "a step definition": "def step(self): pass",
    "only a step mode": "net.step_mode = 'm'",
}


@pytest.mark.parametrize("case", sorted({**STEPS, **NO_STEP}))
def test_a_module_alone_that_cannot_step_is_not_parsed_by_libcst(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every finding is placed by a STEP: a module checked alone that backpropagates but cannot
    step (autograd helpers, spiking neurons' surrogate gradients) is parsed by CPython only."""
    import zerograd.engine as engine

    source = "import torch\nloss.backward()\n" + {**STEPS, **NO_STEP}[case] + "\n"
    built: list[str] = []
    real = engine.front_end
    monkeypatch.setattr(engine, "front_end", lambda text, *a, **k: built.append(text) or real(text, *a, **k))
    assert engine.may_step(source) is (case in STEPS)
    inspect_source(source)
    assert built == ([source] if case in STEPS else [])


APART = {
    "backward and step in functions apart": ("import torch\n\n\ndef learn(loss):\n    loss.backward()\n\n\n"
                                              "def update(opt):\n    opt.step()\n"),
    "an autograd Function's backward and a neuron's step": (
        "import torch\n\n\nclass F(torch.autograd.Function):\n    @staticmethod\n    def backward(ctx, g):\n"
        "        return g\n\n\nclass N:\n    def single_step(self, x):\n        return x\n\n\n"
        "def check(x):\n    F.apply(x).sum().backward()\n    N().single_step(x)\n"),
}
TOGETHER = {
    "one function calls both helpers": (APART["backward and step in functions apart"]
                                        + "\n\ndef train(loss, opt):\n    learn(loss)\n    update(opt)\n"),
    "the module's statements call both": APART["backward and step in functions apart"] + "\nlearn(l)\nupdate(o)\n",
    "a closure handed to step": ("import torch\n\n\ndef learn(loss):\n    loss.backward()\n\n\n"
                                 "def update(opt, closure):\n    opt.step(closure)\n"),
    "a helper handed over": (APART["backward and step in functions apart"]
                             + "\n\ndef train(opt):\n    run(learn)\n    update(opt)\n"),
    "a framework's hooks": ("import lightning\n\n\nclass M(lightning.LightningModule):\n"
                            "    def backward(self, loss):\n        loss.backward()\n\n\n"
                            "def update(opt):\n    opt.step()\n"),
}


@pytest.mark.parametrize("case", sorted({**APART, **TOGETHER}))
def test_a_module_alone_whose_backwards_and_steps_no_scope_reaches_both_is_not_parsed_by_libcst(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scope is analysed only when it reaches a BACKWARD and a STEP (Analyzer.targets): where
    no function, and not the module's statements, reaches both by what it calls by name, a
    module alone holds no finding and CPython's tree decides it."""
    import zerograd.engine as engine

    source = {**APART, **TOGETHER}[case]
    built: list[str] = []
    real = engine.front_end
    monkeypatch.setattr(engine, "front_end", lambda text, *a, **k: built.append(text) or real(text, *a, **k))
    assert engine.may_step(source) and engine.may_hold_findings(source)  # the text's tests pass them all
    inspect_source(source)
    assert built == ([source] if case in TOGETHER else [])


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_a_module_the_scan_leaves_alone_has_no_scope_to_analyse(path: Path) -> None:
    """The scan's test is sound on every fixture: what it leaves to CPython, the whole front
    end and dataflow analyse to no scope and no finding."""
    from zerograd.engine import Report, analyse, driven, front_end

    source = path.read_text(encoding="utf-8")
    scan = scan_text(source)
    if scan.scopes() or driven(source, scan):
        return
    front = front_end(source, Settings())
    assert not isinstance(front, Report)
    report = analyse(front.program, front.sites)[0]
    assert (report.scopes, report.findings) == (0, [])


def test_a_module_that_cannot_step_still_reports_what_does_not_parse() -> None:
    """ZG900's own example: a backward with no step, cut off; and one too long to parse."""
    assert [f.code for f in inspect_source("for batch in loader:\n    loss.backward(\n").findings] == ["ZG900"]
    from zerograd.front import size

    long = "x = [" + "1, " * (size.LINE_TOKENS // 2 + 10) + "1]; loss.backward()\n"
    assert [(f.code, "too large" in f.message) for f in inspect_source(long).findings] == [("ZG900", True)]


@pytest.mark.parametrize("header", ["def A():\\\r#\n try:\n  pass\n finally:\n  pass\n",
                                    "def A():\n with 'G' as\\\r[]:\n  pass\n"])
def test_a_cut_after_a_lone_cr_keeps_every_line(header: str) -> None:
    """Found by fuzzing (hypothesmith.from_node, issue 42's run): a body blanked after a line
    ended by a lone CR (a backslash continuation) read the CR and the blank line's LF as one
    CRLF, so every later line moved up one: ZG900 "expected INDENT" with the cut, ZG001 without."""
    from zerograd.engine import inspect_source

    source = header + "\nfor b in loader:\n    loss.backward()\n    opt.step()\n"
    cut = inspect_source(source)
    assert cut == inspect_source(source, elide=False)
    assert [(f.code, f.line) for f in cut.findings] == [("ZG001", source.count("\n") + 1)]  # the CR ends one


def test_a_constructor_keeps_the_parameters_it_unpacks_into_fields() -> None:
    """`self.critic, self.critic_old = critic, deepcopy(critic)`: `critic` is kept as a field
    (what it is handed tells what an optimizer handed beside it holds), the copy is not; the
    CPython scan reads it as the LibCST build does, since the constructor's body may be cut."""
    source = (
        "class Agent:\n"
        "    def __init__(self, actor, critic, opt, rest):\n"
        "        self.critic, self.critic_old = critic, deepcopy(critic)\n"
        "        self.actor, self.opt = [actor, opt]\n"
        "        self.a, self.b = rest\n"
        "        self.n += opt\n"
    )
    assert scan_text(source).fields() == {"Agent": {"critic": "critic", "actor": "actor", "opt": "opt"}}
