"""The modules of a project that share apex.amp's state, and how the GradScaler
that replaces it reaches each of them.

apex.amp is one state per process: ``amp.initialize`` in ``train_net.py`` makes
the loss scaler that ``amp.scale_loss`` in ``engine/trainer.py`` and
``amp.state_dict()`` in ``utils.py`` use.  torch.amp has no such state, so the
migration makes a GradScaler where ``amp.initialize`` ran and hands it to every
top-level def and class that used apex's state, a *taker*: a function gets it
as a keyword-only parameter, a class as an ``__init__`` parameter kept on the
instance.  Every call of a taker passes it on, so a def that calls a taker
becomes one too (unless it makes the scaler itself).

A *builder* makes the optimizer, runs ``amp.initialize`` on it and returns it
(``model, optimizer = build(args)`` in ``main()``).  The scaler goes the way
the optimizer goes: the builder returns it too, and a caller that needs it, a
*receiver*, unpacks it beside the optimizer and holds it as its own.

A program migrates whole or not at all: half a migration runs neither with apex
nor without it.  So this module answers, from text and ``ast`` alone, which
modules one migration rewrites, which defs and classes take the scaler, and
what stops the migration where the scaler cannot follow.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from amplint.analysis.precision import switched_float16_cast
from amplint.names import SCALER_NAMES, free_name
from amplint.project import ProjectIndex, ProjectView, bindings, reexported
from amplint.project.source import TEXT_PATH, ModuleSource, dotted_expression

# apex.amp members that read or change the loss scaler's state; their users
# need the GradScaler after the migration.
STATE_MEMBERS = frozenset({"scale_loss", "state_dict", "load_state_dict", "_amp_state"})
_MODULE_LEVEL = "<module>"


@dataclass(frozen=True)
class Taker:
    """A top-level def or class that receives the GradScaler after the migration."""

    path: Path
    name: str
    is_class: bool


@dataclass(frozen=True)
class ApexProgram:
    """One migration: the apex.amp modules connected by project imports."""

    modules: tuple[Path, ...]  # every module it rewrites, this one included
    initializers: tuple[Path, ...]  # those calling amp.initialize
    scaling: tuple[Path, ...]  # those calling amp.scale_loss
    takers: frozenset[Taker]
    # The keyword each module's takers receive the scaler as: the first of
    # SCALER_NAMES that module does not spell already.
    scaler_names: dict[Path, str] = field(hash=False)
    # Why the scaler cannot reach a taker: a call from a module without apex,
    # or from module level of a module that does not make the scaler.
    obstacles: tuple[str, ...] = ()
    # Why a training migration cannot leave apex: casts to float16 that the
    # program's own switch makes beside its steps (an inference-only migration,
    # whose model becomes half, keeps them true).
    switched_casts: tuple[str, ...] = ()
    # The builders that return the scaler, and the defs (`""`: module level)
    # that receive it from a call of one.
    builders: frozenset[Taker] = frozenset()
    receivers: frozenset[Taker] = frozenset()
    # The classes whose method scales a loss it is given, by module: the
    # forward passes of those losses run wherever the instances are called, so
    # autocast belongs to the modules that call amp.initialize.
    scaled_at_callers: tuple[tuple[Path, str], ...] = ()

    def takers_in(self, path: Path) -> dict[str, Taker]:
        return {taker.name: taker for taker in self.takers if taker.path == path}

    def builders_in(self, path: Path) -> dict[str, Taker]:
        return {builder.name: builder for builder in self.builders if builder.path == path}

    def receivers_in(self, path: Path) -> set[str]:
        """The receivers of the module at `path`, by name ("" for module level)."""
        return {
            "" if receiver.name == _MODULE_LEVEL else receiver.name
            for receiver in self.receivers
            if receiver.path == path
        }


@dataclass
class _Definition:
    """What the migration needs to know of one top-level def or class."""

    name: str
    is_class: bool
    uses_state: bool = False
    initializes: bool = False
    scales_loss: bool = False  # calls `amp.scale_loss`
    # A method of this class scales a loss it is given (`def __call__(self,
    # loss, optimizer)`, timm's `ApexScaler`): the forward pass runs at the callers.
    scales_given_loss: bool = False
    returns_value: bool = False  # a `return X` of its own (not a nested def's)
    calls: set[str] = field(default_factory=set)  # callees, dotted: `utils.save`, `Trainer`


@dataclass
class _ApexFacts:
    """A module's use of apex.amp, by top-level definition."""

    uses_amp: bool
    definitions: dict[str, _Definition]  # `<module>` for the statements outside any


