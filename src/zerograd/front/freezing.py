"""Which statements stop a module's parameters from requiring gradients (rules.md section 5:
a backward never reaches a frozen module; provenance.py freezes what these name): a loop over
its parameters that sets `requires_grad`, a comprehension run for that effect, and a function of
ours whose body is such a loop over one of its parameters (`toggle_grad(D, False)`), and a context
manager of ours whose `__enter__` is one over what its constructor kept (`FreezeParameters`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Optional, Protocol, Union

import libcst as cst

from ..analysis.keys import related, within
from ..analysis.model import Reach
from .naming import binds_self, block_of, bound_parameters, dotted, positional

# A freeze: the module written, and whether it is trainable after (None: not known).
Freeze = tuple[cst.BaseExpression, Optional[bool]]


def flag(node: Optional[cst.BaseExpression], default: Optional[bool]) -> Optional[bool]:
    """`True` / `False` as written; `default` when absent; None when computed."""
    if node is None:
        return default
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def loop_freezes(node: cst.For, outer: Optional[tuple[cst.BaseExpression, cst.BaseExpression]] = None) -> list[Freeze]:
    """`for p in D.parameters(): p.requires_grad = False` (or `p.requires_grad_(False)`);
    `outer`: the target and the list of an enclosing loop over modules, which the loop's
    `net.parameters()` then stands for."""
    net = _owner(node.iter, ("parameters", "named_parameters"))
    if net is None:
        return []
    if outer is not None:
        if not net.deep_equals(outer[0]):
            return []
        net = outer[1]
    return [(net, flag(value, True if method else None)) for value, method in _settings(node.body, node.target)]


def gathered_freezes(node: cst.For, gathered: cst.BaseExpression) -> list[Freeze]:
    """`for p in q_params: p.requires_grad = False` where `q_params` holds the parameters of
    `gathered`'s modules (`list(critic.parameters())`, `itertools.chain(q1.parameters(), ...)`)."""
    nets = [c.func.value for c in _calls(gathered)
            if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("parameters", "named_parameters")]
    settings = [flag(value, True if method else None) for value, method in _settings(node.body, node.target)]
    return [(net, setting) for net in nets for setting in settings]


def _calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    if isinstance(node, cst.Call):
        yield node
    for child in node.children:
        yield from _calls(child)


def comprehension_freezes(node: Union[cst.ListComp, cst.GeneratorExp]) -> list[Freeze]:
    """`[p.requires_grad_(False) for p in D.parameters()]`, run for its effect."""
    loop = node.for_in
    if loop.inner_for_in is not None or loop.ifs:
        return []
    body = cst.IndentedBlock([cst.SimpleStatementLine([cst.Expr(node.elt)])])
    return loop_freezes(cst.For(target=loop.target, iter=loop.iter, body=body))


def freezer(function: cst.FunctionDef) -> Optional[tuple[str, Union[str, bool]]]:
    """(the module parameter, the flag parameter or a literal) of a function whose own loop over
    one of its parameters' `.parameters()` sets `requires_grad`, or whose loop over a parameter
    holding modules does so for each (`for net in nets: if net is not None: for p in
    net.parameters(): p.requires_grad = flag`, pix2pix's `set_requires_grad`)."""
    names = set(positional(function))
    for statement in block_of(function.body):
        if not isinstance(statement, cst.For):
            continue
        net = _owner(statement.iter, ("parameters",))
        if isinstance(net, cst.Name) and net.value in names:
            found = _set_to(statement, names)
            if found is not None:
                return net.value, found
        elif isinstance(statement.iter, cst.Name) and statement.iter.value in names:
            for inner in _loops(statement.body):
                owner = _owner(inner.iter, ("parameters",))
                found = _set_to(inner, names) if owner is not None and owner.deep_equals(statement.target) else None
                if found is not None:
                    return statement.iter.value, found
    return None


def _set_to(loop: cst.For, names: set[str]) -> Optional[Union[str, bool]]:
    """What a loop over parameters sets `requires_grad` to: a parameter's name or a literal."""
    for value, method in _settings(loop.body, loop.target):
        if isinstance(value, cst.Name) and value.value in names:
            return value.value
        literal = flag(value, True if method else None)
        if literal is not None:
            return literal
    return None


def _loops(body: cst.BaseSuite) -> Iterator[cst.For]:
    """The loops of a body, its own or under an `if` (`if net is not None:`)."""
    for statement in block_of(body):
        if isinstance(statement, cst.For):
            yield statement
        elif isinstance(statement, cst.If):
            yield from _loops(statement.body)


