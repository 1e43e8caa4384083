"""Manual AMP that works against an FSDP mixed-precision policy in the same module.

`MixedPrecision(param_dtype=...)` (FullyShardedDataParallel) and
`MixedPrecisionPolicy(param_dtype=...)` (`fully_shard`) already run the forward
pass in that dtype.  Autocast on top in the same dtype is redundant but
harmless (it even keeps reductions in float32), and llama-recipes-style code
does it on purpose: left alone.  What is wrong:

- autocast in the other 16-bit dtype: each matmul recasts the policy's
  parameters, bfloat16 to float16 (whose range is 65504) or float16 to bfloat16
  (losing three bits of mantissa), and the gradients come back in a dtype the
  policy did not choose;
- a GradScaler under a bfloat16 policy with no float16 autocast: bfloat16 has
  float32's range and needs no loss scaling, so the scaler only adds an inf
  check and a host sync per step (AMP112's question, for FSDP).

Only dtypes spelled as literals count; a dtype held in a variable is a run-time
choice.  A scaler whose `enabled=` is an expression is a run-time choice too.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.autocast import ANY_AUTOCAST, disabled, keyword_value
from amplint.analysis.fsdp_scaler import ANY_GRAD_SCALER
from amplint.analysis.imports import ImportMap
from amplint.analysis.regions import autocast_dtype, literal_dtype
from amplint.analysis.scopes import ScopedVisitor

POLICIES = {
    "torch.distributed.fsdp.MixedPrecision",
    "torch.distributed.fsdp.api.MixedPrecision",
    "torch.distributed.fsdp.fully_sharded_data_parallel.MixedPrecision",
    "torch.distributed.fsdp.MixedPrecisionPolicy",
    "torch.distributed._composable.fsdp.MixedPrecisionPolicy",
}


@dataclass(frozen=True, eq=False)
class PolicyConflict:
    """Autocast or a GradScaler working against an FSDP MixedPrecision policy."""

    policy: cst.Call  # the MixedPrecision(...) call
    policy_dtype: str  # "float16" or "bfloat16"
    node: cst.Call  # the autocast region or the scaler working against it
    autocast_dtype: str | None  # the region's dtype; None for a scaler


class _Finder(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.policies: list[tuple[cst.Call, str]] = []
        self.regions: list[tuple[cst.Call, str]] = []
        self.scalers: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        called = self.imports.resolve(node.func, self.scope)
        if called in POLICIES:
            param_dtype = keyword_value(node, "param_dtype")
            dtype = (
                literal_dtype(param_dtype, self.imports, self.scope)
                if param_dtype is not None
                else None
            )
            if dtype is not None:
                self.policies.append((node, dtype))
        elif called in ANY_AUTOCAST and not disabled(node):
            dtype = autocast_dtype(node, called, self.imports, self.scope)
            if dtype is not None:
                self.regions.append((node, dtype))
        elif called in ANY_GRAD_SCALER and keyword_value(node, "enabled") is None:
            self.scalers.append(node)


def find_policy_conflicts(module: cst.Module, imports: ImportMap) -> list[PolicyConflict]:
    finder = _Finder(imports)
    finder.walk(module)
    if not finder.policies:
        return []
    # One policy dtype for the module; two policies that disagree are a
    # choice between them (a flag), not a conflict to report.
    dtypes = {dtype for _, dtype in finder.policies}
    if len(dtypes) != 1:
        return []
    policy, dtype = finder.policies[0]
    found = [
        PolicyConflict(policy, dtype, region, region_dtype)
        for region, region_dtype in finder.regions
        if region_dtype != dtype
    ]
    if dtype == "bfloat16" and not any(d == "float16" for _, d in finder.regions):
        found += [PolicyConflict(policy, dtype, scaler, None) for scaler in finder.scalers]
    return found
