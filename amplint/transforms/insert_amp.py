"""Turn an FP32 training step into mixed precision (the AMP001 fix).

The plan: a GradScaler created once in a scope that outlives the step,
``torch.autocast`` around each forward region, ``scaler.scale(loss).backward()``,
``scaler.step(optimizer)`` with one ``scaler.update()`` after the last step, and
``scaler.unscale_(optimizer)`` before the first gradient clip or edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import takewhile
from typing import Callable, Sequence

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.imports import ImportMap
from amplint.analysis.autocast import device_argument, keyword_value
from amplint.analysis.bf16_scaler import GRAD_SCALERS
from amplint.analysis.clips import returns_norm
from amplint.analysis.device import ACCELERATOR, ScriptDevice, script_device, shown_types
from amplint.analysis.fsdp_scaler import SHARDED_GRAD_SCALER, SHARDED_SCALER_MODULE
from amplint.analysis.forward import ForwardRegion
from amplint.analysis.scopes import Scope
from amplint.analysis.steps import GradEdit, TrainingStep
from amplint.analysis.visitor import holds, path_to
from amplint.config import Settings
from amplint.diagnostics import ModulePass
from amplint.names import DTYPE_NAMES, SCALER_NAMES, free_name
from amplint.analysis.statements import name_use, parameter_names, string_value
from amplint.transforms.arguments import insert_argument, keyword_argument
from amplint.transforms.imports import ensure_from_import, ensure_torch_imported
from amplint.transforms.scaler_scope import (
    NoCallers,
    runs_per_epoch,
    thread_through_callers,
    with_parameter_after,
)
from amplint.transforms.statements import StatementPlan
from amplint.transforms import spelling
from amplint.transforms.torch_amp import bfloat16_in_hardware


@dataclass(frozen=True)
class AmpChoice:
    """What to insert, from the settings: the autocast dtype and whether to scale."""

    device: str
    dtype: str  # "float16", "bfloat16" or "auto"

    @property
    def uses_scaler(self) -> bool:
        return self.dtype == "float16" or (self.dtype == "auto" and self.device == "cuda")

    @property
    def picks_dtype_at_run_time(self) -> bool:
        return self.dtype == "auto" and self.device == "cuda"


def amp_choice(settings: Settings) -> AmpChoice:
    return AmpChoice(settings.device_type, settings.dtype)


def scaler_obstacle(facts: ModuleFacts, settings: Settings) -> str | None:
    """Why autocast and a GradScaler for the settings' device cannot be written
    for target-torch, or None (the script's own device is InsertAmp's)."""
    return spelling.obstacle(
        settings.target_torch, settings.target_torch_shown, {settings.device_type}, "float16", True
    )


def needs_sharded_scaler(facts: ModuleFacts) -> bool:
    """Whether the program shards its model with FullyShardedDataParallel, whose
    flat gradient shards need ShardedGradScaler to agree on infs across ranks
    (`fully_shard`'s DTensor gradients work with the plain GradScaler)."""
    return any(not use.composable for use in facts.fsdp_uses)


def import_sharded_scaler(module: cst.Module) -> cst.Module:
    return ensure_from_import(module, SHARDED_SCALER_MODULE, "ShardedGradScaler")


def sharded_or_plain_scaler(
    imports: ImportMap, scope: Scope, torch: str, arguments: str, plain: str
) -> tuple[str, tuple[ModulePass, ...]]:
    """`ShardedGradScaler(arguments) if dist.is_initialized() else plain` in the
    names `scope` sees, and the import passes that code needs.

    ShardedGradScaler all-reduces its inf check, which needs the process group
    FSDP runs in; a run without one (a single-GPU debug run where the wrap is
    skipped) keeps the plain scaler."""
    sharded = imports.name_for(SHARDED_GRAD_SCALER, scope)
    distributed = imports.name_for("torch.distributed", scope) or f"{torch}.distributed"
    passes: tuple[ModulePass, ...] = ()
    if distributed.startswith("torch."):
        passes += (ensure_torch_imported,)
    if sharded is None:
        passes += (import_sharded_scaler,)
    chosen = f"{sharded or 'ShardedGradScaler'}({arguments}) if {distributed}.is_initialized()"
    return f"{chosen} else {plain}", passes


def fsdp_mixed_precision(facts: ModuleFacts) -> str | None:
    """Where the program gives FSDP a mixed-precision policy: its steps are
    mixed precision already, and autocast on top would be a second policy."""
    for use in facts.fsdp_uses:
        if use.mixed_precision:
            if use.path is None or facts.project is None:
                return f"line {use.line}"
            return f"{facts.project.relative(use.path)}:{use.line}"
    return None


def _free_names(text: str, prefix: str = "") -> tuple[str, str]:
    """The names a new scaler and its run-time dtype take where `text` is read."""
    return free_name(SCALER_NAMES, text, prefix), free_name(DTYPE_NAMES, text, prefix)


LINE_LENGTH = 88  # black's default


def _leaves(statement: cst.BaseStatement) -> bool:
    """A line that ends the iteration or the call: continue, break, return."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Continue, cst.Break, cst.Return)) for small in statement.body
    )


def _output_names(value: cst.BaseExpression) -> list[str]:
    """Names for the output of the model call in `value`, after the model:
    `discriminator(fake)` -> `discriminator_out`, `self.D(x)` -> `D_out`."""
    node = value
    while isinstance(node, (cst.Call, cst.Attribute, cst.Subscript)):
        if isinstance(node, cst.Call) and isinstance(node.func, (cst.Name, cst.Attribute)):
            inner = node.func.value if isinstance(node.func, cst.Name) else node.func.attr.value
            if inner not in ("float", "view", "squeeze", "reshape", "sigmoid", "flatten"):
                base = inner
                break
            node = node.func.value if isinstance(node.func, cst.Attribute) else node.func
        elif isinstance(node, cst.Call):
            node = node.func
        else:
            node = node.value
    else:
        base = "model"
    stem = f"{base.strip('_')}_out"
    return [stem, *(f"{stem}_{n}" for n in range(2, 10))]


def _as_float(value: cst.BaseExpression) -> cst.BaseExpression:
    """`value.float()`, in parentheses where the expression needs them."""
    if not isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(func=cst.Attribute(value=value, attr=cst.Name("float")))


def _statement(code: str, indent: int = 0) -> cst.BaseStatement:
    """One inserted line, laid out as black would at that indentation."""
    if indent + len(code) > LINE_LENGTH:
        import black  # only fixes that insert long lines pay for importing black

        mode = black.Mode(line_length=max(LINE_LENGTH - indent, 40))
        code = black.format_str(code, mode=mode).rstrip("\n")
    return cst.parse_statement(code + "\n")


class InsertAmp:
    """Builds the plan for one step; `target` is the node the plan rewrites."""

    def __init__(
        self,
        step: TrainingStep,
        facts: ModuleFacts,
        settings: Settings,
        choice: AmpChoice | None = None,
    ) -> None:
        self.step = step
        self.facts = facts
        self.settings = settings
        self.choice = choice or amp_choice(settings)
        self.torch = facts.imports.name_for("torch", step.enclosing_scope) or "torch"
        self.plan = StatementPlan()
        self.target: cst.CSTNode | None = None
        self.scaler: str | None = None  # how the step refers to its scaler
        # `enabled=` of the autocast, when a scaler made elsewhere decides it.
        self.autocast_enabled: str | None = None
        # Names given to model outputs computed ahead of an unsafe loss, over
        # every region of the step: each stays one thing.
        self._output_names_taken: set[str] = set()
        self.makes_sharded_scaler = False  # the scaler made is FSDP's ShardedGradScaler
        # Why the scaler cannot follow the script's device, where nothing else can.
        self.device_obstacle: str | None = None
        # The script's device where it proves one CUDA does not cover
        # (analysis/device.py), else None for the settings' own: see device_code.
        self.script_device = self._script_device() if choice is None else None
        self.dtype_expression = {
            "float16": f"{self.torch}.float16",
            "bfloat16": f"{self.torch}.bfloat16",
            "auto": f"{self.torch}.bfloat16",
        }[self.choice.dtype]

    def code(self, node: cst.CSTNode) -> str:
        return self.facts.module.code_for_node(node)

    def _script_device(self) -> ScriptDevice | None:
        """The script's device, when the settings leave it to the script: the
        default `cuda`, and a dtype that does not depend on CUDA's bfloat16 support.
        (A GradScaler of the user's that the step reuses keeps its own device:
        see place_scaler.)"""
        if self.choice.device != "cuda" or self.choice.picks_dtype_at_run_time:
            return None
        return script_device(self.facts.proven_device, self.step.function, self.torch)

    @property
    def device_code(self) -> str:
        """The device autocast and the scaler name, as Python."""
        found = self.script_device
        return found.expression if found is not None else f'"{self.choice.device}"'

    @property
    def device_enabled(self) -> str | None:
        """`enabled=` for the script's device: off on its CPU fallback, as CUDA
        autocast turns itself off there."""
        found = self.script_device
        return f'{found.expression} != "cpu"' if found is not None and found.may_be_cpu else None

    def _scaler_made_elsewhere(self) -> None:
        """The scaler is made outside the step's function (in `__init__`, in the
        callers, at module level): a device name local to the step cannot be
        read there, so autocast and scaler both say the settings' device.  Where
        the script can never train on it (`"mps" if ... else "cpu"`), that
        rewrite would claim mixed precision and run none: it is declined."""
        found = self.script_device
        if found is not None and not found.is_global:
            if not found.types & {"cuda", ACCELERATOR}:
                self.device_obstacle = (
                    f"the script trains on `{found.name}` ({shown_types(found.types)}), which the scope the "
                    f'GradScaler must live in cannot read, and a "cuda" one would stay off: '
                    f"make it with `{found.expression}` where `{found.name}` is known"
                )
            self.script_device = None

    def _device_bound(self) -> set[str]:
        """The global device name the scaler's creation must come after."""
        found = self.script_device
        return {found.name} if found is not None and found.is_global else set()

    @property
    def module_passes(self) -> tuple[Callable[[cst.Module], cst.Module], ...]:
        """The imports the rewrite needs, as Fix.module_passes."""
        if self.makes_sharded_scaler:
            return (ensure_torch_imported, import_sharded_scaler)
        return (ensure_torch_imported,)

    # -- where the scaler lives -------------------------------------------------
    def _creation(self, owner_prefix: str, dtype_name: str, scaler_name: str) -> list[str]:
        torch, device = self.torch, self.device_code
        lines = []
        enabled_arguments = [f"enabled={self.device_enabled}"] if self.device_enabled else []
        if self.choice.picks_dtype_at_run_time:
            lines.append(
                f"{owner_prefix}{dtype_name} = {torch}.bfloat16 if "
                f"{bfloat16_in_hardware(torch)} else {torch}.float16"
            )
            enabled_arguments = [f"enabled={owner_prefix}{dtype_name} == {torch}.float16"]
        if self.choice.uses_scaler:
            made = spelling.grad_scaler(
                torch, self.settings.target_torch, device, enabled_arguments
            )
            if needs_sharded_scaler(self.facts):
                # The imports are module_passes' business, for every rewrite.
                made, _ = sharded_or_plain_scaler(
                    self.facts.imports,
                    self.step.enclosing_scope,
                    torch,
                    ", ".join([device, *enabled_arguments]),
                    made,
                )
                self.makes_sharded_scaler = True
            lines.append(f"{owner_prefix}{scaler_name} = {made}")
        return lines

    def place_scaler(self) -> str | None:
        """Plan the scaler's creation beside the optimizer it serves (see
        transforms/scaler_scope.py); returns why it cannot be placed, or None."""
        return (
            self.spelling_obstacle()
            or self._place_scaler()
            or self.device_obstacle
            or self.callers_obstacle()
        )

    def spelling_obstacle(self) -> str | None:
        """Why target-torch has no spelling for what the step needs on the
        script's device (a GradScaler for the MPS before torch 2.3), or None."""
        settings = self.settings
        types = self.script_device.types if self.script_device is not None else {self.choice.device}
        found = spelling.obstacle(
            settings.target_torch,
            settings.target_torch_shown,
            types,
            self.choice.dtype,
            self.choice.uses_scaler,
        )
        if found is None and needs_sharded_scaler(self.facts) and self.choice.uses_scaler:
            if settings.target_torch < spelling.SCALER_SINCE:
                found = "the fix writes ShardedGradScaler as torch 2.3 defines it"
        return found

    def callers_obstacle(self) -> str | None:
        """For a step whose forward regions are at its method's callers: the
        rewrite spans the class, and autocast there must read nothing local to
        the step's method (a scaler kept in one of its locals)."""
        step = self.step
        if not step.forward_at_callers:
            return None
        function = step.function
        method_self = function.params.params[0].name.value
        local = set(parameter_names(function)) | name_use(function.body).bound
        read = name_use(cst.parse_expression(self.autocast_code)).read
        stranded = sorted((read & local) - {method_self})
        if stranded:
            return (
                f"autocast at the callers of `{function.name.value}` would read "
                f"`{stranded[0]}`, which only `{function.name.value}` sees"
            )
        return None

    def _place_scaler(self) -> str | None:
        step = self.step
        if not self.choice.uses_scaler and not self.choice.picks_dtype_at_run_time:
            self.target = self._spanned()  # bfloat16: autocast alone, nothing to place
            return None
        function = step.function
        existing = self._existing_scaler()
        if existing is not None:
            name, enabled, on_script_device = existing
            found = self.script_device
            if not on_script_device and found is not None:
                if not found.types & {"cuda", ACCELERATOR}:
                    return (
                        f"the script trains on `{found.name}` ({shown_types(found.types)}), "
                        f"and its GradScaler `{name}` is CUDA's, which stays off there: make "
                        f"it with `{self.torch}.amp.GradScaler({found.expression})`, and autocast "
                        "will follow that device"
                    )
                # The user's scaler names the settings' device: autocast agrees with it.
                self.script_device = None
            self.use_scaler(name, enabled)
            return None
        optimizers = list(dict.fromkeys(self.code(s.optimizer) for s in step.steps))
        if step.class_def is not None and function.params.params:
            method_self = function.params.params[0].name.value
            if all(name.startswith(f"{method_self}.") for name in optimizers):
                return self._place_on_instance()
        if step.forward_at_callers:
            return (
                f"the forward pass is at the callers of `{function.name.value}`, so its "
                "GradScaler must live on the instance, and it steps an optimizer that does not"
            )
        if function is not None:
            params = function.params
            parameters = [p.name.value for p in (*params.params, *params.kwonly_params)]
            passed = [name for name in parameters if name in optimizers]
            if passed:
                if step.class_def is not None:
                    return (
                        f"`{function.name.value}` receives `{passed[-1]}` as an argument; "
                        "create a GradScaler beside that optimizer and pass it too"
                    )
                if len(passed) < len(optimizers):
                    return "some optimizers of the step are passed in and some are not"
                reason = self._thread_from_callers(passed)
                if reason is None or step.owner is function:
                    return reason
                nested = step.owner is not step.outermost_loop
                if not nested and not (
                    isinstance(reason, NoCallers) and not runs_per_epoch(function)
                ):
                    return reason
                # The function is the whole run: its step loop is inside another
                # loop of it (epochs around batches), or nothing in sight calls it
                # and nothing says it runs per epoch.  A scaler made before its
                # loops lives as long as the training does.
                self.plan = StatementPlan()
        return self._place_beside_binding(optimizers)

    def _existing_scaler(self) -> tuple[str, str | None, bool] | None:
        """A GradScaler the script made already, unused, before the step's loop
        in the same scope (`scaler = torch.cuda.amp.GradScaler(enabled=args.amp)`
        left from a half-done migration): its name, its `enabled=`, if any, and
        whether it names the script's own device (`GradScaler(device.type)`)
        rather than the settings'.  A second scaler beside it would leave it
        dead and confuse a reader."""
        step = self.step
        if step.owner is step.function or step.outermost_loop is None:
            return None
        # The devices a reusable scaler may name: the settings', or the script's own.
        devices = {self.choice.device}
        if self.script_device is not None:
            devices.add(self.script_device.expression)
        found = None
        for statement in self._run_before_loop():
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and isinstance(small.value, cst.Call)
                ):
                    continue
                device = self._scaler_device(small.value)
                if device in devices:
                    enabled = keyword_value(small.value, "enabled")
                    found = (
                        small.targets[0].target.value,
                        None if enabled is None else self.code(enabled),
                        device != self.choice.device,
                    )
        return found

    def _run_before_loop(self) -> list[cst.BaseStatement]:
        """The statements of the step's scope that run before its outermost
        loop: its setup, and those before the loop in the blocks holding it
        (a script's `if __name__ == "__main__":`)."""
        step = self.step
        scope = step.function or self.facts.module
        path = path_to(scope, step.outermost_loop) or []
        found = list(step.setup)
        for holder, held in zip(path[1:], path[2:]):
            if isinstance(holder, cst.IndentedBlock):
                found += list(takewhile(lambda statement: statement is not held, holder.body))
        return found

    def _scaler_device(self, call: cst.Call) -> str | None:
        """The device of the GradScaler `call` makes, or None if it makes none."""
        made = self.facts.imports.resolve(call.func, self.step.enclosing_scope)
        if made not in GRAD_SCALERS:
            return None
        if made.startswith(("torch.cuda.", "torch.cpu.")):
            return made.split(".")[1]
        device = keyword_value(call, "device") or device_argument(call)
        if device is None:
            return "cuda"  # torch.amp.GradScaler's default
        spelled = string_value(device)
        # Not a literal: the expression itself (`device.type`), which may be the script's.
        return spelled.split(":", 1)[0] if spelled is not None else self.code(device)

    def _place_beside_binding(self, optimizers: list[str]) -> str | None:
        """A scaler in the scope that makes the optimizers: right after the
        last statement binding one of them before the step runs there, else
        before the step's outermost loop (or, for a step function, its def)."""
        step = self.step
        # What binds each optimizer: its name, or the container it is taken
        # from (`optims` of `optims.d`, `optims["d"]`).
        names = {root for name in optimizers if (root := _bound_root(name)) is not None}
        if step.function is not None and step.owner is not step.function:
            local = name_use(step.function.body).bound | set(parameter_names(step.function))
            if not names & local:
                return self._place_global(names)
        if step.owner is not step.function:  # a loop body
            scope = step.function or self.facts.module
            holder = step.outermost_loop
            suite = step.setup  # only what runs before the loop can make its optimizer
        else:  # a function that is the step: a global scaler
            self._scaler_made_elsewhere()
            scope = self.facts.module
            # A global optimizer may be made after the def, before the calls.
            suite = list(scope.body)
            holder = step.function
        self.target = scope
        text = self.code(scope) if scope is not self.facts.module else self.facts.text
        scaler, dtype_name = _free_names(text)
        self._use(scaler, dtype_name)
        created = self._creation("", dtype_name, scaler)
        # After its optimizer and, where the script binds it here, its device
        # (a script may pick the device after making the optimizer).
        needed = names | (self._device_bound() if scope is self.facts.module else set())
        bindings = [s for s in suite if needed & name_use(s).bound]
        if bindings:
            self._insert(self.plan.after, bindings[-1], created)
        else:
            self._insert(self.plan.before, holder, created)
        return None

    def _place_global(self, names: set[str]) -> str | None:
        """A function whose loop steps a global optimizer (`def train(epoch)`
        in a script): a global scaler, made right after that optimizer at
        module level (also under `if __name__ == "__main__":`), else before
        the function."""
        module, function = self.facts.module, self.step.function
        self._scaler_made_elsewhere()
        scaler, dtype_name = _free_names(self.facts.text)
        self.target = module
        self._use(scaler, dtype_name)
        created = self._creation("", dtype_name, scaler)
        candidates = []
        for statement in module.body:
            candidates.append(statement)
            if isinstance(statement, cst.If) and isinstance(statement.body, cst.IndentedBlock):
                candidates += statement.body.body
        bound = [
            (s, name_use(s).bound) for s in candidates if isinstance(s, cst.SimpleStatementLine)
        ]
        holder = self.facts.imports.parent.get(function)
        if not names:
            return f"`{function.name.value}` steps optimizers made where amplint cannot see"
        if any(names & names_bound for _, names_bound in bound):
            # After the optimizer and the device the scaler is made for.
            needed = names | self._device_bound()
            anchor = [s for s, names_bound in bound if needed & names_bound][-1]
            self._insert(self.plan.after, anchor, created)
        elif holder is module:
            self._insert(self.plan.before, function, created)
        else:
            return (
                f"`{function.name.value}` steps `{sorted(names)[0]}`, made where amplint cannot see"
            )
        return None

    def _thread_from_callers(self, passed: list[str]) -> str | None:
        """A scaler parameter next to the step function's last optimizer
        parameter, passed by each call and made beside each caller's optimizer."""
        function = self.step.function
        if self.facts.imports.parent.get(function) is not self.facts.module:
            return f"`{function.name.value}` is nested in another function; pass a GradScaler to it"
        thread = thread_through_callers(self.facts.module, function, passed[-1], self.facts.project)
        if isinstance(thread, str):
            return thread
        self._scaler_made_elsewhere()
        scaler, dtype_name = _free_names(self.facts.text)
        self.target = self.facts.module
        self._use(scaler, dtype_name)
        if self.choice.picks_dtype_at_run_time:
            # The dtype is chosen where the scaler is made; the step reads it back.
            self.dtype_expression = (
                f"{self.torch}.float16 if {scaler}.is_enabled() else {self.torch}.bfloat16"
            )
        self.plan.replace_node(
            function.params,
            lambda params: with_parameter_after(
                params, thread.parameter.name.value, scaler, thread.keyword_only
            ),
        )
        for call, position in thread.calls:
            keyword = call.args[position].keyword is not None or thread.keyword_only
            argument = (
                keyword_argument(scaler, cst.Name(scaler)) if keyword else cst.Arg(cst.Name(scaler))
            )
            self.plan.replace_node(
                call,
                lambda node, position=position, argument=argument: insert_argument(
                    node, position + 1, argument
                ),
            )
        for statement in thread.creations:
            self._insert(self.plan.after, statement, self._creation("", dtype_name, scaler))
        return None

    def use_scaler(self, scaler: str, enabled: str | None) -> None:
        """Plan the step around a GradScaler that exists already, reached as
        `scaler`; autocast gets ``enabled=`` the expression `enabled` when given."""
        self.target = self._spanned()
        self.scaler = scaler
        self.autocast_enabled = enabled

    def _spanned(self) -> cst.CSTNode:
        """What the plan rewrites when it makes no scaler of its own: the step's
        block; or, when the forward regions are at its method's callers, its
        class, or the module where subclasses hold some of them."""
        step = self.step
        if not step.forward_at_callers:
            return step.owner
        if all(holds(step.class_def, region.first) for region in step.regions):
            return step.class_def
        return self.facts.module

    def _place_on_instance(self) -> str | None:
        step = self.step
        class_def = step.class_def
        init = next(
            (
                statement
                for statement in class_def.body.body
                if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__"
            ),
            None,
        )
        if init is None or not init.params.params or not isinstance(init.body, cst.IndentedBlock):
            return f"`{class_def.name.value}` has no __init__ to create the GradScaler in"
        if not step.function.params.params:
            return f"`{step.function.name.value}` has no `self` to reach a GradScaler"
        init_self = init.params.params[0].name.value
        method_self = step.function.params.params[0].name.value
        self._scaler_made_elsewhere()
        self.target = self._spanned() if step.forward_at_callers else class_def
        # The names are free in the subclasses too, where autocast may read them.
        scaler, dtype_name = _free_names(self.code(self.target), prefix=f"{init_self}.")
        self._use(f"{method_self}.{scaler}", f"{method_self}.{dtype_name}")
        created = self._creation(f"{init_self}.", dtype_name, scaler)
        # After the line that creates the optimizer, else at the end of __init__.
        optimizers = {self.code(s.optimizer).split(".", 1)[-1] for s in step.steps}
        anchor = init.body.body[-1]
        for statement in init.body.body:
            if any(f"{init_self}.{name}" in self.code(statement) for name in optimizers):
                if isinstance(statement, cst.SimpleStatementLine):
                    anchor = statement
        self._insert(self.plan.after, anchor, created)
        return None

    def _insert(self, where, anchor: cst.BaseStatement, lines: list[str]) -> None:
        """Plan `lines` before or after `anchor`, at its indentation."""
        if lines:
            indent = self.facts.span(anchor).column - 1
            where(anchor, *(_statement(line, indent) for line in lines))

    def _use(self, scaler: str, dtype_name: str) -> None:
        self.scaler = scaler if self.choice.uses_scaler else None
        if self.choice.picks_dtype_at_run_time:
            self.dtype_expression = dtype_name

    # -- the step itself --------------------------------------------------------
    @property
    def autocast_code(self) -> str:
        """The autocast context manager the forward regions get, as Python."""
        enabled = self.autocast_enabled or self.device_enabled
        return spelling.autocast(
            self.torch,
            self.settings.target_torch,
            self.device_code,
            self.dtype_expression,
            [f"enabled={enabled}"] if enabled is not None else [],
        )

    def plan_step(self, autocast_regions: bool = True) -> None:
        """Plan autocast around the forward regions (unless the step has its own,
        `autocast_regions=False`) and the scaler's calls."""
        step, plan = self.step, self.plan
        autocast = self.autocast_code

        def wrapper(statements: Sequence[cst.BaseStatement]) -> cst.With:
            return cst.With(
                items=[cst.WithItem(cst.parse_expression(autocast))],
                body=cst.IndentedBlock(body=list(statements)),
            )

        for region in step.regions if autocast_regions else ():
            if region.unsafe_from is not None and self.choice.device == "cuda":
                self._loss_after_block(region, wrapper)
            else:
                plan.wrap(region.first, region.last, wrapper)
        if self.scaler is None:
            return
        scaler = self.scaler
        for backward in step.backwards:
            plan.replace_node(backward.call, self._scaled_backward)
        for optimizer_step in step.steps:
            optimizer = self.code(optimizer_step.optimizer)
            plan.replace_node(
                optimizer_step.call,
                lambda call, optimizer=optimizer: call.with_changes(
                    func=cst.parse_expression(f"{scaler}.step"),
                    args=[cst.Arg(cst.parse_expression(optimizer))],
                ),
            )
        last_step = max(step.steps, key=lambda s: s.order)
        exclusive = len(step.steps) > 1 and all(
            step.exclusive(a.order, b.order)
            for i, a in enumerate(step.steps)
            for b in step.steps[i + 1 :]
        )
        if exclusive:
            # Steps on paths no iteration shares (`if fp32: ... step() else: if
            # accumulate: ... step()`): an update after each, since a path that
            # steps nothing (a micro-step) must not update.
            for each in step.steps:
                self._insert(plan.after, each.statement, [f"{scaler}.update()"])
        else:
            self._insert(plan.after, self._update_anchor(last_step), [f"{scaler}.update()"])
        # A path that steps and then leaves (`continue` after a warm-up step)
        # never reaches that update; the next step would raise.
        for order, statement in enumerate(step.statements):
            if order >= last_step.order or not _leaves(statement):
                continue
            if any(s.order < order and not step.exclusive(s.order, order) for s in step.steps):
                self._insert(plan.before, statement, [f"{scaler}.update()"])
        # Unscale right before the first clip or other edit that scaling would
        # change (a clamp): a clip reads the gradients' norm.  Edits before it
        # (an all-reduce of the gradients, a division by the world size) are
        # linear and run on scaled gradients as they would on unscaled ones,
        # and an all-reduce must come first so every rank's unscale_ sees the
        # same infs.  Without such an edit, before the first edit.
        # A read of the gradients after every edit (a logged norm) must see
        # them unscaled too; a read that an edit follows is part of that edit
        # (the gather of a hand-written all-reduce).
        changes = sorted((e for e in step.grad_edits if not e.reads), key=lambda e: e.order)
        last_change = max((e.order for e in changes), default=-1)
        reads = sorted(
            (e for e in step.grad_edits if e.reads and e.order > last_change),
            key=lambda e: e.order,
        )
        edits = [e for e in changes if e.clip is not None or e.nonlinear] or reads or changes
        # A clip on every micro-step of accumulation cannot follow an unscale_
        # (one per optimizer step): its threshold takes the scale instead.
        between = {id(edit) for edit in step.edits_between_steps()}
        for edit in edits:
            if id(edit) in between and edit.threshold is not None:
                self._clip_in_scaled_space(edit)
            elif id(edit) in between and edit.norm:
                self._divide_by_the_scale(edit)
        edits = [edit for edit in edits if id(edit) not in between]
        # An edit may be of any optimizer stepped after it before the next
        # backward (`clip(head_params); opt.step(); head_opt.step()`): each of
        # them is unscaled before it, which costs nothing for one it leaves alone.
        unscaled: set[tuple[str, frozenset]] = set()
        for edit in edits:
            next_backward = min(
                (b.order for b in step.backwards if b.order > edit.order), default=None
            )
            following = sorted(
                (
                    s
                    for s in step.steps
                    if s.order > edit.order and (next_backward is None or s.order < next_backward)
                ),
                key=lambda s: s.order,
            )
            for next_step in following:
                optimizer = self.code(next_step.optimizer)
                unscale = f"{scaler}.unscale_({optimizer})"
                present = step.presence_test(next_step)
                if present is not None:  # an optional optimizer: unscaled where it exists
                    unscale = f"if {self.code(present)}:\n    {unscale}"
                loop = next_step.statement
                if isinstance(loop, cst.For) and self.code(loop.target) == optimizer:
                    # Optimizers stepped in a loop: unscaled in a loop of their own.
                    optimizer = f"for {optimizer} in {self.code(loop.iter)}"
                    unscale = f"{optimizer}:\n    {unscale}"
                # Once per optimizer on each path: two branches that step it
                # (XLM's FP32 path and its accumulation path) unscale it each.
                key = (optimizer, step.paths[next_step.order])
                if key in unscaled:
                    continue
                unscaled.add(key)
                self._insert(
                    plan.before,
                    _unscale_anchor(step, edit, [e for e in edits if e.order < next_step.order]),
                    [unscale],
                )

    def _clip_in_scaled_space(self, edit: GradEdit) -> None:
        """`clip_grad_norm_(p, max_norm)` on scaled gradients, clipping as the
        original did: `clip_grad_norm_(p, max_norm * scaler.get_scale())`, the
        norm it returns divided by the scale again (analysis/clips.py)."""
        scale = cst.parse_expression(f"{self.scaler}.get_scale()")
        threshold = edit.threshold
        self.plan.replace_node(
            threshold.value,
            lambda value: cst.BinaryOperation(_factor(value), cst.Multiply(), scale),
        )
        if returns_norm(edit.clip):
            self._divide_by_the_scale(edit)

    def _divide_by_the_scale(self, edit: GradEdit) -> None:
        """The norm `edit.clip` returns of gradients still scaled, as the FP32
        step had it: divided by `scaler.get_scale()` (unless unused)."""
        scale = cst.parse_expression(f"{self.scaler}.get_scale()")
        holder = _line_of(edit.statement, edit.clip)
        if isinstance(holder, cst.Expr):
            return  # the norm goes unused
        parenthesized = holder is None  # `print(clip(...).item())`, not `norm = clip(...)`

        def divided(call: cst.Call) -> cst.BaseExpression:
            quotient = cst.BinaryOperation(call, cst.Divide(), scale)
            if parenthesized:
                quotient = quotient.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return quotient

        self.plan.replace_node(edit.clip, divided)

    def _loss_after_block(self, region: ForwardRegion, wrapper) -> None:
        """Autocast around the region's statements that run a model; its unsafe
        loss, and the arithmetic after it, outside on `.float()` inputs.  The
        model calls among the loss's inputs are bound to new names at the end
        of the autocast block right before the loss (a block of their own if
        none is there)."""
        statements = region.statements
        hoisted: dict[int, list[cst.BaseStatement]] = {}  # by id of the loss statement
        indent = self.facts.span(region.first).column - 1 + 4
        in_block = [True] * region.unsafe_from + list(region.in_autocast)
        for value in region.float_inputs:
            self.plan.replace_node(value, _as_float)
        for unsafe in region.unsafe_calls:
            for value, runs_model in zip(unsafe.inputs, unsafe.runs_model):
                if runs_model:
                    taken = " ".join(self._output_names_taken)
                    name = free_name(_output_names(value), f"{self.facts.text} {taken}")
                    self._output_names_taken.add(name)
                    line = _statement(f"{name} = {self.code(value)}", indent)
                    hoisted.setdefault(id(unsafe.statement), []).append(line)
                    replacement = cst.parse_expression(f"{name}.float()")
                    self.plan.replace_node(value, lambda _, new=replacement: new)
        # Runs of statements inside autocast, as [first, last, extra lines].
        blocks: list[list] = []
        for index, statement in enumerate(statements):
            previous_in_block = index > 0 and in_block[index - 1]
            if in_block[index]:
                if previous_in_block:
                    blocks[-1][1] = statement
                else:
                    blocks.append([statement, statement, []])
            elif id(statement) in hoisted:
                if previous_in_block:
                    blocks[-1][2].extend(hoisted[id(statement)])
                else:
                    self.plan.before(statement, wrapper(hoisted[id(statement)]))
        for first, last, extra in blocks:
            self.plan.wrap(first, last, lambda body, extra=extra: wrapper([*body, *extra]))

    def _update_anchor(self, last_step) -> cst.BaseStatement:
        """Where `scaler.update()` goes: after the statement holding the last
        step that runs under exactly the conditions every step shares.  An
        iteration that steps only the critic, not the generator under `if i %
        n_critic == 0:`, updates too; one before `learning_starts`, which steps
        nothing, does not (update() without a step raises); with accumulation,
        all steps under one `if`, the update stays inside it."""
        step = self.step
        shared = frozenset.intersection(*(step.paths[s.order] for s in step.steps))
        if step.paths[last_step.order] == shared:
            return last_step.statement
        holders = [
            statement
            for statement, path in zip(step.statements, step.paths)
            if path == shared and holds(statement, last_step.statement)
        ]
        return holders[-1] if holders else step.block.body[step.tops[last_step.order]]

    def _scaled_backward(self, call: cst.Call) -> cst.Call:
        loss = call.func.value
        if loss.lpar and not isinstance(loss, (cst.Tuple, cst.GeneratorExp)):
            loss = loss.with_changes(lpar=[], rpar=[])  # `(a + b).backward()`: scale(a + b)
        scale = cst.Call(
            func=cst.parse_expression(f"{self.scaler}.scale"),
            args=[cst.Arg(loss)],
        )
        return call.with_changes(func=call.func.with_changes(value=scale))

    def rewrite(self, node: cst.CSTNode) -> cst.CSTNode:
        return self.plan.apply(node)


