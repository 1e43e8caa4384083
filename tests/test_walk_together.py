"""`walk_together` walks a module once for several visitors, each hooked as its
own walk would hook it: the analyses of a module share one traversal."""

from __future__ import annotations

import libcst as cst

from amplint.analysis.visitor import Visitor, walk_together
from tests.helpers import FIXTURES


class _Recorder(Visitor):
    """Records every hook it is given; skips the children of `prune`."""

    prune: tuple[type, ...] = ()

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    def visit_Module(self, node):
        self.events.append(("visit", "Module", id(node)))

    def visit_FunctionDef(self, node):
        self.events.append(("visit", "FunctionDef", id(node)))
        return not isinstance(node, self.prune)

    def leave_FunctionDef(self, node):
        self.events.append(("leave", "FunctionDef", id(node)))

    def visit_FunctionDef_body(self, node):
        self.events.append(("visit body", "FunctionDef", id(node)))

    def leave_FunctionDef_body(self, node):
        self.events.append(("leave body", "FunctionDef", id(node)))

    def visit_Call(self, node):
        self.events.append(("visit", "Call", id(node)))
        return not isinstance(node, self.prune)

    def visit_Name(self, node):
        self.events.append(("visit", "Name", id(node)))

    def leave_Name(self, node):
        self.events.append(("leave", "Name", id(node)))


class _SkipsFunctions(_Recorder):
    prune = (cst.FunctionDef,)


class _SkipsCalls(_Recorder):
    prune = (cst.Call,)


def test_each_visitor_sees_what_its_own_walk_shows_it() -> None:
    files = sorted(FIXTURES.rglob("*.py"))
    assert len(files) > 100
    pruned = 0
    for path in files:
        module = cst.parse_module(path.read_text(encoding="utf-8"))
        alone = [kind() for kind in (_Recorder, _SkipsFunctions, _SkipsCalls)]
        for visitor in alone:
            visitor.walk(module)
        together = [kind() for kind in (_Recorder, _SkipsFunctions, _SkipsCalls)]
        walk_together(module, together)
        assert [v.events for v in together] == [v.events for v in alone], path
        pruned += len(alone[0].events) > len(alone[1].events)
    assert pruned > 100  # the visitors that skip subtrees did skip some
