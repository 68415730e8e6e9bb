"""Branch conditions as the dataflow sees them: accumulation tests, their phases, correlation keys.

rules.md section 4: `%` tests and their phase (`(i + 1) % k == 0`), a counter compared with a name
about accumulation, `accelerator.sync_gradients`. Equal keys are the same condition, so branches
that test it twice are correlated.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Optional

import libcst as cst

from ..analysis.keys import counter_of, root_of
from ..analysis.model import Test
from ..knowledge.frameworks import ACCELERATE_SYNC
from .naming import block_of, dotted, statements_of, suites, targets_of, text_of
from .walk import nodes_in

# Name segments that speak of gradient accumulation when a counter is compared with them.
_ACCUMULATION_SEGMENT = re.compile(r"accum\w*|micro|microsteps?|microbatch(?:es)?", re.I)


def classify(test: cst.BaseExpression, counters: Mapping[str, str] = {}) -> Test:
    """`counters`: the module's wrapping counters and their keys (`self.n` -> "mod:self.n%k"),
    whose comparisons with a literal are modular tests (`self.n != 0`)."""
    positive = True
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        positive = not positive
        test = test.expression
    modular = _modular(test) or (_wrapped(test, counters) if counters else None)
    if modular is not None:
        key, residue, when_true = modular
        counter = counter_of(key)
        return Test(True, key, residue, positive == when_true, counter=counter, tracked=counter in counters)
    accumulation = any(_accumulation_node(node) for node in nodes_in(test))
    return Test(accumulation, text_of(test), 0, positive, counter=_counter_in(test))


def _counter_in(test: cst.BaseExpression) -> Optional[str]:
    """The counter of the first `counter % k` inside a compound test (`i % k == 0 or last`)."""
    for node in nodes_in(test):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            found = modular_phase(node, 0)
            if found is not None:
                return counter_of(found[0])
    return None


PURE = frozenset({"isinstance", "issubclass", "hasattr", "getattr", "callable", "type"})


_UNSTABLE = frozenset({cst.Call, cst.Await, cst.Yield, cst.NamedExpr, cst.Lambda})


def names_of(test: cst.BaseExpression) -> Optional[frozenset[str]]:
    """The names a test reads (`self.cfg.clip` -> itself and `self`), or None when it calls
    something: a call may give another answer every time."""
    found: set[str] = set()
    for node in nodes_in(test):
        if type(node) is cst.Name or type(node) is cst.Attribute:
            text = text_of(node)
            found.add(text)
            found.add(root_of(text))
        elif type(node) is cst.Call and (isinstance(node.func, cst.Name) and node.func.value in PURE or _lookup(node)):
            continue  # `isinstance(self.optimizer, LBFGS)` answers the same for the same names
        elif type(node) in _UNSTABLE:
            return None
    return frozenset(found)


def _lookup(call: cst.Call) -> bool:
    """`self.opt.get("update_freq", 1)`: a lookup of a setting, as a subscript is."""
    return (isinstance(call.func, cst.Attribute) and call.func.attr.value == "get" and 0 < len(call.args) <= 2
            and all(isinstance(a.value, (cst.SimpleString, cst.Integer, cst.Float, cst.Name)) and a.keyword is None
                    and not a.star for a in call.args))


Settings = dict[str, cst.BaseExpression]


def settings_of(body: Sequence[cst.CSTNode], params: set[str]) -> Settings:
    """Locals a function assigns once, at its top level, from its object's configuration
    (`update_freq = self.opt.get("update_freq", 1)`): tests of them are tests of that, which
    every method of the object answers alike."""
    counts: dict[str, int] = {}
    for statement in statements_of(body):
        for target in targets_of(statement):
            for name in nodes_in(target):
                if isinstance(name, cst.Name):
                    counts[name.value] = counts.get(name.value, 0) + 1
    found: Settings = {}
    for statement in body:
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        assigned = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
        if not isinstance(small, cst.Assign) or not isinstance(assigned, cst.Name):
            continue
        local = assigned.value
        read = names_of(small.value)
        if counts.get(local) == 1 and local not in params and read and {root_of(n) for n in read} <= {"self", "cls"}:
            found[local] = small.value
    return found


def substituted(test: cst.BaseExpression, settings: Settings) -> cst.BaseExpression:
    """`test` with the settings it reads written out (`update_freq > 1` -> `self.opt.get(...) > 1`)."""
    names = [n for n in nodes_in(test) if isinstance(n, cst.Name) and n.value in settings]
    if not names:
        return test
    skip = {id(n.attr) for n in nodes_in(test) if isinstance(n, cst.Attribute)}
    skip |= {id(n.keyword) for n in nodes_in(test) if isinstance(n, cst.Arg) and n.keyword is not None}
    replaced = {id(n): settings[n.value] for n in names if id(n) not in skip}
    if not replaced:
        return test

    class _Writer(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            return replaced.get(id(original), updated)

    result = test.visit(_Writer())
    return result if isinstance(result, cst.BaseExpression) else test


def _accumulation_node(node: cst.CSTNode) -> bool:
    """`%`, `sync_gradients`, a counter compared with an accumulation size (`micro >= grad_accum`),
    not a flag against a constant (`microbatch_size == 1`)."""
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, cst.Modulo) and not isinstance(node.left, (cst.SimpleString, cst.FormattedString))
    if isinstance(node, cst.Attribute):
        return node.attr.value == ACCELERATE_SYNC
    if isinstance(node, cst.Comparison):
        left = node.left
        for target in node.comparisons:
            right = target.comparator
            if not (_literal(left) or _literal(right)) and (_about_accumulation(left) or _about_accumulation(right)):
                return True
            left = right
    return False


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)) or (
        isinstance(node, cst.Name) and node.value in ("None", "True", "False")
    )


def _about_accumulation(node: cst.BaseExpression) -> bool:
    text = text_of(node)
    return "update_freq" in text or any(_ACCUMULATION_SEGMENT.fullmatch(n) for n in re.split(r"[^A-Za-z0-9]", text))


def _modular(test: cst.BaseExpression) -> Optional[tuple[str, int, bool]]:
    """`(i + c) % k == d` -> ("mod:i%k", d - c, True); `!=` and bare `x % k` are the negation."""
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
        found = modular_phase(test, 0)
        return None if found is None else (found[0], found[1], False)
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    left, right = test.left, target.comparator
    if not (isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo)):
        left, right = right, left
    if not (isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo)):
        return None
    value = _offset_against(right, text_of(left.right))
    found = None if value is None else modular_phase(left, value)
    if found is None:
        return None
    return found[0], found[1], isinstance(target.operator, cst.Equal)


def _wrapped(test: cst.BaseExpression, counters: Mapping[str, str]) -> Optional[tuple[str, int, bool]]:
    """`self.n == d`, `self.n != d`, `self.n` (!= 0) of a wrapping counter `self.n`."""
    if isinstance(test, (cst.Name, cst.Attribute)):
        key = counters.get(dotted(test) or "")
        return None if key is None else (key, 0, False)
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    if isinstance(left, cst.Integer):
        left, right = right, left
    key = counters.get(dotted(left) or "")
    if key is None or not isinstance(right, cst.Integer) or not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    return key, int(right.value, 0), isinstance(target.operator, cst.Equal)


def _offset_against(node: cst.BaseExpression, modulus: str) -> Optional[int]:
    """An int literal, or `modulus - n` (which is -n modulo the modulus)."""
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.right, cst.Integer):
        if text_of(node.left) == modulus and isinstance(node.operator, cst.Subtract):
            return -int(node.right.value, 0)
    return None


def modular_phase(modulo: cst.BinaryOperation, equals: int) -> Optional[tuple[str, int]]:
    counter = modulo.left
    offset = 0
    if isinstance(counter, cst.BinaryOperation) and isinstance(counter.right, cst.Integer):
        sign = {cst.Add: 1, cst.Subtract: -1}.get(type(counter.operator))
        if sign is None:
            return None
        offset = sign * int(counter.right.value, 0)
        counter = counter.left
    if not isinstance(counter, (cst.Name, cst.Attribute)):
        return None
    return f"mod:{text_of(counter)}%{text_of(modulo.right)}", equals - offset


Definitions = tuple[cst.BaseExpression, ...]  # the tests a flag may hold: it holds their disjunction
_TESTS = (cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)


def flag_definitions(body: Sequence[cst.CSTNode]) -> dict[str, Definitions]:
    """Flags a body assigns from tests (rules.md v2 section 4, reaching definitions):
    `should_step = (i + 1) % k == 0`, or `flag = True` under `if test:` (then it holds `test`;
    `flag = False` adds nothing). A flag assigned anything else is not a condition we know."""
    found: dict[str, Optional[list[cst.BaseExpression]]] = {}
    _definitions(body, None, found)
    resolved = {name: _copied(name, found, frozenset()) for name in found}
    return {name: tuple(tests) for name, tests in resolved.items() if tests}


def _copied(name: str, found: dict[str, Optional[list[cst.BaseExpression]]],
            seen: frozenset[str]) -> Optional[list[cst.BaseExpression]]:
    """A flag's tests, a copy of another flag (`do_clear = step_now`) standing for that flag's:
    one decision, not two independent ones (issue 47). None: not a condition we know."""
    tests = found.get(name)
    if tests is None or name in seen:
        return None
    out: list[cst.BaseExpression] = []
    for test in tests:
        if isinstance(test, cst.Name):
            copied = _copied(test.value, found, seen | {name})
            if copied is None:
                return None
            out += copied
        else:
            out.append(test)
    return out


def _definitions(body: Sequence[cst.CSTNode], test: Optional[cst.BaseExpression],
                 found: dict[str, Optional[list[cst.BaseExpression]]]) -> None:
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    _define(small.targets[0].target.value, small.value, test, found)
        elif isinstance(statement, cst.If):
            _definitions(block_of(statement.body), statement.test, found)
            if statement.orelse is not None:
                _definitions([statement.orelse] if isinstance(statement.orelse, cst.If) else block_of(statement.orelse.body),
                             None, found)
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            for suite in suites(statement):
                _definitions(block_of(suite), None, found)


def _define(name: str, value: cst.BaseExpression, test: Optional[cst.BaseExpression],
            found: dict[str, Optional[list[cst.BaseExpression]]]) -> None:
    if name in found and found[name] is None:
        return
    literal = value.value if isinstance(value, cst.Name) and value.value in ("True", "False") else None
    if literal == "False":
        found.setdefault(name, [])
    elif literal == "True" and test is not None:
        found.setdefault(name, []).append(test)  # type: ignore[union-attr]
    elif isinstance(value, _TESTS) or isinstance(value, cst.Name) and literal is None:
        found.setdefault(name, []).append(value)  # type: ignore[union-attr]  # a Name: a copy (_copied)
    else:
        found[name] = None


def literal_flags(body: Sequence[cst.CSTNode]) -> frozenset[str]:
    """Names a body assigns nothing but `True` and `False` and tests (`if oom_sync:`): their
    value on a path is a fact that the assignments set (Kind.SET), tested where they are read."""
    values: dict[str, bool] = {}
    tested: set[str] = set()
    for statement in statements_of(body):
        literal = (isinstance(statement, cst.Assign) and len(statement.targets) == 1
                   and isinstance(statement.value, cst.Name) and statement.value.value in ("True", "False"))
        for target in targets_of(statement):
            if literal and isinstance(target, cst.Name):
                values.setdefault(target.value, True)
            else:
                values.update((n.value, False) for n in nodes_in(target) if isinstance(n, cst.Name))
        if isinstance(statement, (cst.If, cst.While)):
            tested.update(n.value for n in nodes_in(statement.test) if isinstance(n, cst.Name))
    return frozenset(name for name, literal in values.items() if literal and name in tested)


def classify_flag(definitions: Definitions) -> Test:
    """One definition is its test; several are their disjunction (accumulation if any is)."""
    if len(definitions) == 1:
        return classify(definitions[0])
    tests = [classify(d) for d in definitions]
    key = "|".join(sorted(text_of(d) for d in definitions))
    return Test(any(t.accumulation for t in tests), key)


# --- the first turn of a loop (`if i == 0:` in `for i, x in enumerate(...)`) ---------------------


def peeled_counter(node: cst.For) -> Optional[str]:
    """The counter of `for i, x in enumerate(...)` or `for i in range(n)` (both from 0) when the
    body tests `i == 0` and has no `break` or `continue` of its own (the first turn, built
    outside the loop, has nowhere to jump)."""
    counter = counter_from_zero(node)
    if counter is None:
        return None
    found = False
    for item in _own_nodes(node.body):
        if isinstance(item, (cst.Break, cst.Continue)):
            return None
        found = found or (isinstance(item, cst.If) and first_turn(item.test) == counter)
    return counter if found else None


def counter_from_zero(node: cst.For) -> Optional[str]:
    """`i` of `for i, x in enumerate(...)` or `for i in range(n)`: 0 in the loop's first turn."""
    target, iterator = node.target, node.iter
    if not isinstance(iterator, cst.Call) or not isinstance(iterator.func, cst.Name) or not iterator.args:
        return None
    args = iterator.args
    if iterator.func.value == "enumerate" and len(args) == 1 and isinstance(target, cst.Tuple):
        head = target.elements[0].value if len(target.elements) == 2 else None
        return head.value if isinstance(head, cst.Name) else None
    starts_at_zero = len(args) == 1 or (isinstance(args[0].value, cst.Integer) and args[0].value.value == "0")
    if iterator.func.value == "range" and starts_at_zero and len(args) <= 2 and isinstance(target, cst.Name):
        return target.value
    return None


