"""Fixes check themselves: every rule and the name checks run on a rewrite
before it is written, and a rewrite that fails is reported, not written."""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest

from amplint import engine, triggers
from amplint.catalog import load_catalog
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.engine import fix_text, self_check
from amplint.rules import RULES, load_rules
from amplint.rules.base import Rule
from amplint.selfcheck import name_problems, possibly_unbound_reads
from tests.helpers import ALL, FIXTURES, dedent, run_cli

CATALOG = load_catalog()
FIXABLE = sorted(code for code, doc in CATALOG.items() if doc.after is not None)
PINNED = sorted(
    (original, expected)
    for expected in FIXTURES.glob("*/expected/*.py")
    for original in [expected.parent.parent / expected.name]
    if original.exists()
)


# -- every rule's fix passes the self-check -------------------------------------
@pytest.mark.parametrize("code", FIXABLE)
def test_each_rules_documented_fix_passes_every_rule(code: str) -> None:
    doc = CATALOG[code]
    assert self_check(doc.before, doc.after, Settings()) == []
    result = fix_text(doc.before, ALL, Settings(), unsafe=doc.fix == "unsafe")
    assert result.text == doc.after
    assert not any("not fixed:" in d.message for d in result.remaining)


def test_every_rule_with_a_fix_has_a_documented_example() -> None:
    fixing_rules = {rule.code for rule in RULES} - {
        code for code, doc in CATALOG.items() if doc.fix == "none"
    }
    assert fixing_rules <= set(FIXABLE)


@pytest.mark.parametrize(
    "original, expected", PINNED, ids=[f"{o.parent.name}/{o.stem}" for o, _ in PINNED]
)
def test_each_pinned_fixture_rewrite_passes_every_rule(original: Path, expected: Path) -> None:
    assert self_check(original.read_text(), expected.read_text(), Settings()) == []


# -- a rewrite the self-check rejects is reported, not written ------------------
class _InsertLine(Rule):
    """A test rule: fires on each `marker()` call line and puts `code` after it."""

    def __init__(self, code: str, inserted: str, marker: str) -> None:
        self.code, self.inserted, self.marker = code, inserted, marker

    def may_fire(self, clues) -> bool:
        return self.marker in clues.text

    def check(self, facts, settings):
        for statement in facts.module.body:
            line = facts.module.code_for_node(statement)
            if line.startswith(self.marker) and self.inserted not in line:
                new = cst.parse_statement(f"{line.strip()}; {self.inserted}\n")
                fix = Fix(Applicability.SAFE, "test", (Edit(statement, lambda _, n=new: n),))
                yield Diagnostic(self.code, f"{self.marker} finding", facts.span(statement), fix)


@pytest.fixture
def rules(monkeypatch: pytest.MonkeyPatch):
    def install(*extra: Rule) -> None:
        def with_extra(codes) -> list[Rule]:
            wanted = set(codes)
            return [*load_rules(wanted), *(rule for rule in extra if rule.code in wanted)]

        monkeypatch.setattr(engine, "load_rules", with_extra)
        for test_rule in extra:  # the CLI's text test asks the triggers first
            real = triggers.TRIGGERS[test_rule.code]
            monkeypatch.setitem(
                triggers.TRIGGERS,
                test_rule.code,
                lambda clues, real=real, test_rule=test_rule: real(clues)
                or test_rule.may_fire(clues),
            )

    return install


SCRIPT = dedent("""
    import os
    good()
    bad()
    """)


def test_a_rewrite_with_an_undefined_name_is_not_written(rules) -> None:
    rules(_InsertLine("AMP201", "undefined_thing.step()", "bad"))
    result = fix_text(SCRIPT, ALL | {"AMP201"}, Settings())
    assert result.text == SCRIPT
    assert result.applied == []
    [finding] = result.remaining
    assert finding.fix is None
    assert (
        "not fixed: the rewrite would use `undefined_thing`, which is undefined" in finding.message
    )


def test_only_the_fix_to_blame_is_left_out(rules) -> None:
    rules(
        _InsertLine("AMP201", "os.sep", "good"),
        _InsertLine("AMP202", "undefined_thing.step()", "bad"),
    )
    result = fix_text(SCRIPT, ALL | {"AMP201", "AMP202"}, Settings())
    assert result.text == SCRIPT.replace("good()", "good(); os.sep")
    assert [d.code for d in result.applied] == ["AMP201"]
    assert [d.code for d in result.remaining] == ["AMP202"]
    assert "not fixed:" in result.remaining[0].message


