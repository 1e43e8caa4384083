"""autocast and GradScaler calls that name CUDA, explicitly or by default.

``torch.amp.GradScaler()`` is CUDA's (its `device` defaults to "cuda") and so is
``torch.autocast("cuda")``.  In a script that trains on the MPS or an XPU, with
the CPU as fallback (analysis/device.py proves that), both turn themselves off
with a warning: the script runs FP32 while it reads as mixed precision.  This
module finds those calls; AMP122 decides what a script's device makes of them.

The deprecated ``torch.cuda.amp`` spellings are AMP201's first: its fix makes
them ``torch.amp.X("cuda")``, which this module then finds.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.autocast import AUTOCAST, device_argument, keyword_value
from amplint.analysis.imports import ImportMap
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import string_value

# The device-generic GradScaler, whose device defaults to "cuda".
GENERIC_SCALERS = frozenset({"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"})


@dataclass(frozen=True)
class CudaAmpCall:
    """An autocast or GradScaler call that names CUDA."""

    call: cst.Call
    scope: Scope
    is_scaler: bool
    # The device argument as written ("cuda"), or None: GradScaler's default.
    device: cst.BaseExpression | None


def cuda_amp_calls(module: cst.Module, imports: ImportMap) -> list[CudaAmpCall]:
    finder = _Finder(imports)
    finder.walk(module)
    return finder.found


class _Finder(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.found: list[CudaAmpCall] = []

    def visit_Call(self, node: cst.Call) -> None:
        called = self.imports.resolve(node.func, self.scope)
        if called in AUTOCAST:
            device = device_argument(node)  # `device_type=` or the first positional
            if device is not None and string_value(device) == "cuda":
                self.found.append(CudaAmpCall(node, self.scope, False, device))
        elif called in GENERIC_SCALERS:
            if any(arg.star for arg in node.args):
                return  # `GradScaler(*args)`: the device is not in sight
            device = keyword_value(node, "device") or device_argument(node)
            if device is None or string_value(device) == "cuda":
                self.found.append(CudaAmpCall(node, self.scope, True, device))