# Calls a helper may make that leave every parameter's `requires_grad` as it was.
_INERT = frozenset({"isinstance", "len", "list", "tuple", "print", "range", "enumerate", "zip"})


def sets_module_attribute(function: cst.FunctionDef) -> bool:
    """A function whose only `requires_grad` writes go to an attribute of the modules themselves
    (`net.requires_grad = flag`), which freezes nothing: PyTorch reads the flag of each parameter,
    not of a module. No call of its can reach the parameters (no `.parameters()`, no
    `requires_grad_()`, no other function)."""
    writes = False
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and (not isinstance(node.func, cst.Name) or node.func.value not in _INERT):
            return False
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute):
            writes = writes or node.target.attr.value == "requires_grad"
        stack.extend(node.children)
    return writes


def context_freezer(init: Optional[cst.FunctionDef], enter: Optional[cst.FunctionDef]) -> Optional[tuple[str, bool]]:
    """(the constructor parameter, whether trainable inside) of a context manager of ours whose
    `__enter__` sets `requires_grad` of the parameters of modules its constructor keeps
    (dreamer-pytorch's `with FreezeParameters([critic]):`: `self.modules = modules`, then `for m
    in self.modules: for p in m.parameters(): p.requires_grad = False`)."""
    if init is None or enter is None:
        return None
    kept = {f"self.{t.target.attr.value}": small.value.value for statement in block_of(init.body)
            for small in (statement.body if isinstance(statement, cst.SimpleStatementLine) else ())
            if isinstance(small, cst.Assign) and isinstance(small.value, cst.Name)
            for t in small.targets if isinstance(t.target, cst.Attribute)
            and isinstance(t.target.value, cst.Name) and t.target.value.value == "self"}
    for statement in block_of(enter.body):
        if not isinstance(statement, cst.For):
            continue
        held = _dotted(statement.iter)
        gathered = _gathered(statement.iter)  # `for p in get_parameters(self.modules):`
        loops = [(statement, None)] if _owner(statement.iter, ("parameters",)) is not None or gathered else [
            (inner, statement.target) for inner in block_of(statement.body) if isinstance(inner, cst.For)]
        for loop, element in loops:
            net = gathered or _owner(loop.iter, ("parameters",))
            if net is None or (element is not None and not net.deep_equals(element)):
                continue
            name = _dotted(net) if element is None else held
            for value, method in _settings(loop.body, loop.target):
                literal = flag(value, True if method else None)
                if name in kept and literal is not None and kept[name] in positional(init):
                    return kept[name], literal
    return None


def _gathered(it: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`self.modules` of `get_parameters(self.modules)`: a helper's call over one kept attribute,
    whose results the loop sets `requires_grad` of (their parameters)."""
    if (isinstance(it, cst.Call) and len(it.args) == 1 and not it.args[0].star and it.args[0].keyword is None
            and _dotted(it.args[0].value).startswith("self.")):
        return it.args[0].value
    return None


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _owner(it: cst.BaseExpression, methods: tuple[str, ...]) -> Optional[cst.BaseExpression]:
    """`D` of `D.parameters()`."""
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value in methods:
        return it.func.value
    return None


def _settings(body: cst.BaseSuite, target: cst.BaseExpression) -> Iterator[tuple[Optional[cst.BaseExpression], bool]]:
    """What a loop body's own statements set `requires_grad` to: (the value, whether by the
    method `target.requires_grad_(value)`, whose value may be left out)."""
    for statement in block_of(body):
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Attribute)
                    and small.targets[0].target.attr.value == "requires_grad"):
                yield small.value, False
            elif (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
                  and isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value == "requires_grad_"
                  and small.value.func.value.deep_equals(target)):
                yield (small.value.args[0].value if small.value.args else None), True


def gathers_parameters(value: cst.BaseExpression) -> bool:
    """A list of every parameter of modules (`list(critic.parameters())`, `list(chain(q1.parameters(),
    q2.parameters()))`, sums of such): no comprehension (a filter keeps a part), and no bare
    generator (`critic.parameters()` or `chain(...)`, used up by the optimizer built over it)."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        return gathers_parameters(value.left) and gathers_parameters(value.right)
    return (isinstance(value, cst.Call) and dotted(value.func) in ("list", "tuple") and len(value.args) == 1
            and not value.args[0].star and _parameters(value.args[0].value))


