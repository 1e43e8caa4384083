"""Source text with its comments and string literals blanked out.

Some decisions are read off the text with a pattern (`masked_fill(..., -1e10)`,
a Gram matrix, a step that is mixed precision already).  They must come from
code: a comment that says "autocast", a commented-out `scaler.scale(loss)`, a
docstring about n-grams or a log message are no reason to decline or skip a
step.  `code_only` keeps every character's position (so offsets and lines
still point at the source) and turns each comment and string literal into
spaces; f-strings are blanked whole.
"""

from __future__ import annotations

import re

# Left to right, the first of: a string literal (any prefix, triple or single
# quoted, escapes honoured) or a comment.  A quote inside a comment, or a `#`
# inside a string, is inside the match that starts first.
_COMMENT_OR_STRING = re.compile(
    r"""(?P<string>(?<![\w])(?:[rRbBuUfF]{1,2})?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\""""
    r"""|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))|(?P<comment>\#[^\n]*)""",
    re.DOTALL,
)
_NOT_NEWLINE = re.compile(r"[^\n]")


def code_only(text: str) -> str:
    """`text` with comments and string literals replaced by spaces (newlines kept)."""
    if "#" not in text and "'" not in text and '"' not in text:
        return text
    return _COMMENT_OR_STRING.sub(lambda match: _NOT_NEWLINE.sub(" ", match.group(0)), text)
