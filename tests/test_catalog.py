"""The rule documents are executable: their examples are the rule's tests."""

from __future__ import annotations

import pytest

from amplint.catalog import load_catalog
from amplint.rules import ALL_CODES, RULES
from tests.helpers import codes_of, fixed, run_cli

CATALOG = load_catalog()


def test_every_code_has_a_document_and_every_document_a_code() -> None:
    assert sorted(CATALOG) == sorted(ALL_CODES)


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_document_header(code: str) -> None:
    doc = CATALOG[code]
    assert doc.path.stem == code
    assert doc.fix in {"safe", "unsafe", "none"}
    assert doc.name and doc.name == doc.name.lower() and " " not in doc.name
    assert doc.before is not None, f"{code} has no `before` example"
    if doc.fix == "none":
        assert doc.after is None
    else:
        assert doc.after is not None, f"{code} is fixable but shows no `after`"


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_before_reports_exactly_this_code(code: str) -> None:
    found = set(codes_of(CATALOG[code].before))
    assert found == {code}


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_fix_turns_before_into_after(code: str) -> None:
    doc = CATALOG[code]
    result = fixed(doc.before, unsafe=doc.fix == "unsafe")
    if doc.after is None:
        assert result == doc.before
    else:
        assert result == doc.after
        assert codes_of(doc.after) == []


def test_fix_safety_in_the_header_matches_the_fixes() -> None:
    from amplint.config import Settings
    from amplint.engine import lint_text

    for rule in RULES:
        doc = CATALOG[rule.code]
        diagnostics = lint_text(doc.before, frozenset({rule.code}), Settings())
        labels = {d.fix.applicability.value for d in diagnostics if d.fix is not None}
        assert labels <= {doc.fix}, rule.code


def test_rules_lists_every_rule() -> None:
    result = run_cli("rules")
    assert result.exit_code == 0
    for code, doc in CATALOG.items():
        assert code in result.stdout and doc.name in result.stdout


def test_rule_prints_the_document() -> None:
    result = run_cli("rule", "amp201")
    assert result.exit_code == 0
    assert result.stdout == CATALOG["AMP201"].text


def test_unknown_rule_is_a_usage_error() -> None:
    result = run_cli("rule", "AMP999")
    assert result.exit_code == 2
    assert "unknown rule" in result.stderr
