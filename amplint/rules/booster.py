"""AMP121 and AMP206: a Colossal-AI Booster asked for a precision it will not run.

`Booster(mixed_precision=..., plugin=...)` hands the precision to the plugin when
the plugin controls it (Gemini, LowLevelZero, HybridParallel and the MoE one, by
their own `precision=`; TorchFSDPPlugin by FSDP's mixed-precision policy): the
Booster then drops its `mixed_precision` with a warning, so the run trains in
the plugin's precision, not the one written beside it (AMP121).  That also
covers what Colossal-AI's documentation rules out: the torch AMP of
`mixed_precision="fp16"` with ZeRO (Gemini, LowLevelZero) and anything but the
plugin's own half precision with pipeline parallelism (HybridParallel).

`mixed_precision="fp16_apex"` runs NVIDIA apex's amp, which apex removed in
2025 (AMP206); `"fp16"` is Colossal-AI's torch AMP, apex's O1 done by torch.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.autocast import keyword_value
from amplint.analysis.frameworks import FSDP_PLUGIN, PRECISION_PLUGINS, literal
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule

_APEX = "fp16_apex"


def _boosters(facts: ModuleFacts):
    return [setup for setup in facts.framework_setups if setup.framework == "colossalai"]


class BoosterPrecisionIgnored(Rule):
    code = "AMP121"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for setup in _boosters(facts):
            plugin = setup.plugin
            value = keyword_value(setup.call, "mixed_precision")
            if value is None or plugin not in PRECISION_PLUGINS | {FSDP_PLUGIN}:
                continue
            spelled = facts.module.code_for_node(value)
            where = (
                "FSDP's own `mixed_precision` policy"
                if plugin == FSDP_PLUGIN
                else 'its `precision=` ("fp16" when not given)'
            )
            yield Diagnostic(
                self.code,
                f"`mixed_precision={spelled}` is ignored: the Booster's plugin, {plugin}, "
                f"controls the precision, and Colossal-AI drops the Booster's with a warning; "
                f"the run trains in the plugin's precision, {where}: set it there",
                facts.span(value),
            )


class BoosterApexAmp(Rule):
    code = "AMP206"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for setup in _boosters(facts):
            value = keyword_value(setup.call, "mixed_precision")
            if value is None or literal(value) != _APEX:
                continue
            replacement = cst.SimpleString(f"{value.value[0]}fp16{value.value[0]}")
            fix = Fix(
                Applicability.SAFE,
                '"fp16_apex" -> "fp16" (torch AMP, what apex\'s default O1 did)',
                (Edit(value, lambda _: replacement),),
            )
            yield Diagnostic(
                self.code,
                '`mixed_precision="fp16_apex"` runs NVIDIA apex\'s amp, which was removed from '
                'apex in 2025; `mixed_precision="fp16"` is the same O1 recipe in torch AMP',
                facts.span(value),
                fix,
            )
