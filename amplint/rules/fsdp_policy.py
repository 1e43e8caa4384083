"""AMP120: manual autocast or a GradScaler that works against the FSDP
mixed-precision policy of the same module (analysis/fsdp_policy.py)."""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.rules.base import Rule


class AmpAgainstFsdpPolicy(Rule):
    code = "AMP120"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for conflict in facts.fsdp_policy_conflicts:
            policy = (
                f"the FSDP policy (line {facts.span(conflict.policy).line}) runs the model in "
                f"{conflict.policy_dtype}"
            )
            if conflict.autocast_dtype is not None:
                message = (
                    f"{policy}, and this autocast region in {conflict.autocast_dtype}: every "
                    f"matmul recasts the {conflict.policy_dtype} parameters to "
                    f"{conflict.autocast_dtype}, and the gradients come back in a dtype the "
                    "policy did not choose; drop the autocast (the policy casts) or give both "
                    "the same dtype"
                )
            else:
                message = (
                    f"{policy}, which has float32's range and needs no loss scaling: this "
                    "GradScaler only adds an inf/NaN check and a host sync per step; drop it, "
                    "or create it with `enabled=False`"
                )
            yield Diagnostic(self.code, message, facts.span(conflict.node))
