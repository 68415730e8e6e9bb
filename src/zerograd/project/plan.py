"""The paths of one run as one project (interface.md, "Whole projects and the cache").

A module that calls a function of another module of the project that can perform an event (a
backward, step or clear, directly or through what it calls) is built together with that module:
their IR is linked into one program, so the callee's summary is applied at the call (rules.md v2
section 3) and each summary is computed once. Which modules take part is decided cheaply first:
imports from a text scan, relevance from CPython's `ast` (relevance.Scan), names only where the
text calls them; a module that subclasses, or configures, a framework's class of another
module joins that module's group too (rules.md section 7). This module plans the groups;
linking.py builds and analyses each. A module outside every group is analysed alone.
"""

from __future__ import annotations

import ast
import gc
import re
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Optional

from ..front.relevance import Scan, scan_text
from ..knowledge.frameworks import framework_of
from ..knowledge.optimizers import KNOWN_OPTIMIZER_CLASSES
from .cache import Cache
from .index import Facts, Imported, Index
from .unit import Unit, defines, subclasses, unit_of, valued_name

_WORD = re.compile(r"\w")
_NAME_CALL = re.compile(r"(\w+)\s*\(")
_METHOD_CALL = re.compile(r"\.(\w+)\s*\(")
# A call that may build an optimizer: `optim.Adam(`, `Adam(`, a factory (`make_optimizer(`).
_BUILDS_OPTIMIZER = re.compile(r"\b(?:optim\.\w+|" + "|".join(sorted(KNOWN_OPTIMIZER_CLASSES))
                               + r"|(?:make|build|create|get|init|setup|configure)_optim\w*)\s*\(")
# `super().__init__(actor, ...)`, `super(Agent, self).__init__(actor, ...)`: a constructor that
# hands its base's something (`super().__init__()` of every nn.Module hands nothing).
_HANDS_UP = re.compile(r"super\([^)]*\)\s*\.\s*__init__\s*\(\s*[^\s)]")
MAX_HOPS = 5  # re-exports followed through `__init__` modules


