"""Calls of torch's per-device autocast state functions, deprecated in torch 2.4.

`torch.get_autocast_gpu_dtype()`, `torch.is_autocast_cpu_enabled()`,
`torch.set_autocast_cpu_dtype(dtype)` and their xla / ipu siblings each warn
("Please use torch.get_autocast_dtype('cuda') instead"): since torch 2.4 one
function per question takes the device type as its first argument.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis.imports import ImportMap
from amplint.analysis.guards import GuardedVisitor
from amplint.analysis.scopes import Scope

# Each deprecated function -> (the function that replaces it, the device it names).
DEPRECATED_STATE_FUNCTIONS: dict[str, tuple[str, str]] = {
    "get_autocast_gpu_dtype": ("get_autocast_dtype", "cuda"),
    "set_autocast_gpu_dtype": ("set_autocast_dtype", "cuda"),
    "get_autocast_cpu_dtype": ("get_autocast_dtype", "cpu"),
    "set_autocast_cpu_dtype": ("set_autocast_dtype", "cpu"),
    "is_autocast_cpu_enabled": ("is_autocast_enabled", "cpu"),
    "set_autocast_cpu_enabled": ("set_autocast_enabled", "cpu"),
    "get_autocast_xla_dtype": ("get_autocast_dtype", "xla"),
    "set_autocast_xla_dtype": ("set_autocast_dtype", "xla"),
    "is_autocast_xla_enabled": ("is_autocast_enabled", "xla"),
    "set_autocast_xla_enabled": ("set_autocast_enabled", "xla"),
    "get_autocast_ipu_dtype": ("get_autocast_dtype", "ipu"),
    "set_autocast_ipu_dtype": ("set_autocast_dtype", "ipu"),
    "is_autocast_ipu_enabled": ("is_autocast_enabled", "ipu"),
    "set_autocast_ipu_enabled": ("set_autocast_enabled", "ipu"),
}
# Where the replacements are (torch.get_autocast_dtype and friends).
INTRODUCED_IN = (2, 4)

# A test that reads a version or probes for an attribute guards code written
# for several torch releases on purpose: calls under it are left alone.
_VERSION_TEST = re.compile(r"version|hasattr\(|getattr\(", re.I)
_NEW_API = re.compile(
    r"(?:get|set)_autocast_dtype\b|set_autocast_enabled\b|is_autocast_enabled\s*\(\s*\S"
)


@dataclass(frozen=True, eq=False)
class DeprecatedStateCall:
    """A call of a per-device autocast state function, and what replaces it."""

    call: cst.Call
    deprecated: str  # "get_autocast_gpu_dtype"
    replacement: str  # "get_autocast_dtype"
    device: str  # "cuda"
    # `torch.get_autocast_gpu_dtype` through a module name (rewritable in place),
    # or a name imported from torch (`from torch import get_autocast_gpu_dtype`).
    through_module: bool
    scope: Scope


class _CallFinder(GuardedVisitor):
    def __init__(self, module: cst.Module, imports: ImportMap) -> None:
        super().__init__()
        self.module = module
        self.imports = imports
        self.calls: list[DeprecatedStateCall] = []

    def opens_guard(self, node) -> bool:
        # `try: torch.get_autocast_dtype("cuda") except: torch.get_autocast_gpu_dtype()`
        # is a fallback; a try that does not spell the new API is just a try.
        if isinstance(node, cst.Try):
            return bool(_NEW_API.search(code_only(self.module.code_for_node(node))))
        return bool(_VERSION_TEST.search(self.module.code_for_node(node.test)))

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.imports.resolve(node.func, self.scopes[-1])
        if qualified is None or not qualified.startswith("torch."):
            return
        name = qualified[len("torch.") :]
        if name not in DEPRECATED_STATE_FUNCTIONS or self.guarded:
            return
        replacement, device = DEPRECATED_STATE_FUNCTIONS[name]
        self.calls.append(
            DeprecatedStateCall(
                call=node,
                deprecated=name,
                replacement=replacement,
                device=device,
                through_module=isinstance(node.func, cst.Attribute),
                scope=self.scopes[-1],
            )
        )


def find_deprecated_state_calls(
    module: cst.Module, imports: ImportMap
) -> list[DeprecatedStateCall]:
    finder = _CallFinder(module, imports)
    finder.walk(module)
    return finder.calls
