"""The project a file belongs to: the layer between the files and the analysis.

A training step crosses module borders (the epoch loop in ``main.py`` calls
``train_one_epoch`` in ``engine.py``; the model is wrapped in FSDP somewhere
else), so the per-file analysis asks questions about the rest of the project
here.  The index is read-only and lazy: it reads a module's text only when a
question needs it, parses it with ``ast`` (never libcst, never importing it)
only when the text can answer, and keeps both by content hash.  Every module a
file's answers came from is recorded on that file's view, so a cached result
is served only while those modules are unchanged.
"""

from __future__ import annotations

import ast
import codecs
import hashlib
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from amplint.files import DEFAULT_EXCLUDES, read_regular, real_path
from amplint.project.gradient_norms import gradient_norms_in
from amplint.project.losses import LossHelper, loss_helpers_in
from amplint.project.source import ModuleSource, dotted_expression, last_name, may_import
from amplint.project.configs import (
    LAUNCH_SUFFIXES,
    LaunchPrecision,
    json_object,
    launch_precision_in,
    read_config_file,
)

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Walking a home directory by mistake must not take minutes.
MAX_PROJECT_FILES = 20_000
# How far the imports of one program are followed (a script importing a whole
# framework stops here).
MAX_PROGRAM_MODULES = 2_000
T = TypeVar("T")


# One pattern a spelling, each starting with its word: CPython's re looks for
# a literal prefix first, where a leading `\b` or alternation makes it try
# every position (these read every module of the project: ten times slower).
def _word_then(word: str, then: str) -> re.Pattern[str]:
    """`word` (not the end of a longer name), then the pattern `then`."""
    return re.compile(rf"{word}(?<!\w{word}){then}")


_FSDP_WRAPS = [
    _word_then(wrapper, r"\s*\(") for wrapper in ("FullyShardedDataParallel", "FSDP", "fully_shard")
]
_FSDP_MIXED_PRECISION = [
    _word_then("MixedPrecision", r"\s*(?:Policy)?\s*\("),
    _word_then("mixed_precision", r"\s*="),
    _word_then("mp_policy", r"\s*="),
]


@dataclass(frozen=True)
class ProjectRoot:
    """Where a file's project starts, and whether the directories below it are
    read (a marker says where the project ends; without one, only the
    directories the user's own paths span)."""

    path: Path
    whole_tree: bool


class ProjectRoots:
    """Each file's project root in one run over `named` (the user's paths): the
    nearest directory above the file holding a project marker, else the common
    parent of the paths, else (one script named alone) the script's directory,
    whose subdirectories are then not read: a script in /tmp or ~/Downloads
    must not read everything below."""

    def __init__(self, named: Sequence[Path]) -> None:
        spans = {real_path(path) if path.is_dir() else real_path(path).parent for path in named}
        try:
            common = Path(os.path.commonpath(sorted(spans))) if spans else None
        except ValueError:  # paths on different drives
            common = None
        # One file, or files of one directory, span only that directory.
        named_a_tree = len(spans) > 1 or any(path.is_dir() for path in named)
        self._common = common if named_a_tree else None

    def __call__(self, path: Path) -> ProjectRoot:
        directory = path.resolve().parent
        marked = _marked_root(directory)
        if marked is not None:
            return ProjectRoot(marked, whole_tree=True)
        if self._common is not None and directory.is_relative_to(self._common):
            return ProjectRoot(self._common, whole_tree=True)
        return ProjectRoot(directory, whole_tree=False)


def find_project_root(path: Path) -> ProjectRoot:
    """The project root of `path` named alone (standard input, one file)."""
    return ProjectRoots([path])(path)


_SKIPPED_DIRECTORIES = frozenset(
    {*DEFAULT_EXCLUDES, "site-packages", "node_modules", "__pycache__"}
)


