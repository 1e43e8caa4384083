"""Facts about one parsed module, computed on first use and shared by every rule."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import libcst as cst

from amplint.analysis.apex import ApexScan, apex_analysis
from amplint.analysis.autocast import AutocastScan, autocast_analysis
from amplint.analysis.code_text import code_only
from amplint.analysis.compiled import CompiledScan, compiled_analysis
from amplint.analysis.checkpoints import CheckpointScan, checkpoints_analysis
from amplint.analysis.bf16_scaler import Bf16Scaler, find_bf16_scalers
from amplint.analysis.deprecated_amp import DeprecatedAmpUse, deprecated_amp_analysis
from amplint.analysis.imports import ImportMap
from amplint.analysis.positions import NodePositions
from amplint.analysis.regions import (
    ForwardOutsideAutocast,
    LossOutsideAutocast,
    UnscaledFloat16,
    find_forwards_outside_autocast,
    find_losses_outside_autocast,
    find_unscaled_float16,
)
from amplint.analysis.scaler import (
    BypassedScaler,
    ClipBeforeUnscale,
    EarlyUpdate,
    ExtraUnscale,
    MissingUpdate,
    ScalerClosure,
    ScalerUse,
    UnscaledBackward,
    ZeroGradBeforeStep,
    find_bypassed_scalers,
    find_clips_before_unscale,
    find_early_updates,
    find_extra_unscales,
    find_missing_updates,
    scaler_closures_analysis,
    find_zero_grads_before_step,
    find_scaler_uses,
    find_unscaled_backwards,
)
from amplint.analysis.fsdp_scaler import PlainScaler, find_plain_grad_scalers
from amplint.analysis.device import ProvenDevice, proven_device_analysis
from amplint.analysis.steps import StepScan, find_training_steps
from amplint.analysis.module_roles import ModuleRoles, module_roles_analysis
from amplint.analysis.visitor import Analysis, walk_together
from amplint.diagnostics import Span, source_lines
from amplint.project import CustomKernel, FsdpUse, LossHelper, ProjectView, fsdp_use_in
from amplint.project.gradient_norms import gradient_norms_in
from amplint.project.source import TEXT_PATH, ModuleSource
from amplint.triggers import DEPRECATED_STATE_SPELLED, FRAMEWORK_SPELLED

if TYPE_CHECKING:
    from amplint.analysis.accumulation import PerMicroStep
    from amplint.project.apex import ApexProgram
    from amplint.analysis.deprecated_state import DeprecatedStateCall
    from amplint.analysis.framework_amp import ManualAmp
    from amplint.analysis.frameworks import FrameworkSetup
    from amplint.analysis.fsdp_policy import PolicyConflict
    from amplint.analysis.half_model import HalfModel
    from amplint.analysis.manual_half import ManualHalf
    from amplint.analysis.precision import ProgramCode, ProgramPrecision


class ModuleFacts:
    """What the rules read of one parsed module, each fact made on first use.

    A fact only one rule reads imports its analysis when first asked: the
    engine loads only the rules a file's text lets fire, and their facts with
    them (a script only AMP001 can fire on never loads the framework or the
    FSDP-policy analyses)."""

    def __init__(
        self,
        module: cst.Module,
        text: str,
        project: ProjectView | None = None,
        share_walks: bool = True,
    ) -> None:
        self.module = module
        self.text = text  # the source the module was parsed from
        # In a fix's later rounds, the text the fix started from (the engine
        # sets it): what the user wrote, as opposed to what amplint rewrote.
        self.original_text: str | None = None
        # The rest of the project, for questions that cross module borders;
        # None for text with no file behind it (a rule's example, a test).
        self.project = project
        self.share_walks = share_walks
        self._results: dict[str, object] = {}

    @cached_property
    def code_text(self) -> str:
        """`text` with comments and strings blanked: what patterns may decide from."""
        return code_only(self.text)

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap.of(self.module)

    # The analyses that read the whole module and ask nothing of one another,
    # by the name of the fact each gives: made in one walk of the module
    # (visitor.walk_together), not one walk each.
    _SHARED: dict[str, Callable[[ModuleFacts], Analysis]] = {
        "deprecated_amp_uses": lambda facts: deprecated_amp_analysis(facts.module, facts.imports),
        "apex": lambda facts: apex_analysis(facts.imports),
        "autocast": lambda facts: autocast_analysis(facts.imports),
        "compiled": lambda facts: compiled_analysis(facts.imports),
        "proven_device": lambda facts: proven_device_analysis(facts.module, facts.imports),
        "checkpoints_without_scaler": lambda facts: checkpoints_analysis(facts.module),
        "scaler_closures": lambda facts: scaler_closures_analysis(),
        "roles": lambda facts: module_roles_analysis(facts.imports, facts.project_loss_helpers),
    }

    def _shared(self, name: str):
        """The result of one of the _SHARED analyses.  The first asked for
        brings all those not made yet, in one walk; a ModuleFacts made to ask
        one question of a rewrite (share_walks=False) makes only that one."""
        if name not in self._results:
            if self.share_walks:
                self._walk_shared()
            else:
                self._results[name] = self._SHARED[name](self).alone(self.module)
        return self._results[name]

    def _walk_shared(self) -> None:
        pending = {
            name: analysis(self)
            for name, analysis in self._SHARED.items()
            if name not in self._results
        }
        walk_together(self.module, [analysis.visitor for analysis in pending.values()])
        self._results.update((name, analysis.finish()) for name, analysis in pending.items())

    @property
    def deprecated_amp_uses(self) -> list[DeprecatedAmpUse]:
        return self._shared("deprecated_amp_uses")

    @property
    def roles(self) -> ModuleRoles:
        """What the module's names are (optimizers, losses, schedulers...)."""
        return self._shared("roles")

    # Each fact below walks the whole module; most modules parsed for other
    # rules never spell what it looks for, and the text says so for nothing.
    @cached_property
    def deprecated_state_calls(self) -> list[DeprecatedStateCall]:
        if not DEPRECATED_STATE_SPELLED.search(self.text):
            return []
        from amplint.analysis.deprecated_state import find_deprecated_state_calls

        return find_deprecated_state_calls(self.module, self.imports)

    @cached_property
    def plain_grad_scalers(self) -> list[PlainScaler]:
        if "GradScaler" not in self.text:
            return []
        return find_plain_grad_scalers(self.module, self.imports)

    @cached_property
    def framework_setups(self) -> list[FrameworkSetup]:
        """Accelerator, Lightning Trainer, TrainingArguments and DeepSpeed
        set-ups, with the precision each asks for (a DeepSpeed JSON config is
        read through the project)."""
        if not FRAMEWORK_SPELLED.search(self.text):
            return []
        from amplint.analysis.frameworks import find_framework_setups

        read = self.project.json_config if self.project is not None else None
        return find_framework_setups(self.module, self.imports, read)

    @cached_property
    def manual_amp_under_framework(self) -> list[ManualAmp]:
        """Own autocast and scalers where a framework set up in this module
        already runs mixed precision (analysis/framework_amp.py)."""
        setups = self.framework_setups
        if not setups:
            return []
        from amplint.analysis.framework_amp import find_manual_amp
        from amplint.analysis.frameworks import Precision

        launch = (
            self.project.launch_precision()
            if self.project is not None
            and any(s.framework == "accelerate" and s.precision is Precision.UNSET for s in setups)
            else None
        )
        launched = launch is not None and launch.enabled
        return find_manual_amp(self.module, self.imports, setups, launched)

    @property
    def apex(self) -> ApexScan:
        return self._shared("apex")

    @property
    def autocast(self) -> AutocastScan:
        return self._shared("autocast")

    @property
    def compiled(self) -> CompiledScan:
        return self._shared("compiled")

    @cached_property
    def training_steps(self) -> StepScan:
        user_wrote = None
        if self.original_text is not None:
            # A node's code comes indented from its own first line: compare
            # lines without their indentation.
            original = _unindented(self.original_text)
            user_wrote = lambda code: _unindented(code) in original  # noqa: E731
        return find_training_steps(
            self.module,
            self.imports,
            self.project_loss_helpers,
            lambda: self.project_gradient_norms,
            roles=self.roles,
            user_wrote=user_wrote,
        )

    @property
    def proven_device(self) -> ProvenDevice | None:
        """The device the module moves its model to, where it proves one."""
        return self._shared("proven_device")

    @cached_property
    def fsdp_uses(self) -> list[FsdpUse]:
        """Where this module, or another module of its program, wraps a model in FSDP."""
        here = self.project.path if self.project is not None else None
        own = fsdp_use_in(self.text, here)
        others = [] if self.project is None else self.project.fsdp_uses()
        return ([own] if own is not None else []) + [u for u in others if u.path != here]

    @cached_property
    def apex_program(self) -> ApexProgram | None:
        """The modules one apex.amp migration of this module's program rewrites
        (project/apex.py): this module alone without a project; None without
        apex.amp."""
        from amplint.project.apex import apex_program, text_program

        return text_program(self.text) if self.project is None else apex_program(self.project)

    @property
    def program_path(self) -> Path:
        """Where this module stands in its programs: its file, or TEXT_PATH."""
        return self.project.path if self.project is not None else TEXT_PATH

    @cached_property
    def custom_kernels(self) -> list[CustomKernel]:
        """Modules of this module's program that compile kernels autocast
        cannot cast for (project.CustomKernel)."""
        return [] if self.project is None else self.project.custom_kernels()

    @cached_property
    def program_code(self) -> list[ProgramCode]:
        """This module's code and that of the program's modules that may set
        its precision, as the precision analysis reads them
        (analysis/precision.py)."""
        from amplint.analysis.precision import program_code

        return program_code(self)

    @cached_property
    def program_precision(self) -> ProgramPrecision:
        """The precision analysis's answers that no single step decides, each
        found once for the module (analysis/precision.py)."""
        from amplint.analysis.precision import ProgramPrecision

        return ProgramPrecision(self)

    @cached_property
    def project_loss_helpers(self) -> dict[str, LossHelper]:
        """Loss helpers of other project modules this one imports that compute
        a loss CUDA autocast refuses, by the name a call spells them."""
        if self.project is None:
            return {}
        return self.project.loss_helpers(self._project_imports)

    @property
    def _project_imports(self) -> dict[str, str]:
        """Local name -> what it imports, for the imports that may be of the
        project's modules.  torch's own losses and norms are known by name; its
        modules are project modules only when the project is torch itself."""
        return {
            binding.name: binding.target
            for binding in self.imports.statements
            if binding.target.split(".", 1)[0] != "torch"
        }

    @cached_property
    def project_gradient_norms(self) -> dict[str, str]:
        """Functions of this module and of the project modules it imports that
        compute a norm of the gradients they are given, by the name a call
        spells them, with where they are (project/gradient_norms.py)."""
        if self.project is not None:
            return self.project.gradient_norms(self._project_imports)
        own = gradient_norms_in(ModuleSource(TEXT_PATH, "", self.text))
        return {name: f"line {line}" for name, line in own.items()}

    @cached_property
    def scaler_uses(self) -> list[ScalerUse]:
        return find_scaler_uses(self.training_steps)

    @cached_property
    def bypassed_scalers(self) -> list[BypassedScaler]:
        return find_bypassed_scalers(self.scaler_uses)

    @cached_property
    def unscaled_backwards(self) -> list[UnscaledBackward]:
        return find_unscaled_backwards(self.scaler_uses)

    @cached_property
    def clips_before_unscale(self) -> list[ClipBeforeUnscale]:
        return find_clips_before_unscale(self.scaler_uses)

    @cached_property
    def missing_updates(self) -> list[MissingUpdate]:
        return find_missing_updates(self.scaler_uses)

    @cached_property
    def early_updates(self) -> list[EarlyUpdate]:
        return find_early_updates(self.scaler_uses)

    @cached_property
    def extra_unscales(self) -> list[ExtraUnscale]:
        return find_extra_unscales(self.scaler_uses)

    @cached_property
    def scalers_per_microstep(self) -> list[PerMicroStep]:
        from amplint.analysis.accumulation import find_scalers_per_microstep

        return find_scalers_per_microstep(self.scaler_uses)

    @cached_property
    def zero_grads_before_step(self) -> list[ZeroGradBeforeStep]:
        return find_zero_grads_before_step(self.scaler_uses)

    @cached_property
    def bf16_scalers(self) -> list[Bf16Scaler]:
        return find_bf16_scalers(self.scaler_uses, self.module, self.imports)

    @cached_property
    def unscaled_float16(self) -> list[UnscaledFloat16]:
        return find_unscaled_float16(
            self.training_steps.steps, self.imports, self.code_text, self.span
        )

    @cached_property
    def losses_outside_autocast(self) -> list[LossOutsideAutocast]:
        return find_losses_outside_autocast(self.training_steps.steps, self.imports, self.code_text)

    @cached_property
    def forwards_outside_autocast(self) -> list[ForwardOutsideAutocast]:
        return find_forwards_outside_autocast(self.training_steps.steps, self.imports)

    @property
    def checkpoints_without_scaler(self) -> CheckpointScan:
        return self._shared("checkpoints_without_scaler")

    @cached_property
    def manual_halves(self) -> list[ManualHalf]:
        from amplint.analysis.manual_half import find_manual_halves

        return find_manual_halves(self.training_steps, self.module, self.imports)

    @cached_property
    def half_models_with_scaler(self) -> list[HalfModel]:
        if "Scaler" not in self.text:
            return []
        from amplint.analysis.half_model import find_half_models

        reported = {id(half.call) for half in self.manual_halves}  # AMP111's
        return find_half_models(self.module, self.imports, reported)

    @cached_property
    def fsdp_policy_conflicts(self) -> list[PolicyConflict]:
        if "MixedPrecision" not in self.text:
            return []
        from amplint.analysis.fsdp_policy import find_policy_conflicts

        return find_policy_conflicts(self.module, self.imports)

    @property
    def scaler_closures(self) -> list[ScalerClosure]:
        return self._shared("scaler_closures")

    @cached_property
    def _positions(self) -> NodePositions:
        return NodePositions(self.module)

    @property
    def round_trips(self) -> bool:
        """Whether the module generates its text byte for byte (libcst cannot
        write some line ends back).  Read from the positions' own generation,
        which a module with findings has made already."""
        return self._positions.code == self.text

    @cached_property
    def _lines(self) -> list[str]:
        return source_lines(self.text)

    def line_of(self, node: cst.CSTNode) -> str:
        """The source line `node` starts on (a fix's layout measures it)."""
        return self._lines[self.span(node).line - 1]

    def span(self, node: cst.CSTNode) -> Span:
        start, end = self._positions.range(node)
        return Span(
            line=start.line,
            column=start.column + 1,
            end_line=end.line,
            end_column=end.column + 1,
        )


def _unindented(code: str) -> str:
    return "\n".join(line.strip() for line in code.splitlines())
