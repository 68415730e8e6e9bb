"""Steps and clears as the scope builder meets them (rules.md sections 2 and 4): optimizer steps
(with the closures they evaluate, or on behalf of a helper object), `zero_grad()` of optimizers
and modules, and `.grad` written by hand over a module's parameters or an optimizer's groups.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Optional

import libcst as cst

from ..analysis.keys import HANDED, root_of, within
from ..analysis.model import Branch, Call, Event, Kind, Loop, Node, Seq, children
from ..knowledge.frameworks import clears_all
from .calls import Calls, Context, Owner
from .grads import grad_written
from .naming import assigned_names, block_of, bound_names, statements_of, text_of
from .walk import nodes_in


class Clears(Calls):
    """The steps and clears part of the scope builder (scopes.py supplies `event` and
    `expression_events`)."""

    def event(self, kind: Kind, node: cst.CSTNode, ctx: Context, target: Optional[str] = None, label: str = "",
              zeroes: bool = False, sets: Optional[frozenset[str]] = None, keeps: frozenset[str] = frozenset(),
              spares: frozenset[str] = frozenset()) -> Node:
        raise NotImplementedError

    def expression_events(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        raise NotImplementedError

    def block(self, body: Sequence[cst.CSTNode], ctx: Context) -> Seq:
        raise NotImplementedError

    def _framework_default(self, call: cst.Call, ctx: Context) -> Optional[list[Node]]:
        """`super().optimizer_zero_grad(...)` in a hook: the framework's own event there (after
        evaluating the closure it was handed, for Lightning's optimizer_step)."""
        func = call.func
        framework = self.framework(ctx)
        if framework is None or not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Call):
            return None
        slot = framework.slot(func.attr.value) if text_of(func.value.func) == "super" else None
        if slot is None or slot.event is None:
            return None
        items: list[Node] = []
        closure = self.closures.get(id(ctx.function)) if ctx.function is not None else None
        if slot.closure >= 0 and closure is not None:
            items.append(Call(self.sites.site(call.func), -1, param=closure))
        target = framework.optimizer if slot.event is not Kind.BACKWARD else None
        items.append(self.event(slot.event, call, ctx, target, "optimizer"))
        return items

    def _step(self, call: cst.Call, node: cst.BaseExpression, ctx: Context) -> list[Node]:
        table = self.info.table
        receiver = self.key(node, ctx)
        if table.is_scaler(receiver) and call.args:
            argument = call.args[0].value
            if isinstance(argument, (cst.Name, cst.Attribute, cst.Subscript)):
                return [self.event(Kind.STEP, call, ctx, self.key(argument, ctx), text_of(argument))]
            return []
        delegate = self._delegate(call, receiver, ctx)
        if delegate is not None:  # `strategy.step(self.optimizer, closure)` steps the optimizer
            node, receiver = delegate, self.key(delegate, ctx)
        elif not self.is_optimizer(receiver, ctx):
            return []
        items: list[Node] = []
        closure = self._closure(call, ctx, skip=1 if delegate is not None else 0)
        if closure is not None:
            # The optimizer evaluates the closure once (SGD, Adam) or many times (LBFGS): the
            # gradients of one evaluation must not leak into the next.
            once = receiver not in table.multiple_evaluations
            items.append(closure if once else Loop(closure, self.sites.site(call), collection=True, closure=True))
        items.append(self.event(Kind.STEP, call, ctx, receiver, text_of(node)))
        own = self.custom_method(call, node, "step", ctx) if delegate is None else None
        return [*items, own] if own is not None else items

    def _delegate(self, call: cst.Call, receiver: str, ctx: Context) -> Optional[cst.BaseExpression]:
        """The optimizer a helper object steps or clears for its caller: `distributed.step(opt)`,
        `strategy.zero_grad(opt)` (a torch optimizer is never the receiver here)."""
        if not call.args or call.args[0].keyword is not None or receiver in self.info.table.built:
            return None
        argument = call.args[0].value
        if isinstance(argument, (cst.Name, cst.Attribute, cst.Subscript)) and self.is_optimizer(self.key(argument, ctx), ctx):
            return argument
        return None

    def _closure(self, call: cst.Call, ctx: Context, skip: int = 0) -> Optional[Seq]:
        """What evaluating the closure handed to `step()` does: a function of this module, a
        lambda's calls, or, for one we cannot see, a possible clear and a backward (it proves
        nothing either way)."""
        for arg in call.args[skip:]:
            if arg.keyword is not None and arg.keyword.value != "closure":
                continue
            value = arg.value
            if isinstance(value, cst.Name) and ctx.function is not None and self.closures.get(id(ctx.function)) == value.value:
                # A framework's closure (Lightning's optimizer_step): whatever the driver hands over.
                return Seq((Call(self.sites.site(value), -1, param=value.value),))
            if isinstance(value, cst.Lambda):
                return Seq(tuple(self.expression_events(value.body, ctx)))
            found = self.resolve(value, ctx) if isinstance(value, (cst.Name, cst.Attribute)) else None
            if found is not None and id(found[0]) in self.index:
                self.called.add(id(found[0]))
                return Seq((Call(self.sites.site(value), self.index[id(found[0])]),))
            if found is None:
                return Seq((self.event(Kind.MAYBE_CLEAR, value, replace(ctx, gate=None)), self.event(Kind.BACKWARD, value, ctx)))
            return None
        return None

    def _clear(self, node: cst.CSTNode, receiver: str, ctx: Context, zeroes: bool = False) -> list[Node]:
        framework = self.framework(ctx)
        if framework is not None and clears_all(framework, receiver):
            # In a hook, the model's zero_grad() clears the framework's optimizer, whatever else
            # the class's own methods make `self` look like (a `step()` of its own).
            return self._module_clear(node, receiver, ctx, zeroes)
        if self.is_optimizer(receiver, ctx):
            cls = self._instance_class(receiver, ctx)
            if cls is not None and self.optimizer_class(cls) and isinstance(node, cst.Call) and isinstance(
                    node.func, cst.Attribute):
                # A custom optimizer clears its own groups (and what an override of its own does).
                own = self.custom_method(node, node.func.value, "zero_grad", ctx)
                spares = frozenset(f"{receiver}.{name}" for name in disjoint_inner(self.info.method(cls, "__init__")))
                clear = self.event(Kind.CLEAR, node, ctx, receiver, zeroes=zeroes, spares=spares)
                return [clear, own] if own is not None else [clear]
            return [self.event(Kind.CLEAR, node, ctx, receiver, zeroes=zeroes)]
        return self._module_clear(node, receiver, ctx, zeroes)

    def _module_clear(self, node: cst.CSTNode, module: Optional[str], ctx: Context, zeroes: bool = False) -> list[Node]:
        # A module's own zero_grad() is not gated by accelerate: it runs every iteration.
        ungated = replace(ctx, gate=None)
        framework = self.framework(ctx)
        if framework is not None and module is not None and clears_all(framework, module):
            return [self.event(Kind.CLEAR, node, ungated, framework.optimizer, zeroes=zeroes)]
        scope = id(ctx.function) if ctx.function is not None else 0
        linked = self.info.table.optimizers_of_module(module, scope) if module is not None else []
        if module is not None:  # an optimizer this scope builds holds what it is built over here
            linked = [o for o in linked if self._may_hold(ctx, o, module)]
        spares: frozenset[str] = frozenset()
        if module is not None and self._fresh(ctx, module):
            # Built here (`model = Net()`, a deep copy): no optimizer from before this call holds
            # it, whatever name the object it was built over had (identity by binding).
            assigned = assigned_names(block_of(ctx.function.body)) if ctx.function is not None else frozenset()
            spares = frozenset(o for o in self.info.table.links if not self._bound_here(ctx, o, assigned))
            linked = [o for o in linked if o not in spares]
        elif module is not None and not linked and root_of(module) in self._facts(ctx).parameters \
                and not self._own_attribute(ctx, module):
            # A module handed in under a name no optimizer's link uses (`net` for the caller's
            # `model`): any optimizer may hold it, but for those this scope builds over what
            # it names (`Adam([patch])`, `SGD(student.parameters())`).
            module, spares = None, frozenset(o for o in self.info.table.links if (scope, o) in self.info.table.builds)
        if module is None or not linked:
            return [self.event(Kind.MAYBE_CLEAR, node, ungated, module, spares=spares)]
        # The optimizers linked to the module are decided by their clears; any other, whose
        # parameters are not known (built over a list: transformer-xl's sparse embedding
        # optimizer), may hold some of the module's: a possible clear of it.
        possible = self.event(Kind.MAYBE_CLEAR, node, ungated, module, spares=frozenset(linked))
        return [*(self._part_clear(node, ungated, target, module, zeroes) for target in linked), possible]

    def _fresh(self, ctx: Context, module: str) -> bool:
        """A module this function builds itself, holding no module handed in: a deep copy, or an
        instance built from settings (`Net()`, `Net(env.obs_dim, 64)`; not `DataParallel(net)`,
        whose parameters are `net`'s)."""
        facts = self._facts(ctx)
        built = facts.built.get(module)
        if ctx.function is None or built is None or module in facts.parameters:
            return False
        if self.info.qualify(built.func) == "copy.deepcopy":
            return True
        return all(not isinstance(node, cst.Name) or node.value not in facts.parameters and node.value not in facts.instances
                   for arg in built.args for node in _bare_names(arg.value))

    def _own_attribute(self, ctx: Context, module: str) -> bool:
        """`self.target` that the object built itself, a deep copy or an instance built from
        settings (`self.target = copy.deepcopy(qnet)`): no name for a module handed in, so an
        optimizer known to hold other modules does not hold it."""
        if ctx.cls is None or not module.startswith("self.") or module.count(".") != 1:
            return False
        built = next((info.built[module] for info in self.info.lineage(ctx.cls) if module in info.built), None)
        if built is None:
            return False
        if self.info.qualify(built.func) == "copy.deepcopy":
            return True
        return not any(isinstance(node, cst.Name) and node.value != "self"
                       for arg in built.args for node in _bare_names(arg.value))

    def _bound_here(self, ctx: Context, optimizer: str, assigned: frozenset[str]) -> bool:
        """An optimizer this function binds (`assigned`: the names it assigns) or grows: it may
        hold a module built here."""
        scope = id(ctx.function) if ctx.function is not None else 0
        table = self.info.table
        return (scope, optimizer) in table.builds or (scope, optimizer) in table.grown or root_of(optimizer) in assigned

    def _may_hold(self, ctx: Context, target: str, module: str) -> bool:
        built = self.info.table.builds.get((id(ctx.function) if ctx.function is not None else 0, target))
        return not built or any(within(m, module) for modules in built for m in modules)

    def _part_clear(self, node: cst.CSTNode, ctx: Context, target: str, module: str, zeroes: bool) -> Node:
        """A module's clear of an optimizer that also holds other modules' parameters clears only
        that module's: when every construction the optimizer may come from here agrees on the
        modules it holds (two readings: the relation is unknown, and it counts as a whole clear)."""
        built = self.info.table.constructions(id(ctx.function) if ctx.function is not None else 0, target)
        keeps = {m for m in next(iter(built)) if not within(m, module)} if len(built) == 1 else set()
        if not keeps:
            return self.event(Kind.CLEAR, node, ctx, target, zeroes=zeroes)
        return self.event(Kind.CLEAR, node, ctx, target, zeroes=zeroes, sets=frozenset({module}), keeps=frozenset(keeps))

    def _owner_of(self, iterator: cst.BaseExpression, ctx: Context) -> Optional[Owner]:
        """Whose parameters `for p in <iterator>` visits: `m.parameters()`, `o.param_groups`,
        `group["params"]` of such a group."""
        if isinstance(iterator, cst.Call) and isinstance(iterator.func, cst.Attribute):
            if iterator.func.attr.value in ("parameters", "named_parameters"):
                return ("module", self.key(iterator.func.value, ctx))
        if isinstance(iterator, cst.Attribute) and iterator.attr.value == "param_groups":
            return ("group", self.key(iterator.value, ctx))
        if isinstance(iterator, cst.Subscript) and isinstance(iterator.value, cst.Name):
            owner = dict(ctx.owners).get(iterator.value.value)
            if owner is not None and owner[0] == "group":
                return ("optimizer", owner[1])
        return None

    def _clear_idiom(self, node: cst.For, owner: Optional[Owner], ctx: Context) -> Optional[list[Node]]:
        """`for p in m.parameters(): p.grad = None` (and friends) is one clear of whatever owns
        those parameters, reported at the loop; a loop that does anything else stays a loop. Over
        parameters of unknown origin (`for p in params: if p.grad is not None: p.grad.zero_()`,
        improved-diffusion's helper) it is one possible clear: a parameter without a gradient
        has nothing to clear, so its `if` skips nothing."""
        writes = [w for w in map(grad_written, statements_of(block_of(node.body))) if w is not None]
        if owner is None and not writes:
            return None
        body = self.block(block_of(node.body), ctx)
        events = _events_in(body)
        kinds = {e.kind for e in events}
        # Writes that replace each gradient (`p.grad.fill_(1.0)`, `p.grad.copy_(g)`) clear, then
        # put one new gradient in every parameter: one clear and one contribution (rules.md v3).
        replaces = Kind.BACKWARD in kinds and all(w.clears for w in writes) and (
            sum(e.kind is Kind.BACKWARD for e in events) == sum(w.adds for w in writes))
        if Kind.CLEAR not in kinds and Kind.MAYBE_CLEAR not in kinds or kinds - {Kind.CLEAR, Kind.MAYBE_CLEAR, Kind.BACKWARD}:
            return None
        if Kind.BACKWARD in kinds and not replaces or any(isinstance(n, (Call, Loop)) for n in _nodes_in(body)):
            return None
        zeroes = any(e.zeroes for e in events)
        if _selective(node):
            # `if p.ndim > 1: p.grad = None`: only the parameters the test picks are cleared, the
            # others keep theirs (issue 47; oracle.py: STALE at the step), as a write of one
            # named parameter's .grad.
            return None if replaces else [self.event(Kind.PARTIAL, node, ctx)]
        added = [self.event(Kind.BACKWARD, node, ctx)] if replaces else []
        if owner is None:
            return [self.event(Kind.MAYBE_CLEAR, node, replace(ctx, gate=None)), *added] if Kind.CLEAR not in kinds else None
        return [*self._owner_clear(node, owner, ctx, zeroes), *added]

    def _handed(self, node: cst.For, ctx: Context) -> Optional[list[Node]]:
        """`for p, s in zip(local.parameters(), shared.parameters()): s._grad = p.grad` (an A3C
        worker; either order): the local module's gradients handed to the shared module's
        parameters, whose optimizer applies them. A step of the local module's gradients
        (keys.HANDED), which only its own clear removes; an early `return` may skip it."""
        it, names = node.iter, list(bound_names(node.target))
        if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "zip"
                and len(it.args) == 2 and len(names) == 2 and isinstance(node.target, cst.Tuple)):
            return None
        owners = [self._owner_of(arg.value, ctx) for arg in it.args]
        if not all(owner is not None and owner[0] == "module" for owner in owners):
            return None
        body = block_of(node.body)
        for destination, source in (names, names[::-1]):
            found = [s for s in statements_of(body) if _hands(s, source, destination)]
            if found:
                break
        else:
            return None
        modules = dict(zip(names, (owner[1] for owner in owners)))  # type: ignore[index]
        site, handed = self.sites.site(node), modules[source] + HANDED
        step: Node = Event(Kind.STEP, site, handed, modules[source])
        writes = [grad_written(s) for s in statements_of(body)]
        if any(w is not None and w.clears and w.holder == source for w in writes):
            # `p.grad = None` after handing it over: the local module starts afresh.
            step = Seq((step, Event(Kind.CLEAR, site, handed, modules[source])))
        # Only a hand-over on every turn replaces the destination's .grad: one that an early
        # `return` or a test may skip (`if shared.grad is None:`) may leave the old one there.
        direct = [s for b in body if isinstance(b, cst.SimpleStatementLine) for s in b.body]
        if any(isinstance(n, (cst.Return, cst.Break)) for n in nodes_in(node.body)) or not any(s in direct for s in found):
            return [Branch((Seq((step,)), Seq()))]
        return [step]

    def _owner_clear(self, node: cst.CSTNode, owner: Owner, ctx: Context, zeroes: bool = False) -> list[Node]:
        kind, key = owner
        if kind in ("optimizer", "group"):
            return [self.event(Kind.CLEAR, node, ctx, key, zeroes=zeroes)] if self.is_optimizer(key, ctx) else []
        return self._module_clear(node, key, ctx, zeroes)

    def _grad_write(self, node: cst.CSTNode, ctx: Context) -> list[Node]:
        """rules.md section 4: a write of a parameter's .grad over a module's parameters or an
        optimizer's groups clears it; a write that puts a new gradient there (`copy_`, `= g`) is a
        clear followed by a gradient; scaling (`mul_`, `p.grad = p.grad / n`) is neither."""
        written = grad_written(node)
        if written is None:
            return []
        gradient = [self.event(Kind.BACKWARD, node, ctx)] if written.adds else []
        if not written.clears:
            return gradient
        holder = written.holder
        owner = dict(ctx.owners).get(holder) if isinstance(holder, str) else None
        if owner is None and not isinstance(holder, str):
            return [self.event(Kind.PARTIAL, node, ctx)]  # `model.head.weight.grad.zero_()`
        cleared = self._owner_clear(node, owner, ctx, written.zeroes) if owner is not None else [
            self.event(Kind.MAYBE_CLEAR, node, replace(ctx, gate=None))]
        return cleared + gradient


