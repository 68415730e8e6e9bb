"""What an optimizer's constructor hands it, in module names (rules.md section 4, parameter
sets): `Adam(chain(g.parameters(), d.parameters()))` holds `g` and `d`; one built over names
(issue 47) holds what the scope bound them to, a list of a module's parameters kept in a
variable (`params = list(m.parameters())`: `m`; filtered, `[p for p in m.parameters() if
p.ndim > 1]`, a part of `m` of its own, `m[params]`) or a tensor of its own
(`patch = torch.zeros(3, requires_grad=True)`: the set `patch`, which no module's clear reaches).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Callable, Optional

import libcst as cst

from ..analysis.keys import rebase, root_of, within
from ..knowledge.values import FACTORIES, RETURNS_SELF
from .naming import assigned_names, block_of, receiver_key, statements_of
from .walk import calls_in, nodes_in

# Calls that make a tensor of their own, which no module holds (an adversarial patch, a latent).
_FRESH = FACTORIES | {"Parameter"}
_TORCH = ("torch", "torch.nn", "nn", "torch.nn.parameter")
# What a call of a function of ours returns, in parameter sets, read in a scope (front/returned.py).
Returned = Callable[[int, cst.Call], tuple[str, ...]]
_COPIES = frozenset({"list", "set", "tuple", "iter"})  # builtins that hand back what they are given


def parameters_owners(value: cst.BaseExpression) -> list[str]:
    """Every module whose `.parameters()` (or `.named_parameters()`) an expression holds."""
    return [receiver_key(c.func.value) for c in calls_in(value)
            if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("parameters", "named_parameters")]


class Holdings:
    """The names each scope bound to parameters or to a tensor of its own, so far in the pass
    (a name rebound to anything else is forgotten); only such names are kept. An object's
    attributes (`self.log_alpha = nn.Parameter(...)`) belong to its class, whichever method
    binds them: the scope the caller gives for `self.` keys."""

    def __init__(self, qualify: Callable[[cst.BaseExpression], Optional[str]]) -> None:
        self.qualify = qualify
        self.held: dict[tuple[int, str], tuple[str, ...]] = {}
        self.tensors: set[str] = set()  # names bound somewhere to a tensor of their own
        self.stored: dict[int, dict[str, str]] = {}  # per method: its parameters kept as attributes

    def rooted(self, scope: int, owners: Sequence[str]) -> list[str]:
        """`owners` as the object names them: in a method that keeps its parameter `actor` as
        `self.actor`, `actor.encoder` is `self.actor.encoder` (stored_parameters)."""
        stored = self.stored.get(scope)
        if not stored:
            return list(owners)
        return [rebase(o, root_of(o), stored[root_of(o)]) or o if root_of(o) in stored else o for o in owners]

    def bind(self, scope: int, name: str, value: cst.BaseExpression, function: Optional[int] = None,
             shared: Optional[int] = None) -> None:
        """`name` (in `scope`) is bound to `value`, read in `function` (default: `scope`)."""
        reading = scope if function is None else function
        selected = _selection(value) if _filtered(value) else None
        if selected is not None:  # `params = [p for p in net.parameters() if p.ndim > 1]`: a part
            owners = [f"{o}[{name}]" for o in self.owners(reading, selected[0], shared)]
        else:
            owners = list(self.owners(reading, value, shared))
            if owners and _filtered(value):
                owners = [f"{o}[{name}]" for o in owners]
        if not owners and isinstance(value, cst.Call) and self._fresh(value):
            owners = [name]
            self.tensors.add(name)
        if owners or (isinstance(value, cst.List) and not value.elements):
            self.held[(scope, name)] = tuple(owners)  # `params = []`: known, and empty so far
        else:
            self.held.pop((scope, name), None)

    def owners(self, scope: int, value: cst.BaseExpression, shared: Optional[int] = None,
               returned: Optional[Returned] = None) -> tuple[str, ...]:
        """The modules whose parameters `value` holds, read in `scope` (empty: none known): those
        whose `.parameters()` it calls, what a name it copies holds (`list(params)`), or a part of
        its own for a difference (`set(vae.parameters()) - set(vae.discr.parameters())` is
        `vae[-vae.discr]`: within `vae`, apart from `vae.discr`)."""
        value = _copied(value)
        selected = _selection(value)
        if selected is not None:
            source, test = selected
            found = self.owners(scope, source, shared, returned)
            # A selection by another test is a part of its own (weights apart from biases:
            # `Muon([p ... if p.ndim >= 2])` beside `AdamW([p ... if p.ndim < 2])`).
            return tuple(f"{o}[{_part(test)}]" for o in found) if test is not None else found
        if type(value) is cst.BinaryOperation and type(value.operator) is cst.Subtract:
            whole = self.owners(scope, value.left, shared, returned)
            removed = self.owners(scope, value.right, shared, returned)
            if not whole or not removed or not all(any(within(r, w) and r != w for w in whole) for r in removed):
                return ()
            return tuple(f"{w}[-{','.join(r for r in removed if within(r, w))}]"
                         if any(within(r, w) for r in removed) else w for w in whole)
        if type(value) is cst.Name or type(value) is cst.Attribute:
            key = receiver_key(value)
            held = self.held.get((shared if key.startswith("self.") and shared is not None else scope, key))
            if held is not None:
                return held
        found = tuple(self.rooted(scope, parameters_owners(value)))
        if not found and returned is not None and type(value) is cst.Call:
            return returned(scope, value)  # `self.actor_parameters()`: what a function of ours returns
        return found

    def grow(self, scope: int, name: str, value: cst.BaseExpression, looping: tuple[str, ...], picking: bool) -> None:
        """`params.append(p)` in a loop over `net.parameters()` (`looping`: `net`), or of a value
        that holds some (`{"params": net.fc.parameters()}`): a list known so far holds more;
        anything else appended makes it unknown. Under a branch of the loop (`picking`: `if
        p.ndim == 1:`) it gathers a part of `net` of its own, `net[name]`, which a clear of `net`
        reaches and no other list's part overlaps (transformer-xl's dense and sparse lists)."""
        held = self.held.get((scope, name))
        if held is None:
            return
        owners = self.rooted(scope, parameters_owners(value) or [f"{o}[{name}]" if picking else o for o in looping])
        if owners:
            self.held[(scope, name)] = (*held, *(o for o in owners if o not in held))
        else:
            del self.held[(scope, name)]

    def _fresh(self, call: cst.Call) -> bool:
        """A tensor of its own: made by a factory (`torch.zeros(3).requires_grad_()`), or
        detached from what it was computed from (`x.detach().clone()`)."""
        return _fresh_tensor(self.qualify(_innermost(call).func) or "") or _detached(call)

    def of_construction(self, scope: int, call: cst.Call, shared: Optional[int] = None,
                        returned: Optional[Returned] = None) -> list[str]:
        """The modules an optimizer's constructor hands it: those its parameters argument holds
        (`Adam(model.parameters())`, `Adam([patch])`, `SGD(params)`, `[{"params": enc_params},
        ...]`, `LBFGS([self.temperature])`, `Adam(list(vae_params))`) when every item is known to
        hold some; else those whose parameters any argument holds, unless it takes a difference
        it cannot read. `shared`: the scope of the object's attributes."""
        found: list[str] = []
        for item in _items(call):
            held = self.owners(scope, item, shared, returned)
            if not held:
                found = []
                break
            found += held
        if found or any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Subtract for n in nodes_in(call)):
            return found
        return self.rooted(scope, parameters_owners(call))


