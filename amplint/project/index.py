"""Every Python module under one project root, read on demand, and the
questions across modules: who imports what, who calls a function, which
definitions an import brings."""

from __future__ import annotations

import ast
import codecs
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from amplint.files import read_regular
from amplint.project.gradient_norms import gradient_norms_in
from amplint.project.losses import LossHelper, loss_helpers_in
from amplint.project.source import ModuleSource, dotted_expression, may_import
from amplint.project.configs import (
    LAUNCH_SUFFIXES,
    LaunchPrecision,
    launch_precision_in,
    read_config_file,
)
from amplint.project.module_facts import CustomKernel, FsdpUse, custom_kernel_in, fsdp_use_in
from amplint.project.roots import ProjectRoot, walk_tree

# Walking a home directory by mistake must not take minutes.
MAX_PROJECT_FILES = 20_000
T = TypeVar("T")


@dataclass(frozen=True)
class CallSite:
    """A call, in another module of the project, of a function of this one."""

    path: Path
    line: int  # in a notebook, the line within its cell
    caller: str  # the function (or `<module>`) the call is in
    cell: int | None = None  # a notebook's cell, numbered as editors count them

    def where(self, relative: str) -> str:
        """`relative` (the path as the user reads it) with the call's line:
        ``train.py:12``, ``explore.ipynb:cell 3:2``."""
        cell = f"cell {self.cell}:" if self.cell is not None else ""
        return f"{relative}:{cell}{self.line}"


