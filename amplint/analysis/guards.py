"""A visitor that knows when it is inside a guarded `if`, conditional
expression or `try`: a version fallback, a choice between two scalers.

Each If/IfExp/Try is pushed as it is entered; the visitor is inside a guarded
region while any of them opens one (`opens_guard`, asked only when needed).
"""

from __future__ import annotations

from typing import Union

import libcst as cst

from amplint.analysis.scopes import ScopedVisitor

Guard = Union[cst.If, cst.IfExp, cst.Try]


class GuardedVisitor(ScopedVisitor):
    def __init__(self) -> None:
        super().__init__()
        # The guards around the code being visited, outermost first: each
        # node, how deep the scopes were at it, and whether it opens a guarded
        # region once asked (None before).  Asked only when a subclass reads
        # `guarded`, which it does at a use it found: deciding means turning
        # the test (or the whole `try`) back into text, and most `if`s
        # surround nothing that asks.
        self._guards: list[list] = []

    def opens_guard(self, node: Guard) -> bool:
        """Whether `node` opens a guarded region; subclasses say which."""
        return False

    @property
    def guarded(self) -> bool:
        for entry in self._guards:
            if entry[2] is None:
                node, depth = entry[0], entry[1]
                visiting, self.scopes = self.scopes, self.scopes[:depth]
                try:  # decided in the scope the guard stands in, as when entered
                    entry[2] = self.opens_guard(node)
                finally:
                    self.scopes = visiting
            if entry[2]:
                return True
        return False

    def _enter(self, node: Guard) -> None:
        self._guards.append([node, len(self.scopes), None])

    def _leave(self) -> None:
        self._guards.pop()

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
