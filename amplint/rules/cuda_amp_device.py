"""AMP122: CUDA's autocast or GradScaler in a script that never trains on CUDA.

``torch.amp.GradScaler()`` (CUDA's by default) and ``torch.autocast("cuda")`` in
a script whose model moves to ``torch.device("mps" if ... else "cpu")`` turn
themselves off on every machine it runs on: FP32 that reads as mixed precision.
The fix gives each the script's device, as AMP001 writes it for such a script:
``torch.amp.GradScaler(device.type, enabled=device.type != "cpu")``, and autocast
keeps CUDA's float16 (its default there, not the CPU's or the MPS's) and stays
off on the CPU fallback, as CUDA's did.  Unsafe: mixed precision starts running
on the script's accelerator, which changes its numerics.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.autocast import keyword_value
from amplint.analysis.cuda_only_amp import CudaAmpCall, cuda_amp_calls
from amplint.analysis.device import ACCELERATOR, ScriptDevice, script_device, shown_types
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms.apex.common import atom, code_of
from amplint.transforms.arguments import insert_argument, is_positional, keyword_argument


class CudaAmpOnOtherDevice(Rule):
    code = "AMP122"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        proven = facts.proven_device
        if proven is None or proven.spelled.types & {"cuda", ACCELERATOR}:
            return  # CUDA may be where it runs: "cuda" is right there
        kinds = shown_types(proven.spelled.types)
        for use in cuda_amp_calls(facts.module, facts.imports):
            written = facts.module.code_for_node(use.call)
            torch = facts.imports.name_for("torch", use.scope) or "torch"
            function = use.scope if isinstance(use.scope, cst.FunctionDef) else None
            found = script_device(proven, function, torch)
            what = 'its device defaults to "cuda"' if use.device is None else 'it names "cuda"'
            message = (
                f"`{written}` is CUDA's ({what}), and this script trains on `{proven.name}` "
                f"({kinds}), where it turns itself off"
            )
            if found is None or not isinstance(use.scope, (cst.FunctionDef, cst.Module)):
                yield Diagnostic(
                    self.code,
                    f"{message}: give it the script's device where `{proven.name}` is known",
                    facts.span(use.call),
                )
                continue
            if _positional(use) > (5 if use.is_scaler else 2):  # `enabled` among them
                yield Diagnostic(
                    self.code,
                    f"{message}: give it the script's device, `{found.expression}` "
                    "(not fixed: its other settings are positional)",
                    facts.span(use.call),
                )
                continue
            rewritten = _on_device(use, found, torch)
            shown = facts.module.code_for_node(rewritten)
            fix = Fix(
                Applicability.UNSAFE,
                f"`{shown}`",
                (Edit(use.call, lambda _node, new=rewritten: new),),
            )
            yield Diagnostic(self.code, f"{message}: use `{shown}`", facts.span(use.call), fix)


def _on_device(use: CudaAmpCall, found: ScriptDevice, torch: str) -> cst.Call:
    """The call on the script's device, off on its CPU fallback, autocast in
    the float16 CUDA's defaulted to."""
    call = use.call
    device = cst.parse_expression(found.expression)
    if use.device is None:
        call = insert_argument(call, 0, cst.Arg(device))
    else:
        call = call.deep_replace(use.device, device)
    if not use.is_scaler and keyword_value(call, "dtype") is None and _positional(use) < 2:
        call = insert_argument(
            call, 1, keyword_argument("dtype", cst.parse_expression(f"{torch}.float16"))
        )
    if found.may_be_cpu:
        off_on_cpu = f'{found.expression} != "cpu"'
        enabled = keyword_value(call, "enabled")
        if enabled is None:
            call = insert_argument(
                call, len(call.args), keyword_argument("enabled", cst.parse_expression(off_on_cpu))
            )
        else:
            # `a or b` must stay one operand of the `and`
            both = cst.parse_expression(f"{code_of(atom(enabled))} and {off_on_cpu}")
            call = call.deep_replace(enabled, both)
    return call


def _positional(use: CudaAmpCall) -> int:
    """How many arguments the call passes by position (the device one of them)."""
    return sum(is_positional(arg) for arg in use.call.args)
