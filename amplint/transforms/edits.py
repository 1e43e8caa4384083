"""Apply the node edits of many fixes to one tree in a single pass."""

from __future__ import annotations

from typing import Iterable

import libcst as cst

from amplint.diagnostics import Edit


class _TargetAncestors(cst.CSTVisitor):
    """Ids of every node that has an edit target strictly below it."""

    def __init__(self, target_ids: set[int]) -> None:
        self.target_ids = target_ids
        self.ancestor_ids: set[int] = set()
        self._path: list[int] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.target_ids:
            self.ancestor_ids.update(self._path)
        self._path.append(id(node))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self._path.pop()


class _EditApplier(cst.CSTTransformer):
    def __init__(self, edits: Iterable[Edit], ancestor_ids: set[int]) -> None:
        self.rewrites = {id(edit.target): edit.rewrite for edit in edits}
        self.ancestor_ids = ancestor_ids

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Subtrees without targets are not rebuilt: a rewrite whose subtree
        # holds no other edit receives the very node the rule analysed, so it
        # may look nodes up by identity.
        return id(node) in self.ancestor_ids

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        rewrite = self.rewrites.get(id(original_node))
        # Children are rewritten first (leave runs bottom-up), so the rewrite
        # sees them already changed.
        return rewrite(updated_node) if rewrite is not None else updated_node


def apply_edits(module: cst.Module, edits: Iterable[Edit]) -> cst.Module:
    edits = list(edits)
    if not edits:
        return module
    ancestors = _TargetAncestors({id(edit.target) for edit in edits})
    module.visit(ancestors)
    return module.visit(_EditApplier(edits, ancestors.ancestor_ids))
