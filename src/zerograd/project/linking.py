"""Building and linking one group of the project's modules (project.py plans the groups): each
module through the front end in import order, its calls of the others' functions bound to them,
then one program analysed once, findings handed back to the module where each is reported.
"""

from __future__ import annotations

import ast
import bisect
import gc
import os
import warnings
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Optional

from ..analysis.model import Branch, Call, Event, Finding, Function, Loop, Node, Program, Seq, Settings, Span, Try
from ..engine import Front, Report, analyse, front_end
from ..front.relevance import Scan
from ..front.sites import Sites
from ..knowledge.frameworks import SETTINGS, Outside, accumulation_of
from ..knowledge.optimizers import TORCH_FAMILY
from .plan import Project, qualified_name


@dataclass
class Linked:
    """The sites of several modules numbered one after another."""

    bases: list[int]
    locators: list[Sites]

    def module_of(self, site: int) -> int:
        return bisect.bisect_right(self.bases, site) - 1

    def locate(self, site: int) -> Span:
        number = self.module_of(site)
        return self.locators[number].locate(site - self.bases[number])

    def text(self, site: int) -> str:
        number = self.module_of(site)
        return self.locators[number].text(site - self.bases[number])


def check_group(project: Project, group: list[str], settings: Settings) -> dict[str, list[Finding]]:
    """Build the modules of one group in order, link them, and analyse them as one program."""
    return inspect_group(project, group, settings)[0]


def inspect_group(project: Project, group: list[str], settings: Settings) -> tuple[dict[str, list[Finding]], Report]:
    """check_group, and how many scopes the linked program analysed (for the benchmarks)."""
    enabled = gc.isenabled()
    gc.disable()  # acyclic trees, freed by reference counting (engine.inspect_source)
    try:
        return _check_group(project, group, settings)
    finally:
        if enabled:
            gc.enable()


def _check_group(project: Project, group: list[str], settings: Settings) -> tuple[dict[str, list[Finding]], Report]:
    absolute = [os.path.abspath(p) for p in group]
    fronts: dict[str, Front] = {}
    results: dict[str, list[Finding]] = {}
    accumulation = _group_settings(project, absolute)
    pytorch = any(i.module.lstrip(".").split(".")[0] in TORCH_FAMILY for a in absolute for i in project.units[a].imports)
    for path in absolute:
        unit = project.units[path]
        # A name of a module not built yet (an import cycle) only keeps more bodies: _link drops the call.
        outside = Outside(partial(_hooked_base, project, fronts, path), accumulation, pytorch)
        front = front_end(unit.text, settings, linked=unit.linked, link=partial(_link, project, fronts, path),
                          outside=outside, scan=unit.scan)
        if isinstance(front, Report):
            results[path] = front.findings
        else:
            fronts[path] = front
    report = Report([])
    if fronts:
        program, sites, order = _combine(fronts)
        report, sited = analyse(program, sites)
        for path in order:
            results.setdefault(path, [])
        for site, finding in sited:
            results[order[sites.module_of(site)]].append(finding)
    return {project.index.paths[a]: found for a, found in results.items()}, replace(report, findings=[])


def _link(project: Project, fronts: dict[str, Front], importer: str, qualified: str) -> Optional[str]:
    """The function of an already built module that `qualified` names in `importer`."""
    origin = project.origin(importer, qualified)
    if origin is None or origin[0] not in fronts or origin[1] not in fronts[origin[0]].exports.functions:
        return None
    return "\0".join(origin)


def _hooked_base(project: Project, fronts: dict[str, Front], importer: str, qualified: str) -> Optional[str]:
    """The framework whose hooks the project's class `qualified` (a base in `importer`) has."""
    origin = project.origin(importer, qualified)
    return fronts[origin[0]].exports.hooked.get(origin[1]) if origin is not None and origin[0] in fronts else None


def _group_settings(project: Project, group: list[str]) -> dict[str, Optional[int]]:
    """A framework's accumulation settings in a group's modules (`Trainer(accumulate_grad_batches=
    4)` in train.py for the LightningModule of model.py): keyword -> the literal they agree on."""
    found: dict[str, Optional[int]] = {}
    for path in group:
        unit = project.units[path]
        if not any(keyword in unit.text for keyword in SETTINGS):
            continue
        tree = _parsed(unit.text)
        aliases = unit.outline.aliases if unit.outline is not None else (Scan(tree).aliases if tree is not None else {})
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and accumulation_of(qualified_name(node.func, aliases)):
                for keyword in node.keywords:
                    if keyword.arg in SETTINGS:
                        value = keyword.value
                        literal = value.value if isinstance(value, ast.Constant) and type(value.value) is int else None
                        found[keyword.arg] = literal if found.get(keyword.arg, literal) == literal else None
    return found


