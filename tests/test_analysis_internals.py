"""The fast walker and position table agree with libcst's own, node for node."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.analysis.positions import NodePositions
from amplint.analysis.visitor import _TOKEN_TYPES, Visitor, children
from amplint.transforms.edits import _TargetAncestors, ancestor_ids
from tests.helpers import FIXTURES, REPO, dedent

# Every statement and expression form whose fields are not in source order,
# plus the newer syntax: decorators, keyword arguments, conditional
# expressions, except handlers, all parameter kinds, match, type aliases.
SYNTAX_TOUR = dedent('''
    import os, sys as system
    from .pkg import (a, b as c)
    from x import *

    @decorator(arg=1)
    @other
    async def f[T](a, /, b: int = 1, *args, c, d=2, **kwargs) -> "T":
        """Doc."""
        global g
        x = a if b else c
        y: list[int] = [i for i in range(3) if i async for j in k]
        z = {k: v for k, v in items}; w = {*s}
        del x[1:2:3], y
        try:
            pass
        except (ValueError, TypeError) as error:
            raise RuntimeError("x") from error
        else:
            pass
        finally:
            pass
        async with lock as held, other():
            await thing
        while not done:
            yield (lambda q, *, r=1: q + r)(1)
        match command:
            case [Point(x=0, y=yy), *rest] if yy > 0:
                pass
            case {"k": v, **others} | None:
                pass
            case str() as s:
                pass
        return f"{x!r:>{width}} {y=}"

    class C[T](Base, metaclass=Meta):
        attr: int
        def method(self): return self.attr; pass

    type Alias[K] = dict[K, int]
    try:
        pass
    except* OSError:
        pass
    assert x, "message"
    print(*a, **b, sep="")
    v = -x ** 2 // 3 @ m
    v += 1
    ''')


def _sources() -> list[str]:
    texts = [SYNTAX_TOUR]
    texts += [path.read_text() for path in sorted(FIXTURES.rglob("*.py"))]
    texts += [path.read_text() for path in sorted((REPO / "amplint").rglob("*.py"))]
    return texts


def _all_nodes(module: cst.Module):
    stack = [module]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


@pytest.mark.parametrize("text", _sources(), ids=lambda text: text[:30])
def test_children_are_libcsts_in_source_order_without_punctuation(text):
    module = cst.parse_module(text)
    for node in _all_nodes(module):
        expected = [child for child in node.children if type(child) not in _TOKEN_TYPES]
        assert [id(child) for child in children(node)] == [id(child) for child in expected], type(
            node
        ).__name__


def test_walk_follows_libcsts_visit_protocol():
    module = cst.parse_module("@d\ndef f(a, k=1):\n    return g(x, key=y)\n")
    events: list[str] = []

    class Recorder(Visitor):
        def visit_FunctionDef(self, node):
            events.append("def")

        def visit_FunctionDef_body(self, node):
            events.append("body>")

        def leave_FunctionDef_body(self, node):
            events.append("<body")

        def visit_Name(self, node):
            events.append(node.value)

        def visit_Call(self, node):
            events.append("call")
            return False  # children skipped, leave still runs

        def leave_Call(self, node):
            events.append("/call")

    Recorder().walk(module)
    assert events == ["def", "d", "f", "a", "k", "body>", "call", "/call", "<body"]


@pytest.mark.parametrize("text", _sources(), ids=lambda text: text[:30])
def test_positions_are_position_providers(text):
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    positions = NodePositions(module)
    for node, code_range in expected.items():
        start, end = positions.range(node)
        assert (start.line, start.column, end.line, end.column) == (
            code_range.start.line,
            code_range.start.column,
            code_range.end.line,
            code_range.end.column,
        ), type(node).__name__


def test_edit_ancestors_are_libcsts_for_any_target():
    # `apply_edits` rebuilds only the nodes that hold a target; the fast walk
    # that finds them must agree with libcst's own visit, and a target it
    # skips (punctuation, whitespace) must send it to that visit.
    module = cst.parse_module(SYNTAX_TOUR)
    nodes = list(_all_nodes(module))
    real = [node for node in nodes if type(node) not in _TOKEN_TYPES]
    tokens = [node for node in nodes if type(node) in _TOKEN_TYPES]
    assert real[1:] and tokens
    for targets in (real[1::7], real[-3:], [tokens[len(tokens) // 2]], [real[5], tokens[0]]):
        target_ids = {id(node) for node in targets}
        by_libcst = _TargetAncestors(target_ids)
        module.visit(by_libcst)
        assert by_libcst.ancestor_ids
        assert ancestor_ids(module, target_ids) == by_libcst.ancestor_ids
