"""AMP116: autocast given a device where it takes a device type.

``torch.autocast(torch.device("cuda"))`` raises; ``torch.autocast("cuda:0")``
runs, but skips what autocast checks for "cuda" (is CUDA there, does the GPU do
bf16).  Both want the type: ``"cuda"``, or ``device.type``.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.autocast import AutocastDevice
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule

_PLAIN = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


class AutocastDeviceType(Rule):
    code = "AMP116"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for use in facts.autocast.wrong_devices:
            written = facts.module.code_for_node(use.argument)
            replacement = _replacement(use)
            shown = facts.module.code_for_node(replacement)
            if use.is_torch_device:
                message = (
                    f"`{written}` is a torch.device and autocast raises on it; "
                    f"it takes the device type: `{shown}`"
                )
            else:
                message = (
                    f"`{written}` names one device, and autocast then skips its checks for "
                    f'"{use.literal_type}" (availability, dtype support); pass the type: `{shown}`'
                )
            fix = Fix(
                Applicability.SAFE,
                f"device type `{shown}` for autocast",
                (Edit(use.argument, lambda _node, new=replacement: new),),
            )
            yield Diagnostic(self.code, message, facts.span(use.argument), fix)


def _replacement(use: AutocastDevice) -> cst.BaseExpression:
    if use.literal_type is not None:
        quote = _quote_of(use.argument)
        return cst.SimpleString(f"{quote}{use.literal_type}{quote}")
    argument = use.argument
    if not isinstance(argument, _PLAIN):
        argument = argument.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Attribute(value=argument, attr=cst.Name("type"))


def _quote_of(argument: cst.BaseExpression) -> str:
    """The quote the user wrote, so "cuda:0" becomes "cuda" and 'cpu:0' 'cpu'."""
    literal = argument
    if isinstance(argument, cst.Call) and argument.args:
        literal = argument.args[0].value
    if isinstance(literal, cst.SimpleString):
        return literal.quote if len(literal.quote) == 1 else '"'
    return '"'
