"""AMP117: a plain GradScaler in a program that shards its model with
FullyShardedDataParallel, whose flat gradient shards need ShardedGradScaler."""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.rules.base import Rule


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
        for call in facts.plain_grad_scalers:
            yield Diagnostic(self.code, message, facts.span(call))
