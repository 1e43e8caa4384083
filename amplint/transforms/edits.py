"""Apply the node edits of many fixes to one tree in a single pass, and collect
the edits of one fix that touches some nodes more than once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import libcst as cst

from amplint.analysis.visitor import children
from amplint.diagnostics import Edit
from amplint.transforms.statements import preceded_by


class _TargetAncestors(cst.CSTVisitor):
    """Ids of every node that has an edit target strictly below it, by libcst's
    own walk: for targets the fast walk does not reach."""

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


def ancestor_ids(module: cst.Module, target_ids: set[int]) -> set[int]:
    """Ids of every node of `module` that has one of `target_ids` strictly
    below it: the nodes a transformer must enter to reach the targets.

    Found by the analysis walk, which skips punctuation and whitespace and
    costs a fifth of libcst's visit; a target that walk does not reach (a
    comment line, a comma) sends the search to libcst's visitor."""
    ancestors: set[int] = set()
    reached: set[int] = set()
    path: list[int] = []

    def search(node: cst.CSTNode) -> None:
        if id(node) in target_ids:
            ancestors.update(path)
            reached.add(id(node))
        path.append(id(node))
        for child in children(node):
            search(child)
        path.pop()

    search(module)
    if reached == target_ids:
        return ancestors
    everywhere = _TargetAncestors(target_ids)
    module.visit(everywhere)
    return everywhere.ancestor_ids


class _EditApplier(cst.CSTTransformer):
    def __init__(self, edits: Iterable[Edit], ancestor_ids: set[int]) -> None:
        self.rewrites = {id(edit.target): edit.rewrite for edit in edits}
        self.ancestor_ids = ancestor_ids
        self._elifs: set[int] = set()  # ids of the `if`s that are another's `elif`

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.If) and isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))
        # Subtrees without targets are not rebuilt: a rewrite whose subtree
        # holds no other edit receives the very node the rule analysed, so it
        # may look nodes up by identity.
        return id(node) in self.ancestor_ids

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        rewrite = self.rewrites.get(id(original_node))
        if rewrite is None:
            return updated_node
        # Children are rewritten first (leave runs bottom-up), so the rewrite
        # sees them already changed.
        rewritten = rewrite(updated_node)
        if id(original_node) in self._elifs:
            return _as_elif_branch(original_node, rewritten)
        return rewritten


def _as_elif_branch(elif_: cst.If, rewritten):
    """What a rewrite of the `if` statement `elif_` means where it is an
    `elif`.  Statements in its place say its test is settled and they run when
    it is reached: there, an `else:` holding them (the branches after it can no
    longer run).  An `if` stays an `elif`; a removal ends the chain."""
    if isinstance(rewritten, (cst.If, cst.RemovalSentinel)):
        return rewritten
    statements = list(
        rewritten.nodes if isinstance(rewritten, cst.FlattenSentinel) else [rewritten]
    )
    first = statements[0]
    # `in_place_of` gave the `elif`'s comments to the first statement: they
    # belong before the `else:` again.
    lines = list(first.leading_lines)
    own = list(elif_.leading_lines)
    if lines[: len(own)] == own:
        statements[0] = first.with_changes(leading_lines=lines[len(own) :])
    return cst.Else(body=elif_.body.with_changes(body=statements), leading_lines=own)


def apply_edits(module: cst.Module, edits: Iterable[Edit]) -> cst.Module:
    edits = list(edits)
    if not edits:
        return module
    ancestors = ancestor_ids(module, {id(edit.target) for edit in edits})
    return module.visit(_EditApplier(edits, ancestors))


@dataclass
class EditBook:
    """Rewrites and insertions collected per target node, handed out as one
    Edit per node: `apply_edits` keeps one rewrite per node, so a fix that
    touches a statement twice (removes it, puts a line before it) composes
    the two here instead of losing one."""

    nodes: dict[int, cst.CSTNode] = field(default_factory=dict)
    rewrites: dict[int, list[Callable]] = field(default_factory=dict)
    before: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)

    def rewrite(self, node: cst.CSTNode, rewrite: Callable) -> None:
        self.nodes[id(node)] = node
        self.rewrites.setdefault(id(node), []).append(rewrite)

    def insert_before(self, statement: cst.BaseStatement, new: Sequence[cst.BaseStatement]):
        self.nodes[id(statement)] = statement
        self.before.setdefault(id(statement), []).extend(new)

    def edits(self) -> list[Edit]:
        return [Edit(node, self._composed(key)) for key, node in self.nodes.items()]

    def _composed(self, key: int) -> Callable:
        rewrites, before = self.rewrites.get(key, []), self.before.get(key, [])

        def rewrite(node):
            for one in rewrites:
                node = one(node)
            if not before:
                return node
            if isinstance(node, cst.RemovalSentinel):
                return cst.FlattenSentinel(before)
            if isinstance(node, cst.FlattenSentinel):
                nodes = list(node.nodes)
                return cst.FlattenSentinel([*preceded_by(before, nodes[0]).nodes, *nodes[1:]])
            return preceded_by(before, node)

        return rewrite
