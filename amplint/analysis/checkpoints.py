"""Checkpoints that save or restore the optimizer but not the GradScaler.

A GradScaler carries state across iterations: the loss scale it has settled on
and how many steps it has gone without an overflow.  A run resumed without it
starts again at 65536 and skips steps while it backs off.  The scaler's
``state_dict()`` belongs next to the optimizer's in the checkpoint, and its
``load_state_dict`` next to the optimizer's on resume.

Checkpoint dicts are recognised by their values: an optimizer's
``state_dict()`` and at least one more entry.  A resume is
``optimizer.load_state_dict(checkpoint["key"])``.  The module must use exactly
one scaler (``S.scale(...)`` somewhere) and never pass it to a checkpoint.

A checkpoint in a module-level helper (``def save_checkpoint(model, optimizer,
path)``) cannot name a scaler that is local to its caller; the scaler then
travels the way the optimizer does, as an argument: the helper is its
*carrier* when the optimizer is one of its parameters and some call of it in
the module stands where the scaler is bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.imports import dotted_name
from amplint.analysis.nullable import may_be_none, optional_annotation, optional_parameter
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.visitor import Analysis
from amplint.analysis.statements import calls_in_line, method_name, string_value
from amplint.analysis.steps import is_scaler, looks_like_optimizer


@dataclass(frozen=True, eq=False)
class Carrier:
    """A module-level function that would take the scaler as a parameter to
    reach a checkpoint, and its calls that can pass it."""

    function: cst.FunctionDef
    calls: tuple[cst.Call, ...]


@dataclass(frozen=True, eq=False)
class CheckpointWithoutScaler:
    """A checkpoint dict with the optimizer's state and not the scaler's."""

    checkpoint: cst.Dict
    optimizer_entry: cst.DictElement  # where the scaler's entry goes after
    scaler: str
    key: str  # the key the scaler's state is saved under
    reachable: bool  # whether the scaler can be named where the dict is built
    # The scaler is (or, passed through the carrier, becomes) a parameter
    # defaulting to None: guard its use.
    optional: bool
    carrier: Carrier | None  # when not reachable: the function to pass it through
    made_after: bool = False  # not reachable: the scope makes the scaler later


@dataclass(frozen=True, eq=False)
class ResumeWithoutScaler:
    """``optimizer.load_state_dict(checkpoint["key"])`` with no scaler restore."""

    statement: cst.SimpleStatementLine
    call: cst.Call
    checkpoint: str  # the name the checkpoint is held in
    scaler: str
    key: str
    reachable: bool
    quote: str  # the quote the optimizer's key is written with
    optional: bool
    carrier: Carrier | None
    made_after: bool = False


@dataclass(frozen=True)
class CheckpointScan:
    """Checkpoints that save or resume a model without its GradScaler's state."""

    saves: list[CheckpointWithoutScaler]
    resumes: list[ResumeWithoutScaler]


def scaler_key(optimizer_key: str, taken: set[str]) -> str:
    """The scaler's key, spelled like the optimizer's: "optimizer" -> "scaler",
    "optimizer_state_dict" -> "scaler_state_dict", "opt_state" -> "scaler_state"."""
    match = re.search(r"(_state_dict|_state|_sd)$", optimizer_key)
    key = "scaler" + (match.group(1) if match else "")
    return key if key not in taken else "grad_" + key


def state_dict_of(value: cst.BaseExpression) -> str | None:
    """`x` for a value `x.state_dict()`, also as one side of a conditional
    (`None if final_epoch else optimizer.state_dict()`, as yolov5 saves)."""
    if isinstance(value, cst.IfExp):
        return state_dict_of(value.body) or state_dict_of(value.orelse)
    if isinstance(value, cst.Call) and method_name(value) == "state_dict" and not value.args:
        return dotted_name(value.func.value)
    return None


