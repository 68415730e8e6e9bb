"""What a module defines and knows, collected in one pass before any scope is built.

Imports (for qualified names), functions and classes with their lexical nesting, optimizer and
other receiver assignments (rules.md section 2), instances of this module's classes, and the
functions handed to a framework as callbacks (evidence of a step function, section 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import libcst as cst

from ..knowledge.frameworks import (
    COMPLETED,
    REGISTER_CALL,
    REGISTER_KEYWORD,
    STARTED,
    Framework,
    accumulation_of,
    factory_of,
)
from ..knowledge.optimizers import (
    EVENT_METHODS,
    NON_TORCH_ROOTS,
    is_engine_callee,
    is_foreign_autograd,
    is_optimizer_callee,
    is_scaler_callee,
    named_optimizer,
)
from ..knowledge.values import RETURNS_SELF
from .counters import counter_step, int_literal
from .holdings import Holdings, parameters_owners, stored_parameters
from .members import Members
from .moduleinfo import ClassInfo, FunctionFacts, ModuleInfo, Pending, Registered
from .naming import block_of, dotted, receiver_key, suites, text_of
from .walk import nodes_in


class Collector(Members):
    """The one pass over the module: imports, definitions, receivers, callbacks."""

    def __init__(self, info: ModuleInfo) -> None:
        self.info = info
        self.function: Optional[cst.FunctionDef] = None  # being read (None: the module body)
        self.facts = info.module
        self.cls: Optional[ClassInfo] = None  # whose method is being read
        self.holdings = Holdings(info.qualify)  # what names hold, for optimizers built over them
        self.pending: list[Pending] = []  # assignments from calls of builders of this module (builders.py)
        self.maybe: list[tuple[int, str, frozenset[str]]] = []  # (scope, key, modules): _maybe_built
        # Optimizers built over what no name of the pass holds, read again once every function
        # is (returned.py): (scope, key, the constructor's call, the object's scope).
        self.unheld: list[tuple[int, str, cst.Call, Optional[int]]] = []
        self.copies: dict[int, dict[str, str]] = {}  # per function: _copies
        self.scalars: dict[int, frozenset[str]] = {}  # per function: _plain_parameters
        self.looping: tuple[str, ...] = ()  # the modules whose parameters the loop being read visits
        self.picking = False  # under a branch inside that loop: some of them only

    def statements(self, body: Sequence[cst.CSTNode], cls: Optional[ClassInfo] = None) -> None:
        for statement in body:
            self.statement(statement, cls)

    def statement(self, node: cst.CSTNode, cls: Optional[ClassInfo]) -> None:
        if type(node) is cst.SimpleStatementLine:
            for small in node.body:
                self.small(small)
        elif isinstance(node, cst.BaseSmallStatement):  # in a one-line suite: `try: a; b`
            self.small(node)
        elif type(node) is cst.FunctionDef:
            self.function_def(node, cls)
        elif type(node) is cst.ClassDef:
            info = ClassInfo(node.name.value, bases=[b for b in (dotted(a.value) for a in node.bases) if b], node=node)
            self.info.classes.setdefault(node.name.value, info)
            self.info.class_of[id(node)] = info
            self.statements(block_of(node.body), info)
        elif type(node) is cst.For and parameters_owners(node.iter):
            # `for p in net.parameters(): params.append(p)`: what the list gathers (holdings.py)
            saved, self.looping = self.looping, tuple(parameters_owners(node.iter))
            for suite in suites(node):
                self.statements(block_of(suite), cls)
            self.looping, self.picking = saved, False
        else:
            test = getattr(node, "test", None)
            if isinstance(test, cst.BaseExpression):
                self.info.counters.test(test)
                self.facts.compared |= {name.value for comparison in nodes_in(test) if isinstance(comparison, cst.Comparison)
                                        for name in nodes_in(comparison) if isinstance(name, cst.Name)}
            # A branch inside a loop over parameters gathers only some of them.
            picking, self.picking = self.picking, self.picking or bool(self.looping and test is not None)
            for suite in suites(node):
                self.statements(block_of(suite), cls)
            self.picking = picking

    def function_def(self, node: cst.FunctionDef, cls: Optional[ClassInfo]) -> None:
        for decorator in node.decorators:  # `@trainer.on(Events.ITERATION_COMPLETED)`
            found = _registration(decorator.decorator, "on")
            if found is not None:
                self.info.handlers.append(((self._scope(), found[0]), found[1], node))
            # `@register_step_func` hands the function to a registry, as `register(f)` does.
            expression = decorator.decorator
            registry = dotted(expression.func if isinstance(expression, cst.Call) else expression) or ""
            if registry.rsplit(".", 1)[-1].startswith("register"):
                self.info.registered.add(node.name.value)
        if cls is not None:
            cls.methods[node.name.value] = node
        elif self.function is None:
            self.info.functions.setdefault(node.name.value, node)
        else:
            self.facts.nested[node.name.value] = node
        self.info.every_function.append(node)
        params = node.params
        names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
        facts = FunctionFacts(parameters=set(names), parent=self.function, cls=cls)
        if cls is not None:
            stored = stored_parameters(node, names)
            if stored:
                self.holdings.stored[id(node)] = stored
        self.info.facts[id(node)] = facts
        saved = (self.function, self.facts, self.cls)
        self.function, self.facts, self.cls = node, facts, cls
        self.statements(block_of(node.body))
        self.function, self.facts, self.cls = saved

    def small(self, node: cst.CSTNode) -> None:
        if type(node) is cst.Import:
            for alias in node.names:
                full = dotted(alias.name) or ""
                named = alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                local = alias.asname.name.value if named else full.split(".")[0]  # type: ignore[union-attr]
                self.info.aliases[local] = full if alias.asname else local
        elif type(node) is cst.ImportFrom:
            module = (dotted(node.module) or "") if node.module else ""
            base = "." * len(node.relative) + module
            if isinstance(node.names, cst.ImportStar):
                self.info.stars.append(base)
                return
            for alias in node.names:
                name = dotted(alias.name) or ""
                local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
                self.info.aliases[local] = f"{base}.{name}" if module else f"{base}{name}"
        elif (type(node) is cst.Assign or type(node) is cst.AnnAssign) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            self.assignment(targets, node.value)
            self._field(targets, node.value)
            self._callable(targets, node.value)
            self._plain(targets, node.value)
            self.info.counters.record(node, targets, node.value, self.function)
            self.info.counters.test(node.value)  # `should_step = self.n % k == 0`
            if any(isinstance(t, cst.Attribute) and t.attr.value in ("grad", "_grad") for t in targets):
                self.facts.events = True  # `p.grad = None`
                self.info.hands |= ".grad" in text_of(node.value)  # `shared._grad = p.grad`
        elif type(node) is cst.AugAssign:
            self._plain([node.target], node.value)
            self.info.counters.record(node, [node.target], None, self.function)
            if isinstance(node.target, cst.Name):
                self.facts.increments |= {node.target.value}
            elif isinstance(node.target, cst.Attribute) and counter_step(node) is not None:
                self.facts.increments |= {dotted(node.target) or ""}  # `self.remaining -= 1`
        for call in self.info.calls_of(node):
            self.call(call)

    def call(self, call: cst.Call) -> None:
        facts = self.facts
        func = call.func
        if type(func) is cst.Attribute:
            name = func.attr.value
            facts.events |= name in EVENT_METHODS
            self.info.attribute_calls[name] += 1
            if name == "__init__" and _is_super(func.value) and self.cls is not None and self.function is not None \
                    and self.function.name.value == "__init__":
                self.cls.up = call
            if name in ("append", "extend") and type(func.value) is cst.Name and call.args:
                self.holdings.grow(self._scope(), func.value.value, call.args[0].value, self.looping, self.picking)
            if name == "add_param_group" and call.args:
                key = receiver_key(func.value)
                added = self.holdings.of_construction(self._scope(), call, self._shared())
                self.info.table.links.setdefault(key, set()).update(added)
                self.info.table.grown.add((self._scope(), key))
            if name == "backward" and call.args and call.args[0].keyword is None:
                facts.fed |= {receiver_key(func.value)}
            if name == "step":
                facts.stepped |= {receiver_key(func.value)}
            if (name in ("step", "backward") and receiver_key(func.value) in facts.stepped & facts.fed
                    and not named_optimizer(receiver_key(func.value))):
                # `model.backward(loss)` and `model.step()`: an engine (DeepSpeed's), whatever
                # built it; its step clears what it applies. A tensor is never stepped; a wrapper
                # named an optimizer (ColossalAI's `optimizer.backward(loss)`) is cleared by hand.
                self.info.table.engines.add(receiver_key(func.value))
            elif name in ("zero_grad", "clear_grad", "clear_gradients"):
                facts.cleared |= {receiver_key(func.value)}
            owner = self._receiver_class(func.value)
            if owner is not None:
                self._counted(f"{owner}.{name}", call)  # `self.apply(opt, b, b)`, `agent.update(...)`
            if len(call.args) >= 2:  # may hand an optimizer and what it holds (constructed.py)
                self.info.method_calls[name] += 1
                if owner is not None:
                    self.info.handing.append((self._scope(), f"{owner}.{name}", call))
        elif type(func) is cst.Name:
            # Calling a parameter (`f()` in fastai's _with_events) may run anything handed over.
            facts.events |= func.value == "backward" or func.value in facts.parameters
            instances = self._handed_instances(call)
            if instances:
                self.info.instance_args.append((func.value, instances))
            self._counted(func.value, call)
            if len(call.args) >= 2:  # may hand an optimizer and what it holds (constructed.py)
                self.info.handing.append((self._scope(), func.value, call))
        callee = func.attr.value if type(func) is cst.Attribute else dotted(func) or ""
        setting = accumulation_of(self.info.qualify(func) or "")
        if setting is not None:
            self._accumulation(setting, call)
        registered = _registration(call, "add_event_handler")
        if registered is not None and len(call.args) > 1 and isinstance(call.args[1].value, cst.Name):
            where = (self._scope(), registered[0])
            self.info.handlers.append((where, registered[1], call.args[1].value.value))
        for used in (func, *(arg.value for arg in call.args)):
            if type(used) is cst.Name:
                facts.callees.add(used.value)
            elif type(used) is cst.Attribute:
                facts.callees.add(used.attr.value)
        for arg in call.args:
            handed = arg.value
            handed_name = handed.value if isinstance(handed, cst.Name) else (
                handed.attr.value if isinstance(handed, cst.Attribute) else None)
            if handed_name is None:
                continue
            self.info.passed.add(handed_name)  # a function handed over may be called anywhere
            keyword = arg.keyword.value if arg.keyword else ""
            if REGISTER_CALL.match(callee) or REGISTER_KEYWORD.match(keyword):
                self.info.registered.add(handed_name)

    def _engine(self, key: str, framework: Framework, call: cst.Call) -> None:
        """`trainer = create_supervised_trainer(model, optimizer, ...)`: its optimizer and N."""
        args = [a for a in call.args if a.keyword is None]
        named = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        optimizer = named.get("optimizer", args[1].value if len(args) > 1 else None)
        if not isinstance(optimizer, (cst.Name, cst.Attribute)):
            return
        setting = named.get(framework.accumulation[1])
        n = 1 if setting is None else int_literal(setting)
        self.info.engines[(self._scope(), key)] = Registered(framework, call, receiver_key(optimizer), n)

    def _shared(self) -> Optional[int]:
        """The scope of the attributes of the object whose method is being read (holdings.py)."""
        return id(self.cls) if self.cls is not None else None

    def _scope(self) -> int:
        """Which scope an engine's name belongs to: the function being read (0: the module)."""
        return id(self.function) if self.function is not None else 0

    def _accumulation(self, keyword: str, call: cst.Call) -> None:
        """`Trainer(accumulate_grad_batches=4)`: the framework's N, when it is a literal."""
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                value = int_literal(arg.value)
                known = self.info.accumulation
                known[keyword] = value if known.get(keyword, value) == value else None

    def assignment(self, targets: Sequence[cst.BaseExpression], value: cst.BaseExpression) -> None:
        for target in targets:
            if isinstance(target, cst.Attribute) and target.attr.value in _REPLACEABLE:
                # `opt.step = private_step`: the instance's step or clear is no longer torch's, and
                # what the replacement does is not followed: no event of that receiver is read as
                # an optimizer's (issue 47: a wrapper that clears after stepping was a false ZG001).
                self.info.table.replaced.add(receiver_key(target.value))
        if isinstance(value, cst.List) and not value.elements:
            for target in targets:
                if isinstance(target, cst.Name):
                    self.holdings.bind(self._scope(), target.value, value)  # `params = []`, filled later
        if isinstance(value, (cst.Tuple, cst.List)):  # `opt_g, opt_d = Adam(...), Adam(...)`: pairwise
            for target in targets:
                if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == len(value.elements) and not any(
                        isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
                    for name, part in zip(target.elements, value.elements):
                        self.assignment([name.value], part.value)
            return
        # `SSLMetaArch(cfg).to(device)` is the instance built (dinov2): moving returns the module.
        while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
               and value.func.attr.value in RETURNS_SELF and isinstance(value.func.value, cst.Call)):
            value = value.func.value
        for target in targets:
            if isinstance(target, cst.Name):
                self.holdings.bind(self._scope(), target.value, value, shared=self._shared())
            elif isinstance(target, cst.Attribute) and self.cls is not None and receiver_key(target).startswith("self."):
                self.holdings.bind(id(self.cls), receiver_key(target), value, self._scope(), self._shared())
                self.cls.assigned.add(receiver_key(target))
        if isinstance(value, cst.ListComp) and len(targets) == 1 and isinstance(targets[0], (cst.Name, cst.Attribute)):
            self._built_per_entry(receiver_key(targets[0]), value)
        if not isinstance(value, cst.Call):
            return
        self._from_builder(targets, value)
        qualified = self.info.qualify(value.func) or ""
        table = self.info.table
        for target in targets:
            if isinstance(target, (cst.Tuple, cst.List)):
                if qualified.startswith("deepspeed.") and target.elements:
                    table.engines.add(receiver_key(target.elements[0].value))
                elif is_optimizer_callee(qualified):  # opt_g, opt_d = self.optimizers()
                    table.built.update(receiver_key(e.value) for e in target.elements)
                continue
            self._assigned(receiver_key(target), qualified, value)

    def _from_builder(self, targets: Sequence[cst.BaseExpression], value: cst.Call) -> None:
        """Keep an assignment from a call of a function or method of this module for `finish`."""
        func = value.func
        if len(targets) != 1:
            return
        head = (dotted(func) or ".").split(".", 1)[0]
        imported = head in self.info.aliases  # `get_optimizer(...)`, `utils.get_optimizer(...)` imported
        if isinstance(func, cst.Name) and not imported:
            name, method = func.value, False
        elif (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"
              and self.cls is not None):
            name, method = func.attr.value, True
        elif imported:
            name, method = self.info.qualify(func) or "", False
        else:
            return
        target = targets[0]
        if isinstance(target, (cst.Tuple, cst.List)):
            keys = [receiver_key(e.value) if isinstance(e.value, (cst.Name, cst.Attribute)) else None
                    for e in target.elements]
        elif isinstance(target, (cst.Name, cst.Attribute)):
            keys = [receiver_key(target)]
        else:
            return
        unpacked = isinstance(target, (cst.Tuple, cst.List))
        self.pending.append(Pending(self._scope(), keys, unpacked, name, method, self.cls, value, imported))

    def _assigned(self, key: str, qualified: str, value: cst.Call) -> None:
        table = self.info.table
        framework = factory_of(qualified)
        if framework is not None:
            self._engine(key, framework, value)
        if self._custom_optimizer(qualified):
            self._links(key, value)  # and an instance of ours (below): its own methods resolve
        if not is_optimizer_callee(qualified) and qualified not in self.info.functions:
            self._maybe_built(key, value)
        if is_optimizer_callee(qualified):
            table.built.add(key)
            # LBFGS evaluates a step's closure many times; other classes once, or as they like
            # (garage's conjugate gradient): only LBFGS proves a leak between evaluations.
            if qualified.rsplit(".", 1)[-1] == "LBFGS":
                table.multiple_evaluations.add(key)
            self._links(key, value)
        elif is_scaler_callee(qualified):
            table.scalers.add(key)
        elif is_engine_callee(qualified) or qualified.split(".", 1)[0] in NON_TORCH_ROOTS:
            table.engines.add(key)  # its step() is not a torch optimizer's
        elif is_foreign_autograd(qualified):
            table.foreign.add(key)
        elif qualified in ("functools.partial", "partial") and value.args and not value.args[0].star:
            if "." not in key:
                self.facts.partials[key] = value
        elif qualified in self.info.classes or (dotted(value.func) or ".").split(".", 1)[0] in self.info.aliases:
            # An instance of a class defined here: its methods resolve (`self.agent.update()`);
            # or of an imported one, which calls.py links in a project (`trainlib.Trainer`).
            if key.startswith("self.") and self.cls is not None:
                self.cls.attributes[key] = qualified
                self.cls.built[key] = value
            else:
                self.facts.instances[key] = qualified
                self.facts.built[key] = value

    def _built_per_entry(self, key: str, value: cst.ListComp) -> None:
        """`self.q_optims = [Adam(q.parameters()) for q in self.q_nets]`: every entry is an
        optimizer over the matching entry of the modules (`self.q_optims[*]` holds `self.q_nets[*]`,
        the entry a loop or a computed index picks, as `for q in self.q_nets: q(x)` calls it)."""
        loop, built = value.for_in, value.elt
        if (loop.inner_for_in is not None or loop.ifs or not isinstance(built, cst.Call)
                or not isinstance(loop.target, cst.Name) or not isinstance(loop.iter, (cst.Name, cst.Attribute))
                or not is_optimizer_callee(self.info.qualify(built.func) or "")
                or parameters_owners(built) != [loop.target.value]):
            return
        table, entry, held = self.info.table, f"{key}[*]", f"{receiver_key(loop.iter)}[*]"
        table.built.add(entry)
        table.links.setdefault(entry, set()).add(held)
        table.builds.setdefault((self._scope(), entry), set()).add(frozenset({held}))

    def _maybe_built(self, key: str, value: cst.Call) -> None:
        """A call of a class we cannot see (`self._optimizer_cls(self.policy.parameters())`,
        garage's; an imported one) handed modules' parameters: if `key` proves an optimizer
        (finish), it holds them."""
        owners = self.holdings.of_construction(self._scope(), value, self._shared())
        if owners:
            self.maybe.append((self._scope(), key, frozenset(owners)))

    def _links(self, key: str, value: cst.Call) -> None:
        """An optimizer built here holds the modules its constructor is handed."""
        table = self.info.table
        owners = self.holdings.of_construction(self._scope(), value, self._shared())
        table.links.setdefault(key, set()).update(owners)
        if owners:
            table.builds.setdefault((self._scope(), key), set()).add(frozenset(owners))
        else:
            self.unheld.append((self._scope(), key, value, self._shared()))

    def _custom_optimizer(self, name: str) -> bool:
        """A class of this module deriving from a torch optimizer (A3C's `SharedAdam`): built over
        parameters as its base is."""
        cls = self.info.classes.get(name)
        return cls is not None and any(is_optimizer_callee(self.info.qualify_name(base)) for base in cls.bases)


