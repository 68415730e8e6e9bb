"""What the one pass (facts.Collector) learns of classes and of calls by name: the class a
receiver is an instance of, what a constructor keeps (`self.opt = optimizer`), which attributes
hold functions or plain values, and how each call by name hands its arguments over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Optional

import libcst as cst

from ..knowledge.values import makes_leaf
from .displays import tuple_pairs
from .moduleinfo import ClassInfo, FunctionFacts, ModuleInfo
from .naming import block_of, dotted, receiver_key, statements_of, targets_of
from .plain import plain, plain_parameters
from .walk import nodes_in


class Members:
    """The class bookkeeping of the pass, over the state facts.Collector keeps."""

    info: ModuleInfo
    facts: FunctionFacts  # of the function being read (the module body's: `info.module`)
    cls: Optional[ClassInfo]
    function: Optional[cst.FunctionDef]
    copies: dict[int, dict[str, str]]
    scalars: dict[int, frozenset[str]]

    def _receiver_class(self, receiver: cst.BaseExpression) -> Optional[str]:
        """The class whose method a call on `receiver` runs, where the pass knows it: `self` in
        a method, an instance built in this scope or the module body (`agent = Agent(...)`), an
        attribute built in a method of the class (`self.agent = Agent(...)`); a class of this
        module by its name, an imported one qualified."""
        if type(receiver) is cst.Name:
            if receiver.value == "self":
                return self.cls.name if self.cls is not None else None
            return self.facts.instances.get(receiver.value) or self.info.module.instances.get(receiver.value)
        key = receiver_key(receiver) if type(receiver) is cst.Attribute else ""
        if key.startswith("self.") and key.count(".") == 1 and self.cls is not None:
            return self.cls.attributes.get(key)
        return None

    def _plain_parameters(self) -> frozenset[str]:
        """plain.plain_parameters of the function being read, once per function."""
        function = self.function
        if function is None:
            return frozenset()
        found = self.scalars.get(id(function))
        if found is None:
            found = self.scalars[id(function)] = plain_parameters(function)
        return found

    def _counted(self, name: str, call: cst.Call) -> None:
        """A call by name (`f(...)`, or `Class.m` for `self.m(...)`), and the places it hands one
        value to (ModuleInfo.twin_parameters)."""
        self.info.name_calls[name] += 1
        if sum(type(a.value) is cst.Name for a in call.args) < 2:
            return  # no value handed twice: the function's copies need not be read
        shared = _shared_arguments(call, self._copies())
        if shared:
            self.info.shared_args.append((name, shared))

    def _copies(self) -> dict[str, str]:
        """The function's names assigned once, a copy of another name (`also = boundary`)."""
        function = self.function
        if function is None:
            return {}
        found = self.copies.get(id(function))
        if found is None:
            body = block_of(function.body)
            counts: Counter[str] = Counter()
            for statement in statements_of(body):
                counts.update(n.value for t in targets_of(statement) for n in nodes_in(t) if isinstance(n, cst.Name))
            found = self.copies[id(function)] = {
                s.targets[0].target.value: s.value.value for s in statements_of(body)
                if isinstance(s, cst.Assign) and len(s.targets) == 1 and isinstance(s.targets[0].target, cst.Name)
                and isinstance(s.value, cst.Name) and counts[s.targets[0].target.value] == 1}
        return found

    def _handed_instances(self, call: cst.Call) -> dict[str, str]:
        """The instances of classes of this module a call hands over, by position or keyword:
        a name built from one (`trainer = Trainer()`) or one built inline (`Agent(Actor())`)."""
        found: dict[str, str] = {}
        for position, arg in enumerate(call.args):
            if arg.star:
                return {}
            value = arg.value
            if type(value) is cst.Name:
                cls = self.facts.instances.get(value.value)
            elif type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in self.info.classes:
                cls = value.func.value
            else:
                continue
            if cls is not None:
                found[arg.keyword.value if arg.keyword else f"#{position}"] = cls
        return found

    def _field(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        """`self.opt = optimizer` in `__init__`: an instance's `opt` is what its constructor was
        handed; so is each `self.X` of `self.critic, self.critic_old = critic, deepcopy(critic)`
        paired with a parameter."""
        function, cls = self.function, self.cls
        if cls is None or function is None or function.name.value != "__init__":
            return
        for target, part in _paired(targets, value):
            if (isinstance(part, cst.Name) and part.value in self.facts.parameters and isinstance(target, cst.Attribute)
                    and isinstance(target.value, cst.Name) and target.value.value == "self"):
                cls.fields.setdefault(target.attr.value, part.value)

    def _callable(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        """`self.gen_loss = hinge_gen_loss` (a name not among the method's parameters) or
        `self.recon = F.l1_loss` (a torch function) in a method: the attribute is a function."""
        cls = self.cls
        if cls is None:
            return
        name = dotted(value) if type(value) is cst.Name or type(value) is cst.Attribute else None
        if name is not None and "." in name:
            qualified = self.info.qualify_name(name)
            name = qualified if qualified.startswith("torch.") and qualified.rpartition(".")[2].islower() else None
        elif name is not None and (name in self.facts.parameters or name == "self"):
            name = None
        for target in targets:
            if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self":
                key = receiver_key(target)
                before = cls.callables.get(key, name)
                # Two factories on two branches (`torch.randn_like`, `torch.rand_like`) both make a new leaf.
                leaves = before is not None and name is not None and makes_leaf(before) and makes_leaf(name)
                cls.callables[key] = name if before == name or leaves else None

    def _plain(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        """Whether each `self.X` assigned keeps holding no graph (plain.py); `obj.X = ...` on any
        other object may set anything."""
        for target, assigned in _paired(targets, value):  # `self.gamma, self.tau = gamma, tau`
            if isinstance(target, (cst.Tuple, cst.List)):  # `self.a, self.b = f()`: each may be anything
                self._plain([e.value for e in target.elements], cst.Name("_"))
                continue
            if type(target) is not cst.Attribute:
                continue
            if type(target.value) is cst.Name and target.value.value == "self" and self.cls is not None:
                names = self._plain_parameters()
                key = receiver_key(target)
                self.cls.plain[key] = self.cls.plain.get(key, True) and plain(assigned, names, self.info.qualify)
            else:
                self.info.set_from_outside.add(target.attr.value.lstrip("_"))


def _shared_arguments(call: cst.Call, copies: dict[str, str]) -> frozenset[frozenset[str]]:
    """The places (`#0`, `keyword`) a call gives one value to, grouped, where some value is given
    twice (a name, or a copy of it: `copies`); none with a `*args` or `**kwargs`."""
    places: dict[str, set[str]] = {}
    for position, arg in enumerate(call.args):
        if arg.star:
            return frozenset()
        if type(arg.value) is cst.Name and arg.value.value not in ("True", "False", "None"):
            name = arg.value.value
            for _ in range(4):  # `also = boundary`: one value
                name = copies.get(name, name)
            places.setdefault(name, set()).add(arg.keyword.value if arg.keyword else f"#{position}")
    return frozenset(frozenset(p) for p in places.values() if len(p) > 1)


def _paired(targets: Sequence[cst.BaseExpression],
            value: cst.BaseExpression) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Each target with the value it is assigned: a tuple of targets unpacks a tuple of values
    of the same length element by element (no starred element)."""
    for target in targets:
        pairs = tuple_pairs(target, value)
        yield from [(target, value)] if pairs is None else pairs