class Project:
    def __init__(self, texts: Mapping[str, str], cache: Optional[Cache] = None,
                 scans: Optional[dict[str, Scan]] = None, facts: Optional[Mapping[str, Facts]] = None,
                 absolute: Optional[dict[str, str]] = None) -> None:
        """`texts`: path as given -> text, read when asked when `facts` (made as the files were
        read) has the path; else every text is read now. `absolute`: Index's."""
        self.cache = cache  # outlines by content: a re-plan parses only the modules that changed
        self.index = Index(texts, absolute)
        self.units = {a: unit_of(a, p, texts, facts) for a, p in self.index.paths.items()}
        self.holding: frozenset[str] = frozenset()  # the modules that may hold a finding
        # Scans made beforehand, in parallel (files.prescan), by path as given.
        self.scans = {a: scans[p] for a, p in self.index.paths.items() if p in scans} if scans else {}
        self.alone: dict[str, Scan] = {}  # after the plan: the scans of modules in no group that may hold a finding
        self.imports: dict[str, tuple[Imported, ...]] = {}  # after the plan: every module's (its unit may be gone)
        self._targets_seen: dict[tuple[str, Optional[str], str], tuple[str, Optional[str], str]] = {}

    def plan(self) -> list[list[str]]:
        """Groups of modules to build together (paths as given); every other module stands alone."""
        enabled = gc.isenabled()
        gc.disable()  # the ast trees it keeps are acyclic: the collector would only rescan them
        try:
            return self._plan()
        finally:
            if enabled:
                gc.enable()

    def _plan(self) -> list[list[str]]:
        active = {a for a, u in self.units.items() if u.known.holds}
        self.holding = frozenset(active)
        changed = True
        while changed:  # a module joins when it calls a function that can perform an event
            changed = False
            for unit in self.units.values():
                framed = self._framework_deps(unit, active) if unit.imports else set()
                if framed - active or framed and unit.path not in active:
                    active |= framed | {unit.path}
                    changed = True
                linked = self._linked(unit, active) if unit.imports else frozenset()
                if not linked:
                    continue
                active.add(unit.path)
                unit.linked = linked
                grown = self.relevant(unit) | self._relevant(unit, linked)
                if grown != unit.relevant:
                    unit.relevant, changed = grown, True
        self._inherits(active)
        self._valued(active)
        self._based(active)
        groups = [group for group in _components({a: self.units[a].deps for a in active}) if len(group) > 1]
        grouped = {a for group in groups for a in group}
        for unit in self.units.values():
            if unit.path not in grouped:
                scan = unit.scan or self.scans.get(unit.path)
                if scan is not None and unit.path in self.holding:
                    self.alone[self.index.paths[unit.path]] = scan  # its check alone reads it
                unit.scan = None  # the groups' builds reuse their own
        self.scans = {}
        self._settle(grouped)
        return [[self.index.paths[a] for a in group] for group in groups]

    def _settle(self, grouped: set[str]) -> None:
        """Keep what the groups' builds read: their modules' units, and every module's imports
        (origin follows re-exports through modules of no group). The rest of the plan's view of
        the project goes before the checks start: it was most of a 20,000-module run's peak."""
        self.imports = {a: u.imports for a, u in self.units.items() if u.imports}
        self.units = {a: u for a, u in self.units.items() if a in grouped}
        self._targets_seen = {}

    def relevant(self, unit: Unit) -> set[str]:
        """Its functions that can perform an event by themselves (its outline from the cache,
        else parsed when first asked)."""
        if unit.relevant is None:
            unit.outline = self.cache.outline(unit.text) if self.cache is not None else None
            if unit.outline is None:
                try:
                    unit.scan = self.scans.pop(unit.path, None) or scan_text(unit.text)
                    unit.outline = unit.scan.outline()
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    pass
                if unit.outline is not None and self.cache is not None:
                    self.cache.store_outline(unit.text, unit.outline)
            unit.relevant = self._relevant(unit, frozenset())
        return unit.relevant

    def _relevant(self, unit: Unit, linked: frozenset[str]) -> set[str]:
        if unit.outline is None:
            return set()
        keep = unit.keep = unit.outline.relevant(linked)
        return {unit.outline.names[i] for i in keep}

    def _linked(self, unit: Unit, active: set[str]) -> frozenset[str]:
        """Names `unit` calls that are functions of active modules able to perform an event
        (a cheap superset: by name, where its text calls them); records those modules."""
        names: set[str] = set()
        for module, name, local in self._targets(unit):
            # A module that may hold a finding also links with one that only steps or clears
            # (BERT-pytorch's ScheduledOptim wrapper): one hop, so a chain of such modules
            # does not pull in every library module that steps a scheduler.
            if module not in active and not (unit.path in self.holding and self.units[module].known.events):
                continue
            if name is not None:  # `from pkg.mod import f [as g]`
                called = self._steps(unit, module, name, local)
            else:  # `import pkg.mod [as m]` or `from pkg import mod`, and `m.f(` in its text
                called = {n for f in self._called_on(unit, local) for n in self._steps(unit, module, f, f)}
            if called:
                names |= called
                unit.deps |= {module}
                active.add(module)
        return frozenset(names)

    def _based(self, active: set[str]) -> None:
        """The modules defining a constructor that a module of a group subclasses join its group:
        what a subclass hands its base's `__init__` may be kept there as fields (settle.py)."""
        pending = {a for a in active if self.units[a].deps} | {d for a in active for d in self.units[a].deps}
        self._join_bases(pending, active, lambda unit: _HANDS_UP.search(unit.text) is not None,
                         lambda base, name: defines(base, "def", "__init__") and self._keeps(base, name))

    def _inherits(self, active: set[str]) -> None:
        """The modules defining a class of the project that a module which may hold a finding
        subclasses, when their text may build an optimizer: the subclass steps what
        its base built (settle._inherited_attributes); and their own bases', as far."""
        self._join_bases(set(self.holding), active, lambda unit: True,
                         lambda base, name: _BUILDS_OPTIMIZER.search(base.text) is not None)

    def _join_bases(self, pending: set[str], active: set[str], gate: Callable[[Unit], bool],
                    joins: Callable[[Unit, str], bool]) -> None:
        """Join to the group of each module `gate` lets through the modules defining the project
        classes it subclasses that `joins` accepts, then do the same for those, up to MAX_HOPS."""
        for _ in range(MAX_HOPS):
            found = set()
            for path in pending:
                unit = self.units[path]
                if not unit.imports or not gate(unit):
                    continue
                for module, name, local in self._targets(unit):
                    base = self.units[module]
                    if (name is not None and module != path and subclasses(unit, local)
                            and defines(base, "class", name) and joins(base, name)):
                        unit.deps |= {module}
                        found.add(module)
                        active.add(path)
            pending = found - active
            active |= found
            if not pending:
                return

    def _valued(self, active: set[str]) -> None:
        """A module that may hold a finding and builds two or more optimizers (where ZG006 reads
        what each loss reaches) joins the modules whose functions it calls by name, and those
        modules export what the functions' return values reach (a loss computed in `losses.py`;
        a class it builds, what its `forward` returns: `networks.GANLoss`)."""
        for path in self.holding:
            unit = self.units[path]
            if not unit.imports or _BUILDS_OPTIMIZER.search(unit.text) is None:
                continue
            self.relevant(unit)  # outlines it
            if unit.outline is None or unit.outline.optimizers < 2:
                continue
            wanted = self._training_calls(unit)
            for module, name, local in self._targets(unit):
                other = self.units[module]
                if module == path:
                    continue
                if name is not None:
                    called = {valued_name(other, name)} if local in wanted else set()
                else:
                    called = {valued_name(other, f) for f in self._called_on(unit, local) if f in wanted}
                called.discard("")
                if called:
                    unit.deps |= {module}
                    other.values |= called
                    active |= {path, module}

    def _training_calls(self, unit: Unit) -> frozenset[str]:
        """The names called by the module's statements or by its functions that can perform an
        event (where a loss is computed): not `load_checkpoint` in `main`, nor a dataset's helpers."""
        outline = unit.outline
        if outline is None:
            return frozenset()
        return outline.top.union(*(outline.callees[i] for i in unit.keep))  # keep: relevant with its links

    def _framework_deps(self, unit: Unit, active: set[str]) -> set[str]:
        """rules.md section 7 across modules: the modules defining a framework's class of the
        project (a `LightningModule` subclass) that `unit` subclasses while it may hold a finding,
        or sets the framework's accumulation for while that module may; recorded as deps."""
        found = set()
        setting = unit.known.settings
        for module, name, local in self._targets(unit):
            if name is None or not (setting and module in active or unit.path in active and subclasses(unit, local)):
                continue
            if self._hooked(module, name, 0):
                found.add(module)
                unit.deps |= {module}
        return found

    def _hooked(self, module: str, name: str, depth: int) -> bool:
        """Whether class `name` of `module` derives from a framework class (through bases of the
        module or imported from the project)."""
        unit = self.units[module]
        if depth > MAX_HOPS or not defines(unit, "class", name):
            return False
        self.relevant(unit)  # outlines it
        if unit.outline is None:
            return False
        for qualified, local in unit.outline.bases.get(name, ()):
            if framework_of(qualified) is not None:
                return True
            origin = (module, qualified) if local else self.origin(module, qualified)
            if origin is not None and origin != (module, name) and self._hooked(*origin, depth + 1):
                return True
        return False

    def _steps(self, unit: Unit, module: str, name: str, local: str) -> set[str]:
        """The names `unit` calls of `name` in `module`: the function itself if it can perform an
        event; for a class, its methods that can which `unit` calls as `.m(`, and the class."""
        if self._can_step(module, name):
            return {local}
        methods = self._class_steps(module, name)
        if not methods:
            return set()
        if unit.methods is None:
            unit.methods = set(_METHOD_CALL.findall(unit.text))
        # `super().__init__(` is in every subclass's text; a constructor's events are not linked.
        called = {m for m in methods & unit.methods if not m.startswith("__")}
        if called or self._constructs(unit, module, name, local):
            return called | {local}
        return set()

    def _keeps(self, unit: Unit, name: str) -> bool:
        """Whether class `name`'s constructor may keep what it is handed (its outline, parsed
        when first asked)."""
        self.relevant(unit)
        return unit.outline is not None and unit.outline.keeping(name)

    def _constructs(self, unit: Unit, module: str, name: str, local: str) -> bool:
        """Whether `unit` may build the class (`Agent(actor, critic, actor_optim, ...)`) whose
        `__init__` may keep what it is handed: the optimizers it hands are read in the class's
        terms there (settle.py), whoever calls its methods later (a trainer of another module)."""
        if ("parameters(" not in unit.text or _BUILDS_OPTIMIZER.search(unit.text) is None
                or not defines(self.units[module], "def", "__init__")):
            return False  # no optimizer built here over modules (colossalai's plugins wrap one handed in)
        if not self._keeps(self.units[module], name):
            return False  # its constructor keeps nothing it is handed
        at = unit.text.find(local)
        while at != -1:
            if at == 0 or not _WORD.match(unit.text, at - 1) and unit.text[at - 1] != ".":
                match = _NAME_CALL.match(unit.text, at)
                if match is not None and match.group(1) == local:
                    return True
            at = unit.text.find(local, at + 1)
        return False

    def _targets(self, unit: Unit) -> list[tuple[str, Optional[str], str]]:
        """(module, function or None for the module itself, local name) for each import of a
        project module; resolved once, as the plan's passes only learn which can step."""
        if unit.targets is not None:
            return unit.targets
        unit.targets = []
        for imported in unit.imports:
            if imported.name is None:
                found = self.index.module(unit.path, imported.module)
                plain = imported.local == imported.module.split(".")[0]
                if found is not None and found != unit.path:
                    unit.targets.append((found, None, imported.module if plain else imported.local))
                continue
            qualified = _joined(imported.module, imported.name)
            origin = self.origin(unit.path, qualified)
            if origin is not None:
                unit.targets.append((origin[0], origin[1], imported.local))
            found = self.index.module(unit.path, qualified)  # `from pkg import mod`
            if found is not None and found != unit.path:
                unit.targets.append((found, None, imported.local))
        # One object for a target many modules import (`from pkg.train import step`).
        unit.targets = [self._targets_seen.setdefault(t, t) for t in unit.targets]
        return unit.targets

    def _can_step(self, module: str, name: str) -> bool:
        """Whether function `name` of `module` can perform an event; the module is parsed only
        when its text defines such a function (a constant is not worth a parse)."""
        return defines(self.units[module], "def", name) and name in self.relevant(self.units[module])

    def _class_steps(self, module: str, name: str) -> set[str]:
        """The methods of class `name` of `module` (its own, or of its bases there) that can
        perform an event."""
        unit = self.units[module]
        if not defines(unit, "class", name):
            return set()
        self.relevant(unit)
        return unit.outline.methods_of(name, unit.keep) if unit.outline is not None else set()

    def _called_on(self, unit: Unit, prefix: str) -> set[str]:
        """The names its text calls as `prefix.name(` (`\\bprefix\\.(\\w+)\\s*\\(`, found with
        str.find: a regular expression searched from every position costs ten times more)."""
        if unit.calls is None:
            unit.calls = {}
        if prefix not in unit.calls:
            found, text, needle = set(), unit.text, prefix + "."
            at = text.find(needle)
            while at != -1:
                if at == 0 or not _WORD.match(text, at - 1):
                    match = _NAME_CALL.match(text, at + len(needle))
                    if match is not None:
                        found.add(match.group(1))
                at = text.find(needle, at + 1)
            unit.calls[prefix] = found
        return unit.calls[prefix]

    def origin(self, importer: str, qualified: str) -> Optional[tuple[str, str]]:
        """The module that defines what `qualified` names in `importer`, and its name there
        (`f`, `Class.m`), through the re-exports of `__init__` modules (read from their text)."""
        for _ in range(MAX_HOPS):
            split = self.index.split(importer, qualified)
            if split is None or split[0] == importer or not split[1]:
                return None
            module, rest = split
            imports = self.units[module].imports if module in self.units else self.imports.get(module, ())
            again = next((i for i in imports if i.local == rest[0] and i.name is not None), None)
            if again is None:
                return module, ".".join(rest)
            importer, qualified = module, ".".join([_joined(again.module, again.name or ""), *rest[1:]])
        return None


