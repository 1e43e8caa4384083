"""GradScalers a module makes, for the question whether FSDP needs them sharded.

FullyShardedDataParallel keeps each parameter's gradient as a flat shard per
rank: a plain GradScaler looks for infs in its rank's shard only, so ranks can
disagree on skipping a step.  ShardedGradScaler all-reduces that answer.  A
plain scaler chosen against a sharded one (`ShardedGradScaler(...) if
dist.is_initialized() else torch.amp.GradScaler(...)`, as AMP001 writes it for
a program that may run without a process group) is already the right choice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis.bf16_scaler import GRAD_SCALERS
from amplint.analysis.guards import GuardedVisitor
from amplint.analysis.imports import ImportMap
from amplint.analysis.scopes import Scope

INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
SHARDED_SCALER_MODULE = "torch.distributed.fsdp.sharded_grad_scaler"
SHARDED_GRAD_SCALER = f"{SHARDED_SCALER_MODULE}.ShardedGradScaler"
# Every class that makes a loss scaler, FSDP's included.
ANY_GRAD_SCALER = frozenset({*GRAD_SCALERS, SHARDED_GRAD_SCALER})


@dataclass(frozen=True)
class PlainScaler:
    """A plain GradScaler made where FSDP needs a ShardedGradScaler."""

    call: cst.Call
    scaler: str  # the class it makes, as imported: "torch.cuda.amp.GradScaler"
    scope: Scope
    # Whether the call stands where a conditional expression needs no
    # parentheses: an assigned, returned or passed value, a tuple element.
    bare: bool
    # Whether no process group can exist yet where it is made: at import time
    # with no `init_process_group` above it, or before one in its function.
    before_process_group: bool


# The nodes whose `value` a conditional expression can take without parentheses.
_ValueSlot = Union[cst.Assign, cst.AnnAssign, cst.Return, cst.Arg, cst.BaseElement, cst.DictElement]


class _PlainScalers(GuardedVisitor):
    def __init__(self, module: cst.Module, imports: ImportMap) -> None:
        super().__init__()
        self.module = module
        self.imports = imports
        self.found: list[cst.Call] = []
        self.scope_of: dict[int, Scope] = {}
        self.order: dict[int, int] = {}  # id(call) -> how many calls came before
        self.process_groups: list[tuple[Scope, int]] = []  # (scope, order)
        self.bare_values: set[int] = set()
        # ShardedGradScaler under any name the module imports it as.
        alias = imports.name_for(SHARDED_GRAD_SCALER, module)
        names = {"ShardedGradScaler", alias} - {None}
        self.sharded_spelled = re.compile(rf"\b(?:{'|'.join(sorted(names))})\b")

    def opens_guard(self, node) -> bool:
        # An if that also makes a ShardedGradScaler chooses between the two.
        return not isinstance(node, cst.Try) and (
            self.sharded_spelled.search(code_only(self.module.code_for_node(node))) is not None
        )

    def _slot(self, node: _ValueSlot) -> None:
        if node.value is not None:
            self.bare_values.add(id(node.value))

    visit_Assign = visit_AnnAssign = visit_Return = _slot
    visit_Arg = visit_Element = visit_DictElement = _slot

    def visit_Call(self, node: cst.Call) -> None:
        self.order[id(node)] = len(self.order)
        resolved = self.imports.resolve(node.func, self.scopes[-1])
        if resolved == INIT_PROCESS_GROUP:
            self.process_groups.append((self.scopes[-1], self.order[id(node)]))
        elif resolved in GRAD_SCALERS and not self.guarded:
            self.found.append(node)
            self.scope_of[id(node)] = self.scopes[-1]

    def before_process_group(self, call: cst.Call) -> bool:
        scope, made = self.scope_of[id(call)], self.order[id(call)]
        if isinstance(scope, cst.FunctionDef):
            return any(s is scope and order > made for s, order in self.process_groups)
        # Made as the module (or a class body) is run: only a process group
        # started above it at the same level can exist by then.
        return not any(
            not isinstance(s, cst.FunctionDef) and order < made for s, order in self.process_groups
        )


def find_plain_grad_scalers(module: cst.Module, imports: ImportMap) -> list[PlainScaler]:
    """Every call making a plain GradScaler, but for those chosen against a
    ShardedGradScaler."""
    finder = _PlainScalers(module, imports)
    finder.walk(module)
    # A function that makes a ShardedGradScaler too chooses between the two,
    # by an early return (`if distributed_type == FSDP: return
    # ShardedGradScaler(**kwargs)`, Accelerate's get_grad_scaler) as well as by an if.
    chooses = {
        id(scope)
        for scope in finder.scope_of.values()
        if isinstance(scope, cst.FunctionDef)
        and finder.sharded_spelled.search(code_only(module.code_for_node(scope)))
    }
    return [
        PlainScaler(
            call,
            imports.resolve(call.func, finder.scope_of[id(call)]) or "",
            finder.scope_of[id(call)],
            id(call) in finder.bare_values,
            finder.before_process_group(call),
        )
        for call in finder.found
        if id(finder.scope_of[id(call)]) not in chooses
    ]
