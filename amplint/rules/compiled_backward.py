"""AMP123: a torch.compile'd model under autocast, its backward outside, and
nothing said about the autocast its compiled backward runs under.

torch.compile bakes into the backward it traces an assumption about the
autocast that backward will run under; "same_as_forward" is the default.  A
program that follows the AMP recipe runs backward outside autocast, and
PyTorch's documentation (2.9 on) tells it to set
``torch._functorch.config.backward_pass_autocast = "off"``; without it the
compiled backward computes in float16 or bfloat16 what eager AMP keeps in
float32.  The setting is private, so this is a finding without a fix.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.compiled import DOCUMENTED_SINCE, CompiledScan
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.rules.base import Rule

SETTING_LINE = 'torch._functorch.config.backward_pass_autocast = "off"'


def compiled_backward_advice(facts: ModuleFacts, name: str, compiled: cst.CSTNode) -> str:
    """What a compiled model's backward outside autocast needs: the words
    AMP123 and AMP001's refusal share."""
    return (
        f"`{name}` is torch.compile'd (line {facts.span(compiled).line}), and torch.compile "
        "assumes its backward runs under the forward's autocast, computing in low precision "
        "what eager AMP keeps in float32, unless the program sets "
        f'`{SETTING_LINE}` (PyTorch docs, "torch.compile has different autograd semantics", '
        "2.9 on)"
    )


def needs_setting(scan: CompiledScan, settings: Settings) -> bool:
    return settings.target_torch >= DOCUMENTED_SINCE and not scan.sets_backward_autocast


class CompiledBackwardAutocast(Rule):
    code = "AMP123"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        scan = facts.compiled
        if not needs_setting(scan, settings):
            return
        for found in scan.under_autocast:
            advice = compiled_backward_advice(facts, found.name, found.compiled)
            yield Diagnostic(
                self.code,
                f"{advice}; its backward runs outside autocast here: set it once before "
                "training (a private setting: not fixed)",
                facts.span(found.call),
            )