def first_turn(test: cst.BaseExpression) -> Optional[str]:
    """`i == 0`, `0 == i`: the counter it tests."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    comparison = test.comparisons[0]
    if not isinstance(comparison.operator, cst.Equal):
        return None
    left, right = test.left, comparison.comparator
    if isinstance(left, cst.Integer):
        left, right = right, left
    if isinstance(left, cst.Name) and isinstance(right, cst.Integer) and right.value == "0":
        return left.value
    return None


def _own_nodes(suite: cst.BaseSuite) -> list[cst.CSTNode]:
    """The statements of a loop body, through if/with/try but not into nested loops or defs."""
    found: list[cst.CSTNode] = []
    pending: list[cst.CSTNode] = list(block_of(suite))
    while pending:
        item = pending.pop()
        found.append(item)
        if isinstance(item, cst.SimpleStatementLine):
            found.extend(item.body)
        elif not isinstance(item, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)):
            pending.extend(s for suite in suites(item) for s in block_of(suite))
    return found


# --- a parameter tested against a literal, which a call's literal argument decides ---------------

_OPERATORS = {cst.Equal: "==", cst.NotEqual: "!=", cst.Is: "is", cst.IsNot: "is not"}


def literal_text(node: Optional[cst.BaseExpression]) -> Optional[str]:
    """The source of a plain literal (`True`, `None`, `1`, `-1`, `"disc"`), else None."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return node.value
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return text_of(node)
    if (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
            and isinstance(node.expression, (cst.Integer, cst.Float))):
        return "-" + text_of(node.expression)
    return None


def given_of(test: cst.BaseExpression, params: Collection[str]) -> Optional[tuple[str, str, str]]:
    """`p`, `p == "disc"`, `1 != p`, `p is None` (nots stripped: Test.positive keeps them) for a
    parameter `p`: (p, operator, literal), the operator "" for a truth test."""
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if isinstance(test, cst.Name) and test.value in params:
        return test.value, "", ""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    operator = _OPERATORS.get(type(target.operator))
    left, right = test.left, target.comparator
    if literal_text(left) is not None:
        left, right = right, left
    literal = literal_text(right)
    if operator is None or literal is None or not isinstance(left, cst.Name) or left.value not in params:
        return None
    return left.value, operator, literal
