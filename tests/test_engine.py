"""The fix loop refuses to produce broken or unstable code, and reports why."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from amplint import engine, rules, triggers
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Span
from amplint.engine import FixError, fix_text
from amplint.prefilter import SourceClues
from amplint.rules.base import Rule
from tests.helpers import ALL, FIXTURES, run_cli

SOURCE = "import torch\nx = torch.ones(2)\n"


class _RewriteFirstStatement(Rule):
    """A test rule that always fires on the first statement and rewrites it."""

    code = "AMP201"

    def may_fire(self, clues) -> bool:
        return "torch" in clues.text

    def __init__(self, rewrite) -> None:
        self.rewrite = rewrite

    def check(self, facts, settings):
        first = facts.module.body[0]
        fix = Fix(Applicability.SAFE, "test", (Edit(first, self.rewrite),))
        yield Diagnostic(self.code, "test finding", Span(1, 1, 1, 2), fix)


def _unparsable(node: cst.CSTNode) -> cst.CSTNode:
    """A statement that renders as `1 2`: libcst validates node text on
    construction, so the bad value is set afterwards, as a buggy fix might."""
    number = cst.Integer("1")
    object.__setattr__(number, "value", "1 2")
    return cst.SimpleStatementLine([cst.Expr(number)])


@pytest.fixture
def rule(monkeypatch: pytest.MonkeyPatch):
    def install(rewrite) -> None:
        test_rule = _RewriteFirstStatement(rewrite)
        monkeypatch.setattr(
            engine, "load_rules", lambda codes: [test_rule] if test_rule.code in set(codes) else []
        )
        monkeypatch.setitem(triggers.TRIGGERS, test_rule.code, test_rule.may_fire)

    return install


def test_a_fix_that_breaks_the_code_is_refused(rule) -> None:
    rule(_unparsable)
    with pytest.raises(FixError, match="does not parse"):
        fix_text(SOURCE, frozenset({"AMP201"}), Settings())


def test_a_fix_that_never_settles_is_refused(rule) -> None:
    counter = iter(range(1000))
    rule(lambda node: cst.parse_statement(f"import torch  # round {next(counter)}\n"))
    with pytest.raises(FixError, match="did not settle"):
        fix_text(SOURCE, frozenset({"AMP201"}), Settings())


def test_a_fix_that_changes_nothing_is_refused(rule) -> None:
    rule(lambda node: node)
    with pytest.raises(FixError, match="changed nothing"):
        fix_text(SOURCE, frozenset({"AMP201"}), Settings())


def test_the_cli_reports_the_file_and_writes_nothing(rule, tmp_path: Path) -> None:
    rule(_unparsable)
    (tmp_path / "a.py").write_text(SOURCE)
    (tmp_path / "b.py").write_text(SOURCE)
    result = run_cli("fix", "--apply", tmp_path)
    assert result.exit_code == 2
    for name in ("a.py", "b.py"):  # every file is reported, and none is written
        assert f"{tmp_path / name}: not fixed, file left unchanged" in result.stderr
        assert (tmp_path / name).read_text() == SOURCE


def test_files_without_trigger_text_are_never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str):
        raise AssertionError("parsed a file no rule can fire on")

    monkeypatch.setattr(engine.cst, "parse_module", refuse)
    assert engine.lint_text("x = 1\n", frozenset({"AMP201", "AMP900"}), Settings()) == []


def test_a_fix_parses_each_text_once_and_runs_each_rule_once_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fix rounds and the self-check read the same texts (the original, the
    # last rewrite): on a large module each parse and each run of the rules
    # costs a second, so neither may be repeated.
    parsed: list[str] = []
    real_parse = engine.cst.parse_module

    def parse(text: str) -> cst.Module:
        parsed.append(text)
        return real_parse(text)

    checked: list[tuple[str, str]] = []

    class Counted(Rule):
        def __init__(self, rule: Rule) -> None:
            self.code, self.rule = rule.code, rule

        def check(self, facts, settings):
            checked.append((self.code, facts.text))
            return self.rule.check(facts, settings)

    monkeypatch.setattr(engine.cst, "parse_module", parse)
    counted = {rule.code: Counted(rule) for rule in rules.RULES}
    monkeypatch.setattr(
        engine, "load_rules", lambda codes: [counted[r.code] for r in rules.load_rules(codes)]
    )
    original = (FIXTURES / "fp32_steps" / "gan.py").read_text()
    result = fix_text(original, ALL, Settings())
    assert result.applied and result.text != original
    assert parsed[0] == original and parsed[-1] == result.text
    assert len(parsed) == len(set(parsed))
    assert len(checked) == len(set(checked))
    # Every rule whose trigger lets it fire on the result ran there (the
    # self-check); the others cannot find anything in it.
    may_fire = {rule.code for rule in rules.RULES if rule.may_fire(SourceClues(result.text))}
    assert {code for code, text in checked if text == result.text} == may_fire - {"AMP900"}