def _components(edges: Mapping[str, AbstractSet[str]]) -> list[list[str]]:
    """Connected groups of modules (imports in either direction), each in build order: the
    modules a module calls come before it (cycles broken where they close)."""
    parent = {a: a for a in edges}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, deps in edges.items():
        for b in deps:
            if b in parent:
                parent[find(a)] = find(b)
    order: list[str] = []
    seen: set[str] = set()

    def visit(a: str) -> None:
        stack = [(a, iter(sorted(edges[a])))]
        seen.add(a)
        while stack:
            node, pending = stack[-1]
            following = next((b for b in pending if b in edges and b not in seen), None)
            if following is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(following)
                stack.append((following, iter(sorted(edges[following]))))

    for a in sorted(edges):
        if a not in seen:
            visit(a)
    groups: dict[str, list[str]] = {}
    for a in order:
        groups.setdefault(find(a), []).append(a)
    return list(groups.values())


def qualified_name(node: ast.expr, aliases: dict[str, str]) -> str:
    """`pl.Trainer` -> `pytorch_lightning.Trainer` through the module's imports ("" if not a name)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([aliases.get(node.id, node.id), *parts])


def _joined(module: str, name: str) -> str:
    """`from module import name` as one dotted name: `pkg.name`, `.name`, `..pkg.name`."""
    return module + name if module.endswith(".") else f"{module}.{name}"


