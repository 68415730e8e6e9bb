"""A synthetic Python package of a given number of modules, the same one for the same size.

Linked by imports as a real package is: `synth/` holds a shared `utils` and `train` package, then
areas of packages of up to 20 modules (each folder with its `__init__.py`). A library module is
50-150 lines of plain code (small functions, an `nn.Module`, a config class) and imports the
first helper of up to two earlier sibling modules and a shared utility. One module in 50 is a
training module: a loop that calls the shared `train.steps` helpers (clear, backprop, update) and
a step helper of a sibling module; one in three of those loops holds a bug zerograd finds only
across modules (the clear missing, the clear between backprop and update, or a sibling's step
helper that never clears), so each run has findings. Every `.py` file counts as a module, the
`__init__.py` files too, so a project of 20,000 modules stays within io/projects.py's
MAX_CONTEXT (a larger one would be checked without context on the one-file routes).
"""

from __future__ import annotations

import random
from pathlib import Path

PACKAGE_MODULES = 19  # modules of a package beside its __init__.py
AREA_PACKAGES = 20
TRAINING_EVERY = 50

STEPS = '''"""The training steps every loop of the project shares."""


def clear(optimizer):
    """Forget the gradients of the last step."""
    optimizer.zero_grad(set_to_none=True)


def backprop(loss, scale=1.0):
    """Gradients of the loss, scaled."""
    (loss * scale).backward()


def update(optimizer, clip=None, parameters=()):
    """One optimizer step, the gradients clipped first when asked."""
    if clip is not None:
        for parameter in parameters:
            parameter.grad.clamp_(-clip, clip)
    optimizer.step()
'''

LOSSES = '''"""Losses of a batch."""

import torch
from torch import nn


def batch_loss(model, inputs, targets=None):
    """Mean squared error against the targets, or the inputs themselves."""
    outputs = model(inputs)
    if targets is None:
        targets = inputs
    return nn.functional.mse_loss(outputs, targets)


def total(losses):
    return torch.stack(list(losses)).sum()
'''

UTILS = {
    "tensors": '''"""Small tensor helpers."""

import torch


def normalize(values):
    total = sum(values) or 1
    return [value / total for value in values]


def stack(rows):
    return torch.stack([torch.as_tensor(row) for row in rows])


def clamp(values, low=0.0, high=1.0):
    return [min(max(value, low), high) for value in values]
''',
    "text": '''"""Text helpers."""


def slug(name):
    return "-".join(part for part in name.lower().split() if part)


def indent(lines, width=4):
    return [" " * width + line for line in lines]
''',
    "records": '''"""Records as dictionaries."""


def merge(*records):
    merged = {}
    for record in records:
        for key, value in record.items():
            merged.setdefault(key, value)
    return merged


def pick(record, keys):
    return {key: record[key] for key in keys if key in record}
''',
}


def _library_function(rng: random.Random, name: str, helper: str) -> str:
    scale = rng.randint(2, 9)
    return rng.choice((
        f'''def {name}(values, scale={scale}):
    """Scale the values that are set, shifted by their index."""
    result = []
    for index, value in enumerate(values):
        if value is None:
            continue
        result.append(value * scale + index)
    return {helper}(result)
''',
        f'''def {name}(records, key="value"):
    """The records grouped by their key, in order of first sight."""
    groups = {{}}
    for record in records:
        groups.setdefault(record.get(key), []).append(record)
    ordered = sorted(groups.items(), key=lambda item: str(item[0]))
    return [len(items) for _, items in ordered][:{scale}]
''',
        f'''def {name}(text, width={10 * scale}):
    """The text wrapped at the width, words kept whole."""
    lines, line = [], ""
    for word in text.split():
        if len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{{line}} {{word}}".strip()
    if line:
        lines.append(line)
    return lines
''',
        f'''def {name}(rows, columns={scale}):
    """Column means of the rows, missing cells skipped."""
    sums = [0.0] * columns
    counts = [0] * columns
    for row in rows:
        for column, cell in enumerate(row[:columns]):
            if cell is not None:
                sums[column] += cell
                counts[column] += 1
    return {helper}([s / c if c else 0.0 for s, c in zip(sums, counts)])
''',
    ))


def _library_class(rng: random.Random, name: str) -> str:
    return rng.choice((
        f'''class {name}(nn.Module):
    """A residual block of linear layers."""

    def __init__(self, width={rng.choice((64, 128, 256))}, depth={rng.randint(1, 4)}):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Linear(width, width) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x)) + x
        return self.norm(x)
''',
        f'''class {name}:
    """Settings read from a dictionary, with defaults."""

    defaults = {{"rate": {rng.randint(1, 9)}e-4, "width": {rng.choice((32, 64))}}}

    def __init__(self, **given):
        self.values = dict(self.defaults)
        self.values.update(given)

    def __getitem__(self, key):
        return self.values[key]

    def describe(self):
        return ", ".join(f"{{k}}={{v}}" for k, v in sorted(self.values.items()))
''',
    ))


