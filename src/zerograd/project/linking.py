"""Building and linking one group of the project's modules (project.py plans the groups): each
module through the front end in import order, its calls of the others' functions bound to them,
then one program analysed once, findings handed back to the module where each is reported.

Memory is bounded by the largest module plus what stays of each (issue 43: torch's group of 749
modules climbed past 12 GB): a module's LibCST trees, facts and sites go as soon as its IR is
linked in, and a finding is located by building its module again; the linked IR keeps the
front end's shared subtrees shared; the analysis keeps each function's summary, not its nodes'.
"""

from __future__ import annotations

import ast
import bisect
import gc
import os
import warnings
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Callable, Optional

from ..analysis.model import Branch, Call, Event, Finding, Function, Loop, Node, Program, Seq, Settings, Span, Try
from ..engine import Front, Report, analyse, front_end, may_hold_findings
from ..front.program import Exports
from ..front.relevance import Scan
from ..front.sites import Sites
from ..knowledge.frameworks import SETTINGS, Callee, Outside, Valued, accumulation_of
from ..knowledge.optimizers import TORCH_FAMILY, Built
from .plan import Project, qualified_name


class Linked:
    """The sites of a linked group's modules, numbered one after another. A module's LibCST
    trees go once it is built (they weigh more than its IR); a site is located by building its
    module again, the same (`rebuild`), the last one rebuilt kept for the next finding."""

    def __init__(self, rebuild: Callable[[int], Sites]) -> None:
        self.bases: list[int] = []
        self.counts: list[int] = []  # each module's sites: a rebuild must make as many
        self.rebuild = rebuild
        self.last: Optional[tuple[int, Sites]] = None

    def module_of(self, site: int) -> int:
        return bisect.bisect_right(self.bases, site) - 1

    def locate(self, site: int) -> Span:
        number = self.module_of(site)
        return self._sites(number).locate(site - self.bases[number])

    def text(self, site: int) -> str:
        number = self.module_of(site)
        return self._sites(number).text(site - self.bases[number])

    def _sites(self, number: int) -> Sites:
        if self.last is None or self.last[0] != number:
            self.last = None  # the previous module's trees go before the next one's are built
            sites = self.rebuild(number)
            if len(sites.nodes) != self.counts[number]:
                raise RuntimeError("a module built again numbered its sites differently")
            self.last = (number, sites)
        return self.last[1]


def check_group(project: Project, group: list[str], settings: Settings) -> dict[str, list[Finding]]:
    """Build the modules of one group in order, link them, and analyse them as one program."""
    return inspect_group(project, group, settings)[0]


def inspect_group(project: Project, group: list[str], settings: Settings,
                  observe: Optional[Callable[[Program], None]] = None) -> tuple[dict[str, list[Finding]], Report]:
    """check_group, and how many scopes the linked program analysed (for the benchmarks);
    `observe` is shown the linked program before it is analysed (what stays unknown in it)."""
    enabled = gc.isenabled()
    gc.disable()  # acyclic trees, freed by reference counting (engine.inspect_source)
    try:
        return _check_group(project, group, settings, observe)
    finally:
        if enabled:
            gc.enable()


def _check_group(project: Project, group: list[str], settings: Settings,
                 observe: Optional[Callable[[Program], None]] = None) -> tuple[dict[str, list[Finding]], Report]:
    absolute = [os.path.abspath(p) for p in group]
    linker = _Linker(project, absolute, settings)
    results: dict[str, list[Finding]] = {}
    for path in absolute:
        failed = linker.add(path)
        if failed is not None:
            # A module in the group only for the values its functions return (plan._valued: a
            # helper a training module calls, in Python 2) performs and calls no event: what
            # stops its build is the caller's loss left unknown, not a finding of its own.
            unit = project.units[path]
            helper = unit.values and not unit.linked and not unit.known.events and not may_hold_findings(unit.text)
            results[path] = [] if helper else failed.findings
    linker.tell()
    report = Report([])
    if linker.order:
        program = linker.program()
        if observe is not None:
            observe(program)
        report, sited = analyse(program, linker.sites)
        linker.sites.last = None
        for path in linker.order:
            results.setdefault(path, [])
        for site, finding in sited:
            results[linker.order[linker.sites.module_of(site)]].append(finding)
    return {project.index.paths[a]: found for a, found in results.items()}, replace(report, findings=[])