def _apex_facts(module: ModuleSource) -> _ApexFacts | None:
    """How `module` uses apex.amp, from its imports; None when it does not."""
    if "apex" not in module.text or module.tree is None:
        return None
    amp_names: set[str] = set()  # local names of apex.amp
    apex_names: set[str] = set()  # local names of apex (`apex.amp.X`)
    members: dict[str, str] = {}  # `from apex.amp import scale_loss`: local -> member
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module == "apex" and alias.name == "amp":
                    amp_names.add(local)
                elif node.module == "apex.amp":
                    members[local] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "apex.amp" and alias.asname:
                    amp_names.add(alias.asname)
                elif alias.name.split(".")[0] == "apex" and not alias.asname:
                    apex_names.add("apex")
    if not (amp_names or apex_names or members):
        return None

    def member_of(node: ast.AST) -> str | None:
        """`scale_loss` for `amp.scale_loss`, `apex.amp.scale_loss` or an imported member."""
        if isinstance(node, ast.Name):
            return members.get(node.id)
        if not isinstance(node, ast.Attribute):
            return None
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in amp_names:
            return node.attr
        if (
            isinstance(owner, ast.Attribute)
            and owner.attr == "amp"
            and isinstance(owner.value, ast.Name)
            and owner.value.id in apex_names
        ):
            return node.attr
        return None

    facts = _ApexFacts(False, {})
    outside = _Definition(_MODULE_LEVEL, False)
    for statement in module.tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            definition = _Definition(statement.name, isinstance(statement, ast.ClassDef))
        else:
            definition = outside
        for node in ast.walk(statement):
            member = member_of(node)
            if member is not None:
                facts.uses_amp = True
                definition.uses_state |= member in STATE_MEMBERS
                definition.initializes |= member == "initialize"
                definition.scales_loss |= member == "scale_loss"
            if isinstance(node, ast.Call):
                callee = dotted_expression(node.func)
                if callee is not None:
                    definition.calls.add(callee)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            definition.returns_value = _returns_value(statement)
        if isinstance(statement, ast.ClassDef):
            definition.scales_given_loss = _scales_given_loss(statement, member_of)
        facts.definitions[definition.name] = definition
    facts.definitions[_MODULE_LEVEL] = outside
    return facts if facts.uses_amp else None


def apex_program(view: ProjectView) -> ApexProgram | None:
    """The migration `view`'s module belongs to, or None where it uses no apex.amp."""
    index = view.index
    own = index.module(view.path)
    own_facts = _apex_facts(own) if own is not None else None
    if own_facts is None:
        return None
    imports = _imports(index)
    connected = _connected(imports, view.path.resolve())
    every_facts: dict[Path, _ApexFacts] = {}
    for path in sorted(connected):
        module = index.module(path)
        if module is own:
            found = own_facts
        else:
            found = _apex_facts(module) if module is not None else None
        if found is not None:
            every_facts[path] = found
    component = _program(imports, every_facts, view.path.resolve())
    facts = {path: found for path, found in every_facts.items() if path in component}
    for path in component:  # with the callers of takers without apex
        view.note(path)
    # What the program's entry scripts import runs beside its steps (an evaluator).
    beside = set().union(*(_reachable(imports, path) for path in component))
    return _assembled(
        index, facts, component, lambda path: index.module(path).text, beside
    )


def text_program(text: str) -> ApexProgram | None:
    """The migration of a module known only as text (standard input, a test):
    a program of that one module, at TEXT_PATH."""
    facts = _apex_facts(ModuleSource(TEXT_PATH, "", text))
    if facts is None:
        return None
    return _assembled(None, {TEXT_PATH: facts}, {TEXT_PATH}, lambda _: text)


