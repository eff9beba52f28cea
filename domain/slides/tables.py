"""Table exports of a comparison: CSV and Markdown, each followed by the caveat footer of
:func:`domain.results.caveat.caveat_lines`.

* CSV keeps every number exactly as the frame holds it (pandas writes the shortest repr
  that round-trips); the caveat follows the table as ``# ``-prefixed lines after a blank
  line, and every text cell is quoted, so ``pd.read_csv(path, comment="#")`` reads the table
  back whole (a '#' inside a quoted name is kept).  UTF-8 with a BOM, so Excel shows Japanese.
* Markdown rounds numbers for reading (see :func:`format_number`) and says so in its footer.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence

import pandas as pd

from domain.core.i18n import t

CSV_ENCODING = "utf-8-sig"
CAVEAT_PREFIX = "# "



def flat_table(table: pd.DataFrame) -> pd.DataFrame:
    """Index levels become columns and multi-level headers are joined with ' · '."""
    out = table.reset_index() if _has_named_index(table) else table.copy()
    if isinstance(out.columns, pd.MultiIndex):
        out.columns = [" · ".join(str(p) for p in col if str(p)) for col in out.columns]
    return out


def _has_named_index(table: pd.DataFrame) -> bool:
    return any(name is not None for name in table.index.names)


def table_csv(table: pd.DataFrame, caveat: Sequence[str]) -> bytes:
    """CSV with exact numbers, then the caveat as '# ' lines (see the module docstring)."""
    body = flat_table(table).to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    footer = "".join(f"{CAVEAT_PREFIX}{line}\n" for line in caveat)
    return (body + "\n" + footer).encode(CSV_ENCODING)


def format_number(value: object) -> str:
    """Rounded for reading: whole numbers as integers with separators; 1 decimal from 100,
    2 from 1, 3 below.  NaN/None as an empty cell."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    number = float(value)
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if number.is_integer():
        return f"{int(number):,}"
    decimals = 1 if abs(number) >= 100 else 2 if abs(number) >= 1 else 3
    return f"{number:,.{decimals}f}"


def table_markdown(table: pd.DataFrame, caveat: Sequence[str], lang: str) -> str:
    """A GitHub Markdown table, numbers rounded (:func:`format_number`), then the caveat
    and a note that the values are rounded."""
    flat = flat_table(table)
    header = [_md_cell(c) for c in flat.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(_md_align(flat[c]) for c in flat.columns) + "|"]
    for row in flat.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(format_number(v)) for v in row) + " |")
    notes = [*caveat, t("compare.caveat.rounded", lang)]
    return "\n".join(lines) + "\n\n" + "\n".join(f"> {note}  " for note in notes) + "\n"


def _md_cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _md_align(column: pd.Series) -> str:
    return " ---: " if pd.api.types.is_numeric_dtype(column) else " --- "
