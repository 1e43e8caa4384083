"""A visitor that knows when it is inside a guarded `if`, conditional
expression or `try`: a version fallback, a choice between two scalers.

Each If/IfExp/Try pushes whether it opens a guarded region (`opens_guard`);
the visitor is inside one while any entry on the stack says so.
"""

from __future__ import annotations

from typing import Union

import libcst as cst

from amplint.analysis.scopes import ScopedVisitor

Guard = Union[cst.If, cst.IfExp, cst.Try]


class GuardedVisitor(ScopedVisitor):
    def __init__(self) -> None:
        super().__init__()
        self._guards: list[bool] = []
        self._guarded_depth = 0

    def opens_guard(self, node: Guard) -> bool:
        """Whether `node` opens a guarded region; subclasses say which."""
        return False

    @property
    def guarded(self) -> bool:
        return self._guarded_depth > 0

    def _enter(self, node: Guard) -> None:
        opens = self.opens_guard(node)
        self._guards.append(opens)
        self._guarded_depth += opens

    def _leave(self) -> None:
        self._guarded_depth -= self._guards.pop()

    def visit_If(self, node: cst.If) -> None:
        self._enter(node)

    def leave_If(self, original_node: cst.If) -> None:
        self._leave()

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._enter(node)

    def leave_IfExp(self, original_node: cst.IfExp) -> None:
        self._leave()

    def visit_Try(self, node: cst.Try) -> None:
        self._enter(node)

    def leave_Try(self, original_node: cst.Try) -> None:
        self._leave()