def _tree(root: str, whole: bool) -> Iterator[tuple[str, list[os.DirEntry], bool]]:
    """Each directory os.walk would list under `root` (only `root` unless
    `whole`; no hidden, excluded or linked directory), with its entries that
    are not directories, in name order, and whether it holds a project marker.
    A directory entry of os.scandir says whether it is a link without the stat
    os.walk's names need: a project of 400 modules is listed in half the time."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        files, subdirectories, marked = [], [], False
        for entry in entries:
            if not _is_directory(entry):
                files.append(entry)
                marked = marked or entry.name in ROOT_MARKERS
                continue
            marked = marked or entry.name == ".git"
            if whole and not (
                entry.name.startswith(".")
                or entry.name in _SKIPPED_DIRECTORIES
                or entry.is_symlink()
            ):
                subdirectories.append(entry.path)
        yield directory, files, marked
        stack += reversed(subdirectories)


def _is_directory(entry: os.DirEntry) -> bool:
    """Whether `entry` is a directory or a link to one, as os.walk decides."""
    try:
        return entry.is_dir()
    except OSError:
        return False


@lru_cache(maxsize=4096)
def _marked_root(directory: Path) -> Path | None:
    for candidate in (directory, *directory.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return None


@dataclass(frozen=True)
class CallSite:
    """A call, in another module of the project, of a function of this one."""

    path: Path
    line: int
    caller: str  # the function (or `<module>`) the call is in


@dataclass(frozen=True)
class FsdpUse:
    """Where a module wraps a model in FSDP."""

    path: Path | None  # None for text with no file behind it
    line: int
    mixed_precision: bool  # the same module passes an FSDP mixed-precision policy
    # `fully_shard` (FSDP2): its gradients are DTensors, whose inf check the
    # plain GradScaler already reduces across ranks; FullyShardedDataParallel's
    # flat shards need ShardedGradScaler.
    composable: bool


def fsdp_use_in(text: str, path: Path | None = None) -> FsdpUse | None:
    """Where `text` wraps a model in FSDP (the wrapper called, not only named)."""
    if "FSDP" not in text and "FullyShardedDataParallel" not in text and "fully_shard" not in text:
        return None
    matches = [match for pattern in _FSDP_WRAPS if (match := pattern.search(text)) is not None]
    if not matches:
        return None
    first = min(matches, key=lambda match: match.start())
    return FsdpUse(
        path,
        text.count("\n", 0, first.start()) + 1,
        any(pattern.search(text) is not None for pattern in _FSDP_MIXED_PRECISION),
        first.group().startswith("fully_shard"),
    )


@dataclass(frozen=True)
class CustomKernel:
    """A project module that compiles C++/CUDA kernels when imported
    (`fused = load("fused", sources=[...])`, rosinality's StyleGAN2 ops) and
    has no `custom_fwd`: its autograd Functions hand autocast's float16
    activations and float32 parameters to one kernel, which reads both as one
    type (`data_ptr<scalar_t>()`) and raises."""

    path: Path
    line: int


# A call of `load` or `load_inline`, not their definition (torch's cpp_extension.py).
_LOAD_CALL = re.compile(r"(?<!def )load(?:_inline)?(?:[\s\\]|#[^\r\n]*[\r\n])*\(")


def custom_kernel_in(module: ModuleSource) -> CustomKernel | None:
    """Where `module` compiles kernels on import without `custom_fwd`, or None."""
    if "cpp_extension" not in module.text or "custom_fwd" in module.text:
        return None
    # The compile is a call of `load` or `load_inline`: spelled so before
    # the module is parsed (torch's own cpp_extension.py, which defines them,
    # is 3,000 lines).
    if _LOAD_CALL.search(module.text) is None or module.tree is None:
        return None
    statements = list(module.tree.body)
    for statement in module.tree.body:  # also under a top-level `try:` or `if`
        if isinstance(statement, (ast.Try, ast.If)):
            statements += statement.body
    for statement in statements:
        value = getattr(statement, "value", None)
        if (
            isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Expr))
            and isinstance(value, ast.Call)
            and last_name(value.func) in ("load", "load_inline")
        ):
            return CustomKernel(module.path, statement.lineno)
    return None


class ProjectIndex:
    """Every Python module under one project root, read on demand."""

    def __init__(self, root: ProjectRoot) -> None:
        self.root = root.path.resolve()
        self.whole_tree = root.whole_tree
        self._paths: list[Path] | None = None
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
            for directory, files, marked in _tree(root, self.whole_tree):
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
        return ModuleSource(path, _dotted(path, self.root), text, data.startswith(codecs.BOM_UTF8))

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
        for path in self.paths:
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
        return source.tree is not None and any(True for _ in _bindings(source, target))


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
        starts = [self.path] + [
            self.index.resolved(path) or path
            for path in self.index.paths
            if self._may_import_this(path) and self.path in self.index.imported_modules(path)
        ]
        found = []
        for path in sorted(self._reached(starts)):
            self.note(path)
            module = self.index.module(path)
            kernel = custom_kernel_in(module) if module is not None else None
            if kernel is not None:
                found.append(kernel)
        return found

    def imported_program(self) -> list[Path]:
        """The project modules this one reaches through its imports, at any
        depth, itself left out (what a driver script runs of the project)."""
        return sorted(self._reached([self.path]) - {self.path})

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


def _bindings(module: ModuleSource, target: ModuleSource):
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
        for name, local in _bindings(source, target):
            if name is not None:
                found.setdefault(local, (imported.resolve(), name))
    return found


def _calls_of(module: ModuleSource, target: ModuleSource, function: str) -> list[CallSite]:
    """Calls in `module` of `function` defined in `target`."""
    direct: set[str] = set()  # local names bound to the function itself
    via_module: set[str] = set()  # local names bound to the target module
    for imported, local in _bindings(module, target):
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
            sites.append(CallSite(module.path, node.lineno, caller))
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
