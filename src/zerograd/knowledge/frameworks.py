"""Frameworks that call backward(), step() and zero_grad() around the user's hooks (rules.md
section 7): each one's per-batch order as data, beside the optimizer lists of optimizers.py.

A class whose base resolves by import provenance to a framework's class (a subclass of a
subclass defined in the same module counts) has its hooks called in that order; drivers.py turns
the order into a scope, with the framework's own BACKWARD / STEP / CLEAR between the hooks, so
the ordinary dataflow judges what the hooks do. Each table cites the source it was read from:
the published package at the version given. No LibCST here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Optional

from ..analysis.model import Kind, Reach
from .optimizers import Built

# Registering a function with a framework that calls it once per batch (ignite, skorch, ...).
REGISTER_CALL = re.compile(r"^(?:Engine|DeterministicEngine|add_event_handler|on|register\w*|attach)$")
REGISTER_KEYWORD = re.compile(r"^(?:step_fn|train_step\w*|update_fn|process_function|train_fn|step_function)$")

EVERY, FIRST, LAST, NOT_LAST = "every", "first", "last", "not last"  # which batches of a window
COUNTER = "batch_idx"  # the driver's batch counter (its accumulation tests read it)


@dataclass(frozen=True)
class Slot:
    """One point of the per-batch order: a hook the user may define, the framework's own event
    there (what the hook's default does, or what runs with no hook), and which batches reach it."""

    hook: str = ""
    event: Optional[Kind] = None
    when: str = EVERY
    optimizer: int = -1  # position of the optimizer among the hook's parameters after `self`
    closure: int = -1  # position of the closure the hook hands to step() (Lightning's optimizer_step)
    within: str = ""  # runs inside this hook's default: dropped when the user overrides that hook


@dataclass(frozen=True)
class Framework:
    name: str
    roots: frozenset[str]  # top-level packages the base class is imported from
    classes: frozenset[str]  # the base classes' own names
    order: tuple[Slot, ...]
    optimizer: str  # the key the framework's optimizer has in the driver and the hooks
    optimizers: re.Pattern[str]  # receivers in a hook that are that optimizer
    modules: re.Pattern[str]  # modules whose zero_grad() clears all of its parameters
    accumulation: tuple[frozenset[str], str] = (frozenset(), "")  # (constructors, keyword) that set N
    manual: str = ""  # an attribute that, set to False, hands the order to the user
    runner: str = ""  # who calls the hooks, as messages name it (default: the name)
    clear_hook: str = ""  # the hook a user overrides to clear the gradients their own way

    @property
    def who(self) -> str:
        return self.runner or self.name

    def slot(self, hook: str) -> Optional[Slot]:
        return next((s for s in self.order if s.hook == hook), None)


_LIGHTNING = frozenset({"lightning", "pytorch_lightning"})
_LIGHTNING_OPTIMIZER = re.compile(r"self\.optimizers\([^()]*\)(?:\[0\])?|self\.trainer\.optimizers\[0\]|trainer\.optimizers\[0\]")

FRAMEWORKS = (
    # Lightning 2.6.6, automatic optimization (one optimizer since 2.0):
    # loops/training_epoch_loop.py (on_train_batch_start/end around _AutomaticOptimization.run);
    # loops/optimization/automatic.py (run: the closure alone while accumulating, else the
    # optimizer_step hook with it; Closure: training_step, then _make_zero_grad_fn on the first
    # batch of a window, `batch_idx % accumulate_grad_batches == 0`: on_before_zero_grad,
    # optimizer_zero_grad, then the backward); plugins/precision/precision.py (pre_backward:
    # on_before_backward; backward: LightningModule.backward; post_backward: on_after_backward;
    # _after_closure: on_before_optimizer_step, configure_gradient_clipping); core/module.py
    # (optimizer_step's default `optimizer.step(closure=optimizer_closure)`, optimizer_zero_grad's
    # `optimizer.zero_grad()`); fit_loop._should_accumulate: the step on `(batch_idx + 1) % N == 0`.
    Framework(
        "Lightning",
        _LIGHTNING,
        frozenset({"LightningModule"}),
        (
            Slot("on_train_batch_start"),
            Slot("training_step"),
            Slot("on_before_zero_grad", when=FIRST, optimizer=0),
            Slot("optimizer_zero_grad", Kind.CLEAR, when=FIRST, optimizer=2),
            Slot("on_before_backward"),
            Slot("backward", Kind.BACKWARD),
            Slot("on_after_backward"),
            Slot("on_before_optimizer_step", when=LAST, optimizer=0),
            Slot("configure_gradient_clipping", when=LAST, optimizer=0),
            Slot("optimizer_step", Kind.STEP, when=LAST, optimizer=2, closure=3),
            Slot("on_train_batch_end"),
        ),
        "self.optimizers()",
        _LIGHTNING_OPTIMIZER,
        re.compile(r"self"),
        (frozenset({"Trainer"}), "accumulate_grad_batches"),
        manual="automatic_optimization",
        clear_hook="optimizer_zero_grad",
    ),
    # Lightning 2.6.6 callbacks (pytorch/callbacks/callback.py): the same points of the same
    # order, called with (trainer, pl_module, ...) just before the LightningModule's own hook.
    Framework(
        "Lightning callback",
        _LIGHTNING,
        frozenset({"Callback"}),
        (
            Slot("on_train_batch_start"),
            Slot("on_before_zero_grad", when=FIRST, optimizer=2),
            Slot("", Kind.CLEAR, when=FIRST),
            Slot("on_before_backward"),
            Slot("", Kind.BACKWARD),
            Slot("on_after_backward"),
            Slot("on_before_optimizer_step", when=LAST, optimizer=2),
            Slot("", Kind.STEP, when=LAST),
            Slot("on_train_batch_end"),
        ),
        "self.optimizers()",
        _LIGHTNING_OPTIMIZER,
        re.compile(r"pl_module|trainer\.(?:lightning_module|model)"),
        (frozenset({"Trainer"}), "accumulate_grad_batches"),
        runner="Lightning",
    ),
    # transformers 5.25.0, trainer.py, Trainer._inner_training_loop (lines 1932-2006): per
    # micro-batch on_step_begin (first of a window), training_step (its default: compute_loss,
    # then accelerator.backward); on `do_sync_step = (step + 1) % gradient_accumulation_steps == 0`
    # clip, on_pre_optimizer_step, optimizer.step(), on_optimizer_step, model.zero_grad(),
    # on_step_end; otherwise on_substep_end.
    Framework(
        "Hugging Face Trainer",
        frozenset({"transformers"}),
        frozenset({"Trainer", "Seq2SeqTrainer"}),
        (
            Slot("compute_loss", within="training_step"),
            Slot("training_step", Kind.BACKWARD),
            Slot("", Kind.STEP, when=LAST),
            Slot("", Kind.CLEAR, when=LAST),
        ),
        "self.optimizer",
        re.compile(r"self\.optimizer"),
        re.compile(r"model|self\.model|self\.model_wrapped"),
        (frozenset({"TrainingArguments", "Seq2SeqTrainingArguments"}), "gradient_accumulation_steps"),
        runner="the Hugging Face Trainer",
    ),
    Framework(
        "Hugging Face TrainerCallback",
        frozenset({"transformers"}),
        frozenset({"TrainerCallback"}),
        (
            Slot("on_step_begin", when=FIRST),
            Slot("", Kind.BACKWARD),
            Slot("on_pre_optimizer_step", when=LAST),
            Slot("", Kind.STEP, when=LAST),
            Slot("on_optimizer_step", when=LAST),
            Slot("", Kind.CLEAR, when=LAST),
            Slot("on_step_end", when=LAST),
            Slot("on_substep_end", when=NOT_LAST),
        ),
        "self.optimizer",
        re.compile(r"optimizer|kwargs\[\"optimizer\"\]|kwargs\.get\(\"optimizer\"\)"),
        re.compile(r"model|kwargs\[\"model\"\]|kwargs\.get\(\"model\"\)"),
        (frozenset({"TrainingArguments", "Seq2SeqTrainingArguments"}), "gradient_accumulation_steps"),
        runner="the Hugging Face Trainer",
    ),
    # fastai 2.8.12, learner.py: Learner._do_one_batch (after_pred, after_loss) and _do_grad_opt:
    # _with_events(_backward, 'backward') = before_backward, loss_grad.backward(), after_backward;
    # _with_events(_step, 'step') = before_step, opt.step(), after_step; then opt.zero_grad().
    # A callback reads the learner's attributes as its own (Callback.__getattr__).
    Framework(
        "fastai",
        frozenset({"fastai"}),
        frozenset({"Callback"}),
        (
            Slot("before_batch"),
            Slot("after_pred"),
            Slot("after_loss"),
            Slot("before_backward"),
            Slot("", Kind.BACKWARD),
            Slot("after_backward"),
            Slot("before_step"),
            Slot("", Kind.STEP),
            Slot("after_step"),
            Slot("", Kind.CLEAR),
            Slot("after_batch"),
        ),
        "self.learn.opt",
        re.compile(r"self\.(?:learn\.)?opt"),
        re.compile(r"self\.(?:learn\.)?model"),
    ),
)


# ignite, from its published documentation (ignite.engine.create_supervised_trainer, 0.5: "the
# update function ... gradient_accumulation_steps: number of steps the gradients should be
# accumulated across", default 1; ignite.engine.events.Events: ITERATION_STARTED, the process
# function, ITERATION_COMPLETED, per iteration). Its code is reserved (shared/heldout-corpus.txt),
# so which iteration of a window clears and steps is not read from it: a finding here must hold
# for any phase (a handler's clear every iteration under N > 1). Handlers are registered with
# `@engine.on(Events.X)` or `engine.add_event_handler(Events.X, f)`; they are slots named
# "<event>:<function>" before and after the update.
STARTED, COMPLETED = "ITERATION_STARTED", "ITERATION_COMPLETED"
IGNITE = Framework(
    "ignite",
    frozenset({"ignite"}),
    frozenset({"create_supervised_trainer"}),
    (Slot("", Kind.CLEAR, when=FIRST), Slot("", Kind.BACKWARD), Slot("", Kind.STEP, when=LAST)),
    "optimizer",  # replaced by the key of the optimizer the factory was handed
    re.compile(r"(?!)"),
    re.compile(r"(?!)"),
    (frozenset({"create_supervised_trainer"}), "gradient_accumulation_steps"),
)

# accelerate, from its published documentation (Accelerator.accumulate and "Gradient
# accumulation": inside `with accelerator.accumulate(model):` the prepared optimizer's step() and
# zero_grad() act only when `accelerator.sync_gradients` is true; `accelerator.backward(loss)` is
# the backward). Its code is reserved. scopes.py gates STEP and CLEAR inside such a block by this
# condition (rules.md section 4).
ACCELERATE_BLOCK, ACCELERATE_SYNC = "accumulate", "sync_gradients"
# Receivers whose `backward(loss, ...)` backpropagates its first argument: accelerate's
# `Accelerator.backward(loss, **kwargs)`, Lightning Fabric's `Fabric.backward(tensor, *args,
# model=None, **kwargs)` (both from their published API references) and PyTorch's
# `torch.autograd.backward(tensors, ...)`; a tensor's own `backward(gradient)` takes the gradient
# there instead. By the receiver's last name.
LOSS_BACKWARD = ("accelerator", "fabric", "autograd")

HOOKS = frozenset(s.hook for f in FRAMEWORKS for s in f.order if s.hook)
ROOTS = frozenset(root for f in (*FRAMEWORKS, IGNITE) for root in f.roots)  # what a module imports to use one
# The keywords that set a framework's accumulation (relevance.py keeps the bodies that use one).
SETTINGS = frozenset(f.accumulation[1] for f in (*FRAMEWORKS, IGNITE) if f.accumulation[1])


Callee = tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...]]
# A function's parameters (all, in order; keyword-only last) and what its return value reaches,
# each parameter standing for itself (Reach.modules names them): program._values.
Valued = tuple[tuple[str, ...], int, Reach]


