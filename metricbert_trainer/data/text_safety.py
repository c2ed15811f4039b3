"""Catalog text handed to other programs: a terminal, a spreadsheet.

A catalog is data from elsewhere, and its titles and ids can hold what another program acts on:

- a terminal runs escape sequences (colours, clearing the screen, OSC 0 setting the window title,
  OSC 8 links), rings on BEL, and reorders the rest of a line after a right-to-left override
  (U+202E). ``shown`` writes every control and format character as its escape, as ``ls`` and
  ``git`` quote file names: ``\\x1b``, ``\\u202e``. Printable text, accents and scripts included,
  is left as it is.
- a spreadsheet runs a CSV cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
  return as a formula (CSV injection). ``spreadsheet_safe`` prefixes such a cell with ``'``, which
  spreadsheets read as "text", the OWASP advice. Only CSV and TSV tables get it: JSON lines and
  Parquet keep every value as it is.
"""

from __future__ import annotations

import unicodedata

# Unicode categories shown escaped: controls (C0, DEL, C1), format characters (bidirectional
# overrides and isolates, zero-width characters), line and paragraph separators, and unassigned
# or private-use code points, which a terminal font shows as anything.
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cn", "Cs"})
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def shown(text: str) -> str:
    """``text`` with every character of ``ESCAPED_CATEGORIES`` written as its escape."""
    if text.isprintable():
        return text
    return "".join(
        _escape(character) if unicodedata.category(character) in ESCAPED_CATEGORIES else character
        for character in text
    )


def _escape(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def spreadsheet_safe(value: str) -> str:
    """``value``, prefixed with ``'`` when a spreadsheet would run it as a formula."""
    return f"'{value}" if value.startswith(FORMULA_STARTS) else value