def _assembled(
    index: ProjectIndex | None,
    facts: dict[Path, _ApexFacts],
    component: set[Path],
    text_of: Callable[[Path], str],
    beside: set[Path] | None = None,
) -> ApexProgram:
    """The program of the apex modules `facts` and the other modules of
    `component`, whose texts `text_of` gives; `beside` holds every module that
    runs with it (default: `component`)."""
    takers, obstacles, builders, receivers = _takers(index, facts, component)
    return ApexProgram(
        modules=tuple(sorted(facts)),
        initializers=tuple(
            sorted(
                path
                for path, f in facts.items()
                if any(d.initializes for d in f.definitions.values())
            )
        ),
        scaling=tuple(
            sorted(
                path
                for path, f in facts.items()
                if any(d.scales_loss for d in f.definitions.values())
            )
        ),
        scaled_at_callers=tuple(
            (path, d.name)
            for path, f in sorted(facts.items())
            for d in f.definitions.values()
            if d.scales_given_loss
        ),
        takers=frozenset(takers),
        scaler_names={path: free_name(SCALER_NAMES, text_of(path)) for path in facts},
        obstacles=tuple(obstacles),
        switched_casts=tuple(_switched_casts(index, beside or component, text_of)),
        builders=frozenset(builders),
        receivers=frozenset(receivers),
    )


def _switched_casts(
    index: ProjectIndex | None, modules: set[Path], text_of: Callable[[Path], str]
) -> list[str]:
    """Why the program cannot leave apex: a cast to float16 its own switch makes
    (analysis/precision.py) in any of `modules`."""
    found = []
    for path in sorted(modules):
        if index is not None and index.module(path) is None:
            continue
        cast = switched_float16_cast(text_of(path))
        if cast is None:
            continue
        number, line = cast
        where = f"{index.relative(path)}:{number}" if index is not None else f"line {number}"
        found.append(
            f"`{line}` ({where}) casts to float16 under the program's own switch, "
            "where apex's casts met it (O1 cast every call, O2 made the model half); "
            "autocast covers only the training steps, so outside them (evaluation) it "
            "meets float32 weights: remove the cast (autocast casts per operation), then "
            "migrate"
        )
    return found


def _scales_given_loss(class_def: ast.ClassDef, member_of: Callable[[ast.AST], str | None]) -> bool:
    """Whether a method of `class_def` calls `amp.scale_loss(loss, ...)` on a
    `loss` that is one of its own parameters, and the class never calls that
    method itself (`self.optimize(loss)` puts the forward pass in the class,
    where the step's own rewrite finds it: analysis/caller_forward.py)."""
    called_in_class = {node.attr for node in ast.walk(class_def) if isinstance(node, ast.Attribute)}
    for method in class_def.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if method.name in called_in_class:
            continue
        parameters = {arg.arg for arg in method.args.args + method.args.kwonlyargs}
        for node in ast.walk(method):
            if (
                isinstance(node, ast.Call)
                and member_of(node.func) == "scale_loss"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in parameters
            ):
                return True
    return False


