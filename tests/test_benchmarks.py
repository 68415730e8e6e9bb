"""The benchmark scripts run: benchmarks/realcode.py crashed on every package for a session
(it handed a list of lines where a text was asked for) and no test ran it. Here its scan runs
on a project of the fixtures, offline, as it runs on a downloaded package."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import realcode  # noqa: E402


def test_realcode_scans_a_project_and_counts_its_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realcode, "CACHE", tmp_path)
    root = tmp_path / "src" / "split"
    shutil.copytree(ROOT / "fixtures" / "projects" / "split", root)
    details: list[str] = []
    row: Counter[str] = realcode._scan(root, details)
    assert row["files"] == len(list(root.rglob("*.py"))) and row["linked"] >= 2
    assert (row["ZG001"], row["ZG002"]) == (1, 1)
    assert sorted(line.split(": ")[1][:5] for line in details) == ["ZG001", "ZG002"]


def test_unknowns_counts_resolved_and_opaque_reaches_and_unlinked_optimizers() -> None:
    """benchmarks/unknowns.py (issue 45): a GAN whose losses read only its own modules and a
    fresh tensor is resolved; the same GAN on a batch handed in as a parameter is opaque; an
    optimizer handed in has no known sets."""
    import unknowns

    gan = (
        "import torch\n"
        "def train({args}):\n"
        "    G = torch.nn.Linear(2, 3)\n"
        "    D = torch.nn.Linear(3, 1)\n"
        "    opt_g = torch.optim.Adam(G.parameters())\n"
        "    opt_d = torch.optim.Adam(D.parameters())\n"
        "    for _ in range(10):\n"
        "        real = {real}\n"
        "        opt_d.zero_grad()\n"
        "        (D(real).mean() - D(G(torch.randn(4, 2)).detach()).mean()).backward()\n"
        "        opt_d.step()\n"
        "        opt_g.zero_grad()\n"
        "        (-D(G(torch.randn(4, 2))).mean()).backward()\n"
        "        opt_g.step()\n"
    )
    resolved = unknowns.Tally()
    unknowns.count(gan.format(args="", real="torch.randn(4, 3)"), resolved)
    assert (resolved.backwards, resolved.resolved_backwards) == (2, 2)
    assert (resolved.optimizers, resolved.resolved_optimizers) == (2, 2)
    opaque = unknowns.Tally()
    unknowns.count(gan.format(args="batch, encode", real="encode(batch)"), opaque)
    assert opaque.resolved_backwards < opaque.backwards and opaque.why_reach[unknowns.OPAQUE] >= 1
    handed = unknowns.Tally()
    unknowns.count("def train(model, opt, loader):\n    for x in loader:\n        opt.zero_grad()\n"
                   "        model(x).sum().backward()\n        opt.step()\n", handed)
    assert (handed.optimizers, handed.resolved_optimizers, handed.why_sets[unknowns.PARAMETER]) == (1, 0, 1)