def _parsed(text: str) -> Optional[ast.Module]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _combine(fronts: dict[str, Front]) -> tuple[Program, Linked, list[str]]:
    order = list(fronts)
    function_bases, site_bases = [], []
    functions = sites = 0
    for path in order:
        function_bases.append(functions)
        site_bases.append(sites)
        functions += len(fronts[path].program.functions)
        sites += len(fronts[path].sites.nodes)
    where = {path: number for number, path in enumerate(order)}
    called: set[int] = set()

    def target(call: Call, number: int) -> Optional[Call]:
        module, _, name = (call.external or "").partition("\0")
        if module not in where:
            return None
        exports = fronts[module].exports
        local, params = exports.functions[name]
        callee = function_bases[where[module]] + local
        bindings = [(_parameter(param, params), key) for param, key in call.bindings if param[0] != "@"]
        if "." in name and params:
            bindings += _fields(call, params[0], exports.fields.get(name.rsplit(".", 1)[0]))
        called.add(callee)
        return Call(call.site + site_bases[number], callee, tuple(b for b in bindings if b[0]))

    linked: list[Function] = []
    table_of: list[int] = []
    for number, path in enumerate(order):
        program = fronts[path].program
        mover = _Mover(function_bases[number], site_bases[number], partial(target, number=number))
        for function in program.functions:
            linked.append(replace(function, body=mover.seq(function.body), site=_shifted(function.site, site_bases[number])))
            table_of.append(number)
    for fid in called:  # called from another module: not a step function (rules.md section 3)
        linked[fid] = replace(linked[fid], step_function=False)
    tables = tuple(fronts[path].program.links for path in order)
    phases: dict[str, Optional[int]] = {}
    for path in order:  # counters named alike in two modules that start apart start nowhere known
        for key, phase in fronts[path].program.phases.items():
            phases[key] = phase if phases.get(key, phase) == phase else None
    known = {key: phase for key, phase in phases.items() if phase is not None}
    return (Program(linked, {}, tables, tuple(table_of), known), Linked(site_bases, [fronts[p].sites for p in order]),
            order)


def _shifted(site: int, base: int) -> int:
    return site if site < 0 else site + base  # -1: a module body without a first statement


def _fields(call: Call, me: str, fields: Optional[tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]) -> list[tuple[str, str]]:
    """A method's `self.optimizer` as the caller's `opt`: the constructor was handed `opt` (bound
    `@optimizer` or `@#1` by calls.py) and its `__init__` keeps `self.optimizer = optimizer`."""
    if fields is None:
        return []
    params, kept = fields
    handed = {_parameter(param[1:], params): key for param, key in call.bindings if param[0] == "@"}
    return [(f"{me}.{attr}", handed[param]) for attr, param in kept if param in handed]


def _parameter(param: str, params: tuple[str, ...]) -> str:
    if param.startswith("#"):
        position = int(param[1:])
        return params[position] if position < len(params) else ""
    return param if param in params else ""


class _Mover:
    """A module's IR with its function and site numbers moved into the linked program, and
    its external calls bound (or dropped: a function nobody built performs no event)."""

    def __init__(self, functions: int, sites: int, bind: Callable[[Call], Optional[Call]]) -> None:
        self.functions, self.sites, self.bind = functions, sites, bind

    def seq(self, node: Seq) -> Seq:
        return Seq(tuple(self.node(item) for item in node.items))

    def node(self, node: Node) -> Node:
        if isinstance(node, Seq):
            return self.seq(node)
        if isinstance(node, Call):
            if node.external is not None:
                return self.bind(node) or Seq()
            callee = node.callee + self.functions if node.callee >= 0 else node.callee
            funcs = tuple((name, fid + self.functions, bound) for name, fid, bound in node.funcs)
            return replace(node, site=node.site + self.sites, callee=callee, funcs=funcs)
        if isinstance(node, Event):
            return replace(node, site=node.site + self.sites)
        if isinstance(node, Branch):
            return replace(node, arms=tuple(self.seq(arm) for arm in node.arms))
        if isinstance(node, Loop):
            return replace(node, body=self.seq(node.body), orelse=self.seq(node.orelse), site=node.site + self.sites)
        if isinstance(node, Try):
            return Try(self.seq(node.body), tuple(self.seq(h) for h in node.handlers), self.seq(node.orelse),
                       self.seq(node.final))
        return node  # Jump
