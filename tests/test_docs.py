"""The README is a newcomer's five minutes; depth lives in docs/.  The README
stays short, every page has a contents list, and every link between them
(a file, and a heading within it) leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_anchor(heading) for heading in re.findall(r"^#+ (.+)$", text, re.M)}


def test_the_readme_is_read_in_five_minutes() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < 400, f"README.md has {lines} lines: move depth to docs/"
    assert len(PAGES) > 5  # the depth went somewhere


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_each_page_has_a_contents_list_and_its_links_lead_somewhere(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "\n## Contents\n" in text, f"{page.name} has no contents list"
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for link in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link} leads nowhere"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page.name}: no heading for {link}"
