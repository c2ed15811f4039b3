"""One renderer for the markdown the package writes (model cards, study reports, CLI output), and
the one escaper of the text users choose that goes into it (names, paths, catalog labels)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence

# Characters that start markdown syntax inside a line: emphasis, code, links and images, strike,
# and the backslash itself; HTML's are escaped as entities, which markdown renders as the text.
# ``|`` matters only inside tables, where ``markdown_table`` escapes it in every cell; ``_`` is
# left as it is, since names such as Metric_Inf are full of it and CommonMark never opens
# emphasis inside a word (``_x_`` standing alone can still italicise: a matter of looks only).
_MARKDOWN_SYNTAX = re.compile(r"([\\`*\[\]~])")


def escape_markdown(text: object) -> str:
    """``text`` as literal markdown text on one line: tags become entities (``html.escape``), inline
    syntax is backslash-escaped and line breaks become spaces, so a user's name or path renders
    as itself and can neither format nor link nor inject HTML."""
    one_line = " ".join(str(text).splitlines())
    return _MARKDOWN_SYNTAX.sub(r"\\\1", html.escape(one_line, quote=False))


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A GitHub markdown table, without a trailing newline.

    ``align`` holds one letter per column, ``l`` (left, the default for missing letters) or ``r``
    (right, for numbers). Cells are written with ``str``, their ``|`` escaped and line breaks made
    spaces, so a title or a setting that contains one cannot split its row; cells holding text a
    user chose go through ``escape_markdown`` first.
    """
    rule = "|" + "".join("---:|" if letter == "r" else "---|" for letter in align.ljust(len(headers), "l"))
    return "\n".join([_row(headers), rule, *(_row(row) for row in rows)])


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(" ".join(str(cell).splitlines()).replace("|", "\\|") for cell in cells) + " |"


def json_block(settings: dict[str, object]) -> str:
    """A JSON code block of an objective's settings, for a model card's objective section."""
    return f"```json\n{json.dumps(settings, indent=2)}\n```\n"