class _Linker:
    """A group's linked program, grown module by module in build order: each module's IR moves
    in (its calls of the modules before it bound) as soon as it is built, and the rest of what
    its build made (LibCST trees, facts, sites, its own IR) goes then. What stays of a module is
    its IR in the linked program and what the modules after it may call (its exports)."""

    def __init__(self, project: Project, group: list[str], settings: Settings) -> None:
        self.project, self.settings = project, settings
        self.accumulation = _group_settings(project, group)
        self.pytorch = any(i.module.lstrip(".").split(".")[0] in TORCH_FAMILY for a in group
                           for i in project.units[a].imports)
        self.order: list[str] = []  # the modules built, in order
        self.exports: dict[str, Exports] = {}
        self.function_bases: dict[str, int] = {}
        self.functions: list[Function] = []
        self.table_of: list[int] = []
        self.tables: list[dict[str, frozenset[str]]] = []
        self.phases: dict[str, Optional[int]] = {}
        self.called: set[int] = set()
        self.sites = Linked(self._rebuild)
        # What the modules built after a module hand its functions and classes (Exports.tells):
        # it is built again with it (tell), and so whenever it is built again.
        self.incoming: dict[str, dict[tuple[str, str], frozenset[str]]] = {}

    def add(self, path: str) -> Optional[Report]:
        """Build `path` and link it in; a Report holds what stops its build (a syntax error)."""
        front = self._build(path, self.exports)
        if isinstance(front, Report):
            return front
        number = len(self.order)
        self.order.append(path)
        self.exports[path] = front.exports
        self.function_bases[path] = len(self.functions)
        self.sites.bases.append(sum(self.sites.counts))
        self.sites.counts.append(len(front.sites.nodes))
        self.functions.extend(self._moved(front.program, number))
        self.table_of.extend(number for _ in front.program.functions)
        self.tables.append(front.program.links)
        # Counters named alike in two modules that start apart start nowhere known.
        for key, phase in front.program.phases.items():
            self.phases[key] = phase if self.phases.get(key, phase) == phase else None
        return None

    def _moved(self, program: Program, number: int) -> list[Function]:
        """The `number`th module's functions, moved into the linked program."""
        mover = _Mover(self.function_bases[self.order[number]], self.sites.bases[number],
                       partial(self._target, number=number))
        return [replace(function, body=mover.seq(function.body), site=_shifted(function.site, self.sites.bases[number]))
                for function in program.functions]

    def tell(self) -> None:
        """Build again, once, each module whose functions or classes the modules built after it
        hand optimizers over known modules (`Agent(actor, critic, actor_optim, critic_optim)` in
        train.py for agent.py's class): its optimizers then hold what they were handed. A
        rebuild that numbers its functions or sites otherwise is not taken."""
        told: dict[str, dict[tuple[str, str], frozenset[str]]] = {}
        for path in self.order:
            for module, keys in self.exports[path].tells.items():
                for key, held in keys.items():
                    told.setdefault(module, {})[key] = told.get(module, {}).get(key, frozenset()) | held
        self._told_up(told)
        for number, path in enumerate(self.order):
            if path not in told or not self._news(number, told[path]):
                continue
            self.incoming[path] = told[path]
            front = self._build(path, {p: self.exports[p] for p in self.order[:number]})
            base = self.function_bases[path]
            count = (self.function_bases[self.order[number + 1]] if number + 1 < len(self.order)
                     else len(self.functions)) - base
            if (isinstance(front, Report) or len(front.program.functions) != count
                    or len(front.sites.nodes) != self.sites.counts[number]):
                del self.incoming[path]
                continue
            self.functions[base:base + count] = self._moved(front.program, number)
            self.tables[number] = front.program.links

    def _told_up(self, told: dict[str, dict[tuple[str, str], frozenset[str]]]) -> None:
        """What a construction hands the fields a class keeps through its base's constructor
        (`super().__init__(actor, ..., actor_optim)`, the base in another module) is told the
        base's module too: its methods read the same `self.actor_optim` (SACPolicy.learn, for
        a CQLPolicy built in run_cql.py). Up the chain of bases, again whenever a base grows."""
        pending = list(told)
        while pending:
            module = pending.pop()
            exports = self.exports.get(module)
            for base_module, base in set(exports.up.values()) if exports is not None else ():
                kept = self.exports[base_module].fields.get(base) if base_module in self.exports else None
                keys = {f"self.{attribute}" for attribute, _ in kept[1]} if kept is not None else set()
                into = told.get(base_module, {})
                grown = {("", key): into.get(("", key), frozenset()) | held for (function, key), held in told[module].items()
                         if not function and key in keys and not held <= into.get(("", key), frozenset())}
                if grown:
                    told[base_module] = {**into, **grown}
                    pending.append(base_module)

    def _news(self, number: int, told: dict[tuple[str, str], frozenset[str]]) -> bool:
        """Whether the `number`th module's optimizers do not hold all they are told already."""
        path = self.order[number]
        for (function, key), held in told.items():
            found = self.exports[path].functions.get(function) if function else None
            links = (self.functions[self.function_bases[path] + found[0]].links if found is not None else
                     tuple(self.tables[number].items()))
            if not held <= dict(links).get(key, frozenset()):
                return True
        return False

    def _build(self, path: str, before: dict[str, Exports]) -> Front | Report:
        """`path` through the front end, its imports bound to the modules in `before`. A name of
        a module not built yet (an import cycle) only keeps more bodies: _link drops the call."""
        unit = self.project.units[path]
        # The plan's scan serves the first build only: the front end empties the scan it is handed
        # (Scan.release), so a build again (to locate, or the group checked again) scans afresh.
        scan, unit.scan = unit.scan, None
        outside = Outside(partial(_hooked_base, self.project, before, path), self.accumulation, self.pytorch,
                          partial(_builder, self.project, before, path), partial(_callee, self.project, before, path),
                          self.incoming.get(path, {}), partial(_attributes, self.project, before, path),
                          partial(_valued, self.project, before, path))
        return front_end(unit.text, self.settings, linked=unit.linked, link=partial(_link, self.project, before, path),
                         outside=outside, scan=scan, values=unit.values)

    def _rebuild(self, number: int) -> Sites:
        """The sites of the `number`th module built, built again as it was: bound to the same
        modules (those built before it), so its sites are numbered as they were."""
        path = self.order[number]
        before = {p: self.exports[p] for p in self.order[:number]}
        front = self._build(path, before)
        if isinstance(front, Report):
            raise RuntimeError(f"{path} no longer builds")
        return front.sites

    def _target(self, call: Call, number: int) -> Optional[Call]:
        """An external call bound to the function of an earlier module it names."""
        module, _, name = (call.external or "").partition("\0")
        if module not in self.exports:
            return None
        exports = self.exports[module]
        local, params = exports.functions[name]
        callee = self.function_bases[module] + local
        bindings = [(_parameter(param, params), key) for param, key in call.bindings if param[0] != "@"]
        if "." in name and params:
            bindings += _fields(call, params[0], exports.fields.get(name.rsplit(".", 1)[0]))
        self.called.add(callee)
        return Call(call.site + self.sites.bases[number], callee, tuple(b for b in bindings if b[0]))

    def program(self) -> Program:
        """The linked program of every module built."""
        for fid in self.called:  # called from another module: not a step function (rules.md section 3)
            self.functions[fid] = replace(self.functions[fid], step_function=False)
        known = {key: phase for key, phase in self.phases.items() if phase is not None}
        return Program(self.functions, {}, tuple(self.tables), tuple(self.table_of), known)


