"""A rewrite's parse from the statements that changed (transforms/reparse.py)
must be the parse of its code: checked on every fixture's fix rounds, and on
the shapes that put a changed statement's lines at the edge of its block."""

from __future__ import annotations


import libcst as cst
import pytest

from amplint import engine
from amplint.config import Settings
from amplint.transforms.edits import apply_edits
from amplint.transforms import reparse
from amplint.transforms.reparse import reparsed
from amplint.diagnostics import Edit
from tests.helpers import ALL, FIXTURES, dedent


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, cst.Module, cst.Module]]:
    """Every (code, tree before, edited tree) the fix rounds hand the analyses."""
    seen: list[tuple[str, cst.Module, cst.Module]] = []
    expect = engine._Analyses.expect

    def recorded(self, text, before, edited) -> None:
        seen.append((text, before, edited))
        expect(self, text, before, edited)

    monkeypatch.setattr(engine._Analyses, "expect", recorded)
    return seen


def _assert_parse_of_its_code(code: str, before: cst.Module, edited: cst.Module) -> bool:
    module = reparsed(before, edited, code)
    if module is None:
        return False
    assert module.code == code
    assert module.deep_equals(cst.parse_module(code))
    return True


FIXTURE_SCRIPTS = sorted(
    path for path in FIXTURES.rglob("*.py") if "expected" not in path.parts and path.stat().st_size
)


@pytest.mark.slow
def test_every_fixture_rewrite_reparsed_is_its_parse(
    rounds: list[tuple[str, cst.Module, cst.Module]],
) -> None:
    for path in FIXTURE_SCRIPTS:
        try:
            engine.fix_text(path.read_text(), ALL, Settings(), unsafe=True)
        except (engine.FixError, cst.ParserSyntaxError):
            continue
    assert len(rounds) > 50
    from_statements = [_assert_parse_of_its_code(*one) for one in rounds]
    # Most rewrites change a few statements of many: parsed again alone.
    assert sum(from_statements) > len(rounds) / 2


def _edited(code: str, rewrite) -> tuple[str, cst.Module, cst.Module]:
    """`code` with `rewrite(module)` -> [(target, new node)] applied."""
    module = cst.parse_module(dedent(code))
    edits = [Edit(target, lambda _node, new=new: new) for target, new in rewrite(module)]
    edited = apply_edits(module, edits)
    return edited.code, module, edited


def _method(module: cst.Module, index: int) -> cst.FunctionDef:
    return module.body[0].body.body[index]


def _renamed(function: cst.FunctionDef) -> cst.FunctionDef:
    """`function` under a new name: its own line changed, so it is parsed again
    whole, the lines above it with it."""
    return function.with_changes(name=cst.Name(f"{function.name.value}_2"))


@pytest.mark.parametrize(
    "code, rewrite",
    [
        # Blank and comment lines at the class's own indentation, and at
        # column 0 inside it, before the changed method and after it.
        (
            """
            class Trainer:
                def a(self):
                    return 1

                # the step
                @staticmethod
            # at column 0
                @property
                def b(self):
                    return 1
            # at column 0 too

                def c(self):
                    return 1
            """,
            lambda m: [
                (_method(m, 1), _renamed(_method(m, 1))),
                (_method(m, 2), _renamed(_method(m, 2))),
            ],
        ),
        # An `elif` whose body changed, and an `except` whose body changed.
        (
            """
            def f(flag):
                if flag:
                    x = 1
                elif other:
                    x = 2

                else:
                    x = 3
                try:
                    x = 4
                except ValueError:
                    x = 5
                return x
            """,
            lambda m: [
                (m.body[0].body.body[0].orelse.body.body[0], cst.parse_statement("x = 22\n")),
                (m.body[0].body.body[1].handlers[0].body.body[0], cst.parse_statement("x = 55\n")),
            ],
        ),
        # A statement replaced by a new compound one, a first statement added.
        (
            """
            import torch


            def step(model, x):
                loss = model(x)
                return loss
            """,
            lambda m: [
                (
                    m.body[1].body.body[0],
                    cst.parse_statement('with torch.autocast("cuda"):\n    loss = model(x)\n'),
                ),
                (m.body[0], cst.FlattenSentinel([cst.parse_statement("import os\n"), m.body[0]])),
            ],
        ),
    ],
)
def test_a_changed_statement_reparsed_is_its_parse(
    code: str, rewrite, monkeypatch: pytest.MonkeyPatch
) -> None:
    # These modules are small: changed statements are parsed alone whatever
    # share of the module they are.
    monkeypatch.setattr(reparse, "_MOST", 1.0)
    assert _assert_parse_of_its_code(*_edited(code, rewrite))
