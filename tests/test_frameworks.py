"""Framework hooks (rules.md section 7): what recognises a hooked class, and what decides N."""

from __future__ import annotations

from pathlib import Path

from zerograd.engine import lint_source, may_hold_findings
from zerograd.knowledge.frameworks import FRAMEWORKS, accumulation_of, framework_of

DROPPED = '''import lightning as L


class Model(L.LightningModule):
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        pass
'''

EVERY_BATCH = '''import pytorch_lightning as pl


class Model(pl.LightningModule):
    def on_train_batch_start(self, batch, batch_idx):
        self.zero_grad()


def fit(model, data, n):
    pl.Trainer(accumulate_grad_batches={first}).fit(model, data)
    pl.Trainer(accumulate_grad_batches={second}).fit(model, data)
'''


def codes(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(source)]


def test_a_dropped_clear_needs_no_backward_in_the_file() -> None:
    assert "backward" not in DROPPED and may_hold_findings(DROPPED)
    assert codes(DROPPED) == [(5, "ZG001")]


def test_the_name_alone_is_no_hook() -> None:
    for base in ("nn.Module", "LightningModule", "other.LightningModule"):
        imports = "import other\nimport torch.nn as nn"
        source = DROPPED.replace("L.LightningModule", base).replace("import lightning as L", imports)
        assert codes(source) == [], base


def test_a_relative_base_is_not_the_framework() -> None:
    # Inside a framework's own package (or a project of the same name) nothing says whose class it is.
    assert codes(DROPPED.replace("import lightning as L", "from . import L")) == []


def test_manual_optimization_takes_the_order_over() -> None:
    manual = DROPPED + "\n    def training_step(self, batch, batch_idx):\n        self.manual_backward(batch.sum())\n"
    assert codes(manual) == []


def test_accumulation_is_a_literal_agreed_by_every_setting() -> None:
    assert codes(EVERY_BATCH.format(first=4, second=4)) == [(6, "ZG003")]
    assert codes(EVERY_BATCH.format(first=4, second=8)) == []  # which one trains this model?
    assert codes(EVERY_BATCH.format(first=4, second="n")) == []  # computed: the default, N = 1
    assert codes(EVERY_BATCH.format(first=1, second=1)) == []


def test_star_imports_resolve_a_base() -> None:
    source = ("from fastai.vision.all import *\n\n\nclass Cb(Callback):\n"
              "    def before_step(self):\n        self.opt.zero_grad()\n")
    assert codes(source) == [(6, "ZG002")]


def test_tables() -> None:
    assert framework_of("lightning.pytorch.LightningModule") is framework_of("pytorch_lightning.LightningModule")
    assert framework_of("transformers.trainer_callback.TrainerCallback") is not None
    assert framework_of("keras.callbacks.Callback") is None
    assert accumulation_of("lightning.Trainer") == "accumulate_grad_batches"
    assert accumulation_of("transformers.TrainingArguments") == "gradient_accumulation_steps"
    for framework in FRAMEWORKS:
        events = [s.event for s in framework.order if s.event is not None]
        assert len(events) == len(set(events)) == 3, framework.name  # one backward, step and clear each


def test_hook_messages_name_what_the_user_wrote_and_what_a_hook_can_do() -> None:
    """issue 31: the framework's optimizer is no name the user wrote, and a hook cannot move its
    clear before the framework's backward; the message names the clear as written and the hook,
    and says to drop it (Lightning: or override optimizer_zero_grad)."""
    from zerograd.analysis.model import Settings
    from zerograd.io.files import check_source

    cases = {
        "fixtures/zg002_framework_hooks.py": ("drop it", "zero_grad(set_to_none=True)"),
        "fixtures/zg003_framework_hooks.py": ("drop it",),
        "fixtures/zg001_framework_hooks.py": ("override of optimizer_zero_grad()",),
    }
    root = Path(__file__).resolve().parent.parent
    for path, advice in cases.items():
        source = (root / path).read_text(encoding="utf-8")
        lines = source.splitlines()
        findings = [f for f in check_source(source, Settings(), describe=False) if f.code != "ZG005"]
        assert findings
        for finding in findings:
            written = lines[finding.line - 1].strip().split("  #")[0]
            if finding.code != "ZG001":
                assert finding.message.startswith((f"{written} in ", "setting .grad in ")), finding.message
                assert "'optimizer'" not in finding.message and "move optimizer" not in finding.message
                assert f" in {_enclosing_def(lines, finding.line)}() " in finding.message
            assert any(a in finding.message for a in advice), finding.message
    assert "override optimizer_zero_grad()" in lint_source(EVERY_BATCH.format(first=4, second=4))[0].message


def _enclosing_def(lines: list[str], line: int) -> str:
    for text in reversed(lines[: line - 1]):
        if text.lstrip().startswith("def "):
            return text.lstrip()[4:].split("(")[0]
    return ""
