"""Character-level checks on string values.

argv goes to ``exec`` without a shell, so none of this is needed to stop injection
into a shell; it is policy (docs/fault-suite.md, cases 15-17): values that look like options, carry
control characters or shell syntax are refused early with a clear reason, because they
are never what a benchmark configuration means.
"""

from __future__ import annotations

import re
import unicodedata

# Categories that never belong in a flag value: C0/C1 controls, format characters
# (bidi overrides, zero-width joiners that disguise text) and line/paragraph separators.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})

# Characters a plain (not free-text) value may hold: names, numbers, paths, host:port,
# comma lists, key=value.  Everything else is refused.
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_.,:=/@+%-]+$", re.ASCII)
_SHELL_CHARACTERS = frozenset(";|&$`<>(){}[]*?!~'\"\\#\t\n ")

# In free text (JSON, regexes, labels) only command-shaped sequences are refused.
_COMMAND_SEQUENCES = (";", "`", "$(", "${", "&&", "||")


def has_control_characters(text: str) -> bool:
    return any(unicodedata.category(ch) in _CONTROL_CATEGORIES for ch in text)


def has_non_ascii_digit(text: str) -> bool:
    """Digits such as '８' or '٣': Python's int() accepts them, SGLang's users never mean them."""
    return any(ch.isdigit() and not ch.isascii() for ch in text)


def plain_value_problem(text: str) -> str | None:
    """Why ``text`` is not an acceptable plain value ('shell_meta', 'unsafe_chars'), or None."""
    if _PLAIN_VALUE.match(text):
        return None
    if any(ch in _SHELL_CHARACTERS for ch in text):
        return "shell_meta"
    return "unsafe_chars"


def free_text_problem(text: str) -> str | None:
    """'shell_meta' when free text holds a command-shaped sequence, else None."""
    return "shell_meta" if any(seq in text for seq in _COMMAND_SEQUENCES) else None


def has_parent_reference(text: str) -> bool:
    """A '..' path component anywhere (``../x``, ``a/../b``, ``..``)."""
    return ".." in re.split(r"[/\\]", text)