def _link(project: Project, exports: dict[str, Exports], importer: str, qualified: str) -> Optional[str]:
    """The function of an already built module that `qualified` names in `importer`."""
    origin = project.origin(importer, qualified)
    if origin is None or origin[0] not in exports or origin[1] not in exports[origin[0]].functions:
        return None
    return "\0".join(origin)


def _builder(project: Project, exports: dict[str, Exports], importer: str, qualified: str) -> Optional[Built]:
    """What the builder function of an already built module that `qualified` names returns."""
    origin = project.origin(importer, qualified)
    return exports[origin[0]].builders.get(origin[1]) if origin is not None and origin[0] in exports else None


def _callee(project: Project, exports: dict[str, Exports], importer: str, qualified: str) -> Optional[Callee]:
    """The function, or the class keeping fields, of an already built module that `qualified`
    names in `importer` (frameworks.Outside.callee)."""
    origin = project.origin(importer, qualified)
    if origin is None or origin[0] not in exports or origin[1].count(".") > 1:
        return None
    module, name = origin
    function = exports[module].functions.get(name)
    if function is not None:
        params = function[1][1:] if "." in name else function[1]  # a method's `self` is the receiver
        return module, name, params, tuple((p, p) for p in params)
    if "." in name:
        return None
    fields = exports[module].fields.get(name)
    if fields is not None:
        return module, name, fields[0][1:], tuple((f"self.{attribute}", param) for attribute, param in fields[1])
    return None