# Tests of a parameter that pick no subset to clear: one without a gradient has nothing to clear.
_EVERY_PARAMETER = r"^(?:not )?(?:{v}\.grad is(?: not)? None|{v}\.requires_grad)$"


def _selective(loop: cst.For) -> bool:
    """Whether a `.grad` write of the loop runs under a test of the loop's parameter (or its
    name) other than whether it has a gradient: `if p.ndim > 1`, `if "bias" not in name`."""
    names = [re.escape(n.value) for n in nodes_in(loop.target) if isinstance(n, cst.Name)]
    if not names:
        return False
    mentions = re.compile(rf"\b(?:{'|'.join(names)})\b")
    every = re.compile(_EVERY_PARAMETER.format(v=f"(?:{'|'.join(names)})"))
    tests = (n.test for n in nodes_in(loop.body) if isinstance(n, cst.If))
    return any(mentions.search(part) and not every.match(part)
               for test in tests for part in map(text_of, _conjuncts(test)))


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation):
        return [*_conjuncts(test.left), *_conjuncts(test.right)]
    return [test]


def disjoint_inner(init: Optional[cst.FunctionDef]) -> list[str]:
    """The inner optimizers (`self.inner`) a custom optimizer's `__init__` builds over another of
    its arguments than the one it hands `super().__init__` (a composite's other parameters): its
    inherited zero_grad() never reaches them. Built over the same argument (KFAC's), or over
    anything else, they may share its parameters."""
    if init is None:
        return []
    params = {p.name.value for p in init.params.params}
    own, inner = None, {}
    for node in nodes_in(init.body):
        if isinstance(node, cst.Call) and text_of(node.func) == "super().__init__" and node.args:
            own = text_of(node.args[0].value)
        elif (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)
              and node.value.args and text_of(node.targets[0].target).startswith("self.")):
            inner[text_of(node.targets[0].target)[5:]] = text_of(node.value.args[0].value)
    return sorted(name for name, argument in inner.items()
                  if own in params and argument in params and argument != own and "." not in name)


def _events_in(node: Node) -> list[Event]:
    return [n for n in _nodes_in(node) if isinstance(n, Event)]


def _nodes_in(node: Node) -> list[Node]:
    found: list[Node] = []
    stack: list[Node] = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children(current))
    return found


def _bare_names(node: cst.CSTNode) -> list[cst.Name]:
    """The names an expression reads whole (not `env` of `env.obs_dim`)."""
    if isinstance(node, cst.Name):
        return [node]
    if isinstance(node, cst.Attribute):
        return []
    return [n for child in node.children for n in _bare_names(child)]


def _hands(statement: cst.CSTNode, local: str, shared: str) -> bool:
    """`shared._grad = local.grad` (or `.grad`, a copy of it: `local.grad.clone()`, `.cpu()`)."""
    if type(statement) is not cst.Assign or len(statement.targets) != 1:
        return False
    target = statement.targets[0].target
    return (isinstance(target, cst.Attribute) and target.attr.value in ("grad", "_grad")
            and text_of(target.value) == shared and f"{local}.grad" in text_of(statement.value))