class _CheckpointFinder(ScopedVisitor):
    def __init__(self) -> None:
        super().__init__()
        # scaler as written -> the classes it is used in (None: not in a method)
        self.scalers: dict[str, set[cst.ClassDef | None]] = {}
        # Per scope, each name or `self.x` it binds -> when it is first bound, in
        # source order (0 for a parameter): a scaler named before it is bound
        # would be a NameError.
        self.bound: dict[Scope, dict[str, int]] = {}
        self.optional: dict[Scope, set[str]] = {}  # parameters defaulting to None
        # Names and `self.x` bound somewhere to what may be None (`scaler = None`,
        # `GradScaler() if args.amp else None`): a method called on them needs a test.
        self.maybe_none: set[str] = set()
        self.top_level: set[cst.FunctionDef] = set()  # functions defined at module level
        # A def nested in a function -> that function, and where the def stands
        # in it: a closure reads the names its function bound before it.
        self.enclosing: dict[cst.FunctionDef, tuple[cst.FunctionDef, int]] = {}
        # calls of a plain name: name -> (call, scope, class, position)
        self.calls: dict[str, list[tuple[cst.Call, Scope, cst.ClassDef | None, int]]] = {}
        self.dicts: list[tuple[cst.Dict, Scope, cst.ClassDef | None, int]] = []
        self.resumes: list[
            tuple[cst.SimpleStatementLine, cst.Call, Scope, cst.ClassDef | None, int]
        ] = []
        self._position = 0  # statements seen so far, in source order
        self.restored = False  # some scaler's load_state_dict is called
        self.saved = False  # some scaler's state_dict is taken

    def _class(self) -> cst.ClassDef | None:
        if isinstance(self.scope, cst.FunctionDef) and len(self.scopes) > 1:
            parent = self.scopes[-2]
            return parent if isinstance(parent, cst.ClassDef) else None
        return None

    def enter_scope(self, scope: Scope) -> None:
        bound = self.bound.setdefault(scope, {})
        if isinstance(scope, cst.FunctionDef):
            if len(self.scopes) == 2:
                self.top_level.add(scope)
            parent = self.scopes[-2] if len(self.scopes) > 1 else None
            if isinstance(parent, cst.FunctionDef):
                self.enclosing[scope] = (parent, self._position)
            for param in (*scope.params.params, *scope.params.kwonly_params):
                bound[param.name.value] = 0
                if optional_parameter(param):
                    self.optional.setdefault(scope, set()).add(param.name.value)

    def _bind(self, target: cst.BaseExpression, value, annotation=None) -> str | None:
        """Bind `target` (a name or `self.x`) in the scope; note when it may be
        None.  Returns the name, None for a target that is not one."""
        name = dotted_name(target)
        if name is None:
            return None
        self.bound[self.scope].setdefault(name, self._position)
        optional_here = self.optional.get(self.scope, ())
        if (
            may_be_none(value)
            or optional_annotation(annotation)
            # `self.scaler = scaler`, the scaler a parameter that may be None
            or (isinstance(value, cst.Name) and value.value in optional_here)
        ):
            self.maybe_none.add(name)
            if isinstance(self.scope, cst.ClassDef):  # a class attribute: `self.x` too
                self.maybe_none.add(f"self.{name}")
        return name

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value, node.annotation)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if self._bind(target.target, node.value) is not None:
                continue
            if isinstance(target.target, (cst.Tuple, cst.List)):
                # `model, optimizer, scaler = build(args)`: a builder's scaler.
                for element in target.target.elements:
                    unpacked = dotted_name(element.value)
                    if unpacked is not None:
                        self.bound[self.scope].setdefault(unpacked, self._position)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name):
            entry = (node, self.scope, self._class(), self._position)
            self.calls.setdefault(node.func.value, []).append(entry)
        method = method_name(node)
        if method is None or not is_scaler(node.func.value):
            return
        scaler = dotted_name(node.func.value)
        if method in ("scale", "unscale_", "update", "step"):
            self.scalers.setdefault(scaler, set()).add(self._class())
        elif method == "state_dict":
            self.saved = True
        elif method == "load_state_dict":
            self.restored = True

    def visit_Dict(self, node: cst.Dict) -> None:
        self.dicts.append((node, self.scope, self._class(), self._position))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._position += 1
        for call in calls_in_line(node):
            if (
                method_name(call) == "load_state_dict"
                and len(call.args) == 1
                and looks_like_optimizer(dotted_name(call.func.value) or "")
            ):
                self.resumes.append((node, call, self.scope, self._class(), self._position))


def checkpoints_analysis(module: cst.Module) -> Analysis[CheckpointScan]:
    finder = _CheckpointFinder()
    return Analysis(finder, lambda: _checkpoints(finder, module))


