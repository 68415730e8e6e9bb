"""What library calls do to the autograd graph a value carries (provenance.py, issue 45).

A loss's reach is the modules its graph runs through. Most of what a training step reads from
outside its scope is no graph at all: a batch size, a device, a dtype, a shape. It only ever
reaches the graph as the argument of a call that makes a new tensor or reshapes one, and these
calls are the library's: their results carry no graph of those arguments. Works on plain
strings (qualified names as imported, method names). No LibCST here.
"""

from __future__ import annotations

# Functions whose result is a new leaf tensor (or array, or number): no graph, whatever the
# arguments (shapes, fill values, another tensor's size or dtype). `torch.as_tensor` and
# `torch.Tensor.to` are not here: they may hand back their argument itself.
FACTORIES = frozenset(
    """
    zeros ones full empty rand randn randint randperm arange linspace logspace eye tensor
    from_numpy zeros_like ones_like full_like empty_like rand_like randn_like randint_like
    Tensor FloatTensor LongTensor IntTensor BoolTensor ByteTensor DoubleTensor HalfTensor
    """.split()
)
# Modules whose functions return numbers or arrays, never a tensor with a graph.
SCALAR_MODULES = frozenset({"math", "numpy", "random"})
# Builtins whose result is no tensor (a number, a string, a range) or a tensor's count.
SCALAR_BUILTINS = frozenset({"len", "range", "int", "float", "bool", "str", "isinstance", "hasattr", "print",
                             "repr", "format", "id", "hash", "callable"})
# Tensor methods whose result is a new leaf (`x.new_zeros(n)`).
NEW_TENSOR_METHODS = frozenset({"new_zeros", "new_ones", "new_full", "new_empty", "new_tensor"})
# Tensor (and module) methods whose arguments are a device, a dtype, a shape, dimensions or
# indices, or another tensor read only for its type or shape: the result's graph is the
# receiver's alone.
RECEIVER_ONLY = frozenset(
    """
    to cuda cpu float double half bfloat16 long int bool type type_as view view_as reshape
    reshape_as expand expand_as repeat permute transpose squeeze unsqueeze flatten unflatten
    contiguous narrow chunk split roll flip index_select gather size dim numel
    """.split()
)
# Module methods that return the module itself (`model.to(device)`, `net.train()`).
RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "half", "double", "bfloat16",
                           "requires_grad_", "to_empty"})
# An AMP gradient scaler's method that hands back its argument scaled (`scaler.scale(loss)`).
SCALER_PASS = "scale"


def makes_leaf(qualified: str) -> bool:
    """A call of this function (qualified as imported) returns a value with no graph; a deep
    copy is made of new leaves (a module's copy has parameters of its own)."""
    if qualified == "copy.deepcopy":
        return True
    root, _, name = qualified.rpartition(".")
    if not root:
        return qualified in SCALAR_BUILTINS
    head = root.split(".", 1)[0]
    return head in SCALAR_MODULES or (head == "torch" and name in FACTORIES)


# torch.nn classes built over other modules: calling one runs what it was handed.
_NN_WRAPPERS = frozenset({"Sequential", "ModuleList", "ModuleDict", "DataParallel", "DistributedDataParallel",
                          "SyncBatchNorm", "Module"})


def runs_only_itself(qualified: str) -> bool:
    """An instance of this class (qualified as imported), called, reaches only its own parameters
    and its arguments' graphs: a loss or a layer of torch.nn (`nn.BCELoss()`), not a container or
    a wrapper of modules it was handed."""
    root, _, name = qualified.rpartition(".")
    return root in ("torch.nn", "torch.nn.modules") and name not in _NN_WRAPPERS and not name.startswith("_")