class ProjectIndex:
    """Every Python module under one project root, read on demand."""

    def __init__(self, root: ProjectRoot) -> None:
        self.root = root.path.resolve()
        self.whole_tree = root.whole_tree
        self._paths: list[Path] | None = None
        # Notebooks import the project's modules and call their functions, but
        # nothing imports them: they are asked only who calls a function.
        self._notebooks: list[Path] = []
        self._launch_files: list[Path] = []  # accelerate configs, launch scripts
        self._launch: list[LaunchPrecision] | None = None
        # path -> ((mtime, size) when read, the module or None if unreadable)
        self._modules: dict[Path, tuple[tuple[int, int] | None, ModuleSource | None]] = {}
        # The modules compared with their files since the file being analysed
        # began: each question reads every module, and one stat each will do.
        self._checked: set[Path] = set()
        self._fsdp: list[FsdpUse] | None = None
        self._by_name: dict[str, list[Path]] | None = None
        # (what was looked for, module digest) -> the definitions found
        self._definitions: dict[tuple[str, str], dict] = {}
        self._kernels: list[CustomKernel] | None = None
        self._imported: dict[str, list[Path]] = {}  # module digest -> project modules
        # path as asked -> the file it names (None: a link loop); resolving walks
        # every component of the path, and each question asks about every module
        self._resolved: dict[Path, Path | None] = {}

    # -- files ----------------------------------------------------------------
    @property
    def paths(self) -> list[Path]:
        if self._paths is None:
            self._paths = []
            root = os.fspath(self.root)
            nested: set[str] = set()  # directories of projects inside this one
            for directory, files, marked in walk_tree(root, self.whole_tree):
                # A launch config belongs to the project whose root holds it: not
                # to an enclosing repository (fixtures, examples with markers).
                if os.path.dirname(directory) in nested or (directory != root and marked):
                    nested.add(directory)
                for entry in files:
                    if entry.name.endswith(".py"):
                        path = Path(entry.path)
                        self._paths.append(path)
                        # The walk follows no directory link under the resolved
                        # root, so only the file itself can be one.
                        if not entry.is_symlink():
                            self._resolved[path] = path
                    elif entry.name.endswith(".ipynb"):
                        self._notebooks.append(Path(entry.path))
                    elif entry.name.endswith(LAUNCH_SUFFIXES) and directory not in nested:
                        self._launch_files.append(Path(entry.path))
                if len(self._paths) > MAX_PROJECT_FILES:
                    break
        return self._paths

    def resolved(self, path: Path) -> Path | None:
        """The file `path` names, links followed; None for a link loop.  Kept
        for the index's life, as the list of its paths is."""
        try:
            return self._resolved[path]
        except KeyError:
            pass
        try:
            found = path.resolve()
        except (OSError, RuntimeError):
            found = None
        self._resolved[path] = found
        return found

    def begin_file(self) -> None:
        """A file's analysis begins: each module is compared with its file
        again when next read (an index outlives one file: a worker analyses
        many, an editor keeps it open)."""
        self._checked.clear()

    def module(self, path: Path) -> ModuleSource | None:
        """The module at `path`, read again when its file has changed: compared
        with the file once per file analysed (begin_file)."""
        path = self.resolved(path)
        if path is None:  # a link loop: no module there
            return None
        known = self._modules.get(path)  # only paths inside the project are kept
        if known is not None and path in self._checked:
            return known[1]
        if known is None and _under(path, self.root) is None:
            return None  # a link out of the project: not read, as files.read_regular refuses
        try:
            stat = os.stat(path)
        except OSError:
            stat = None
        version = None if stat is None else (stat.st_mtime_ns, stat.st_size)
        if known is None or known[0] != version:
            if known is not None:
                self._fsdp = self._kernels = None  # answers read from the old text
            module = self._read(path) if stat is not None else None
            self._modules[path] = known = (version, module)
        self._checked.add(path)
        return known[1]

    def _read(self, path: Path) -> ModuleSource | None:
        try:
            # Never waits on a FIFO named like a module, and refuses a file
            # too large to be a module anyone wrote.
            data = read_regular(path)
            text = data.decode("utf-8-sig")
        except (OSError, UnicodeDecodeError):
            return None
        bom = data.startswith(codecs.BOM_UTF8)
        if path.suffix != ".ipynb":
            return ModuleSource(path, _dotted(path, self.root), text, bom)
        from amplint.notebook import NotebookError, read_notebook  # for notebooks only

        try:
            notebook = read_notebook(text)
        except NotebookError:
            return None
        # No import can name a notebook: its dotted name is its file's.  The
        # digest is of the file's bytes, as the cache compares it (still_current).
        digest = hashlib.sha256(data).hexdigest()
        return ModuleSource(path, path.name, notebook.code, bom, notebook, _digest=digest)

    def relative(self, path: Path) -> str:
        """`path` as the user reads it: relative to the project root."""
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    # -- questions --------------------------------------------------------------
    def callers(self, defining: Path, function: str) -> list[CallSite]:
        """Calls of the module-level function `function` of `defining` from the
        project's other modules, through the names they import it by."""
        defining = self.resolved(defining)
        target = self.module(defining) if defining is not None else None
        if target is None:
            return []
        # An import of a module spells its last name (`from .engine import
        # train`, `import engine`): a text test that spares parsing the many
        # modules that mention a common name such as `train`.  A package's
        # __init__ is imported relatively without its name (`from . import x`).
        spelled = None if defining.name == "__init__.py" else target.name.rsplit(".", 1)[-1]
        sites = []
        self.paths  # the walk that finds the notebooks too
        for path in [*self.paths, *self._notebooks]:
            if self.resolved(path) == defining:
                continue
            module = self.module(path)
            if module is None or function not in module.text:
                continue
            if spelled is not None and not may_import(module.text, spelled):
                continue
            if module.tree is None:
                continue
            sites += _calls_of(module, target, function)
        return sites

    def fsdp_uses(self) -> list[FsdpUse]:
        """Where the project wraps a model in FSDP (a text test: the wrapper is
        called, not merely named)."""
        if self._fsdp is None:
            self._fsdp = self._in_every_module(lambda m: fsdp_use_in(m.text, m.path))
        return self._fsdp

    def launch_precisions(self) -> list[LaunchPrecision]:
        """The project's Accelerate launch configs and scripts that set its
        precision (project/configs.py)."""
        if self._launch is None:
            self.paths  # the walk that finds them
            self._launch = []
            for path in self._launch_files:
                config = read_config_file(path, self.root)
                found = launch_precision_in(config) if config is not None else None
                if found is not None:
                    self._launch.append(found)
        return self._launch

    def custom_kernels(self) -> list[CustomKernel]:
        """The project's modules that compile kernels autocast cannot cast for."""
        if self._kernels is None:
            self._kernels = self._in_every_module(custom_kernel_in)
        return self._kernels

    def _in_every_module(self, finder: Callable[[ModuleSource], T | None]) -> list[T]:
        """What `finder` answers for each readable module of the project."""
        found = []
        for path in self.paths:
            module = self.module(path)
            answer = finder(module) if module is not None else None
            if answer is not None:
                found.append(answer)
        return found

    def imported_modules(self, importer: Path) -> list[Path]:
        """The project modules `importer`'s import statements name: `from op
        import x` gives op/__init__.py, and op/x.py where x is a module."""
        module = self.module(importer)
        if module is None or module.tree is None:
            return []
        found = self._imported.get(module.digest)
        if found is None:
            spelled: list[str] = []
            for node in module.imports:
                if isinstance(node, ast.Import):
                    spelled += [alias.name for alias in node.names]
                else:
                    source = _absolute(node, module)
                    spelled += [source] + [f"{source}.{alias.name}" for alias in node.names]
            paths = (self._find_module(importer, name) for name in spelled if name)
            found = self._imported[module.digest] = sorted(
                {self.resolved(path) or path for path in paths if path is not None}
            )
        return found

    def loss_helpers(
        self, importer: Path, target: str
    ) -> tuple[Path | None, dict[str, LossHelper]]:
        """What an import in `importer` of `target` (`losses.vae_loss`,
        `.losses`) brings of the project's autocast-unsafe loss helpers:
        {"": helper} for a helper itself, {"vae_loss": helper, ...} for the
        module holding them; with the module read to answer, or None."""
        return self._definitions_imported(importer, target, loss_helpers_in)

    def gradient_norms(self, importer: Path, target: str) -> tuple[Path | None, dict[str, int]]:
        """What an import in `importer` of `target` brings of the project's
        functions computing a norm of the gradients (project/gradient_norms.py),
        by name ("" for the function itself), with their lines."""
        return self._definitions_imported(importer, target, gradient_norms_in)

    def _definitions_imported(
        self, importer: Path, target: str, found_in: Callable[[ModuleSource], dict[str, T]]
    ) -> tuple[Path | None, dict[str, T]]:
        """What `found_in` finds in the module or the top-level name of a module
        that an import in `importer` of `target` means: {"": it} for a name,
        everything found for a module; with the module read, or None."""
        spelled = self._absolute_target(importer, target)
        if spelled is None:
            return None, {}
        path = self._find_module(importer, spelled)
        if path is not None:
            module = self.module(path)
            return path, self.definitions_in(module, found_in) if module is not None else {}
        owner, _, name = spelled.rpartition(".")
        path = self._find_module(importer, owner) if owner else None
        module = self.module(path) if path is not None else None
        if module is None:
            return None, {}
        found = self.definitions_in(module, found_in).get(name)
        return path, {"": found} if found is not None else {}

    def definitions_in(
        self, module: ModuleSource, found_in: Callable[[ModuleSource], dict[str, T]]
    ) -> dict[str, T]:
        """`found_in(module)`, once per content of the module."""
        key = (found_in.__name__, module.digest)
        if key not in self._definitions:
            self._definitions[key] = found_in(module)
        return self._definitions[key]

    def _absolute_target(self, importer: Path, target: str) -> str | None:
        """`target` with its leading dots resolved against `importer`'s package."""
        level = len(target) - len(target.lstrip("."))
        if not level:
            return target
        module = self.module(importer)
        if module is None:
            return None
        return _from_package(module, level, target[level:]) or None

    def _find_module(self, importer: Path, spelled: str) -> Path | None:
        """The project module an import of `spelled` means, the one beside the
        importer first (scripts import their neighbours by bare name)."""
        if self._by_name is None:
            self._by_name = {}
            for path in self.paths:
                dotted = _dotted(path, self.root)
                for start in range(dotted.count(".") + 1):
                    suffix = dotted.split(".", start)[-1]
                    self._by_name.setdefault(suffix, []).append(path)
        candidates = self._by_name.get(spelled, [])
        directory = (self.resolved(importer) or importer).parent
        beside = [path for path in candidates if path.parent == directory]
        return (beside or candidates or [_on_script_path(self.root, spelled)])[0]

    def imports(self, importer: Path, imported: Path) -> bool:
        """Whether the module at `importer` imports the one at `imported`."""
        source, target = self.module(importer), self.module(imported)
        if source is None or target is None:
            return False
        if not may_import(source.text, target.name.rsplit(".", 1)[-1]):
            return False  # before parsing: most modules never spell the name
        return source.tree is not None and any(True for _ in bindings(source, target))


