"""Receivers as the scope builder names them (rules.md section 2): a receiver's key, with the
names that stand for one in a body (`opt = self.optimizers[k]`, a loop variable over a
collection) and the flags that hold a test (`do_step = self._should_do_step()`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Optional

import libcst as cst

from ..analysis.keys import root_of
from ..knowledge.frameworks import optimizer_key
from .calls import Context
from .clears import Clears
from .conditions import flag_definitions, substituted
from .naming import binds_self, block_of, bound_arguments, collection_key, element_name, positional, receiver_key, statements_of
from .walk import nodes_in


class Receivers(Clears):
    """The receivers part of the scope builder (scopes.py builds the statements)."""

    def key(self, node: cst.BaseExpression, ctx: Context) -> str:
        key = self.key_text(receiver_key(node), ctx)
        framework = self.framework(ctx)
        return key if framework is None else optimizer_key(framework, key)

    def aliases(self, body: Sequence[cst.CSTNode], ctx: Context) -> Context:
        """Names that stand for one receiver in this body: `opt = self.optimizers[k]` (assigned
        once), and loop variables over collections (`for opt in opts` -> `opts[*]`)."""
        found: dict[str, Optional[str]] = {}

        def bind(name: str, value: Optional[str]) -> None:
            found[name] = value if found.get(name, value) == value else None

        for statement in statements_of(body):
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0].target, statement.value
                if isinstance(target, cst.Name):
                    simple = isinstance(value, (cst.Name, cst.Attribute, cst.Subscript))
                    # `opt = self.optimizers()` in a hook: the framework's optimizer. Elsewhere a
                    # call's key is not read (its text is generated: not worth it for nothing).
                    framework = self.framework(ctx) if isinstance(value, cst.Call) else None
                    key = self.key(value, ctx) if simple or framework is not None else None
                    accessed = self._accessed(value, ctx) if isinstance(value, cst.Call) and key is None else None
                    if accessed is not None:  # `opt = self.get_optimizer()` returning `self._opt`
                        bind(target.value, accessed)
                        continue
                    bind(target.value, key if simple or framework is not None and key == framework.optimizer else None)
            elif isinstance(statement, cst.For):
                name = element_name(statement.target, statement.iter)
                collection = collection_key(statement.iter)
                if name is not None:
                    bind(name, None if collection is None else self.key_text(collection, ctx))
        pairs = tuple((n, v) for n, v in found.items() if v is not None and v != n)
        definitions = flag_definitions(body)
        for statement in statements_of(body):
            # `do_step = self._should_do_step()`: a method of ours that returns a test.
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1 and isinstance(statement.value, cst.Call):
                target = statement.targets[0].target
                returned = self._returned_test(statement.value, ctx)
                if isinstance(target, cst.Name) and returned is not None and target.value not in definitions:
                    definitions[target.value] = (returned,)
        flags = tuple(definitions.items())
        return replace(ctx, aliases=pairs + ctx.aliases, conditions=flags + ctx.conditions) if pairs or flags else ctx

    def _accessed(self, call: cst.Call, ctx: Context) -> Optional[str]:
        """`self.get_optimizer()`, a method of the object whose body is `return self.X` alone and
        that takes no argument: the receiver `self.X`, as written in the caller."""
        if call.args or not isinstance(call.func, cst.Attribute) or not isinstance(call.func.value, cst.Name) \
                or call.func.value.value != "self":
            return None
        resolved = self.resolve(call.func, ctx)
        body = block_of(resolved[0].body) if resolved is not None else ()
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
            return None
        returned = body[0].body[0]
        value = returned.value if isinstance(returned, cst.Return) else None
        if not isinstance(value, cst.Attribute) or not isinstance(value.value, cst.Name) or value.value.value != "self":
            return None
        return self.key(value, ctx)

    def _returned_test(self, call: cst.Call, ctx: Context) -> Optional[cst.BaseExpression]:
        """The test a function of ours returns when its last statement is `return <test>`, its
        parameters written as the call's arguments (`should_step(i, accum)` returning `(step +
        1) % accum_steps == 0` is `(i + 1) % accum == 0`)."""
        resolved = self.resolve(call.func, ctx)
        body = block_of(resolved[0].body) if resolved is not None else ()
        last = body[-1] if body else None
        if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)):
            return None
        value = last.body[-1].value
        if not isinstance(value, (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)):
            return None
        if not call.args:
            return value
        assert resolved is not None
        params = positional(resolved[0])
        bound, starred = bound_arguments(call, params[1:] if binds_self(resolved[0], resolved[1]) else params)
        read = {n.value for n in nodes_in(value) if isinstance(n, cst.Name)}
        every = {p.name.value for p in (*resolved[0].params.posonly_params, *resolved[0].params.params,
                                        *resolved[0].params.kwonly_params)}
        if starred or (read & every) - set(bound) or not all(isinstance(a, (cst.Name, cst.Attribute, cst.Integer))
                                                             for a in bound.values()):
            return None  # a parameter left to its default, or an argument computed at the call
        return substituted(value, bound)

    def key_text(self, key: str, ctx: Context) -> str:
        root = root_of(key)
        for name, value in ctx.aliases:
            if name == root:
                return value + key[len(root):]
        return key