def _returns_value(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether `function` itself (not a def nested in it) returns a value."""
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _takers(
    index: ProjectIndex | None, facts: dict[Path, _ApexFacts], component: set[Path]
) -> tuple[set[Taker], list[str], set[Taker], set[Taker]]:
    """The defs and classes that take the scaler: those using apex's state, then
    those calling a taker, as far as the calls go; where a call of a taker
    cannot pass it; and the builders that return it, with their receivers.
    Without an index, `facts` is one module's, read from text."""
    obstacles: list[str] = []
    answers: dict[tuple[Path, Taker], bool] = {}  # the fixpoint asks the same again

    def calls(path: Path, taker: Taker) -> bool:
        if (path, taker) not in answers:
            answers[path, taker] = index is not None and _calls_taker(
                index, index.module(path), taker
            )
        return answers[path, taker]

    def relative(path: Path) -> str:
        return "this module" if index is None else index.relative(path)

    # A def that runs amp.initialize and returns a value may hand the optimizer
    # to its caller; such a caller can get the scaler the same way.
    candidates = {
        Taker(path, d.name, False)
        for path, f in facts.items()
        for d in f.definitions.values()
        if d.initializes and d.returns_value and not d.is_class
    }
    receiving: dict[tuple[Path, str], list[Taker]] = {}
    for path, f in facts.items():
        for definition in f.definitions.values():
            if not definition.initializes:
                called = _called_takers(path, definition.calls, candidates, calls)
                if called:
                    receiving[path, definition.name] = called

    def makes_scaler(path: Path, definition: _Definition) -> bool:
        return definition.initializes or (path, definition.name) in receiving

    # A module that makes the scaler at module level keeps it a global its
    # functions read: they take nothing.
    takers = {
        Taker(path, d.name, d.is_class)
        for path, f in facts.items()
        if not makes_scaler(path, f.definitions[_MODULE_LEVEL])
        for d in f.definitions.values()
        if d.uses_state and not makes_scaler(path, d) and d.name != _MODULE_LEVEL
    }
    changed = True
    while changed:
        changed = False
        for path, f in facts.items():
            makes_scaler_at_top = makes_scaler(path, f.definitions[_MODULE_LEVEL])
            for definition in f.definitions.values():
                if (
                    makes_scaler(path, definition)
                    or makes_scaler_at_top
                    and definition.name != _MODULE_LEVEL
                ):
                    continue
                called = _called_takers(path, definition.calls, takers, calls)
                if not called:
                    continue
                if definition.name == _MODULE_LEVEL:
                    obstacles.append(_no_scaler_at_module_level(relative, path, called[0], facts))
                    continue
                taker = Taker(path, definition.name, definition.is_class)
                if taker not in takers:
                    takers.add(taker)
                    changed = True
    # A builder returns the scaler where a caller needs it (uses apex's state or
    # calls a taker); then every call of it takes the scaler, needed or not.
    builders: set[Taker] = set()
    for (path, name), called in receiving.items():
        definition = facts[path].definitions[name]
        if definition.uses_state or _called_takers(path, definition.calls, takers, calls):
            builders.update(called)
    receivers = {
        Taker(path, name, facts[path].definitions[name].is_class)
        for (path, name), called in receiving.items()
        if builders.intersection(called)
    }
    for path in sorted(component - set(facts)):
        module = index.module(path) if index is not None else None
        if module is None:
            continue
        for taker in sorted(takers | builders, key=lambda t: (str(t.path), t.name)):
            if taker.name in module.text and calls(path, taker):
                passes = "takes" if taker in takers else "returns"
                obstacles.append(
                    f"{index.relative(path)} calls `{taker.name}` of "
                    f"{index.relative(taker.path)}, which {passes} the GradScaler after the "
                    "migration, and does not use apex: pass the GradScaler there by hand"
                )
    return takers, sorted(set(obstacles)), builders, receivers


def _no_scaler_at_module_level(
    relative: Callable[[Path], str], path: Path, called: Taker, facts: dict[Path, _ApexFacts]
) -> str:
    """Why module-level code calling `called` leaves the scaler out of reach:
    where amp.initialize runs, and why that scaler cannot come back to it."""
    where = [
        f"`{d.name}` of {relative(p)}"
        for p, f in sorted(facts.items())
        for d in f.definitions.values()
        if d.initializes
    ]
    made = f"the GradScaler is made in {', '.join(where)}" if where else "no GradScaler is made"
    return (
        f"{relative(path)} calls `{called.name}` at module level, which needs the "
        f"GradScaler, and {made}, which no module-level call returns: make the optimizer "
        "and call amp.initialize in the function that runs the training, or return the "
        "optimizer to it"
    )


def _called_takers(
    path: Path,
    callees: set[str],
    takers: set[Taker],
    calls: Callable[[Path, Taker], bool],
) -> list[Taker]:
    """The takers among `callees`, spelled in the module at `path`; `calls`
    answers whether that module calls a taker of another module."""
    found = []
    for taker in sorted(takers, key=lambda t: (str(t.path), t.name)):
        if taker.path == path:
            if taker.name in callees:
                found.append(taker)
        elif any(taker.name in callee for callee in callees) and calls(path, taker):
            found.append(taker)
    return found


def _calls_taker(index: ProjectIndex, module: ModuleSource, taker: Taker) -> bool:
    """Whether `module` calls `taker`, through the names it imports it by."""
    target = index.module(taker.path)
    if target is None or module.tree is None:
        return False
    spellings = set()
    for imported, local in _bindings_through_packages(index, module, target):
        if imported is None:  # `import utils`: `utils.save_checkpoint(...)`
            spellings.add(f"{local}.{taker.name}")
        elif imported == taker.name:  # `from utils import save_checkpoint`
            spellings.add(local)
    return any(
        isinstance(node, ast.Call) and dotted_expression(node.func) in spellings
        for node in ast.walk(module.tree)
    )


def _bindings_through_packages(index: ProjectIndex, module: ModuleSource, target: ModuleSource):
    """`bindings(module, target)`, and the names `module` imports from a
    package whose `__init__.py` re-exports them from `target` (`from scalers
    import ApexScaler`, where scalers/__init__.py has `from .amp import
    ApexScaler`): one level, as packages re-export their modules' names."""
    yield from bindings(module, target)
    for path in index.imported_modules(module.path):
        exported = {
            local: name
            for local, (where, name) in reexported(index, path).items()
            if index.module(where) is target
        }
        if exported:
            for imported, local in bindings(module, index.module(path)):
                if imported in exported:
                    yield exported[imported], local


def _imports(index: ProjectIndex) -> dict[Path, set[Path]]:
    """Each project module -> the project modules it imports."""
    return {path.resolve(): set(index.imported_modules(path.resolve())) for path in index.paths}


def _connected(imports: dict[Path, set[Path]], start: Path) -> set[Path]:
    """The modules linked to `start` by imports, either way round."""
    links: dict[Path, set[Path]] = {}
    for importer, imported in imports.items():
        for other in imported:
            links.setdefault(importer, set()).add(other)
            links.setdefault(other, set()).add(importer)
    return _reachable(links, start)


def _reachable(links: dict[Path, set[Path]], start: Path) -> set[Path]:
    """`start` and every module its links lead to, transitively: with the
    import edges, `start` and what it imports."""
    seen = {start}
    frontier = [start]
    while frontier:
        for linked in links.get(frontier.pop(), ()):
            if linked not in seen:
                seen.add(linked)
                frontier.append(linked)
    return seen


def _program(
    imports: dict[Path, set[Path]], facts: dict[Path, _ApexFacts], start: Path
) -> set[Path]:
    """The modules one migration with `start` rewrites or must check.

    apex's state flows from a module calling ``amp.initialize`` into the
    modules it imports (directly or through others): those share its scaler.
    Two entry scripts that merely import the same module without apex (a
    dataset, a model) share nothing, and each migrates on its own; two that
    import one apex module (a trainer whose functions take the scaler, a
    builder that returns it) migrate together.  Modules without apex that import a module of the program are
    kept too: they may call a function that now takes the scaler."""
    apex = set(facts)
    initializers = [
        path for path, f in facts.items() if any(d.initializes for d in f.definitions.values())
    ]
    reach = {path: _reachable(imports, path) for path in initializers}
    program = _reachable(imports, start)
    changed = True
    while changed:
        changed = False
        for path, downstream in reach.items():
            if not downstream <= program and downstream & program & apex:
                program |= downstream
                changed = True
        # An apex module importing one of the program's may call a builder of
        # it, which returns the scaler (or a def that takes it).
        for importer, imported in imports.items():
            if importer in apex and importer not in program and imported & program & apex:
                program |= _reachable(imports, importer)
                changed = True
    callers = {
        importer
        for importer, imported in imports.items()
        if importer not in apex and imported & program & apex
    }
    return program | callers
