"""AMP117: a plain GradScaler in a program that shards its model with
FullyShardedDataParallel, whose flat gradient shards need ShardedGradScaler.

The fix chooses the sharded scaler where a process group runs, as AMP001 writes
it: `ShardedGradScaler(...) if dist.is_initialized() else <the plain scaler>`.
The plain one stays for a run without a process group (a single-GPU debug run
that skips the wrap), where ShardedGradScaler's all-reduce has no group to use.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.fsdp_scaler import PlainScaler
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms.insert_amp import sharded_or_plain_scaler
from amplint.transforms.spelling import SCALER_SINCE

# Each plain scaler's parameters in order; ShardedGradScaler swaps
# growth_factor and backoff_factor, so the fix passes them by keyword.
_AFTER_DEVICE = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
# The device a scaler class implies, for those without a device parameter.
_IMPLIED_DEVICE = {
    "torch.cuda.amp.GradScaler": "cuda",
    "torch.cuda.amp.grad_scaler.GradScaler": "cuda",
    "torch.cpu.amp.GradScaler": "cpu",
}


class PlainScalerUnderFsdp(Rule):
    code = "AMP117"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        if not facts.plain_grad_scalers:
            return  # asked first: this module's own tree answers it
        # `fully_shard` (FSDP2) gives DTensor gradients, which the plain
        # GradScaler handles: only FullyShardedDataParallel counts.  Whether
        # the program uses it may mean reading the project's other modules.
        wrapped = [use for use in facts.fsdp_uses if not use.composable]
        if not wrapped:
            return
        here = facts.project.path if facts.project is not None else None
        use = wrapped[0]
        where = f"line {use.line}" if use.path == here else f"{use.path.name}:{use.line}"
        message = (
            f"a plain GradScaler while FullyShardedDataParallel shards the model ({where}): "
            "each rank looks for infs in its own gradient shard only, so ranks can disagree "
            "on skipping a step; use torch.distributed.fsdp.sharded_grad_scaler."
            "ShardedGradScaler, which all-reduces that answer"
        )
        for found in facts.plain_grad_scalers:
            arguments, obstacle = _sharded_arguments(found, facts)
            if obstacle is None and settings.target_torch < SCALER_SINCE:
                obstacle = "the fix writes ShardedGradScaler as torch 2.3 defines it"
            if obstacle is not None:
                yield Diagnostic(
                    self.code, f"{message} (not fixed: {obstacle})", facts.span(found.call)
                )
                continue
            yield Diagnostic(
                self.code, message, facts.span(found.call), _fix(found, arguments, facts)
            )


def _sharded_arguments(found: PlainScaler, facts: ModuleFacts) -> tuple[list[str], str | None]:
    """The ShardedGradScaler arguments matching `found`'s (the device first,
    then keywords), or why there are none."""
    if found.before_process_group:
        return (
            [],
            "it is made before a process group is started; make a ShardedGradScaler after `init_process_group`",
        )
    code = facts.module.code_for_node
    implied = _IMPLIED_DEVICE.get(found.scaler)
    parameters = _AFTER_DEVICE if implied is not None else ("device", *_AFTER_DEVICE)
    device = f'"{implied}"' if implied is not None else '"cuda"'
    keywords = []
    for index, argument in enumerate(found.call.args):
        if argument.star:
            return [], "its arguments are unpacked"
        if argument.keyword is not None:
            name = argument.keyword.value
        elif index < len(parameters):
            name = parameters[index]
        else:
            return [], "it has more arguments than GradScaler takes"
        if name == "device":
            device = code(argument.value)
        else:
            keywords.append(f"{name}={code(argument.value)}")
    return [device, *keywords], None


def _fix(found: PlainScaler, arguments: list[str], facts: ModuleFacts) -> Fix:
    torch = facts.imports.name_for("torch", found.scope) or "torch"
    code, passes = sharded_or_plain_scaler(
        facts.imports, found.scope, torch, ", ".join(arguments), "None"
    )
    chosen = cst.parse_expression(code)
    assert isinstance(chosen, cst.IfExp)
    if not found.bare:
        chosen = chosen.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

    def rewrite(plain: cst.CSTNode, chosen: cst.IfExp = chosen) -> cst.CSTNode:
        # The plain scaler stays as written (comments, keyword order, its
        # own parentheses) as the branch for a run without a process group.
        return chosen.with_changes(orelse=plain)

    return Fix(
        Applicability.SAFE,
        "ShardedGradScaler where a process group runs",
        (Edit(found.call, rewrite),),
        passes,
    )
