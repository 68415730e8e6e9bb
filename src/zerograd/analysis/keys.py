"""Keys are plain strings: receivers as the analysis names them (`self.opt`, `opts[*]`) and
condition keys (`mod:step%k`). These helpers take them apart without LibCST, and say how two
receivers relate (one within another, a clear of a collection covering its entries, two
optimizers sharing a module)."""

from __future__ import annotations

import re
from typing import Optional

_ROOT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
INVARIANT = "inv:"  # prefix of the key of a test no iteration can change (a knob)
FLAG = "flag:"  # prefix of the key of a flag's value, which only its assignments change (1: True)
# The gradients of a module's parameters handed to another module's parameters (an A3C worker's
# `shared_p._grad = p.grad`), as a target of their own: `model.grad` for `model`'s.
HANDED = ".grad"
OUTER = "^"  # marks a caller's key inside a method of another object (inward)
ARGUMENT = "arg:"  # prefix of what a call's literal argument answers of its callee's test (given_facts)


def root_of(key: str) -> str:
    found = _ROOT.match(key)
    return found.group(0) if found else ""


def rebase(key: str, old: str, new: str) -> Optional[str]:
    """`key` with its leading `old` replaced by `new` (`opt.x`, `opt` -> `self.o` gives `self.o.x`)."""
    if key == old:
        return new
    if key.startswith(old) and key[len(old)] in ".[":
        return new + key[len(old):]
    return None


_NAMES = re.compile(r"(?<![\w.'\"])[A-Za-z_][\w.]*")
_NEUTRAL = frozenset({"and", "or", "not", "in", "is", "None", "True", "False", "isinstance", "hasattr", "getattr", "len"})


def rename(key: str, old: str, new: str) -> Optional[str]:
    """A condition key about `old` as the same condition about `new` (`inv:self.k > 1` for
    `agent.k > 1`); None when it reads other names (a modular key's modulus may: it is the
    same value wherever the counter is)."""
    prefix = key[:4] if key[3:4] == ":" else ""
    body = key[len(prefix):]
    counter = counter_of(key)
    if counter is not None and rebase(counter, old, new) is None:
        return None
    out: list[str] = []
    last = 0
    for found in _NAMES.finditer(body):
        name = found.group(0)
        renamed = rebase(name, old, new)
        if renamed is None and counter is None and name not in _NEUTRAL:
            return None
        out.append(body[last:found.start()] + (name if renamed is None else renamed))
        last = found.end()
    return prefix + "".join(out) + body[last:]


def within(part: str, whole: str) -> bool:
    """`model.encoder` lies within `model` (and `model` within itself), and within
    `model[-model.head]`, the parameters of `model` but those of `model.head` (an optimizer
    built over a difference of sets: front/holdings.py)."""
    if rebase(part, whole, whole) is not None:
        return True
    base, removed = difference(whole)
    return (base is not None and part != base and within(part, base)
            and not any(within(part, r) or within(r, part) for r in removed))


def moved(key: str, old: str, new: str) -> Optional[str]:
    """rebase, the parts a difference removes included (`vae[-vae.discr]` -> `self[-self.discr]`)."""
    base, removed = difference(key)
    if base is None:
        return rebase(key, old, new)
    parts = [rebase(r, old, new) for r in removed]
    start = rebase(base, old, new)
    return None if start is None or None in parts else f"{start}[-{','.join(p for p in parts if p)}]"


def inward(key: str, receiver: str) -> str:
    """A caller's key as a method of `receiver` names it: within the receiver, under `self`;
    the caller's other `self.` keys marked (`^self.critic`: not the callee's `self.critic`)."""
    if within(key, receiver):
        return moved(key, receiver, "self") or key
    return OUTER + key if root_of(key) == "self" or key.startswith(OUTER) else key


def outward(key: str, receiver: str) -> str:
    """A method's key back in its caller's terms."""
    if key.startswith(OUTER):
        return key[1:]
    return moved(key, "self", receiver) or key