def _checkpoints(finder: _CheckpointFinder, module: cst.Module) -> CheckpointScan:
    if len(finder.scalers) != 1:
        return CheckpointScan([], [])  # no scaler, or several: which one is a guess
    ((scaler, classes),) = finder.scalers.items()

    def reachable(scope: Scope, class_def: cst.ClassDef | None, position: int) -> bool:
        """Whether `scaler` names the scaler at `position` in `scope`."""
        on_self = scaler.startswith("self.")
        if on_self and (class_def is None or class_def not in classes):
            return False
        if "." in scaler and not on_self:
            return False
        bound_here = finder.bound.get(scope, {}).get(scaler)
        if bound_here is not None:
            return bound_here < position  # not before `scaler = ...` runs
        if not on_self and scope in finder.enclosing:
            # `def resume(path):` nested in `main()`, after main's `scaler = ...`.
            parent, defined_at = finder.enclosing[scope]
            if reachable(parent, class_def, defined_at + 1):
                return True
        # Set by another method, or a global the function reads when it runs.
        return scope is not module and (on_self or scaler in finder.bound.get(module, {}))

    def carrier(scope: Scope, optimizer: str | None) -> Carrier | None:
        """`scope` as the function the scaler would be passed to: a module-level
        function that takes the optimizer as a parameter (the scaler travels
        as the optimizer does) and never binds the scaler's name itself, with
        the calls of it that stand where the scaler is bound."""
        if (
            scope not in finder.top_level
            or "." in scaler
            or optimizer is None
            or finder.bound[scope].get(optimizer.split(".")[0]) != 0
            or scaler in finder.bound[scope]
        ):
            return None
        calls = tuple(
            call
            for call, caller, class_def, position in finder.calls.get(scope.name.value, ())
            if reachable(caller, class_def, position)
            and not any(
                arg.star or arg.keyword is not None and arg.keyword.value == scaler
                for arg in call.args
            )
        )
        return Carrier(scope, calls) if calls else None

    def placed(scope: Scope, class_def, position: int, optimizer: str | None) -> dict:
        if reachable(scope, class_def, position):
            optional = scaler in finder.optional.get(scope, ()) or scaler in finder.maybe_none
            return {"reachable": True, "optional": optional, "carrier": None}
        passed = carrier(scope, optimizer)  # the scaler arrives as `scaler=None`
        made_after = finder.bound.get(scope, {}).get(scaler, -1) >= position
        return {
            "reachable": False,
            "optional": passed is not None,
            "carrier": passed,
            "made_after": made_after,
        }

    saves = []
    if not finder.saved:
        for node, scope, class_def, position in finder.dicts:
            found = _checkpoint(node)
            if found is not None:
                optimizer_entry, key = found
                owner = state_dict_of(optimizer_entry.value)
                where = placed(scope, class_def, position, owner)
                saves.append(CheckpointWithoutScaler(node, optimizer_entry, scaler, key, **where))
    # One restore per checkpoint a scope reads: after the last of the optimizers
    # loaded from it (a GAN's `optim_g` and `optim_d` share one scaler).
    resumes: dict[tuple[int, str, str], ResumeWithoutScaler] = {}
    if not finder.restored:
        for statement, call, scope, class_def, position in finder.resumes:
            argument = call.args[0].value
            if not isinstance(argument, cst.Subscript) or len(argument.slice) != 1:
                continue
            index = argument.slice[0].slice
            key = string_value(index.value) if isinstance(index, cst.Index) else None
            holder = dotted_name(argument.value)
            if key is None or holder is None:
                continue
            optimizer = dotted_name(call.func.value)
            resume = ResumeWithoutScaler(
                statement,
                call,
                holder,
                scaler,
                scaler_key(key, set()),
                quote=index.value.quote,
                **placed(scope, class_def, position, optimizer),
            )
            resumes.pop((id(scope), holder, resume.key), None)
            resumes[(id(scope), holder, resume.key)] = resume
    return CheckpointScan(saves, list(resumes.values()))


def _checkpoint(node: cst.Dict) -> tuple[cst.DictElement, str] | None:
    """The optimizer's entry of a checkpoint dict and the key for the scaler's."""
    entries = [e for e in node.elements if isinstance(e, cst.DictElement)]
    states = [(e, state_dict_of(e.value)) for e in entries]
    optimizers = [e for e, owner in states if owner is not None and looks_like_optimizer(owner)]
    # The optimizer's state and anything else (the weights, as a state dict or
    # the module itself; the epoch) make a training checkpoint.
    if len(entries) < 2 or not optimizers:
        return None
    keys = {string_value(e.key) for e in entries}
    optimizer_key = string_value(optimizers[-1].key)
    if optimizer_key is None:
        return None
    return optimizers[-1], scaler_key(optimizer_key, keys)
