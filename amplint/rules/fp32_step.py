"""AMP001: a training step that runs in full FP32.

The fix inserts autocast around the forward pass and, for float16, a GradScaler
in a scope that outlives the step.  Steps amplint cannot convert safely are
reported with the reason and left alone.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.analysis.code_text import code_only
from amplint.analysis.precision import (
    bfloat16_obstacle,
    float16_hazard,
    low_precision_hazard,
    provenance,
)
from amplint.analysis.cpu_only import cpu_only_reason
from amplint.analysis.steps import SILENT_SKIPS, TrainingStep
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.rules.compiled_backward import compiled_backward_advice, needs_setting
from amplint.transforms.insert_amp import (
    AmpChoice,
    InsertAmp,
    amp_choice,
    fsdp_mixed_precision,
    micro_step_edit_obstacle,
)

# PEFT's AdaLoRA scores each weight by |p * p.grad| after the optimizer step
# and keeps a running mean: on a step the GradScaler skips, the gradients hold
# inf and the scores turn inf / nan for the rest of the run.
_READS_GRADIENTS_AFTER_STEP = re.compile(r"[\w.]*\.update_and_allocate\(")
# A loop that never clears its gradients lets them accumulate (a bug, but one
# that trains); with a GradScaler, the first skipped step's inf stays in them
# and every later step is skipped too.
_CLEARS_GRADIENTS = re.compile(r"zero_grad|\.grad\s*=\s*None|\.grad(?:\.data)?\.zero_\(")


# Recurrent layers: CPU autocast runs them in float16 only where the CPU has
# native float16 (AVX512-FP16, AMX-FP16); elsewhere their forward raises.
_RECURRENT = re.compile(r"\b((?:nn\.)?(?:LSTM|GRU|RNN))\(")


@lru_cache(maxsize=16)
def _in_module(pattern: re.Pattern, code_text: str) -> re.Match | None:
    """The first match of `pattern` in a module's code, found once per module
    however many steps ask (a search per step made a file of many training
    functions quadratic)."""
    return pattern.search(code_text)


def _obstacle(
    step: TrainingStep, facts: ModuleFacts, settings: Settings, choice: AmpChoice
) -> str | None:
    """Why the step, found convertible, still must not be rewritten with
    `choice`: the first reason, or None."""
    if facts.custom_kernels:
        kernel = facts.custom_kernels[0]
        return (
            f"the model runs C++/CUDA kernels compiled in "
            f"{facts.project.relative(kernel.path)}:{kernel.line} without `custom_fwd`: "
            "under autocast they get float16 activations beside float32 parameters and "
            "raise; decorate their autograd Function's forward with "
            '`@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)` first'
        )
    policy = fsdp_mixed_precision(facts)
    if policy is not None:
        return (
            f"the model is wrapped in FSDP with a mixed-precision policy ({policy}); "
            "FSDP already runs it in mixed precision"
        )
    if needs_setting(facts.compiled, settings):
        scopes = (step.enclosing_scope, facts.module)
        forward = [statement for region in step.regions for statement in region.statements]
        for statement in forward:
            found = facts.compiled.compiled_call(statement, scopes)
            if found is not None:
                _, name, compiled = found
                return (
                    f"{compiled_backward_advice(facts, name, compiled)}; the rewrite runs "
                    "backward outside autocast, and amplint does not write a private "
                    "setting: set it once before training, and fix rewrites this step"
                )
    if choice.device == "cuda" and (on_cpu := cpu_only_reason(step, facts)) is not None:
        return (
            f"{on_cpu}, where CUDA autocast does nothing; "
            "`--device-type cpu --dtype bfloat16` rewrites it for the CPU"
        )
    if (
        choice.device == "cpu"
        and choice.dtype == "float16"
        and (recurrent := _in_module(_RECURRENT, facts.code_text)) is not None
    ):
        return (
            f"`{recurrent.group(1)}` has no float16 kernel on most CPUs (oneDNN raises "
            '"could not create a primitive descriptor"); `--dtype bfloat16` runs it'
        )
    if choice.dtype in ("bfloat16", "auto") and (found := bfloat16_obstacle(step, facts)):
        return found
    if choice.dtype in ("float16", "auto") and (found := float16_hazard(step, facts)):
        return found
    if (found := low_precision_hazard(facts)) is not None:
        return found
    problem = next((r.unsafe_problem for r in step.regions if r.unsafe_problem), None)
    if choice.device == "cuda" and step.unsafe_loss is not None and problem is not None:
        return (
            f"{step.unsafe_loss} raises under CUDA autocast and {problem}; compute the "
            "loss on logits with nn.BCEWithLogitsLoss or F.binary_cross_entropy_with_logits"
        )
    if step.index_write is not None:
        return (
            f"`{step.index_write}` writes what the forward pass computes into a tensor by "
            "a tensor index, which needs the value in the tensor's dtype: under autocast one "
            "may be low precision and the other float32 (by promotion, or CPU autocast's "
            "low-precision softmax), and the write raises; cast the value to the tensor's "
            "dtype (`.to(t.dtype)`) or compute it before the forward pass"
        )
    if choice.uses_scaler and step.gradient_penalty is not None:
        return (
            f"`{step.gradient_penalty}` takes gradients inside the forward pass (a "
            "gradient penalty, a meta-learning inner step), which a GradScaler leaves "
            "scaled: scale and unscale them "
            "by hand as in PyTorch's AMP examples, or use `--dtype bfloat16`"
        )
    if choice.uses_scaler:
        reader = None
        if "update_and_allocate" in facts.code_text:  # before generating the block's code
            reader = _READS_GRADIENTS_AFTER_STEP.search(
                code_only(facts.module.code_for_node(step.block))
            )
        if reader is not None:
            return (
                f"`{reader.group(0)}...)` (AdaLoRA) reads the gradients after the step; on "
                "a step the GradScaler skips they hold inf, which its importance scores "
                "keep: use `--dtype bfloat16`"
            )
        between = micro_step_edit_obstacle(step, facts.module)
        if between is not None:
            return between
        if step.outermost_loop is not None and not _in_module(_CLEARS_GRADIENTS, facts.code_text):
            return (
                "the loop never clears its gradients (no `zero_grad()`), so they add up "
                "across steps; with a GradScaler the first skipped step's inf stays in them "
                "and every later step is skipped: zero them each step, or use `--dtype bfloat16`"
            )
    # What target-torch cannot spell is InsertAmp.place_scaler's first answer.
    return None


class FP32TrainingStep(Rule):
    code = "AMP001"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        scan = facts.training_steps
        for step in scan.steps:
            if step.skip in SILENT_SKIPS:
                continue  # already AMP (the misuse rules' business), or not training
            yield self._diagnostic(step, facts, settings)
        for backward in scan.manual_updates:
            loss = facts.module.code_for_node(backward.loss)
            yield Diagnostic(
                self.code,
                f"`{loss}.backward()` runs in FP32 and the parameters are updated by hand, "
                "not by an optimizer: not rewritten, a GradScaler can only unscale what an "
                "optimizer steps",
                facts.span(backward.call),
            )

    def _diagnostic(self, step: TrainingStep, facts: ModuleFacts, settings: Settings) -> Diagnostic:
        span = facts.span(step.anchor)
        # Flagged on its backward; a `# noqa: AMP001` anywhere in its loop counts.
        owner = facts.span(step.owner)
        about = (owner.line, owner.end_line)
        managed = provenance(step, facts)
        if managed is not None:
            # Not "runs in FP32": a bfloat16 model, apex, the program's own
            # switch decide its precision (analysis/precision.py).
            return Diagnostic(
                self.code, f"training step not rewritten: {managed}", span, about_lines=about
            )
        choice = amp_choice(settings)
        reason = step.skip or _obstacle(step, facts, settings, choice)
        unsafe_loss = step.unsafe_loss if choice.device == "cuda" else None
        insert = None
        if reason is None:
            insert = InsertAmp(step, facts, settings)
            reason = insert.place_scaler()
        if reason is not None:
            return Diagnostic(
                self.code,
                f"training step runs in FP32; not rewritten: {reason}",
                span,
                about_lines=about,
            )
        insert.plan_step()
        loss = facts.module.code_for_node(step.backwards[0].loss)
        if choice.uses_scaler:
            advice = "wrap the forward pass in torch.autocast and scale the loss with a GradScaler"
            done = f"autocast around the forward pass, GradScaler `{insert.scaler}`"
        else:
            advice = f"wrap the forward pass in torch.autocast with {choice.dtype}"
            done = f"autocast ({choice.dtype}) around the forward pass"
        if unsafe_loss is not None:
            advice += (
                f"; {unsafe_loss} raises under CUDA autocast, so it is computed after the "
                "block on `.float()` inputs (the loss on logits, nn.BCEWithLogitsLoss, is "
                "the better long-term change)"
            )
            done += ", the BCE loss after the block in float32"
        if insert.makes_sharded_scaler:
            done = done.replace("GradScaler", "ShardedGradScaler (FSDP)", 1)
        fix = Fix(
            Applicability.SAFE,
            done,
            (Edit(insert.target, insert.rewrite),),
            module_passes=insert.module_passes,
        )
        return Diagnostic(
            self.code,
            f"training step runs in FP32: `{loss}` is computed without autocast; {advice}",
            span,
            fix,
            about_lines=about,
        )