def difference(key: str) -> tuple[Optional[str], list[str]]:
    """`model[-model.head,model.tail]` -> (`model`, [`model.head`, `model.tail`]); (None, []) for
    any other key (`nets[-1]` is an entry: what it removes is not within it)."""
    start = key.find("[-")
    if start <= 0 or not key.endswith("]"):
        return None, []
    base, removed = key[:start], key[start + 2:-1].split(",")
    if not all(rebase(r, base, base) is not None and r != base for r in removed):
        return None, []
    return base, removed


def related(module: str, modules: frozenset[str]) -> bool:
    """A call of `model` runs `model.encoder`, whose parameters an optimizer may hold, and back."""
    return any(within(module, m) or within(m, module) for m in modules)


def counter_of(key: Optional[str]) -> Optional[str]:
    """The counter of a modular key: "mod:self.step%k" -> "self.step"."""
    if key is None or not key.startswith("mod:"):
        return None
    return key[4:].partition("%")[0]


# A knob comparing a name with an int literal (`k==1`, `k>1`, `self.accum>=2`: keys hold no spaces).
_COMPARED = re.compile(r"^inv:(?P<size>[A-Za-z_][\w.]*)\s*(?P<op>==|!=|>=|<=|>|<)\s*(?P<bound>\d+)$")
_HOLDS = {"==": int.__eq__, "!=": int.__ne__, ">=": int.__ge__, "<=": int.__le__, ">": int.__gt__, "<": int.__lt__}


def unit_key(size: str) -> str:
    return f"{INVARIANT}{size}==1"


def size_key(modular: str) -> Optional[str]:
    """The unit key of a modular key's window size ("mod:i%k" -> "inv:k==1"); None for others."""
    return unit_key(modular.rpartition("%")[2]) if modular.startswith("mod:") else None


def unit_window(key: str, value: bool) -> Optional[tuple[str, bool]]:
    """A knob on a window size (`k` in `i % k`) read as whether the size is 1 (sizes start at 1): `k > 1` false
    says it is, `k >= 2` true says it is not; None when the comparison does not tell."""
    found = _COMPARED.match(key)
    if found is None:
        return None
    holds, bound = _HOLDS[found["op"]], int(found["bound"])
    at_one = holds(1, bound)
    if any(holds(size, bound) == at_one for size in range(2, bound + 3)):
        return None
    return unit_key(found["size"]), value == at_one


def covers(cleared: str, target: str) -> bool:
    """A clear of `opts[*]` (every entry, e.g. `for o in opts.values(): o.zero_grad()`) clears
    `opts["g"]`, and `opts.g` of a dict read by attribute (Munch, EasyDict: StarGAN v2)."""
    if cleared == target:
        return True
    return cleared.endswith("[*]") and target.startswith((cleared[:-2], cleared[:-3] + "."))


def unrelated(module: Optional[str], target: str, links: dict[str, frozenset[str]]) -> bool:
    """`teacher.zero_grad()` is no clear of an optimizer known to hold `student`'s parameters."""
    held = links.get(target)
    if module is None or not held or "[" in module:
        return False  # an entry of a collection (`models[*]`) may be any module
    return not any(within(m, module) for m in held)


def shares(other: str, target: str, links: dict[str, frozenset[str]]) -> bool:
    """Two optimizers known to hold parameters of one module (`info_optim` over `G` and `D`), or
    a clear of a holder of `target` (`self.multi_optim.zero_grad()` for `self.multi_optim[*].optim`:
    a wrapper's clear is its optimizers' as far as anyone can tell, never proof of a lost update)."""
    if other != target and within(target, other):
        return True
    mine, theirs = links.get(target), links.get(other)
    if other == target or not mine or not theirs:
        return False
    return any(within(a, b) or within(b, a) for a in mine for b in theirs)
