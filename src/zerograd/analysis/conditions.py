"""What is known of a path's conditions (rules.md section 4, condition facts): outcomes of keyed
tests, held until a name in them is assigned (reaching definitions), and the phases of modular
counters, which move as the counters do. flow.py reads and updates them on a path state."""

from __future__ import annotations

import ast
import re
from typing import Optional

from .graph import BackEffect
from .keys import ARGUMENT, FLAG, INVARIANT, counter_of, size_key, unit_window
from .model import Branch, Event, Node, Test, children

MAX_RESIDUE = 2  # modular facts further from the current phase than this are forgotten
Facts = frozenset[tuple[str, int, bool]]


def assume(facts: Facts, test: Test, value: bool) -> Optional[Facts]:
    key, residue = test.key, test.residue
    assert key is not None
    modulus = _modulus(key)
    if modulus is not None:
        residue %= modulus  # `(i + 1) % 4 == 0` is the phase `i % 4 == 3`
    if (size_key(key), 0, True) in facts:
        # A window of size 1 (`if k == 1:` chose it): every iteration ends the window.
        return facts if value else None
    unit = unit_window(key, value)
    if unit is not None and key != unit[0]:
        known = assume(facts, Test(False, unit[0]), unit[1])  # `k > 1` false: the size is 1
        if known is None:
            return None
        facts = known
    excluded = set()
    for fact_key, fact_residue, fact_value in facts:
        if fact_key != key:
            continue
        if fact_residue == residue and fact_value != value:
            return None
        if fact_residue != residue and fact_value and value:
            return None  # the counter cannot sit at two phases at once
        if not fact_value:
            excluded.add(fact_residue)
    if not value and modulus is not None and len(excluded | {residue}) >= modulus:
        return None  # every other phase is ruled out: the counter sits at this one
    return facts | {(key, residue, value)}


def counted(facts: Facts, event: Event, to: bool) -> Facts:
    """An object's wrapping counter or a flag (`event.target`, its key `event.label`) moved on by
    `event.phase`, or set to it: what was known of its value moves along, or gives way."""
    kept = set()
    for key, residue, value in facts:
        if counter_of(key) != event.target and key != event.label:
            kept.add((key, residue, value))
        elif not to and (moved := _moved(key, residue, event.phase)) is not None:
            kept.add((key, moved, value))
    if to:
        modulus = _modulus(event.label)
        kept.add((event.label, event.phase if modulus is None else event.phase % modulus, True))
    return frozenset(kept)


def _moved(key: str, residue: int, by: int) -> Optional[int]:
    """A modular fact's residue after its counter moves `by`; None: forgotten (too far from the
    current phase, where the modulus is not a literal)."""
    modulus = _modulus(key)
    if modulus is not None:
        return (residue + by) % modulus
    return residue + by if abs(residue + by) <= MAX_RESIDUE else None


def _modulus(key: str) -> Optional[int]:
    """The modulus of a modular key when it is a literal ("mod:i%4" -> 4)."""
    if not key.startswith("mod:"):
        return None
    text = key.rpartition("%")[2]
    return int(text) if text.isdigit() and 0 < int(text) <= 64 else None


def shift(facts: Facts, effect: BackEffect) -> Facts:
    """Going around a loop: a fact holds until a name in it is assigned (reaching definitions);
    a modular counter that moves on shifts its phase by one."""
    if not facts:
        return facts
    kept = set()
    for key, residue, value in facts:
        if key.startswith(INVARIANT):
            kept.add((key, residue, value))  # a knob: the same answer in every iteration
        elif key.startswith(FLAG):
            if not effect.everything:  # set by its assignments only (a step function's: a new call)
                kept.add((key, residue, value))
        elif key.startswith("mod:"):
            counter = key[4:].partition("%")[0]
            # Moved (or set) by the body itself, the counter's events have shifted it already.
            moves = counter not in effect.shifted and (
                effect.everything or counter in effect.moves or counter.split(".")[0] in effect.moves)
            moved = _moved(key, residue, 1 if moves else 0)
            if moved is not None:
                kept.add((key, moved, value))
        elif not effect.everything and not _mentions(key, effect.moves):
            kept.add((key, residue, value))
    return frozenset(kept)


def forget(facts: Facts, names: frozenset[str]) -> Facts:
    """The facts that mention none of `names` (a loop's targets, bound anew as it starts)."""
    kept = frozenset(fact for fact in facts if not any(
        w in names or w.split(".")[0] in names for w in _WORDS.findall(fact[0])))
    return facts if len(kept) == len(facts) else kept


_WORDS = re.compile(r"[A-Za-z_][A-Za-z_0-9.]*")  # the names (dotted) a key reads
_CALL = re.compile(r"[\w\])]\s*\(")  # `f(`, `a.b(`, `x[0](`; not a parenthesised part `(i + 1) % k`


def _mentions(key: str, names: frozenset[str]) -> bool:
    # An attribute of another object may be changed by any call (`accelerator.sync_gradients`
    # by `accelerator.backward()`): only facts about local names and the object's own settings
    # (`self.delay`, REDQ's `(i + 1) % self.policy_update_delay == 0 or i == n - 1`) are known
    # to hold until the loop assigns them.
    words = set(_WORDS.findall(key))
    return _CALL.search(key) is not None or "[" in key or any(
        w in names or w.split(".")[0] in names or ("." in w and not _own_setting(w, names)) for w in words)


def _own_setting(word: str, names: frozenset[str]) -> bool:
    """`self.x` (or `self.x.y`), when the loop assigns nothing of `self.x`."""
    own = ".".join(word.split(".")[:2])
    return word.startswith("self.") and not any(n == own or n.startswith(own + ".") for n in names)


# --- a call's literal arguments decide its callee's tests of them (issue 45) -----------------------


def given_tests(node: Node) -> list[Test]:
    """The tests of a parameter against a literal in a function's body (Test.given)."""
    found = [node.test] if isinstance(node, Branch) and node.test is not None and node.test.given is not None else []
    for child in children(node):
        found.extend(given_tests(child))
    return found


def given_facts(tests: list[Test], values: dict[str, str]) -> Facts:
    """What a call's literals (`update_params=False`) answer of the callee's tests: facts
    entering it, so that only the arms the call selects are paths."""
    facts = set()
    for test in tests:
        assert test.given is not None and test.key is not None
        param, operator, literal = test.given
        if param in values:
            answer = decide(operator, values[param], literal)
            if answer is not None:
                facts.add((ARGUMENT + test.key, test.residue, answer))
    return frozenset(facts)


def decide(operator: str, value: str, literal: str) -> Optional[bool]:
    """`value <operator> literal` as Python answers it (operator "": the value's truth)."""
    try:
        left = ast.literal_eval(value)
        right = ast.literal_eval(literal) if operator else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if operator == "":
        return bool(left)
    if operator in ("==", "!="):
        return bool(left == right) == (operator == "==")
    if right is None and operator in ("is", "is not"):  # identity is only sure for None
        return (left is None) == (operator == "is")
    return None
