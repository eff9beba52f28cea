"""Run names in any language, and the ASCII slug that stands in for one in file names.

A run name is what a team calls a run, in its own words: Japanese, emoji, spaces and
punctuation are all fine (``ベースライン =HYPERLINK("x") | <b>x</b> 🚀`` is a valid name).
The rule, applied by :func:`clean_name` and :func:`name_problem`:

- NFC-normalised (so the same text typed two ways is one name) and trimmed;
- not empty, at most :data:`MAX_NAME_CHARS` Unicode code points;
- no control characters: C0/C1 controls (tab and newline included), lone surrogates,
  line and paragraph separators, and the bidirectional embedding/override/isolate
  controls (U+202A-U+202E, U+2066-U+2069) that would make a name display as another.
  Joiners (U+200D, used inside emoji sequences) are allowed.

A name is shown as text everywhere; making it safe in a given output (a CSV cell, a
Markdown table, HTML) is that output's job, not the name's.

:func:`slug` turns a name into ``[A-Za-z0-9_-]`` for file names without a
transliteration table: Unicode compatibility decomposition (NFKD) first, so full-width
``ＡＢＣ`` becomes ``ABC`` and ``é`` becomes ``e`` + a combining accent; combining
marks are then dropped (``café`` → ``cafe``), every other character outside the ASCII
letters, digits, ``_`` and ``-`` (kana, kanji, emoji, spaces, punctuation) becomes ``-``,
runs of ``-`` collapse to one and none is left at either end; at most
:data:`MAX_SLUG_CHARS` characters are kept.  A name with nothing left (``ベースライン``),
or one that is a Windows device name (``con``), gets the caller's ``fallback`` (for
example ``run-<id>``).
"""

from __future__ import annotations

import re
import unicodedata

MAX_NAME_CHARS = 80
MAX_SLUG_CHARS = 80

_CONTROL_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
_BIDI_CONTROLS = frozenset(chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_DASHES = re.compile(r"-{2,}")
_SLUG = re.compile(r"[A-Za-z0-9_\-]{1,80}")
# Device names Windows refuses as a file's stem, whatever the extension.
_WINDOWS_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                               *(f"LPT{i}" for i in range(1, 10))})


def clean_name(text: str) -> str:
    """The name as stored: NFC-normalised and trimmed (validity is :func:`name_problem`'s)."""
    return unicodedata.normalize("NFC", text).strip()


def is_control(char: str) -> bool:
    return unicodedata.category(char) in _CONTROL_CATEGORIES or char in _BIDI_CONTROLS


def name_problem(text: str) -> tuple[str, dict[str, object]] | None:
    """Why ``text`` (already cleaned) is not a run name, as (kind, context); None when it is one.
    The kinds are the ``plan.problem.<kind>`` sentences of domain/core/i18n/naming.yaml."""
    if not text:
        return "name_empty", {}
    if len(text) > MAX_NAME_CHARS:
        return "name_too_long", {"limit": MAX_NAME_CHARS, "length": len(text)}
    bad = next((c for c in text if is_control(c)), None)
    if bad is not None:
        return "name_control", {"code": f"U+{ord(bad):04X}"}
    return None


def is_slug(text: str) -> bool:
    return bool(_SLUG.fullmatch(text))


def _slug_chars(name: str) -> list[str]:
    kept = []
    for char in unicodedata.normalize("NFKD", name):
        if char.isascii() and (char.isalnum() or char in "_-"):
            kept.append(char)
        elif unicodedata.category(char) != "Mn":  # a combining mark belongs to the letter before it
            kept.append("-")
    return kept


def slug(name: str, fallback: str) -> str:
    """``name`` as ASCII letters, digits, ``_`` and ``-`` for a file name (the rule is in the
    module docstring); ``fallback`` when nothing is left.  ``fallback`` must itself be a slug
    (``run-12``), so the result always is one."""
    if not is_slug(fallback):
        raise ValueError(f"fallback {fallback!r} is not a slug")
    text = _DASHES.sub("-", "".join(_slug_chars(name))).strip("-")
    text = text[:MAX_SLUG_CHARS].rstrip("-")
    if not text or text.upper() in _WINDOWS_RESERVED:
        return fallback
    return text
