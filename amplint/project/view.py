"""One file's window on its project: the questions a rule asks, answered
through the index, and every module each answer came from."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Callable

from amplint.files import read_regular
from amplint.project.gradient_norms import gradient_norms_in
from amplint.project.losses import LossHelper
from amplint.project.source import ModuleSource, may_import
from amplint.project.configs import (
    LaunchPrecision,
    json_object,
    read_config_file,
)
from amplint.project.index import CallSite, ProjectIndex, reexported
from amplint.project.module_facts import CustomKernel, FsdpUse, custom_kernel_in
from amplint.project.roots import ProjectRoot, find_project_root

# How far the imports of one program are followed (a script importing a whole
# framework stops here).
MAX_PROGRAM_MODULES = 2_000


_NOT_ASKED = object()


class ProjectView:
    """One file's window on its project; remembers what it looked at."""

    def __init__(self, index: ProjectIndex, path: Path) -> None:
        self.index = index
        self.path = path.resolve()
        self.consulted: dict[str, str] = {}  # path -> sha256 of the bytes read
        self._launch_precision: LaunchPrecision | None | object = _NOT_ASKED  # several rules ask

    def note(self, path: Path) -> None:
        """Record that an answer came from the module at `path`."""
        module = self.index.module(path)
        if module is not None and module.path != self.path:
            self.consulted[str(module.path)] = module.digest

    def relative(self, path: Path) -> str:
        return self.index.relative(path)

    def module_path(self, spelled: str) -> Path | None:
        """The project module an import of `spelled` in this module means
        (`utils`, `.engine.trainer`), or None."""
        absolute = self.index._absolute_target(self.path, spelled)
        path = self.index._find_module(self.path, absolute) if absolute else None
        return path.resolve() if path is not None else None

    def defining_module(self, spelled: str, name: str) -> Path | None:
        """The project module that defines `name` imported from `spelled`: that
        module, or where it is a package whose `__init__.py` re-exports `name`
        (`from .amp import ApexScaler`), the module it re-exports it from."""
        path = self.module_path(spelled)
        if path is None:
            return None
        found = reexported(self.index, path).get(name)
        if found is None or found[1] != name:
            return path
        self.note(found[0])
        return found[0]

    def callers(self, function: str) -> list[CallSite]:
        sites = self.index.callers(self.path, function)
        for site in sites:
            self.note(site.path)
        return sites

    def loss_helpers(self, imported: dict[str, str]) -> dict[str, LossHelper]:
        """The autocast-unsafe loss helpers of other project modules reachable
        through this module's imports (local name -> what it imports), by the
        name a call spells them: `vae_loss`, `losses.vae_loss`."""
        return {
            spelled: replace(helper, where=f"{self.relative(helper.path)}:{helper.line}")
            for spelled, _, helper in self._through_imports(imported, self.index.loss_helpers)
        }

    def gradient_norms(self, imported: dict[str, str]) -> dict[str, str]:
        """The functions of this module, and of the project modules its imports
        reach (local name -> what it imports), that compute a norm of the
        gradients they are given, by the name a call spells them
        (`get_grad_norm`, `utils.get_grad_norm`), with where they are."""
        found: dict[str, str] = {}
        own = self.index.module(self.path)
        if own is not None:
            for name, line in self.index.definitions_in(own, gradient_norms_in).items():
                found[name] = f"{self.relative(self.path)}:{line}"
        for spelled, path, line in self._through_imports(imported, self.index.gradient_norms):
            found[spelled] = f"{self.relative(path)}:{line}"
        return found

    def _through_imports(self, imported: dict[str, str], look_up: Callable):
        """(the name a call spells, its module, what `look_up` found) for each
        definition of another project module that this module's imports bring
        (local name -> what it imports); each module read is noted."""
        for local, target in imported.items():
            path, definitions = look_up(self.path, target)
            if path is None or path.resolve() == self.path:
                continue
            self.note(path)
            for name, definition in definitions.items():
                yield (f"{local}.{name}" if name else local), path, definition

    def fsdp_uses(self) -> list[FsdpUse]:
        """FSDP wrapping in this module's program: a project module that imports
        this one or that this one imports (a repository of independent examples
        is one project but many programs)."""
        uses = [
            use
            for use in self.index.fsdp_uses()
            if use.path == self.path
            or self.index.imports(use.path, self.path)
            or self.index.imports(self.path, use.path)
        ]
        for use in uses:
            self.note(use.path)
        return uses

    def launch_precision(self) -> LaunchPrecision | None:
        """The precision an `accelerate launch` of this module sets, from the
        project's launch configs and scripts near it (LaunchPrecision.applies_to):
        one that turns mixed precision on first, else one that says "no", else
        None."""
        if self._launch_precision is _NOT_ASKED:
            near = [
                found
                for found in self.index.launch_precisions()
                if found.applies_to(self.path, self.index.root)
            ]
            near.sort(key=lambda found: not found.enabled)
            for found in near:
                self.consulted[str(found.path)] = found.digest
            self._launch_precision = near[0] if near else None
        return self._launch_precision

    def json_config(self, spelled: str) -> tuple[Path, dict] | None:
        """The JSON object in the file `spelled` names (a DeepSpeed config), as
        a path from this module's directory or from the project root."""
        for base in (self.path.parent, self.index.root):
            config = read_config_file(base / spelled, self.index.root)
            if config is None:
                continue
            self.consulted[str(config.path)] = config.digest
            contents = json_object(config.data)
            return (config.path, contents) if contents is not None else None
        return None

    def custom_kernels(self) -> list[CustomKernel]:
        """Kernel modules (CustomKernel) in this module's program: reached
        through project imports from this module, or from a module that
        imports it (`main.py` importing the model and the training loop)."""
        if self.index.whole_tree and not self.index.custom_kernels():
            return []  # none in the tree (a lone script's imports may leave it)
        own = self.index.module(self.path)
        found = []
        program = ([own] if own is not None else []) + self.program_modules()
        for module in sorted(program, key=lambda module: module.path):
            kernel = custom_kernel_in(module)
            if kernel is not None:
                found.append(kernel)
        return found

    def program_modules(self) -> list[ModuleSource]:
        """The modules of this module's program, itself left out, each noted:
        what it reaches through project imports, and what a module importing
        it reaches (`main.py` importing the model and the training loop)."""
        starts = [self.path] + [
            self.index.resolved(path) or path
            for path in self.index.paths
            if self._may_import_this(path) and self.path in self.index.imported_modules(path)
        ]
        found = []
        for path in sorted(self._reached(starts) - {self.path}):
            self.note(path)
            module = self.index.module(path)
            if module is not None:
                found.append(module)
        return found

    def imported_program(self) -> list[Path]:
        """The project modules this one reaches through its imports, at any
        depth, itself left out (what a driver script runs of the project)."""
        return sorted(self._reached([self.path]) - {self.path})

    def importers(self) -> list[ModuleSource]:
        """The project's modules that import this one (a library module's
        users: `main.py` importing `algo/ppo.py`), each noted."""
        found = []
        for path in self.index.paths:
            if path == self.path or not self._may_import_this(path):
                continue
            if self.index.imports(path, self.path):
                self.note(path)
                module = self.index.module(path)
                if module is not None:
                    found.append(module)
        return found

    def _may_import_this(self, path: Path) -> bool:
        """A text test before parsing: an import of this module spells its name."""
        module = self.index.module(path)
        stem = self.path.stem if self.path.name != "__init__.py" else self.path.parent.name
        return module is not None and may_import(module.text, stem)

    def _reached(self, starts: list[Path]) -> set[Path]:
        seen = set(starts)
        frontier = list(starts)
        while frontier and len(seen) < MAX_PROGRAM_MODULES:
            for imported in self.index.imported_modules(frontier.pop()):
                if imported not in seen:
                    seen.add(imported)
                    frontier.append(imported)
        return seen


_INDEXES: dict[ProjectRoot, ProjectIndex] = {}


def project_view(path: Path, root: ProjectRoot | None = None) -> ProjectView:
    """The view of `path` on the project at `root` (found from `path` when
    None); indexes are shared by every file of a project in this process."""
    root = root or find_project_root(path)
    index = _INDEXES.get(root)
    if index is None:
        index = _INDEXES[root] = ProjectIndex(root)
    index.begin_file()
    return ProjectView(index, path)


def forget_projects() -> None:
    """Drop every index this process keeps (a caller done with its projects:
    the generated programs of the tests, one project each)."""
    _INDEXES.clear()


def still_current(consulted: dict[str, str]) -> bool:
    """Whether every module a cached answer came from is as it was."""
    for path, digest in consulted.items():
        try:
            # A cache entry names these: one a repository planted may name a FIFO.
            if hashlib.sha256(read_regular(path)).hexdigest() != digest:
                return False
        except OSError:
            return False
    return True
