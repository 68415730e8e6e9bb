"""Hook mutations for mutate.py (issue 17): break a class whose hooks a framework calls.

Sites are found from the module's own imports and class bases (a base imported from the
framework, or a class here that is one), not with zerograd's analysis. Per framework:
- hook-clear-between: a clear in the hook the framework runs between its backward and its step
  (the statement goes first in the hook, which is added when the class does not define it): ZG002
- hook-clear-every-batch: a clear in a hook that runs every batch, and the framework's
  accumulation set to 4 at the end of the module (the literal the analysis needs): ZG003
- hook-drop-clear: an override of the framework's clear hook that does not clear (replacing the
  class's own override, or added), in a class that clears nowhere else: ZG001
An HF Trainer subclass's hook is its backward: a `training_step` is added (only where the class has
none) that clears after the parent's, or before it with the accumulation set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

import libcst as cst
from mutants import Edit, code

CLEAR_BETWEEN, EVERY_BATCH, DROP_CLEAR = "hook-clear-between", "hook-clear-every-batch", "hook-drop-clear"


@dataclass(frozen=True)
class Target:
    """How to break one framework's hooks: (hook signature, statement) per kind, and the
    constructor call that sets its accumulation."""

    name: str
    roots: tuple[str, ...]
    classes: tuple[str, ...]
    between: tuple[str, str] = ("", "")
    every_batch: tuple[str, str] = ("", "")
    drop: str = ""  # the clear hook's signature
    setting: str = ""  # `{root}.Trainer(accumulate_grad_batches=4)`
    # Words that mean the user drives the order, or another version's order (Lightning 1.x's
    # `optimizer_idx`): no such site.
    manual: tuple[str, ...] = ()
    added_only: bool = False  # the hook's statement only makes sense in a hook of its own (not first in the user's)


TARGETS = (
    Target("Lightning", ("lightning", "pytorch_lightning"), ("LightningModule",),
           ("on_after_backward(self)", "self.zero_grad()"),
           ("on_train_batch_start(self, batch, batch_idx)", "self.zero_grad()"),
           "optimizer_zero_grad(self, epoch, batch_idx, optimizer)",
           "{root}.Trainer(accumulate_grad_batches=4)", ("automatic_optimization", "manual_backward", "optimizer_idx")),
    Target("Lightning callback", ("lightning", "pytorch_lightning"), ("Callback",),
           ("on_before_optimizer_step(self, trainer, pl_module, optimizer)", "pl_module.zero_grad()"),
           ("on_train_batch_start(self, trainer, pl_module, batch, batch_idx)", "pl_module.zero_grad()"),
           setting="{root}.Trainer(accumulate_grad_batches=4)"),
    Target("Hugging Face TrainerCallback", ("transformers",), ("TrainerCallback",),
           ("on_pre_optimizer_step(self, args, state, control, **kwargs)", 'kwargs["optimizer"].zero_grad()'),
           ("on_substep_end(self, args, state, control, **kwargs)", 'kwargs["model"].zero_grad()'),
           setting="{root}.TrainingArguments(output_dir='out', gradient_accumulation_steps=4)"),
    Target("fastai", ("fastai",), ("Callback",), ("before_step(self)", "self.opt.zero_grad()")),
    # A Trainer subclass's hook is the backward itself: the clear goes after the parent's
    # training_step (between its backward and the step), or before it under accumulation.
    Target("Hugging Face Trainer", ("transformers",), ("Trainer", "Seq2SeqTrainer"),
           ("training_step(self, model, inputs, num_items_in_batch=None)",
            "loss = super().training_step(model, inputs, num_items_in_batch)\n    model.zero_grad()\n    return loss"),
           ("training_step(self, model, inputs, num_items_in_batch=None)",
            "model.zero_grad()\n    return super().training_step(model, inputs, num_items_in_batch)"),
           setting="{root}.TrainingArguments(output_dir='out', gradient_accumulation_steps=4)", added_only=True),
)
SCOPES = tuple(t.name for t in TARGETS)


def _imports(module: cst.Module) -> tuple[dict[str, str], list[str]]:
    """Local name -> absolute qualified name, and the modules imported with `*` (top level)."""
    names, stars = {}, []
    for statement in module.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = code(alias.name)
                    local = code(alias.asname.name) if alias.asname else full.split(".")[0]
                    names[local] = full if alias.asname else local
            elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
                if isinstance(small.names, cst.ImportStar):
                    stars.append(code(small.module))
                    continue
                for alias in small.names:
                    local = code(alias.asname.name) if alias.asname else code(alias.name)
                    names[local] = f"{code(small.module)}.{code(alias.name)}"
    return names, stars


def _target(base: str, names: dict[str, str], stars: list[str], local: dict[str, cst.ClassDef],
            depth: int = 0) -> Optional[tuple[Target, str]]:
    """The framework a base names, and the root package it was imported from."""
    head, _, rest = base.partition(".")
    if not rest and base in local and depth < 5:
        return _class_target(local[base], names, stars, local, depth + 1)
    qualified = [names[head] + (f".{rest}" if rest else "")] if head in names else [f"{s}.{base}" for s in stars]
    for name in qualified:
        root, last = name.split(".")[0], name.rsplit(".", 1)[-1]
        for target in TARGETS:
            if root in target.roots and last in target.classes:
                return target, root
    return None


def _class_target(node: cst.ClassDef, names: dict[str, str], stars: list[str], local: dict[str, cst.ClassDef],
                  depth: int = 0) -> Optional[tuple[Target, str]]:
    for arg in node.bases:
        found = _target(code(arg.value), names, stars, local, depth)
        if found is not None:
            return found
    return None


def _classes(module: cst.Module) -> list[cst.ClassDef]:
    found, stack = [], list(module.body)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.ClassDef):
            found.append(node)
        if isinstance(node, (cst.ClassDef, cst.If, cst.Try)):
            stack.extend(node.body.body)  # type: ignore[union-attr]
    return found


def hook_sites(module: cst.Module) -> Iterator[tuple[cst.ClassDef, Target, str]]:
    """Each class whose hooks a framework calls, with that framework and its imported root."""
    names, stars = _imports(module)
    classes = _classes(module)
    local = {c.name.value: c for c in classes}
    for node in classes:
        found = _class_target(node, names, stars, local)
        if found is None:
            continue
        target, root = found
        if _manual(module, node, local, target):
            continue
        yield node, target, root


def _manual(module: cst.Module, node: cst.ClassDef, local: dict[str, cst.ClassDef], target: Target) -> bool:
    """The words of `target.manual` in the methods the class runs: its own, and those of its bases
    in the module that it does not override (as drivers._manual reads them)."""
    methods: dict[str, cst.FunctionDef] = {}
    pending, seen = [node], 0
    while pending and seen < 6:
        current = pending.pop(0)
        seen += 1
        for statement in current.body.body:
            if isinstance(statement, cst.FunctionDef):
                methods.setdefault(statement.name.value, statement)
            elif any(word in module.code_for_node(statement) for word in target.manual):
                return True  # `automatic_optimization = False` in the class body
        pending.extend(local[b] for arg in current.bases if (b := code(arg.value)) in local and local[b] is not current)
    return any(word in module.code_for_node(m) for m in methods.values() for word in target.manual)


def hook_edits(module: cst.Module, node: cst.ClassDef, target: Target,
               root: str) -> Iterator[tuple[str, Edit, str, list[cst.CSTNode]]]:
    """(kind, edit, what, inserted nodes) for each mutation of one class."""
    methods = {s.name.value: s for s in node.body.body if isinstance(s, cst.FunctionDef)}
    for kind, (signature, statement) in ((CLEAR_BETWEEN, target.between), (EVERY_BATCH, target.every_batch)):
        if not signature:
            continue
        if target.added_only and signature.split("(")[0] in methods:
            continue
        edit = Edit(set())
        inserted = _into_hook(edit, node, methods, signature, statement)
        lines = statement.split("\n")
        what = f"{lines[0]}{' ...' if len(lines) > 1 else ''} in {signature.split('(')[0]}"
        if kind == EVERY_BATCH:
            setting = cst.parse_statement(f"import {root} as _zg_root\n")
            call = cst.parse_statement(f"_zg_setting = {target.setting.format(root='_zg_root')}\n")
            edit.insert(module.body[-1], setting, after=True)
            edit.insert(module.body[-1], call, after=True)
            what += ", accumulation 4"
        yield kind, edit, what, inserted
    name = target.drop.split("(")[0]
    others = [s for s in node.body.body if not (isinstance(s, cst.FunctionDef) and s.name.value == name)]
    if target.drop and not any(_clears(module.code_for_node(s)) for s in others):
        edit = Edit({id(methods[name])} if name in methods else set())
        override = cst.parse_statement(f"def {target.drop}:\n    pass\n")
        edit.insert(node.body.body[-1], override, after=True)
        yield DROP_CLEAR, edit, f"{name} override without a clear", [override]


def _clears(text: str) -> bool:
    """The class clears somewhere else itself: dropping the framework's clear is no bug then."""
    return "zero_grad" in text or ".grad" in text


def _into_hook(edit: Edit, node: cst.ClassDef, methods: dict[str, cst.FunctionDef], signature: str,
               statement: str) -> list[cst.CSTNode]:
    """The clear as the first statement of the hook, or the hook added with it."""
    name = signature.split("(")[0]
    existing = methods.get(name)
    if existing is not None and isinstance(existing.body, cst.IndentedBlock) and existing.body.body:
        new = cst.parse_statement(f"{statement}\n")
        edit.insert(existing.body.body[0], new)
        return [new]
    added = cst.parse_statement(f"def {signature}:\n    {statement}\n")
    if existing is not None:
        edit.delete.add(id(existing))
    edit.insert(node.body.body[-1], added, after=True)
    return [added]