@dataclass(frozen=True)
class Outside:
    """What the other modules of a project say about one module (project.py): the framework an
    imported base class derives from (a qualified name -> the framework's name), the
    accumulation settings of the modules linked with it (keyword -> literal; None: unknown), and
    whether one of them imports PyTorch."""

    base: Callable[[str], Optional[str]] = lambda qualified: None
    accumulation: Mapping[str, Optional[int]] = field(default_factory=dict)
    pytorch: bool = False  # a module linked with it imports PyTorch (it may wrap a torch optimizer)
    # What an imported builder function returns (a qualified name -> builders.py's reading of it).
    builder: Callable[[str], Optional[Built]] = lambda qualified: None
    # The function or class of another module that a qualified name is, as a call hands it
    # optimizers (constructed.py): that module, its name there, its positional parameters, the
    # keys it keeps them under (`actor_optim`, or a constructor's `self.actor_optim`).
    callee: Callable[[str], Optional[Callee]] = lambda qualified: None
    # What the modules linked with it hand its functions and classes: (function, or "" for a
    # class's field; key) -> the modules it holds.
    incoming: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    # The optimizers an imported class of the project builds on `self` (a qualified name ->
    # `self.optimizer` -> the modules it holds): its subclasses here step them.
    attributes: Callable[[str], Mapping[str, frozenset[str]]] = lambda qualified: {}
    # What a function of another module of the project returns reaches, in terms of its
    # parameters (a qualified name -> its positional parameters and the Reach): provenance.py.
    value: Callable[[str], Optional[Valued]] = lambda qualified: None


