"""Apply the node edits of many fixes to one tree in a single pass."""

from __future__ import annotations

from typing import Iterable

import libcst as cst

from amplint.diagnostics import Edit


class _EditApplier(cst.CSTTransformer):
    def __init__(self, edits: Iterable[Edit]) -> None:
        self.rewrites = {id(edit.target): edit.rewrite for edit in edits}

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        rewrite = self.rewrites.get(id(original_node))
        # Children are rewritten first (leave runs bottom-up), so the rewrite
        # sees them already changed.
        return rewrite(updated_node) if rewrite is not None else updated_node


def apply_edits(module: cst.Module, edits: Iterable[Edit]) -> cst.Module:
    applier = _EditApplier(edits)
    if not applier.rewrites:
        return module
    return module.visit(applier)
