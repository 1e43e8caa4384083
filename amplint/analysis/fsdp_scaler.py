"""GradScalers a module makes, for the question whether FSDP needs them sharded.

FullyShardedDataParallel keeps each parameter's gradient as a flat shard per
rank: a plain GradScaler looks for infs in its rank's shard only, so ranks can
disagree on skipping a step.  ShardedGradScaler all-reduces that answer.  A
plain scaler chosen against a sharded one (`ShardedGradScaler(...) if
dist.is_initialized() else torch.amp.GradScaler(...)`, as AMP001 writes it for
a program that may run without a process group) is already the right choice.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.bf16_scaler import GRAD_SCALERS
from amplint.analysis.imports import ImportMap
from amplint.analysis.guards import GuardedVisitor


class _PlainScalers(GuardedVisitor):
    def __init__(self, module: cst.Module, imports: ImportMap) -> None:
        super().__init__()
        self.module = module
        self.imports = imports
        self.calls: list[cst.Call] = []

    def opens_guard(self, node) -> bool:
        # An if that also makes a ShardedGradScaler chooses between the two.
        return not isinstance(node, cst.Try) and "ShardedGradScaler" in (
            self.module.code_for_node(node)
        )

    def visit_Call(self, node: cst.Call) -> None:
        if self.guarded:
            return
        if self.imports.resolve(node.func, self.scopes[-1]) in GRAD_SCALERS:
            self.calls.append(node)


def find_plain_grad_scalers(module: cst.Module, imports: ImportMap) -> list[cst.Call]:
    """Every call making a plain GradScaler, but for one chosen against a
    ShardedGradScaler."""
    finder = _PlainScalers(module, imports)
    finder.walk(module)
    return finder.calls
