"""AMP205: torch's per-device autocast state functions, deprecated in torch 2.4.

`torch.get_autocast_gpu_dtype()` becomes `torch.get_autocast_dtype("cuda")`,
`torch.set_autocast_cpu_enabled(flag)` becomes
`torch.set_autocast_enabled("cpu", flag)`: the same question, the device now an
argument.  Calls under a version test or in a try that spells the new API are
fallbacks, left alone.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.deprecated_state import INTRODUCED_IN, DeprecatedStateCall
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule


class DeprecatedAutocastState(Rule):
    code = "AMP205"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.deprecated_state_calls:
            yield self._diagnostic(found, facts, settings)

    def _diagnostic(
        self, found: DeprecatedStateCall, facts: ModuleFacts, settings: Settings
    ) -> Diagnostic:
        device = f'"{found.device}"'
        shown = f"torch.{found.replacement}({device}{', ...' if found.call.args else ''})"
        message = f"`torch.{found.deprecated}()` is deprecated; use `{shown}`"
        blocker = None
        if settings.target_torch < INTRODUCED_IN:
            target = settings.target_torch_shown
            blocker = f"torch.{found.replacement} needs torch 2.4, target-torch is {target}"
        elif not found.through_module:
            blocker = f"`{found.deprecated}` is imported by name; call it through torch"
        if blocker is not None:
            return Diagnostic(
                self.code, f"{message} (not fixed: {blocker})", facts.span(found.call)
            )
        edit = Edit(found.call, lambda call, found=found: _rewritten(call, found))
        fix = Fix(Applicability.SAFE, f"torch.{found.deprecated}() -> {shown}", (edit,))
        return Diagnostic(self.code, message, facts.span(found.call), fix)


def _rewritten(call: cst.Call, found: DeprecatedStateCall) -> cst.Call:
    """`torch.set_autocast_cpu_dtype(d)` -> `torch.set_autocast_dtype("cpu", d)`,
    through whatever name the call reached torch by."""
    assert isinstance(call.func, cst.Attribute)
    device = cst.Arg(cst.SimpleString(f'"{found.device}"'))
    if call.args:
        device = device.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(
        func=call.func.with_changes(attr=cst.Name(found.replacement)),
        args=(device, *call.args),
    )
