"""AMP112: a GradScaler over bfloat16 autocast.

Loss scaling exists because float16 gradients underflow below 6e-8; bfloat16
has float32's exponent range and does not.  A scaler there still multiplies
the loss, checks every gradient for inf/NaN and waits on the host each step.
``enabled=False`` makes scale/unscale_/step/update pass straight through, so
the loop keeps its shape; the fix is unsafe because steps with inf/NaN
gradients are no longer skipped.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms.arguments import insert_argument, keyword_argument


class ScalerWithBfloat16(Rule):
    code = "AMP112"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.bf16_scalers:
            region = facts.module.code_for_node(found.region.func)
            message = (
                f"`{found.scaler}` scales a step whose `{region}` region runs in bfloat16, "
                "which has float32's range and needs no loss scaling: the scaler only adds an "
                "inf/NaN check and a host sync per step; create it with `enabled=False` "
                "(or `enabled=dtype == torch.float16`)"
            )
            fix = None
            if found.construction is not None:
                disabled = keyword_argument("enabled", cst.Name("False"))
                fix = Fix(
                    Applicability.UNSAFE,
                    f"`{found.scaler}` created with `enabled=False`",
                    (
                        Edit(
                            found.construction,
                            lambda node, new=disabled: insert_argument(node, len(node.args), new),
                        ),
                    ),
                )
            yield Diagnostic(self.code, message, facts.span(found.region), fix)