def library_module(rng: random.Random, tag: str, siblings: list[str], lines: int) -> str:
    """About `lines` lines: imports, the module's helper (its first function, which siblings
    import), then functions and classes until the length is reached."""
    imports = ["from synth.utils.tensors import normalize"]
    helpers = ["normalize"]
    for sibling in siblings:
        imports.append(f"from .{sibling} import helper_{sibling.split('_', 1)[1]}")
        helpers.append(f"helper_{sibling.split('_', 1)[1]}")
    parts = [f'''def helper_{tag}(values):
    """The values normalized, then passed through the sibling helpers."""
    values = normalize(list(values))
    for step in ({", ".join(helpers[1:]) + "," if helpers[1:] else ""}):
        values = step(values)
    return values
''']
    count, n = sum(p.count("\n") + 2 for p in parts), 0
    while count < lines:
        if n % 4 == 3:
            part = _library_class(rng, f"Part{tag.title().replace('_', '')}N{n}")
        else:
            part = _library_function(rng, f"work_{tag}_{n}", rng.choice(helpers))
        parts.append(part)
        count += part.count("\n") + 2
        n += 1
    code = "\n\n".join(parts)
    uses = [line for name, line in (("nn.", "from torch import nn"), ("torch.", "import torch")) if name in code]
    head = "\n".join(sorted(uses, key=len) + [""] * bool(uses) + imports)
    return f'"""Library code of the synthetic project."""\n\n{head}\n\n\n{code}'

def training_module(tag: str, sibling: str, bug: int) -> str:
    """A loop over the shared steps and a sibling's step helper; `bug` 0: none, 1: the clear
    missing (ZG001), 2: the clear between backprop and update (ZG002), 3: the sibling's step
    helper never clears, called in a loop (ZG001)."""
    body = {
        0: "            clear(optimizer)\n            loss = batch_loss(model, inputs)\n"
           "            backprop(loss)\n            update(optimizer)\n",
        1: "            loss = batch_loss(model, inputs)\n            backprop(loss)\n            update(optimizer)\n",
        2: "            loss = batch_loss(model, inputs)\n            backprop(loss)\n            clear(optimizer)\n"
           "            update(optimizer)\n",
        3: f"            step_{tag}(model, inputs, optimizer)\n",
    }[bug]
    helper = "helper_" + sibling.split("_", 1)[1]
    steps = ", ".join(name for name in ("backprop", "clear", "update") if f"{name}(" in body)
    step = f'''def step_{tag}(model, inputs, optimizer):
    """One step without clearing: callers must clear first."""
    loss = batch_loss(model, inputs)
    loss.backward()
    optimizer.step()
    return loss


''' if bug == 3 else ""
    return f'''"""A training loop of the synthetic project."""

import torch

from synth.train.losses import batch_loss
{f"from synth.train.steps import {steps}" if steps else ""}
from .{sibling} import {helper}


{step}def train_{tag}(model, loader, optimizer, epochs=3):
    """Train the model on the loader's batches."""
    model.train()
    for epoch in range(epochs):
        for batch in loader:
            inputs = torch.as_tensor({helper}(batch))
{body}    return model


def evaluate_{tag}(model, loader):
    model.eval()
    with torch.no_grad():
        return [batch_loss(model, torch.as_tensor(b)).item() for b in loader]
'''


def write_project(root: Path, modules: int) -> dict[str, int]:
    """Write the project of `modules` Python files under `root` (with a pyproject.toml); the same
    bytes for the same size. Returns counts: modules, lines, training modules, planted bugs."""
    rng = random.Random(modules)
    files: dict[str, str] = {
        "synth/__init__.py": '"""The synthetic project."""\n',
        "synth/utils/__init__.py": "",
        "synth/train/__init__.py": '"""Shared training steps."""\n\nfrom .steps import backprop, clear, update\n\n'
                                   '__all__ = ["backprop", "clear", "update"]\n',
        "synth/train/steps.py": STEPS,
        "synth/train/losses.py": LOSSES,
    }
    files.update({f"synth/utils/{name}.py": text for name, text in UTILS.items()})
    training = bugs = package = ordinal = 0
    while len(files) < modules:
        area, number = divmod(package, AREA_PACKAGES)
        folder = f"synth/area_{area:03d}"
        if number == 0:
            files[f"{folder}/__init__.py"] = ""
        folder += f"/pkg_{number:02d}"
        files[f"{folder}/__init__.py"] = ""
        names: list[str] = []
        for index in range(PACKAGE_MODULES):
            if len(files) >= modules:
                break
            name = f"m{index:02d}_a{area}p{number}i{index}"
            ordinal += 1
            if ordinal % TRAINING_EVERY == TRAINING_EVERY // 2 and names:
                bug = 0 if training % 3 else 1 + (training // 3) % 3  # one loop in three has a bug
                text = training_module(name.split("_", 1)[1], names[-1], bug)
                training += 1
                bugs += bug > 0
            else:
                siblings = rng.sample(names, min(len(names), rng.randint(0, 2)))
                text = library_module(rng, name.split("_", 1)[1], siblings, rng.randint(50, 150))
            files[f"{folder}/{name}.py"] = text
            names.append(name)
        package += 1
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (root / "pyproject.toml").write_text('[project]\nname = "synth"\nversion = "0"\n')
    return {"modules": len(files), "lines": sum(t.count("\n") for t in files.values()),
            "training": training, "bugs": bugs}
