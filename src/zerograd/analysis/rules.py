"""Codes, names and one-line messages; turns the dataflow's verdicts into findings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .verdicts import Verdict


@dataclass(frozen=True)
class Rule:
    code: str
    name: str  # kebab-case, names the pattern (ruff's convention)
    summary: str
    message: str  # formatted with o=the optimizer as written


RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule(
            "ZG001",
            "gradients-never-cleared",
            "an optimizer's gradients are never cleared in the training loop",
            "gradients of '{o}' are never cleared in this loop; "
            "call {o}.zero_grad() before backward() or after step()",
        ),
        Rule(
            "ZG002",
            "zero-grad-between-backward-and-step",
            "zero_grad() runs between backward() and step(), so the step applies zeroed gradients",
            "'{o}' is cleared after backward() and before {o}.step(), so the step applies zeroed "
            "gradients; move {o}.zero_grad() before backward()",
        ),
        Rule(
            "ZG003",
            "accumulation-frequency-mismatch",
            "zero_grad() and step() run at different frequencies, defeating gradient accumulation",
            "'{o}' is cleared and stepped at different frequencies, which defeats gradient "
            "accumulation; clear it under the same condition as {o}.step(), right after the step",
        ),
        Rule(
            "ZG004",
            "zero-grad-skipped-on-some-path",
            "some path through the loop reaches step() without clearing the gradients",
            "a path through this loop reaches {o}.step() without clearing '{o}' (a continue or a "
            "branch skips the zero_grad()); clear at the top of the loop or right after step()",
        ),
        Rule(
            "ZG005",
            "step-function-never-clears",
            "a step function calls backward() and step() but nothing here ever clears the gradients",
            "this step function never clears '{o}' and no caller in this module does; "
            "call {o}.zero_grad() before backward() or after step()",
        ),
        Rule(
            "ZG006",
            "gradients-from-another-optimizers-loss",
            "an optimizer steps on gradients that another optimizer's loss left in its parameters",
            "{o}.step() also applies the gradients that {loss} (line {line}, stepped by "
            "'{other}') left in its parameters; detach what that loss takes from {o}'s modules, or "
            "clear {o} right before its own loss",
        ),
        Rule("ZG900", "syntax-error", "the file cannot be parsed", "cannot parse: {o}"),
        Rule("ZG901", "internal-error", "zerograd failed on this file (a bug: please report it)",
             "internal error: {o}"),
    )
}

FIXABLE = ("ZG001", "ZG002", "ZG003")  # codes fix.py can repair (interface.md, Autofix)

_CODE_OF_VERDICT = {
    "never_cleared": "ZG001",
    "cleared_before_step": "ZG002",
    "zeroed_before_step": "ZG002",
    "frequency_mismatch": "ZG003",
    "skipped_clear": "ZG004",
    "partially_cleared": "ZG001",
    "part_cleared": "ZG001",
    "leaked_in": "ZG001",
    "applied_twice": "ZG001",
    "stepped_twice": "ZG001",
    "contaminated": "ZG006",
    "contaminated_instead": "ZG006",
    "contaminated_meant": "ZG006",
}


def code_for(verdict: Verdict, in_step_function: bool) -> str:
    if verdict.kind in ("never_cleared", "partially_cleared", "part_cleared") and in_step_function:
        return "ZG005"
    return _CODE_OF_VERDICT[verdict.kind]


# Messages for a verdict that says more than its code's usual message.
_VARIANTS = {
    "zeroed_before_step": "'{o}' is zeroed in place after backward() and before {o}.step() on some path, so the "
    "step still moves the weights (momentum, weight decay); set the gradients to None "
    "({o}.zero_grad(set_to_none=True)) or skip the step",
    "contaminated_meant": "{o}.step() also applies the gradients that {loss} (line {line}, the loss meant for "
    "'{other}') left in its parameters; detach what that loss takes from {o}'s modules, or clear {o} right "
    "before its own loss",
    "contaminated_instead": "{o}.step() applies the gradients that {loss} (line {line}, stepped by '{other}') "
    "left in its parameters, and none of its own loss's: a clear removed those before this step; clear {o} "
    "before its own backward(), not between it and its step",
    "partially_cleared": "gradients of '{o}' are never cleared in this loop: the .grad write at line {line} "
    "clears only some of its parameters; call {o}.zero_grad() before backward() or after step()",
    "part_cleared": "gradients of '{o}' are never wholly cleared in this loop: the clear at line {line} leaves "
    "those of {other}, which '{o}' also holds; call {o}.zero_grad() before backward() or after step()",
    "handed_copies_never_cleared": "gradients of '{o}' are never cleared in this loop, and a copy of them is "
    "handed to another module's parameters at every update (`shared.grad = p.grad.clone()`): {o}'s .grad sums "
    "every loss so far, so each copy hands all earlier losses over again; call {o}.zero_grad() before backward()",
    "handed_never_cleared": "gradients of '{o}' are never cleared in this loop, and they are handed to another "
    "module's parameters (`shared._grad = p.grad`) whose step applies every earlier loss again: since PyTorch 2.0 "
    "the shared optimizer's zero_grad() sets its .grad to None and leaves {o}'s; call {o}.zero_grad() before "
    "backward()",
    "leaked_in": "the first {o}.step() of this loop also applies the gradients that the backward() at line "
    "{line}, before the loop, left in .grad; clear '{o}' before the loop or at the top of the loop",
    "applied_twice": "{o}.step() applies again the gradients that {other}.step() already applied: both are "
    "built over the same parameters; clear '{o}' before its own backward() or step only one of them",
    "stepped_twice": "{o}.step() applies again the gradients that an earlier {o}.step() already applied: "
    "no clear comes between the two steps; clear '{o}' after the first step or before the next backward()",
    "leaked_in_unplaced": "the first {o}.step() of this loop also applies the gradients that a backward() "
    "before the loop left in .grad; clear '{o}' before the loop or at the top of the loop",
    "hook_never_cleared": "gradients of '{o}' are never cleared: the framework steps it every batch but this "
    "override of its zero_grad hook never clears it; call {o}.zero_grad() in it",
    "hook_hook_never_cleared": "gradients of '{o}' are never cleared: {runner} steps it every batch but this "
    "override of {hook}() never clears it; call {o}.zero_grad() in it",
    # In a hook (rules.md section 7) the user wrote neither the framework's optimizer nor its
    # backward and step, and cannot move its clear across them: {o} is the clear as written.
    "hook_cleared_before_step": "{o} in {hook}() clears the gradients after {runner}'s backward() and before its "
    "optimizer step, so the step applies zeroed gradients; drop it ({runner} clears them itself{advice})",
    "hook_zeroed_before_step": "{o} in {hook}() zeroes the gradients in place after {runner}'s backward() and "
    "before its optimizer step on some path, so the step still moves the weights (momentum, weight decay); "
    "set them to None instead (zero_grad(set_to_none=True)): the step skips parameters without gradients",
    "hook_frequency_mismatch": "{o} in {hook}() clears the gradients on batches where {runner} accumulates them "
    "without stepping, which defeats gradient accumulation; drop it ({runner} clears them itself{advice})",
}
CLEAR_KINDS = frozenset({"cleared_before_step", "zeroed_before_step", "frequency_mismatch"})  # at the clear
HOOK_KINDS = CLEAR_KINDS | {"hook_never_cleared"}


@dataclass(frozen=True)
class Hook:
    """Where a finding in a framework's hook is: the hook, who calls it, and where a clear of
    the user's own belongs (Lightning's optimizer_zero_grad), for its message."""

    name: str
    runner: str
    clear_hook: str = ""


def message(code: str, optimizer: str, kind: str = "", line: int = 0, other: str = "", loss: str = "",
            hook: Optional[Hook] = None) -> str:
    if code == "ZG005" and kind in ("partially_cleared", "part_cleared"):
        kind = ""
    if kind == "leaked_in" and not line:
        kind = "leaked_in_unplaced"
    words = {"o": optimizer, "line": line, "other": other, "loss": loss}
    if hook is not None and kind in HOOK_KINDS:
        kind = f"hook_{kind}"
        advice = f", or override {hook.clear_hook}() to clear them your own way" if hook.clear_hook else ""
        words.update(hook=hook.name, runner=hook.runner, advice=advice)
    return _VARIANTS.get(kind, RULES[code].message).format(**words)


@dataclass(frozen=True)
class RulePage:
    """A rule's documentation page (ruledocs/ZG001.md), as shipped with the package."""

    text: str

    def section(self, heading: str) -> str:
        match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", self.text, re.S | re.M)
        return match.group(1).strip() if match else ""


def rule_page(code: str) -> RulePage:
    try:
        from importlib import resources  # only --explain and SARIF read the pages

        return RulePage(resources.files("zerograd").joinpath("ruledocs").joinpath(f"{code}.md").read_text(encoding="utf-8"))
    except (FileNotFoundError, OSError):
        return RulePage("")
