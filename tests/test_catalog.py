"""The rule documents are executable: their examples are the rule's tests."""

from __future__ import annotations

import re

import pytest

from amplint.catalog import load_catalog
from amplint.config import DEFAULT_TARGET_TORCH, Settings
from amplint.engine import lint_text
from amplint.rules import ALL_CODES, RULES
from tests.helpers import codes_of, fixed, run_cli

CATALOG = load_catalog()


def _settings(code: str) -> Settings:
    """The settings an example runs under: the default target torch, or the
    rule's `min-torch` where that is later (AMP123 needs a torch that documents
    the setting it names)."""
    floor = CATALOG[code].min_torch  # "any" for AMP900
    if not floor[0].isdigit():
        return Settings()
    return Settings(target_torch=max(DEFAULT_TARGET_TORCH, tuple(map(int, floor.split(".")))))


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
    found = set(codes_of(CATALOG[code].before, _settings(code)))
    assert found == {code}


@pytest.mark.parametrize(
    ("code", "number"),
    [(code, n) for code in sorted(CATALOG) for n in range(len(CATALOG[code].declined))],
)
def test_a_declined_example_is_reported_and_left_as_it_is(code: str, number: int) -> None:
    example = CATALOG[code].declined[number]
    findings = lint_text(example, frozenset(ALL_CODES), _settings(code))
    assert [d.code for d in findings] == [code]
    assert "not rewritten" in findings[0].message and findings[0].fix is None
    assert fixed(example, _settings(code), unsafe=True) == example


def test_amp001_shows_what_the_precision_analysis_declines() -> None:
    assert len(CATALOG["AMP001"].declined) >= 4


@pytest.mark.parametrize("code", sorted(CATALOG))
def test_fix_turns_before_into_after(code: str) -> None:
    doc = CATALOG[code]
    result = fixed(doc.before, _settings(code), unsafe=doc.fix == "unsafe")
    if doc.after is None:
        assert result == doc.before
    else:
        assert result == doc.after
        assert codes_of(doc.after, _settings(code)) == []


def test_fix_safety_in_the_header_matches_the_fixes() -> None:
    from amplint.engine import lint_text

    for rule in RULES:
        doc = CATALOG[rule.code]
        diagnostics = lint_text(doc.before, frozenset({rule.code}), _settings(rule.code))
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
    doc = CATALOG["AMP201"]
    title, _, explanation = doc.body.partition("\n")
    # ruff's `rule`: Markdown from the title on, the fix said in words, no front matter.
    assert result.stdout == (
        f"{title}\n\nFix is always available: `amplint fix --apply` applies it. "
        f"Needs torch >= {doc.min_torch}.\n{explanation}\n"
    )
    assert not result.stdout.startswith("---")


def test_unknown_rule_is_a_usage_error() -> None:
    result = run_cli("rule", "AMP999")
    assert result.exit_code == 2
    assert "unknown rule" in result.stderr


# -- the rule table (docs/rules.md) tells each rule's fix safety as it is --------
# Code a rule fixes otherwise than its documented example does.
_FIXED_OTHERWISE = {
    "AMP203": [CATALOG["AMP203"].before.replace('opt_level="O1"', 'opt_level="O2"')],
    "AMP204": [
        "import torch\nfrom apex.fp16_utils import to_python_float\n\n\n"
        "def log(loss):\n    return to_python_float(loss)\n"
    ],
}


def _readme_fix_column() -> dict[str, list[str]]:
    table = CATALOG["AMP001"].path.parent.parent / "docs" / "rules.md"
    rows = re.findall(
        r"^\| \[(AMP\d+)\]\([^)]*\) \| [^|]+ \| ([^|]+) \|", table.read_text(encoding="utf-8"), re.M
    )
    return {code: [kind.strip() for kind in column.split("/")] for code, column in rows}


def _fix_kinds(code: str, text: str) -> list[str]:
    found = lint_text(text, frozenset(ALL_CODES), _settings(code))
    kinds = {d.fix.applicability.value if d.fix else "none" for d in found if d.code == code}
    assert kinds, f"{code} does not fire on its example"
    return sorted(kinds)


def test_the_readme_rule_table_names_every_kind_of_fix_a_rule_makes() -> None:
    column = _readme_fix_column()
    assert sorted(column) == sorted(CATALOG)
    for code, doc in CATALOG.items():
        kinds = set(_fix_kinds(code, doc.before))
        for text in _FIXED_OTHERWISE.get(code, []):
            kinds.update(_fix_kinds(code, text))
        assert set(column[code]) == kinds, code
        # The first named is the document's own (its front matter, its example).
        assert column[code][0] == doc.fix, code