def micro_step_edit_obstacle(step: TrainingStep, module: cst.Module) -> str | None:
    """Why a GradScaler cannot go into a step that edits its gradients on every
    micro-step of accumulation in a way the scale cannot be carried through
    (a project's clipper, a clamp by hand), or None.  torch's own clips can
    (InsertAmp._clip_in_scaled_space), and so can a project function that
    computes their norm (InsertAmp._divide_by_the_scale)."""
    for edit in step.edits_between_steps():
        if edit.threshold is not None or edit.norm or not (edit.clip is not None or edit.nonlinear):
            continue
        shown = module.code_for_node(edit.clip or edit.statement).strip().splitlines()[0]
        if edit.clip is not None:  # the project's own code, given the gradients
            return (
                f"`{shown}` hands the gradients to the project's own code on every micro-step "
                "while the optimizer steps under a condition: there they are still scaled (a "
                "GradScaler unscales once per optimizer step); move it to the accumulation "
                "boundary, or, if it only computes a norm, divide that by `scaler.get_scale()`"
            )
        return (
            f"`{shown}` works on the gradients on every micro-step while the optimizer steps "
            "under a condition: a GradScaler unscales once per optimizer step, so move it to "
            "the accumulation boundary first"
        )
    return None


def _factor(value: cst.BaseExpression) -> cst.BaseExpression:
    """`value` as the left operand of a product: parenthesized unless it binds
    at least as tightly (`max_norm`, `args.clip`, `cfg["clip"]`, `1.0`)."""
    if isinstance(
        value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float)
    ):
        return value
    if value.lpar:
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _line_of(statement: cst.BaseStatement, call: cst.Call) -> cst.BaseSmallStatement | None:
    """The line's one small statement whose whole value is `call`: the bare call
    (an `Expr`, its result unused) or an assignment of it (`norm = clip(...)`);
    None where the call sits inside an expression."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) and small.value is call:
        return small
    return None


def _unscale_anchor(step: TrainingStep, edit: GradEdit, edits: list[GradEdit]) -> cst.CSTNode:
    """Where the one unscale_ before `edit` goes: before the edit, unless the
    edit runs under a condition that a later one of `edits` (those before the
    same optimizer step) does not (`if world_size > 1: <clamp>` then an
    unconditional clip): then before the statement of the step's block that
    holds it, so that every path unscales."""
    conditions = step.paths[edit.order]
    later = [e for e in edits if e.order > edit.order and not step.exclusive(edit.order, e.order)]
    if conditions and any(not conditions <= step.paths[e.order] for e in later):
        return step.block.body[step.tops[edit.order]]
    return edit.statement


def _bound_root(optimizer: str) -> str | None:
    """The name an optimizer expression starts from when that name is bound
    in some scope: `optimizer`; `optims` of `optims.d` and `optims["d"]`.
    None for an attribute of `self`, which the instance holds."""
    try:
        node = cst.parse_expression(optimizer)
    except cst.ParserSyntaxError:
        return None
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    if not isinstance(node, cst.Name) or node.value == "self":
        return None
    return node.value
