"""AMP201 / AMP202: the deprecated torch.cuda.amp and torch.cpu.amp APIs.

Since torch 2.4 every call of them raises a FutureWarning; torch.amp takes the
device as an argument instead.  Uses inside version fallbacks are left alone,
and so are uses whose replacement the project's oldest torch (target-torch)
does not have: `torch.cuda.amp.GradScaler()` is the right spelling for a
project that supports torch 2.2, and the one amplint's own fixes write there
(transforms/spelling.py).
"""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.analysis.deprecated_amp import DeprecatedAmpUse, UseKind
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms import spelling, torch_amp
from amplint.transforms.imports import ensure_functools_imported, tidy_deprecated_amp_imports

# The torch release that introduced each torch.amp replacement (for autocast,
# the device-generic autocast itself: below it CUDA's is the only one).
_INTRODUCED_IN = {
    "GradScaler": spelling.SCALER_SINCE,
    "autocast": spelling.AUTOCAST_SINCE,
    "custom_fwd": (2, 4),
    "custom_bwd": (2, 4),
}


class DeprecatedTorchAmp(Rule):
    def __init__(self, code: str, device: str) -> None:
        self.code = code
        self.device = device

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for use in facts.deprecated_amp_uses:
            if use.device != self.device or use.in_version_fallback:
                continue
            if settings.target_torch < _INTRODUCED_IN.get(use.member, (0, 0)):
                continue  # the deprecated spelling is the one target-torch has
            yield self._diagnostic(use, facts)

    def _diagnostic(self, use: DeprecatedAmpUse, facts: ModuleFacts) -> Diagnostic:
        deprecated = f"torch.{use.device}.amp.{use.member}"
        spelled = (
            f"`{use.spelled}`" if use.spelled == deprecated else f"`{use.spelled}` ({deprecated})"
        )
        torch_name = facts.imports.name_for("torch", use.scope) or "torch"
        replacement, edit, blocker = self._replacement(use, torch_name)
        message = f"{spelled} is deprecated; use `{replacement}`"
        if blocker is not None:
            message += f" (not fixed: {blocker})"
        fix = None
        if edit is not None:
            passes = [tidy_deprecated_amp_imports]
            if use.kind is UseKind.REFERENCE:
                passes.append(ensure_functools_imported)
            fix = Fix(
                Applicability.SAFE,
                f"{deprecated} -> {replacement}",
                (edit,),
                module_passes=tuple(passes),
            )
        return Diagnostic(self.code, message, facts.span(use.node), fix)

    def _replacement(self, use: DeprecatedAmpUse, torch_name: str):
        """(replacement shown to the user, the edit or None, why there is no edit)."""
        member, device = use.member, use.device
        modern = f"torch.amp.{member}"
        blocker = None
        if use.kind is UseKind.CALL:
            shown = (
                f'{modern}(..., device_type="{device}")'
                if member in torch_amp.KEYWORD_DEVICE_MEMBERS
                else f'{modern}("{device}", ...)'
            )
            if member == "autocast" and not torch_amp.autocast_call_is_fixable(use.call):
                blocker = blocker or "its positional arguments cannot be named (*args or too many)"
            edit = Edit(use.call, torch_amp.rewrite_call(torch_name, device, member))
        elif use.kind is UseKind.BARE_DECORATOR:
            shown = f'{modern}(device_type="{device}")'
            if member not in torch_amp.KEYWORD_DEVICE_MEMBERS:
                blocker = blocker or f"a bare @{member} decorator has no meaning to carry over"
            edit = Edit(use.node, torch_amp.rewrite_bare_decorator(torch_name, device, member))
        elif use.kind is UseKind.TYPE:
            shown = modern
            edit = Edit(use.node, torch_amp.rewrite_type(torch_name, member))
        else:
            shown = (
                f'functools.partial({modern}, "{device}")'
                if member == "GradScaler"
                else f'functools.partial({modern}, device_type="{device}")'
            )
            edit = Edit(use.node, torch_amp.rewrite_reference(torch_name, device, member))
        return shown, (None if blocker else edit), blocker