def stored_parameters(function: cst.FunctionDef, parameters: Sequence[str]) -> dict[str, str]:
    """`self.actor = actor` in a method: while it runs, the parameter and the attribute are one
    object, so what it builds over `actor.parameters()` holds `self.actor`, the module the
    object's other methods call (identity by binding, issue 45). Only a parameter kept in one
    attribute and never rebound in the method."""
    if not parameters or parameters[0] != "self":
        return {}
    names = set(parameters[1:])
    stored: dict[str, set[str]] = {}
    for statement in statements_of(block_of(function.body)):
        if not isinstance(statement, (cst.Assign, cst.AnnAssign)) or statement.value is None:
            continue
        targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
        for target, value in _pairs(targets, statement.value):
            while (type(value) is cst.Call and type(value.func) is cst.Attribute
                   and value.func.attr.value in RETURNS_SELF):
                value = value.func.value  # `self.actor = actor.to(device)` keeps the same module
            key = receiver_key(target)
            if (type(value) is cst.Name and value.value in names and type(target) is cst.Attribute
                    and key.startswith("self.") and key.count(".") == 1):
                stored.setdefault(value.value, set()).add(key)
    if not stored:
        return {}
    rebound = assigned_names(block_of(function.body))
    return {name: next(iter(keys)) for name, keys in stored.items() if len(keys) == 1 and name not in rebound}


