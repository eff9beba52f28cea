"""Text made literal for Markdown: the one escaper of every page and export.

Kept apart from ``domain/render/tables.py`` (which re-exports it) so that a page which only
needs to show a user's text safely does not import the comparison and curve-fitting code
behind the tables (SciPy's optimiser alone is 0.4 s of a cold page's first run)."""

from __future__ import annotations

import re

NEWLINES = re.compile(r"[\r\n]+")
# Inline Markdown: backslash, code, emphasis, links, strikethrough and the table's own pipe.
_MD_INLINE = re.compile(r"([\\`*_\[\]|~])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_text(value: object) -> str:
    """Text as literal Markdown: one line, HTML-significant characters as entities (so a
    tag is shown, never rendered) and Markdown punctuation backslash-escaped (so '|'
    cannot split a table cell and '[x](y)' cannot make a link)."""
    text = NEWLINES.sub(" ", str(value))
    text = _MD_INLINE.sub(r"\\\1", text)
    return "".join(_HTML.get(ch, ch) for ch in text)


def streamlit_md_text(value: object) -> str:
    """:func:`md_text` for Streamlit's Markdown elements (st.markdown, st.error, st.caption,
    …), which also typeset "$…$" as math: "$" is escaped too, so a run name or a flag value
    can neither format, link nor typeset."""
    return md_text(value).replace("$", "\\$")


_BACKTICKS = re.compile(r"`+")
# Streamlit's Markdown element replaces this text wherever it occurs, code spans included,
# before it parses (the prefix of its icon shortcodes, ":material/name:"; read in its
# frontend's StreamlitMarkdown): such text cannot be shown as it is through st.markdown.
STREAMLIT_REWRITES = ":material/"


def md_code(value: object) -> str:
    """Text as one Markdown code span: shown in a monospace font exactly as given (no
    emphasis, link, HTML, math or Streamlit directive is read inside a code span), on one
    line (Markdown shows a line break in a span as a space).  The fence is one backtick
    longer than the longest run of backticks in the text, padded with a space on each side,
    which Markdown strips (CommonMark: code spans).  Streamlit alters text that holds
    :data:`STREAMLIT_REWRITES`, even in a span: pages show such text otherwise."""
    text = str(value)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    return f"{fence} {text} {fence}"