# -- helpers ------------------------------------------------------------------------
def _dotted(path: Path, root: Path) -> str:
    # On strings: it runs for every module of the project, and pathlib's
    # relative_to took a third of the time reading them did.
    parts = _under(path, root)
    if parts is None:
        parts = [path.name]
    parts[-1] = os.path.splitext(parts[-1])[0]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _under(path: Path, root: Path) -> list[str] | None:
    """The parts of `path` below `root` (both absolute), or None where it is
    not below it."""
    prefix = os.path.join(root, "")
    text = os.fspath(path)
    return text[len(prefix) :].split(os.sep) if text.startswith(prefix) else None


def _absolute(node: ast.ImportFrom, importer: ModuleSource) -> str:
    """The module an ``from X import ...`` reads, relative dots resolved."""
    if not node.level:
        return node.module or ""
    return _from_package(importer, node.level, node.module or "")


def _from_package(importer: ModuleSource, level: int, rest: str) -> str:
    """`rest` imported with `level` leading dots from `importer`: `from ..x import`."""
    package = importer.name.split(".") if importer.name else []
    if importer.path.name != "__init__.py":
        package = package[:-1]
    if level > 1:
        package = package[: len(package) - (level - 1)]
    return ".".join(part for part in (*package, rest) if part)


def _on_script_path(root: Path, spelled: str) -> Path | None:
    """The module Python finds for `import spelled` in the project root, the
    script's own directory (sys.path[0]) where the index does not walk the
    directories below (a lone script: `from op import fused_leaky_relu`)."""
    parts = spelled.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _names_module(spelled: str, target: ModuleSource) -> bool:
    """Whether an import of `spelled` can mean `target`: scripts import their
    neighbours by bare name, packages by a dotted path that may start below
    the project root."""
    return bool(spelled) and (target.name == spelled or target.name.endswith("." + spelled))


