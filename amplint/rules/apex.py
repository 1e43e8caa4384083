"""AMP203 / AMP204: NVIDIA apex's mixed precision, removed from apex in 2025.

AMP203 migrates ``apex.amp`` to torch.amp, the whole module in one fix (see
transforms/apex.py for why it cannot be done a line at a time).  AMP204 covers
the rest of apex's precision and parallel tooling: ``apex.parallel``'s
DistributedDataParallel and ``convert_syncbn_model`` are rewritten to torch's;
the rest of ``apex.parallel`` (LARC, ``create_syncbn_process_group``),
``apex.fp16_utils`` and apex's private amp state are reported with guidance; an
import of a removed module that nothing uses is removed (unless a ``try``
probes with it), and one in an arm of an ``if`` whose other arm imports
torch's class becomes torch's.
Everything else in apex (fused optimizers, normalization kernels) is not mixed
precision and is left alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence
from weakref import WeakKeyDictionary

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.apex import (
    APEX_AMP,
    APEX_FP16_UTILS,
    APEX_PARALLEL,
    ApexUse,
    initializes_for_inference,
    is_private,
    loss_scale_reads,
    removed_module,
    scaler_setting,
)
from amplint.config import Settings
from amplint.files import shown_path
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Span
from amplint.rules.base import Rule
from amplint.selfcheck import UnboundMemo, name_problems, new_name_problems
from amplint.transforms.apex import ApexMigration, MigrationBlocked, migrate_apex
from amplint.transforms.apex.common import atom
from amplint.transforms.edits import apply_edits
from amplint.analysis.imports import AMBIGUOUS
from amplint.transforms.imports import ensure_torch_imported, referenced_names, tidy_apex_imports

REMOVED = "removed from apex in 2025"

# What each apex.amp member becomes, for the finding's message.
_AMP_REPLACEMENTS = {
    "initialize": "a torch.amp.GradScaler, with torch.autocast around the forward pass",
    # `amp.initialize(model)`, no optimizer: a model cast for inference.
    "initialize for inference": "`model.half()` for O3, or torch.autocast around the "
    "forward passes for O1: with no optimizer there is no loss to scale",
    "scale_loss": "`scaler.scale(loss).backward()`, with `scaler.step(optimizer)` and "
    "`scaler.update()` after it",
    "master_params": "the optimizer's own parameters, after `scaler.unscale_(optimizer)`",
    "state_dict": "`scaler.state_dict()`",
    "load_state_dict": "`scaler.load_state_dict(...)`, skipped for checkpoints apex wrote "
    "(`loss_scaler0`), which do not load into a GradScaler",
    "float_function": '`torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)` '
    "on the autograd Function it applies; anything else, called with its half tensor "
    "arguments cast to float32",
    "half_function": '`torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float16)` '
    "on the autograd Function it applies, or autocast's own choice",
    "promote_function": "autocast's own choice of dtype",
    "register_float_function": "`.float()` on the inputs of its calls",
    "register_half_function": "autocast's own choice of dtype",
    "register_promote_function": "autocast's own choice of dtype",
    "disable_casts": '`torch.autocast("cuda", enabled=False)`',
    "lists": "torch.autocast's own op lists, built into torch (the edit goes)",
}

# What replaces each apex.fp16_utils name: the whole FP16 recipe (a half model,
# FP32 master weights, a loss scaler) is what autocast and a GradScaler do.
_KEEP_FLOAT32 = "keep the model in float32 and run its forward pass under torch.autocast"
_MASTER_WEIGHTS = "no master copy is needed: the weights stay float32 under torch.autocast"
_FP16_UTILS_REPLACEMENTS = {
    "network_to_half": _KEEP_FLOAT32,
    "convert_network": _KEEP_FLOAT32,
    "convert_module": _KEEP_FLOAT32,
    "BN_convert_float": _KEEP_FLOAT32,
    "tofp16": _KEEP_FLOAT32,
    "FP16Model": _KEEP_FLOAT32,
    "FP16_Optimizer": "a torch.amp.GradScaler: `scaler.scale(loss).backward()`, "
    "`scaler.step(optimizer)`, `scaler.update()`, around the plain optimizer",
    "LossScaler": "a torch.amp.GradScaler(init_scale=..., growth_interval=...)",
    "DynamicLossScaler": "a torch.amp.GradScaler",
    "prep_param_lists": _MASTER_WEIGHTS,
    "model_grads_to_master_grads": _MASTER_WEIGHTS,
    "master_params_to_model_params": _MASTER_WEIGHTS,
    "clip_grad_norm": "`torch.nn.utils.clip_grad_norm_`, after `scaler.unscale_(optimizer)`",
}

_DDP = "apex.parallel.DistributedDataParallel"
_CONVERT_SYNCBN = "apex.parallel.convert_syncbn_model"
_SYNCBN = "apex.parallel.SyncBatchNorm"
# What AMP204's fixes leave for a module pass: apex imports nothing uses, torch.
_PASSES = (tidy_apex_imports, ensure_torch_imported)
# apex.parallel.DistributedDataParallel's own options; torch's DDP takes none of them.
_APEX_DDP_OPTIONS = (
    "message_size",
    "delay_allreduce",
    "shared_param",
    "allreduce_trigger_params",
    "retain_allreduce_buffers",
    "allreduce_always_fp32",
    "num_allreduce_streams",
    "allreduce_communicators",
    "gradient_average",
    "gradient_predivide_factor",
    "gradient_average_split_factor",
    "prof",
)


class _Migrated:
    """A module's apex.amp migration, with AMP204's fixes in it: one fix for
    both, so that a program on apex.amp keeps apex's DDP, SyncBatchNorm and
    fp16_utils beside it until the migration itself goes through (half a
    migration runs neither with apex nor without it).  Or why it is blocked.

    AMP204's fixes are applied first and the result migrated: an import
    fallback (`try: from apex import amp; from apex.fp16_utils import * except
    ImportError: ...`) goes with the migration only once it holds apex.amp alone."""

    def __init__(self, facts: ModuleFacts, settings: Settings) -> None:
        self.changes: dict[ApexUse, list[str]] = {}
        self.scaler = "scaler"
        self.blocker: str | None = None
        self.fix: Fix | None = None
        target, unsafe = _with_other_apex_fixes(facts)
        try:
            migration = migrate_apex(target, target.apex, settings)
        except MigrationBlocked as blocked:
            self.blocker = str(blocked)
            return
        # The findings are on `facts`: its apex.amp uses, in order, are the
        # target's (AMP204 edits none of them).
        ours = {
            id(use): mine for use, mine in zip(target.apex.of(APEX_AMP), facts.apex.of(APEX_AMP))
        }
        self.changes = {ours[id(use)]: change for use, change in migration.changes.items()}
        self.scaler = migration.scaler
        module = migration.module
        # What the self-check of `fix` would refuse it for, told by `check` too:
        # a finding is marked fixable only when `fix` fixes it.
        unbound: UnboundMemo = {}  # the original's functions, most of them unchanged
        problems = new_name_problems(name_problems(facts.text, unbound), module.code, unbound)
        if problems:
            self.blocker = _scaling_elsewhere(facts, migration, problems)
            if self.blocker is None:
                self.blocker = "the rewrite would " + "; ".join(problems[:2])
            return
        # Unsafe when the migration changes numerics, or when an AMP204 fix it
        # carries is unsafe on its own (apex DDP's options dropped).
        unsafe = unsafe or any(self.changes.values())
        self.fix = Fix(
            Applicability.UNSAFE if unsafe else Applicability.SAFE,
            "apex.amp -> torch.amp, the whole module",
            (Edit(facts.module, lambda _: module),),
            partners=migration.partners,
        )


def _scaling_elsewhere(
    facts: ModuleFacts, migration: ApexMigration, problems: list[str]
) -> str | None:
    """Why a GradScaler made in place of `amp.initialize` would go unused, where
    the cause is in other modules: this one scales no loss, and apex scaled the
    program's losses in the others (timm's train.py and the `ApexScaler` of its
    utils).  The obstacle the user must see is theirs, not an unused name."""
    unused = f"leave `{migration.scaler}` assigned but never used"
    program = facts.apex_program
    here = facts.program_path
    if unused not in problems or program is None or here in program.scaling:
        return None
    shown = [shown_path(path) for path in program.scaling]
    if not shown:
        return None
    return (
        "the GradScaler made in place of `amp.initialize` would scale no loss: this module "
        f"scales none, and apex scaled this program's losses in {', '.join(shown)} "
        "(its findings say what stops that part)"
    )


# Both rules ask for the migration of one module: it is planned once.
_MIGRATIONS: WeakKeyDictionary[ModuleFacts, tuple[Settings, _Migrated]] = WeakKeyDictionary()


def _migrated(facts: ModuleFacts, settings: Settings) -> _Migrated:
    kept = _MIGRATIONS.get(facts)
    if kept is None or kept[0] != settings:
        kept = (settings, _Migrated(facts, settings))
        _MIGRATIONS[facts] = kept
    return kept[1]


def _with_other_apex_fixes(facts: ModuleFacts) -> tuple[ModuleFacts, bool]:
    """The module with AMP204's fixes applied, as a fix round would, and
    whether any of them is unsafe."""
    fixes = [d.fix for d in ApexOther()._findings(facts) if d.fix is not None]
    if not fixes:
        return facts, False
    unsafe = any(fix.applicability is Applicability.UNSAFE for fix in fixes)
    module = apply_edits(facts.module, (edit for fix in fixes for edit in fix.edits))
    for module_pass in dict.fromkeys(p for fix in fixes for p in fix.module_passes):
        module = module_pass(module)
    fixed = ModuleFacts(module, module.code, facts.project, share_walks=False)
    if len(fixed.apex.of(APEX_AMP)) != len(facts.apex.of(APEX_AMP)):
        return facts, False  # an AMP204 fix took an apex.amp use with it: migrate as it was
    return fixed, unsafe


class ApexAmp(Rule):
    code = "AMP203"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        uses = facts.apex.of(APEX_AMP)
        if not uses:
            return
        migrated = _migrated(facts, settings)
        blocker, fix, scaler = migrated.blocker, migrated.fix, migrated.scaler
        changes = migrated.changes
        for use in uses:
            spelled = facts.module.code_for_node(use.node)
            member = "lists" if use.member.startswith("lists.") else use.member
            if initializes_for_inference(use):
                member = "initialize for inference"
            replacement = _AMP_REPLACEMENTS.get(member, "").replace("scaler.", f"{scaler}.")
            if not replacement:
                message = f"`{spelled}`: apex.amp was {REMOVED}"
            else:
                message = f"`{spelled}`: apex.amp was {REMOVED}; use {replacement}"
            if changes.get(use):
                message += "; not exact: " + "; ".join(changes[use])
            if blocker is not None:
                message += f" (not fixed: {blocker})"
            yield Diagnostic(self.code, message, facts.span(use.node), fix)


class ApexOther(Rule):
    code = "AMP204"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        found = self._findings(facts)
        if not facts.apex.of(APEX_AMP):
            yield from found
            return
        # Held with the apex.amp migration (see _Migrated): fixed by its fix.
        migrated = _migrated(facts, settings)
        for diagnostic in found:
            if diagnostic.fix is None:
                yield diagnostic
            elif migrated.fix is not None:
                yield replace(diagnostic, fix=migrated.fix)
            else:
                yield replace(
                    diagnostic,
                    message=f"{diagnostic.message} (not fixed: held with the apex.amp migration, "
                    f"which is not fixed: {migrated.blocker})",
                    fix=None,
                )

    def _findings(self, facts: ModuleFacts) -> Iterator[Diagnostic]:
        for use in facts.apex.uses:
            spelled = facts.module.code_for_node(use.node)
            span = facts.span(use.call or use.node)
            if use.target == _DDP:
                yield self._ddp(use, spelled, span, facts)
            elif use.target == _CONVERT_SYNCBN and use.call is not None:
                yield self._convert_syncbn(use, spelled, span, facts)
            elif use.target == _SYNCBN:
                yield Diagnostic(
                    self.code,
                    f"`{spelled}`: apex.parallel.SyncBatchNorm was {REMOVED}; use "
                    "`torch.nn.SyncBatchNorm` (not fixed: its channel_last and fuse_relu "
                    "options have no counterpart)",
                    span,
                )
            elif use.module == APEX_FP16_UTILS and use.is_star_import:
                star = self._fp16_utils_star(use, spelled, span, facts)
                if star is not None:
                    yield star
            elif use.module == APEX_FP16_UTILS:
                yield self._fp16_utils(use, spelled, span)
            elif (
                use.module == APEX_AMP
                and is_private(use.member)
                # AMP203 migrates these: reads of the scale, settings of the scaler.
                and not loss_scale_reads(use, facts.module)
                and scaler_setting(use, facts.module) is None
            ):
                yield Diagnostic(
                    self.code,
                    f"`{spelled}` reads apex.amp's private state, {REMOVED}; with torch.amp "
                    "ask the GradScaler (`scaler.get_scale()`, `scaler.state_dict()`) (not fixed)",
                    span,
                )
            elif use.module == APEX_PARALLEL:
                yield Diagnostic(
                    self.code,
                    f"`{spelled}`: apex.parallel was {REMOVED}; "
                    + _PARALLEL_REPLACEMENTS.get(
                        use.member.split(".")[-1], "torch.distributed has what it did"
                    )
                    + " (not fixed)",
                    span,
                )
            # Anything else from apex (fused optimizers, normalization) is not
            # mixed precision and still ships.
        yield from self._imports(facts)

    def _imports(self, facts: ModuleFacts) -> Iterator[Diagnostic]:
        """Imports of removed apex modules that no use above reports: a name
        nothing reads (`from apex import amp` left beside torch.amp), and one
        bound in one arm of an `if` whose other arm binds torch's (`if fp16:
        from apex.parallel import DistributedDataParallel as DDP`), where the
        name means either and no use of it is apex's alone."""
        removed = [
            binding
            for binding in facts.imports.statements
            if removed_module(binding.target) is not None
            and not isinstance(binding.statement.names, cst.ImportStar)
        ]
        if not removed:
            return
        referenced = referenced_names(facts.module)
        probes = _tried_imports(facts.module)
        for binding in removed:
            module = removed_module(binding.target)
            span = facts.span(binding.statement)
            if id(binding.statement) in probes:
                continue  # `try: from apex import amp` probes for apex: it fails as meant
            if binding.name not in referenced.get(binding.scope, set()):
                edit = Edit(binding.statement, lambda statement: statement)  # the tidying pass removes it
                yield Diagnostic(
                    self.code,
                    f"`{binding.name}` is imported from {module}, {REMOVED}, and nothing "
                    "uses it: the import fails where apex is gone",
                    span,
                    Fix(Applicability.SAFE, "remove the import", (edit,), _PASSES),
                )
                continue
            bound = facts.imports.binding(binding.name, binding.scope)
            if bound is None or bound.target != AMBIGUOUS:
                continue  # one meaning: its uses are findings of their own
            replacement = _TORCH_IMPORTS.get(binding.target)
            message = (
                f"`{binding.name}` is imported from {module}, {REMOVED}, in one branch; "
                f"the other imports another `{binding.name}`"
            )
            if replacement is None:
                yield Diagnostic(self.code, message + " (not fixed)", span)
                continue
            new = cst.parse_statement(replacement.format(name=binding.name)).body[0]
            yield Diagnostic(
                self.code,
                f"{message}: import torch's in both",
                span,
                Fix(
                    Applicability.SAFE,
                    f"-> {replacement.format(name=binding.name)}",
                    (Edit(binding.statement, lambda _: new),),
                    _PASSES,
                ),
            )

    def _fp16_utils_star(
        self, use: ApexUse, spelled: str, span: Span, facts: ModuleFacts
    ) -> Diagnostic | None:
        """`from apex.fp16_utils import *`: each name it binds that the module
        reads is a finding of its own, and the star goes with the last; one
        that binds nothing read goes now."""
        if any(other.module == APEX_FP16_UTILS and other is not use for other in facts.apex.uses):
            return None
        # The edit marks the line as this fix's region; the tidying pass removes
        # it, with a `try` that guarded only it.
        edit = Edit(use.statement, lambda statement: statement)
        fix = Fix(Applicability.SAFE, "remove the import", (edit,), _PASSES)
        message = f"`{spelled}`: apex.fp16_utils was {REMOVED}; nothing it exports is used here"
        return Diagnostic(self.code, message, span, fix)

    def _fp16_utils(self, use: ApexUse, spelled: str, span: Span) -> Diagnostic:
        message = f"`{spelled}`: apex.fp16_utils was {REMOVED}"
        call = use.call
        if use.member == "to_python_float" and call is not None:
            if len(call.args) == 1 and not call.args[0].keyword and not call.args[0].star:
                # apex's own body: `t.item()` where t has it (a tensor), else t[0]
                item = cst.Call(cst.Attribute(atom(call.args[0].value), cst.Name("item")))
                edit = Edit(call, lambda _: item)
                fix = Fix(Applicability.SAFE, "-> .item()", (edit,), _PASSES)
                return Diagnostic(self.code, message + "; use `.item()`", span, fix)
        replacement = _FP16_UTILS_REPLACEMENTS.get(use.member)
        if replacement is None:
            replacement = "torch.autocast with a torch.amp.GradScaler, the model kept in float32"
        return Diagnostic(
            self.code,
            f"{message}; use {replacement} (not fixed: the training loop changes shape)",
            span,
        )

    def _ddp(self, use: ApexUse, spelled: str, span: Span, facts: ModuleFacts) -> Diagnostic:
        replacement = f"{_torch_name(use, facts)}.nn.parallel.DistributedDataParallel"
        message = f"`{spelled}`: apex's DistributedDataParallel was {REMOVED}; use `{replacement}`"
        if use.call is None:  # `isinstance(model, DDP)`: the class itself
            new = cst.parse_expression(replacement)
            edit = Edit(use.node, lambda _: new)
            fix = Fix(Applicability.SAFE, f"-> {replacement}", (edit,), _PASSES)
            return Diagnostic(self.code, message, span, fix)
        if len([arg for arg in use.call.args if arg.keyword is None]) != 1:
            message += (
                " (not fixed: its positional arguments after the module mean other things to torch)"
            )
            return Diagnostic(self.code, message, span)
        call = use.call.with_changes(func=cst.parse_expression(replacement))
        dropped = [arg for arg in call.args if _keyword(arg) in _APEX_DDP_OPTIONS]
        if dropped:
            names = ", ".join(f"`{_keyword(arg)}`" for arg in dropped)
            message += (
                f"; dropped, as torch has no counterpart: {names} (torch overlaps the "
                "all-reduce with backward in buckets)"
            )
            call = call.with_changes(args=_without(call.args, dropped))
        applicability = Applicability.UNSAFE if dropped else Applicability.SAFE
        fix = Fix(applicability, f"-> {replacement}", (Edit(use.call, lambda _: call),), _PASSES)
        return Diagnostic(self.code, message, span, fix)

    def _convert_syncbn(
        self, use: ApexUse, spelled: str, span: Span, facts: ModuleFacts
    ) -> Diagnostic:
        replacement = f"{_torch_name(use, facts)}.nn.SyncBatchNorm.convert_sync_batchnorm"
        message = f"`{spelled}`: apex.parallel was {REMOVED}; use `{replacement}`"
        call = use.call.with_changes(func=cst.parse_expression(replacement))
        dropped = [arg for arg in call.args if _keyword(arg) == "channel_last"]
        kept = _without(call.args, dropped)
        if len(kept) > 2 or any(_keyword(arg) not in (None, "process_group") for arg in kept):
            return Diagnostic(
                self.code, message + " (not fixed: arguments torch does not take)", span
            )
        if dropped:
            message += "; `channel_last` is dropped: torch's SyncBatchNorm takes any memory format"
            call = call.with_changes(args=kept)
        fix = Fix(
            Applicability.SAFE, f"-> {replacement}", (Edit(use.call, lambda _: call),), _PASSES
        )
        return Diagnostic(self.code, message, span, fix)


# apex.parallel's other members, and what takes their place.
_PARALLEL_REPLACEMENTS = {
    "LARC": "torch has no LARC: timm's `Lars(..., trust_clip=True)` clips the same trust "
    "ratio, or keep a copy of apex's class in the project",
    "create_syncbn_process_group": "make the groups with `torch.distributed.new_group(ranks)` "
    "and pass one to `torch.nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group=...)`",
    "Reducer": "torch.nn.parallel.DistributedDataParallel all-reduces the gradients itself",
}
# An apex import and the torch one that binds the same class.
_TORCH_IMPORTS = {
    _DDP: "from torch.nn.parallel import DistributedDataParallel as {name}",
    _SYNCBN: "from torch.nn import SyncBatchNorm as {name}",
}


def _tried_imports(module: cst.Module) -> set[int]:
    """The ids of the import statements in the body of a `try`."""
    found: set[int] = set()

    class Finder(cst.CSTVisitor):
        def visit_Try(self, node: cst.Try) -> None:
            for statement in node.body.body:
                if isinstance(statement, cst.SimpleStatementLine):
                    found.update(
                        id(small)
                        for small in statement.body
                        if isinstance(small, (cst.Import, cst.ImportFrom))
                    )

    module.visit(Finder())
    return found


def _torch_name(use: ApexUse, facts: ModuleFacts) -> str:
    return facts.imports.name_for("torch", use.scope) or "torch"


def _keyword(arg: cst.Arg) -> str | None:
    return arg.keyword.value if arg.keyword is not None else None


def _without(args: Sequence[cst.Arg], dropped: Sequence[cst.Arg]) -> list[cst.Arg]:
    """`args` less `dropped`; the new last argument takes the old last one's comma."""
    kept = [arg for arg in args if not any(arg is gone for gone in dropped)]
    if kept and args[-1] is not kept[-1]:
        kept[-1] = kept[-1].with_changes(comma=args[-1].comma)
    return kept