def test_a_rewrite_that_leaves_a_new_finding_is_not_written(rules) -> None:
    # The inserted `torch.cuda.amp.GradScaler()` is an AMP201 finding of our own.
    script = "import torch\nmark()\n"
    rules(_InsertLine("AMP202", "s = torch.cuda.amp.GradScaler(); print(s)", "mark"))
    result = fix_text(script, frozenset({"AMP202"}), Settings())
    assert result.text == script
    [finding] = result.remaining
    assert "not fixed: the rewrite would leave AMP201 at line 2" in finding.message


def test_the_cli_writes_nothing_and_says_why(rules, tmp_path: Path) -> None:
    rules(_InsertLine("AMP201", "undefined_thing.step()", "bad"))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = run_cli("fix", "--apply", "--select", "AMP201", script)
    assert script.read_text() == SCRIPT
    assert "not fixed: the rewrite would use `undefined_thing`, which is undefined" in result.stdout


LAZY_OPTIMIZER = dedent("""
    import torch


    def train(model, loader, criterion, device):
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x.to(device)), y.to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if step == 0:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            optimizer.step()
            optimizer.zero_grad()
    """)


def test_unscale_is_never_emitted_where_the_optimizer_may_be_unbound() -> None:
    # `scaler.unscale_(optimizer)` before the clip would read `optimizer`
    # before the first iteration binds it: a NameError the original never had.
    result = fix_text(LAZY_OPTIMIZER, ALL, Settings())
    assert result.text == LAZY_OPTIMIZER
    [finding] = result.remaining
    assert finding.code == "AMP001"
    assert "not fixed: " in finding.message
    assert "would read `optimizer` where it may be unbound in `train`" in finding.message


# -- the oracles themselves -----------------------------------------------------
def _unbound(source: str) -> list[tuple[str, str]]:
    return list(possibly_unbound_reads(ast.parse(dedent(source))))


def test_paths_that_bind_on_every_branch_are_bound() -> None:
    assert _unbound("""
        def f(flag, items):
            if flag:
                a = 1
            else:
                a = 2
            try:
                b = g()
            except ValueError:
                b = None
            with open("x") as handle:
                c = handle
            for item in items:
                d = item
                print(d)
            if not flag:
                return
            return a, b, c
        """) == []


def test_paths_that_skip_a_binding_are_reported() -> None:
    assert _unbound("""
        def f(flag, items):
            if flag:
                a = 1
            for item in items:
                d = item
            try:
                b = g()
            except ValueError:
                pass
            print(a, d, b)
        """) == [("f", "a"), ("f", "d"), ("f", "b")]


def test_a_branch_that_leaves_does_not_count() -> None:
    assert _unbound("""
        def f(flag):
            if flag:
                a = 1
            else:
                raise SystemExit
            for i in range(3):
                if i:
                    b = 1
                else:
                    continue
                print(b)
            return a
        """) == []


def test_name_problems_counts_pyflakes_findings() -> None:
    problems = name_problems("import os\nx = y\n")
    assert problems["leave `os` imported but unused"] == 1
    assert problems["use `y`, which is undefined"] == 1


def test_an_undefined_name_bound_in_another_scope_says_where() -> None:
    # `args` is defined, in main(): "undefined" alone would read as false.
    text = dedent("""
        def train(model):
            return model(args.amp)


        def main():
            args = parse()
            train(lambda x: x)
        """)
    problems = name_problems(text)
    assert problems["use `args` in `train`, where it is not bound (`main` binds it)"] == 1
    assert problems["use `parse`, which is undefined"] == 1  # bound nowhere
    module_level = name_problems("class A:\n    def f(self):\n        x = 1\n\ny = x\n")
    assert module_level["use `x` at module level, where it is not bound (`f` binds it)"] == 1


def test_a_rewrite_re_reads_only_the_functions_it_changed(monkeypatch) -> None:
    from amplint import selfcheck

    original = dedent("""
        def f(flag):
            if flag:
                a = 1
            return a

        def g(items):
            for item in items:
                b = item
            return b
        """)
    rewritten = original.replace("a = 1", "a = 2\n        c = 3")
    read: list[str] = []
    function_reads = selfcheck._function_reads

    def counted(node):
        read.append(node.name)
        return function_reads(node)

    monkeypatch.setattr(selfcheck, "_function_reads", counted)
    memo: selfcheck.UnboundMemo = {}
    before = name_problems(original, memo)
    after = name_problems(rewritten, memo)
    assert read == ["f", "g", "f"]  # g's text is the original's: its reads are known
    assert before == name_problems(original)
    assert after == name_problems(rewritten)
    assert after["read `b` where it may be unbound in `g`"] == 1