def bindings(module: ModuleSource, target: ModuleSource):
    """Each import in `module` of `target`, as (what is imported, the local
    name): (None, name) binds the module itself, (attr, name) one of its names."""
    for node in module.imports:
        if isinstance(node, ast.ImportFrom):
            spelled = _absolute(node, module)
            for alias in node.names:
                local = alias.asname or alias.name
                if _names_module(spelled, target):
                    yield alias.name, local
                if _names_module(f"{spelled}.{alias.name}".lstrip("."), target):
                    yield None, local
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _names_module(alias.name, target):
                    yield None, alias.asname or alias.name


def reexported(index: ProjectIndex, package: Path) -> dict[str, tuple[Path, str]]:
    """The names a package's `__init__.py` binds from the project modules it
    imports (`from .amp import ApexScaler`): each local name -> (that module,
    the name there).  Empty for a module that is no package's `__init__.py`."""
    source = index.module(package)
    if package.name != "__init__.py" or source is None or source.tree is None:
        return {}
    found: dict[str, tuple[Path, str]] = {}
    for imported in index.imported_modules(package):
        target = index.module(imported)
        if target is None or target is source:
            continue
        for name, local in bindings(source, target):
            if name is not None:
                found.setdefault(local, (imported.resolve(), name))
    return found


def _calls_of(module: ModuleSource, target: ModuleSource, function: str) -> list[CallSite]:
    """Calls in `module` of `function` defined in `target`."""
    direct: set[str] = set()  # local names bound to the function itself
    via_module: set[str] = set()  # local names bound to the target module
    for imported, local in bindings(module, target):
        if imported is None:
            via_module.add(local)
        elif imported == function:
            direct.add(local)
    if not direct and not via_module:
        return []
    sites = []
    for caller, node in _calls_with_callers(module.tree):
        func = node.func
        if (isinstance(func, ast.Name) and func.id in direct) or (
            isinstance(func, ast.Attribute)
            and func.attr == function
            and dotted_expression(func.value) in via_module
        ):
            if module.notebook is None:
                sites.append(CallSite(module.path, node.lineno, caller))
            else:
                cell, line = module.notebook.position(node.lineno)
                sites.append(CallSite(module.path, line, caller, cell))
    return sites


def _calls_with_callers(tree: ast.Module):
    stack: list[tuple[str, ast.AST]] = [("<module>", tree)]
    while stack:
        caller, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                stack.append((child.name, child))
                continue
            if isinstance(child, ast.Call):
                yield caller, child
            stack.append((caller, child))