ALONE = Outside()  # a module checked on its own (the flake8 plugin, a module outside every group)


def named(name: str) -> Optional[Framework]:
    return next((f for f in FRAMEWORKS if f.name == name), None)


def framework_of(base: str) -> Optional[Framework]:
    """The framework whose class `base` (a qualified name: `lightning.pytorch.LightningModule`,
    `pl.LightningModule` resolved through its import) is."""
    root, name = base.split(".", 1)[0], base.rsplit(".", 1)[-1]
    return next((f for f in FRAMEWORKS if root in f.roots and name in f.classes), None)


def factory_of(qualified: str) -> Optional[Framework]:
    """The framework whose engine `qualified` builds around registered handlers (ignite's)."""
    root, name = qualified.split(".", 1)[0], qualified.rsplit(".", 1)[-1]
    return IGNITE if root in IGNITE.roots and name in IGNITE.classes else None


def accumulation_of(qualified: str) -> Optional[str]:
    """The keyword that sets a framework's accumulation when `qualified` is the constructor that
    takes it (`lightning.Trainer`: accumulate_grad_batches)."""
    root, name = qualified.split(".", 1)[0], qualified.rsplit(".", 1)[-1]
    for framework in FRAMEWORKS:
        constructors, keyword = framework.accumulation
        if root in framework.roots and name in constructors:
            return keyword
    return None


def optimizer_key(framework: Framework, key: str) -> str:
    """A receiver in a hook, as the framework's optimizer when it is one."""
    return framework.optimizer if framework.optimizers.fullmatch(key) else key


def clears_all(framework: Framework, module: str) -> bool:
    """Whether `module.zero_grad()` in a hook clears the framework optimizer's parameters."""
    return framework.modules.fullmatch(module) is not None