_REPLACEABLE = frozenset({"step", "zero_grad"})  # methods whose reassignment unmakes a torch optimizer


def _is_super(value: cst.BaseExpression) -> bool:
    """`super()`, `super(Cls, self)`."""
    return type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == "super"


def mark_relevant(info: ModuleInfo, linked: frozenset[str] = frozenset()) -> None:
    """Functions that can perform an event, directly or through a function they call or hand
    over (by name: a cheap superset, only used to skip building the rest); `linked` names the
    functions of other modules of the project that can."""
    names: dict[str, list[int]] = {}
    for function in info.every_function:
        names.setdefault(function.name.value, []).append(id(function))
    relevant = {key for key, facts in info.facts.items() if facts.events} | info.counters.settle()
    changed = True
    while changed:
        relevant_names = {name for name, keys in names.items() if any(k in relevant for k in keys)} | linked
        grown = {key for key, facts in info.facts.items() if facts.callees & relevant_names}
        changed = not grown <= relevant
        relevant |= grown
    info.relevant = relevant
    for facts in info.facts.values():
        facts.callees.clear()  # read here only: on a long file they weigh as much as all other facts


def _registration(node: cst.BaseExpression, method: str) -> Optional[tuple[str, str]]:
    """(engine key, event) of `engine.<method>(Events.ITERATION_COMPLETED, ...)` (no filter)."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute) or node.func.attr.value != method:
        return None
    event = dotted(node.args[0].value) if node.args else None
    name = (event or "").rsplit(".", 1)[-1]
    return (receiver_key(node.func.value), name) if name in (STARTED, COMPLETED) else None