def _pairs(targets: Sequence[cst.BaseExpression], value: cst.BaseExpression
           ) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Each target with the value it is assigned: `self.actor, self.critic = actor, critic`
    element by element."""
    found = []
    for target in targets:
        if (isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List))
                and len(target.elements) == len(value.elements)
                and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements))):
            found += [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
        else:
            found.append((target, value))
    return found


def _items(call: cst.Call) -> list[cst.BaseExpression]:
    """What the constructor's parameters argument lists: the argument, the elements of a list
    or tuple, and of a param group `{"params": x}` its `x`."""
    args = [a.value for a in call.args if a.keyword is None or a.keyword.value == "params"][:1]
    items: list[cst.BaseExpression] = []
    for arg in args:
        for element in arg.elements if isinstance(arg, (cst.List, cst.Tuple)) else [arg]:
            value = element.value if isinstance(element, cst.BaseElement) else element
            if isinstance(value, cst.Dict):
                value = next((e.value for e in value.elements if isinstance(e, cst.DictElement)
                              and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == "params"), value)
            items.append(value)
    return items


def _copied(value: cst.BaseExpression) -> cst.BaseExpression:
    """What a copy of parameters is made from: `list(params)`, `tuple(params)` are `params`."""
    while (type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in _COPIES
           and len(value.args) == 1 and not value.args[0].star):
        value = value.args[0].value
    return value


def _selection(value: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, Optional[cst.BaseExpression]]]:
    """What a selection of parameters picks from, and by which test: `[p for p in params if
    p.ndim > 1]` and `filter(lambda p: p.ndim > 1, params)` are `params` and `p.ndim > 1` (`[p for
    n, p in m.named_parameters() if "bias" in n]`: `m.named_parameters()`, `"bias" in n`); no
    test, or only `p.requires_grad` (the trainable part: the parameters a loss can give
    gradients), is None."""
    test: Optional[cst.BaseExpression] = None
    if (type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "filter"
            and len(value.args) == 2 and not any(a.star or a.keyword for a in value.args)):
        picker = value.args[0].value
        test = picker.body if isinstance(picker, cst.Lambda) else picker
        source = value.args[1].value
    elif (isinstance(value, (cst.ListComp, cst.GeneratorExp, cst.SetComp)) and value.for_in.inner_for_in is None
          and type(value.elt) is cst.Name and value.elt.value in _bound(value.for_in.target)
          and len(value.for_in.ifs) <= 1):
        test = value.for_in.ifs[0].test if value.for_in.ifs else None
        source = value.for_in.iter
    else:
        return None
    if isinstance(test, cst.Attribute) and test.attr.value == "requires_grad":
        test = None
    return source, test


def _bound(target: cst.BaseExpression) -> set[str]:
    """The names a comprehension's target binds: `p`, or `n` and `p` of `n, p` (named_parameters)."""
    if type(target) is cst.Name:
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {e.value.value for e in target.elements if type(e.value) is cst.Name}
    return set()


def _part(test: cst.BaseExpression) -> str:
    """A part's name, the same for the same test: `sel` and a digest of its text."""
    return "sel" + hashlib.sha1(cst.Module([]).code_for_node(test).encode()).hexdigest()[:6]


def _fresh_tensor(qualified: str) -> bool:
    head, _, last = qualified.rpartition(".")
    return last in _FRESH and head in _TORCH


def _filtered(value: cst.BaseExpression) -> bool:
    """A comprehension that keeps only some of what it iterates."""
    if not isinstance(value, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        return False
    loop: Optional[cst.CompFor] = value.for_in
    while loop is not None:
        if loop.ifs:
            return True
        loop = loop.inner_for_in
    return False


def _detached(call: cst.Call) -> bool:
    """A method chain with a `.detach()` in it."""
    while isinstance(call.func, cst.Attribute):
        if call.func.attr.value in ("detach", "detach_"):
            return True
        if not isinstance(call.func.value, cst.Call):
            return False
        call = call.func.value
    return False


def _innermost(call: cst.Call) -> cst.Call:
    """`torch.zeros(3).to(device).requires_grad_()` -> `torch.zeros(3)`."""
    while isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call):
        call = call.func.value
    return call