def _parameters(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "parameters":
        return True
    return (isinstance(value, cst.Call) and (dotted(value.func) or "").rsplit(".", 1)[-1] == "chain" and bool(value.args)
            and all(not a.star and _parameters(a.value) for a in value.args))


class _Classes(Protocol):
    """What Freezes reads of provenance.Names."""

    @property
    def contexts(self) -> Callable[[str], Optional[tuple[cst.FunctionDef, str, bool]]]: ...

    @property
    def lists(self) -> Callable[[Optional[cst.FunctionDef]], dict[str, cst.List]]: ...


class Freezes:
    """What a trace keeps frozen (provenance.Tracer): the modules whose parameters record no
    graph while they are, set by the forms above, a freezing helper or context manager of ours,
    and Lightning's toggles."""

    frozen: set[str]
    toggled: set[str]  # what the last `toggle_optimizer` froze
    optimizers: Mapping[str, frozenset[str]]  # what each optimizer holds (a toggle's)
    names: _Classes
    resolve: Optional[Callable[[cst.BaseExpression], Optional[tuple[cst.FunctionDef, Optional[str], object]]]]
    function: Optional[cst.FunctionDef]
    key: Callable[[cst.BaseExpression], str]

    def _forms(self, node: cst.BaseExpression) -> set[str]:
        raise NotImplementedError

    def _context_freeze(self, call: cst.Call) -> set[str]:
        """`with FreezeParameters([critic]):` (Names.contexts): what the block newly freezes."""
        found = self.names.contexts(dotted(call.func) or "")
        bound = bound_parameters(found[0], call.args, True) if found is not None else None
        if found is None or bound is None or found[1] not in bound or found[2]:
            return set()
        before = set(self.frozen)
        self._freeze([bound[found[1]]], False)
        return self.frozen - before

    def _helper_freeze(self, call: cst.Call) -> bool:
        """A function of ours that sets what its module parameter's parameters require
        (`toggle_grad(D, False)`: `for p in model.parameters(): p.requires_grad_(flag)`); whether
        its body decided it (a freeze, or `net.requires_grad = flag`, which freezes nothing)."""
        callee = self.resolve(call.func) if self.resolve is not None else None
        if callee is None:
            return False
        found = freezer(callee[0])
        if found is None:
            return sets_module_attribute(callee[0])
        bound = bound_parameters(callee[0], call.args, binds_self(callee[0], callee[1]))
        if bound is None or found[0] not in bound:
            return False
        module, setting = found
        value = setting if isinstance(setting, bool) else flag(bound[setting], None) if setting in bound else None
        self._freeze([bound[module]], value)
        return True

    def _toggle(self, optimizer: str, on: bool) -> None:
        """Lightning's `self.toggle_optimizer(opt)`: every parameter of the other optimizers that
        `opt` does not hold stops requiring gradients until `untoggle_optimizer` restores it."""
        mine = self.optimizers.get(optimizer)
        if on and mine:
            others = {m for key, held in self.optimizers.items() if key != optimizer for m in held
                      if not related(m, mine)}
            self.toggled = others - self.frozen
            self.frozen |= self.toggled
        elif not on:
            self.frozen -= self.toggled
            self.toggled = set()

    def _freezes(self, found: list[Freeze]) -> None:
        for net, trainable in found:
            self._freeze([net], trainable)

    def _freeze(self, nets: list[cst.BaseExpression], trainable: Optional[bool]) -> None:
        if trainable is None:
            return
        for net in nets:
            if isinstance(net, (cst.List, cst.Tuple)):
                self._freeze([e.value for e in net.elements], trainable)
                continue
            if isinstance(net, cst.BinaryOperation) and isinstance(net.operator, cst.Add):  # `modules + [value]`
                self._freeze([net.left, net.right], trainable)
                continue
            listed = self.names.lists(self.function).get(self.key(net)) if isinstance(net, cst.Attribute) else None
            if listed is not None:
                self._freeze([listed], trainable)
                continue
            for module in self._forms(net):
                if trainable:
                    self.frozen = {m for m in self.frozen if not within(m, module)}
                else:
                    self.frozen.add(module)

    def _unfrozen(self, value: Reach) -> Reach:
        if not self.frozen:
            return value
        kept = frozenset(m for m in value.modules if not any(within(m, f) for f in self.frozen))
        return Reach(kept, value.cut | (value.modules - kept), value.opaque, value.chained)
