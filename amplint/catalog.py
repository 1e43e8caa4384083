"""The rule catalogue: one Markdown document per code, shipped with the package.

A document starts with a ``key: value`` header between ``---`` lines and holds a
``before`` and (for fixable rules) an ``after`` code block, fenced as
```` ```python before ```` and ```` ```python after ````, and any number of
```` ```python declined ```` blocks: code the rule reports and leaves as it is,
for a reason the text gives.  The test suite runs them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_FENCE = re.compile(
    r"^```python[ \t]+(before|after|declined)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S
)
REQUIRED_KEYS = ("code", "name", "summary", "fix", "min-torch")


class CatalogError(Exception):
    pass


@dataclass(frozen=True)
class RuleDoc:
    """A rule's catalogue document: its header, its text and its examples."""

    code: str
    name: str
    summary: str
    fix: str  # "safe", "unsafe" or "none"
    min_torch: str
    text: str  # the whole document
    before: str | None
    after: str | None
    path: Path
    declined: tuple[str, ...] = ()  # reported, not rewritten

    @property
    def body(self) -> str:
        """The document without its header."""
        return self.text[self.text.index("\n---\n", 4) + len("\n---\n") :].strip()


def catalog_dir() -> Path:
    """`amplint/_catalogue` in an installed wheel, the repository's `rules/` otherwise."""
    installed = _PACKAGE_DIR / "_catalogue"
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / "rules"


def parse_doc(path: Path) -> RuleDoc:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise CatalogError(f"{path}: must start with a '---' header")
    header_end = text.find("\n---\n", 4)
    if header_end == -1:
        raise CatalogError(f"{path}: header is not closed by '---'")
    header: dict[str, str] = {}
    for line in text[4:header_end].splitlines():
        key, separator, value = line.partition(":")
        if not separator:
            raise CatalogError(f"{path}: header line without ':': {line!r}")
        header[key.strip()] = value.strip()
    missing = [key for key in REQUIRED_KEYS if key not in header]
    if missing:
        raise CatalogError(f"{path}: header lacks {', '.join(missing)}")
    found = _FENCE.findall(text)
    blocks = {label: body for label, body in found if label != "declined"}
    return RuleDoc(
        code=header["code"],
        name=header["name"],
        summary=header["summary"],
        fix=header["fix"],
        min_torch=header["min-torch"],
        text=text,
        before=blocks.get("before"),
        after=blocks.get("after"),
        path=path,
        declined=tuple(body for label, body in found if label == "declined"),
    )


@lru_cache(maxsize=1)
def load_catalog() -> dict[str, RuleDoc]:
    docs = {}
    for path in sorted(catalog_dir().glob("AMP*.md")):
        doc = parse_doc(path)
        docs[doc.code] = doc
    return docs
