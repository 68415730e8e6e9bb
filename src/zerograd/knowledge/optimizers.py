"""What is an optimizer, and what only looks like one (rules.md section 2).

Works on plain strings: receivers as written (`self.optimizer`, `opt_d`, `optimizers["g"]`) and
callees as qualified names resolved from the module's imports. No LibCST here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Optional

from ..analysis.keys import rebase, root_of, within  # noqa: F401  (re-exported)
from ..analysis.model import Settings

# Calls that are events, or clear gradients by hand: a function without any (directly or through
# the functions it calls) is neither built into IR nor summarised.
# The methods whose call is a BACKWARD (scopes.py); a function called by a name ending in
# `backward` may be `torch.autograd.backward`.
BACKWARD_METHODS = frozenset({"backward", "manual_backward"})
EVENT_METHODS = frozenset({"backward", "manual_backward", "step", "zero_grad", "clear_grad", "clear_gradients",
                           "optimizer_step", "zero_"})

# Optimizer classes outside torch.optim that training code commonly builds directly.
KNOWN_OPTIMIZER_CLASSES = frozenset(
    """
    SGD Adam AdamW Adagrad Adadelta Adamax NAdam RAdam RMSprop Rprop ASGD LBFGS SparseAdam
    Adafactor Lion LAMB Lamb FusedAdam FusedLAMB FusedSGD FusedNovoGrad FusedLamb DeepSpeedCPUAdam
    Adam8bit AdamW8bit PagedAdamW PagedAdamW8bit PagedAdamW32bit Lion8bit PagedLion SGD8bit
    Adan AdaBelief Novograd NovoGrad Lookahead Ranger RAdamW Shampoo SophiaG Prodigy DAdaptAdam
    DAdaptSGD Muon AdamWScheduleFree SGDScheduleFree Adamax8bit AdEMAMix Came CAME Apollo GaLoreAdamW
    """.split()
)

# Calls that hand back an optimizer (Lightning's self.optimizers(), factory helpers).
_FACTORY = re.compile(r"(?:^|_)(?:create|build|get|make|init|setup|configure|new)_?optim(?:izer)?s?$", re.I)
_OPTIMIZER_NAME = re.compile(r"(?i:optim)|(?:^|_)[Oo]pt(?:$|_|[A-Z0-9])")
# Receivers whose .step() is never an optimizer step.
_NOT_OPTIMIZER_NAME = re.compile(
    r"sched|(?:^|_)lr(?:$|_)|env|profil|engine|ema(?:$|_)|swa|scaler|pbar|progress|bar$|tqdm|"
    r"timer|writer|logger|sampler|loader|trainer|callback|state$|scaler|annealer|warmup|stepper",
    re.I,
)
_ENGINE_ROOTS = ("deepspeed.", "gym.", "gymnasium.", "torch.optim.lr_scheduler.", "torch.optim.swa_utils.")
# Libraries with optimizer classes of the same names that are not PyTorch optimizers: a class
# imported from them is not a torch optimizer (rules.md v2 section 2, import provenance).
NON_TORCH_ROOTS = frozenset(
    "warp warp_nn mxnet gluon jax optax flax tensorflow tf keras paddle mindspore oneflow chainer "
    "cupy numpy autograd tinygrad micrograd mlx sklearn".split()
)
# Autograd systems whose backward() does not write PyTorch's .grad (rules.md section 4).
OTHER_AUTOGRAD_ROOTS = frozenset("mxnet warp jax tensorflow paddle mindspore chainer tinygrad micrograd mlx".split())
# Functions that clear gradients by name (`zero_grad(model_params)` imported from a helper
# module): an unresolved call of one is a possible clear.
CLEARING_FUNCTIONS = frozenset({"zero_grad", "zero_grads", "zero_gradients", "clear_grad", "clear_grads",
                                "reset_grad", "reset_grads", "zero_grad_"})
# Libraries built on PyTorch: importing one is evidence of PyTorch training code.
TORCH_FAMILY = frozenset(
    "torch torchvision torchaudio torchtext lightning pytorch_lightning lightning_fabric transformers "
    "accelerate deepspeed fairseq timm ignite skorch fastai apex bitsandbytes peft trl diffusers "
    "torchmetrics mmengine mmcv composer speechbrain torchtune pytorch_pfn_extras torch_xla "
    "torch_geometric dgl".split()
)
# Numeric libraries with no PyTorch `.grad`: with one of them and nothing of the family above, a
# module's backward() is somebody else's.
NON_TORCH_NUMERIC = frozenset("numpy cupy scipy".split()) | OTHER_AUTOGRAD_ROOTS
_FOREIGN_TAPES = re.compile(r"(?:^|\.)(?:Tape|GradientTape)$")


def last_segment(receiver: str) -> str:
    """`self.optimizers["g"]` -> `optimizers`; `opt_d` -> `opt_d`; an attribute of an entry is
    that attribute: `self.agents[*].optimizer` -> `optimizer` (seac's `curr_agent.optimizer`).
    The name after the last dot outside any subscript."""
    depth, outside = 0, []
    for char in receiver:
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif depth == 0:
            outside.append(char)
    return "".join(outside).rsplit(".", 1)[-1]


def entry_name(receiver: str) -> str:
    """The string key an entry is picked by: `state["optimizer"]` -> `optimizer` ("" if none)."""
    named = _NAMED_ENTRY.search(receiver)
    return named.group(1) if named else ""


def holder_name(receiver: str) -> str:
    """The name of what holds a receiver whose own name says nothing: a wrapper's attribute
    (`self.optimizer_model.instance` -> `optimizer_model`); "" if its own name says something."""
    parts = receiver.split(".")
    if "[" in receiver or len(parts) < 2 or _OPTIMIZER_NAME.search(parts[-1]) or _NOT_OPTIMIZER_NAME.search(parts[-1]):
        return ""
    return parts[-2]


_NAMED_ENTRY = re.compile(r"""\[["']([A-Za-z_][A-Za-z_0-9]*)["']\]$""")


def named_optimizer(receiver: str) -> bool:
    """`optimizer`, `self.opt_g`: a receiver whose own name says optimizer."""
    return bool(_OPTIMIZER_NAME.search(last_segment(receiver)))


def is_optimizer_callee(qualified: str) -> bool:
    """True when calling `qualified` builds or returns an optimizer."""
    if qualified.startswith(_ENGINE_ROOTS) or qualified.split(".", 1)[0] in NON_TORCH_ROOTS:
        return False
    last = qualified.rsplit(".", 1)[-1]
    if qualified.startswith("torch.optim.") and last[:1].isupper():
        return True
    return last in KNOWN_OPTIMIZER_CLASSES or bool(_FACTORY.search(last)) or qualified.endswith(
        "self.optimizers"
    )


def is_engine_callee(qualified: str) -> bool:
    """True when calling `qualified` builds something whose .step() is not an optimizer step."""
    return qualified.startswith(_ENGINE_ROOTS)


def is_foreign_autograd(qualified: str) -> bool:
    """A Warp or TensorFlow tape: its backward() is not PyTorch's."""
    return qualified.split(".", 1)[0] in OTHER_AUTOGRAD_ROOTS or bool(_FOREIGN_TAPES.search(qualified))


def is_scaler_callee(qualified: str) -> bool:
    """AMP gradient scalers: `scaler.step(optimizer)` steps that optimizer."""
    return qualified.rsplit(".", 1)[-1].endswith("GradScaler")


# What a builder function returns, position by position (front/builders.py): an optimizer's
# module sets, a visible non-optimizer (the empty set), or unknown (None); with its signature
# (positional parameters, every parameter's name), which names the sets' roots.
Slot = Optional[frozenset[frozenset[str]]]
Signature = tuple[tuple[str, ...], frozenset[str]]
Built = tuple[Signature, tuple[Slot, ...]]


@dataclass
class OptimizerTable:
    """Per-module knowledge: assignments seen, module links, and the user's name patterns."""

    settings: Settings = field(default_factory=Settings)
    built: set[str] = field(default_factory=set)  # receivers assigned an optimizer
    engines: set[str] = field(default_factory=set)  # receivers assigned a non-optimizer
    scalers: set[str] = field(default_factory=set)  # receivers assigned a GradScaler
    links: dict[str, set[str]] = field(default_factory=dict)  # optimizer -> modules it was built from
    # Each construction's modules, by the scope that builds it (id of its function, 0: the module
    # body): which sets an optimizer holds where one name is built over different modules.
    builds: dict[tuple[int, str], set[frozenset[str]]] = field(default_factory=dict)
    # (scope, optimizer) where `optimizer.add_param_group(...)` hands it more parameters
    grown: set[tuple[int, str]] = field(default_factory=set)
    # (function, parameter) -> the modules every call hands it an optimizer over, as the function
    # names them (settle._handed_parameters): the parameter's own, whatever its name is elsewhere.
    handed: dict[tuple[int, str], frozenset[str]] = field(default_factory=dict)
    multiple_evaluations: set[str] = field(default_factory=set)  # LBFGS: evaluates a closure many times
    foreign: set[str] = field(default_factory=set)  # tapes of other autograd systems
    replaced: set[str] = field(default_factory=set)  # receivers whose step or zero_grad was reassigned
    tensors: set[str] = field(default_factory=set)  # names of tensors of their own (`patch`), not modules

    def _user(self, receiver: str, patterns: tuple[str, ...]) -> bool:
        name = last_segment(receiver)
        return any(fnmatchcase(receiver, p) or fnmatchcase(name, p) for p in patterns)

    def is_excluded(self, receiver: str, also_cleared_and_stepped: bool = False) -> bool:
        """Never an optimizer: the user says so, or it was built or is named as something else.
        Use beats a name: a `trainer` that is both stepped and cleared is an optimizer."""
        if self._user(receiver, self.settings.not_optimizer_names) or receiver in self.replaced:
            return True
        if receiver in self.built or self._user(receiver, self.settings.optimizer_names):
            return False
        if also_cleared_and_stepped and receiver not in self.engines and receiver not in self.scalers:
            return False
        # `state["optimizer"]`: the entry's name says more than the container's.
        named = bool(_OPTIMIZER_NAME.search(entry_name(receiver)))
        return receiver in self.engines or receiver in self.scalers or (
            bool(_NOT_OPTIMIZER_NAME.search(last_segment(receiver))) and not named
        )

    def is_optimizer(self, receiver: str, also_cleared_and_stepped: bool = False) -> bool:
        """rules.md section 2: constructor, name, user pattern, or both stepped and cleared."""
        if self.is_excluded(receiver, also_cleared_and_stepped):
            return False
        if receiver in self.built or self._user(receiver, self.settings.optimizer_names):
            return True
        names = (last_segment(receiver), entry_name(receiver), holder_name(receiver))
        return any(_OPTIMIZER_NAME.search(n) for n in names if n) or also_cleared_and_stepped

    def is_scaler(self, receiver: str) -> bool:
        return receiver in self.scalers or "scaler" in last_segment(receiver).lower()

    def constructions(self, scope: int, key: str) -> set[frozenset[str]]:
        """The module sets `key` may hold in `scope`: built there, or handed there, else built
        anywhere in the module."""
        here = self.builds.get((scope, key))
        if here:
            return here
        if (scope, key) in self.handed:
            return {self.handed[(scope, key)]}
        return {modules for (_, built), sets in self.builds.items() if built == key for modules in sets}

    def optimizers_of_module(self, module: str, scope: int = 0) -> list[str]:
        """Optimizers whose parameters all lie in `module` (built from it or from a part of it),
        with those handed to the function `scope` over it."""
        found = {o for o, modules in self.links.items() if any(within(m, module) for m in modules)}
        found |= {o for (where, o), modules in self.handed.items() if where == scope and any(within(m, module) for m in modules)}
        return sorted(found)
