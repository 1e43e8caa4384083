"""A visitor base that knows which scope (module, function, class) it is in."""

from __future__ import annotations

from typing import Union

import libcst as cst

from amplint.analysis.visitor import Visitor

Scope = Union[cst.Module, cst.FunctionDef, cst.ClassDef]


class ScopedVisitor(Visitor):
    """Keeps `self.scopes`, innermost last; subclasses hook `enter_scope`."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    def enter_scope(self, scope: Scope) -> None:
        """Called as each scope is entered, after it is pushed."""

    def leave_scope(self, scope: Scope) -> None:
        """Called as each scope is left, before it is popped."""

    def _push(self, scope: Scope) -> None:
        self.scopes.append(scope)
        self.enter_scope(scope)

    def visit_Module(self, node: cst.Module) -> None:
        self._push(node)

    def _pop(self) -> None:
        self.leave_scope(self.scopes[-1])
        self.scopes.pop()

    def leave_Module(self, original_node: cst.Module) -> None:
        self._pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._push(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._push(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._pop()
