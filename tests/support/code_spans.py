"""The commands a page shows as Markdown code spans (``domain.core.markdown.md_code``), read
back from AppTest's markdown elements as the text a user sees."""

from __future__ import annotations

import re
from typing import Any

_SPAN = re.compile(r"^(`+) (.*) \1$", re.DOTALL)


def code_spans(at: Any) -> list[str]:
    """Every markdown element of ``at`` that is one code span, as its text."""
    return [match.group(2) for m in at.markdown if (match := _SPAN.match(str(m.value)))]