def _attributes(project: Project, exports: dict[str, Exports], importer: str,
                qualified: str) -> Mapping[str, frozenset[str]]:
    """The optimizers the project's class `qualified` (a base in `importer`) builds on `self`."""
    origin = project.origin(importer, qualified)
    return exports[origin[0]].attributes.get(origin[1], {}) if origin is not None and origin[0] in exports else {}


def _valued(project: Project, exports: dict[str, Exports], importer: str, qualified: str) -> Optional[Valued]:
    """What the return value of the project's function `qualified` (in `importer`) reaches."""
    origin = project.origin(importer, qualified)
    return exports[origin[0]].values.get(origin[1]) if origin is not None and origin[0] in exports else None


def _hooked_base(project: Project, exports: dict[str, Exports], importer: str, qualified: str) -> Optional[str]:
    """The framework whose hooks the project's class `qualified` (a base in `importer`) has."""
    origin = project.origin(importer, qualified)
    return exports[origin[0]].hooked.get(origin[1]) if origin is not None and origin[0] in exports else None


def _group_settings(project: Project, group: list[str]) -> dict[str, Optional[int]]:
    """A framework's accumulation settings in a group's modules (`Trainer(accumulate_grad_batches=
    4)` in train.py for the LightningModule of model.py): keyword -> the literal they agree on."""
    found: dict[str, Optional[int]] = {}
    for path in group:
        unit = project.units[path]
        if not unit.known.settings:
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
    its external calls bound (or dropped: a function nobody built performs no event). The front
    end shares subtrees (the IR is a DAG); each is moved once and stays shared, or the linked copy
    of torch's IR took four times the memory of the modules' own."""

    def __init__(self, functions: int, sites: int, bind: Callable[[Call], Optional[Call]]) -> None:
        self.functions, self.sites, self.bind = functions, sites, bind
        self.seqs: dict[int, Seq] = {}  # by id of the module's node: alive while this moves it
        self.nodes: dict[int, Node] = {}

    def seq(self, node: Seq) -> Seq:
        moved = self.seqs.get(id(node))
        if moved is None:
            moved = self.seqs[id(node)] = Seq(tuple(self.node(item) for item in node.items))
        return moved

    def node(self, node: Node) -> Node:
        if isinstance(node, Seq):
            return self.seq(node)
        moved = self.nodes.get(id(node))
        if moved is None:
            moved = self.nodes[id(node)] = self._moved(node)
        return moved

    def _moved(self, node: Node) -> Node:
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
            return replace(node, body=self.seq(node.body), handlers=tuple(self.seq(h) for h in node.handlers),
                           orelse=self.seq(node.orelse), final=self.seq(node.final))
        return node  # Jump
