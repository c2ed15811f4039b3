"""One renderer for the markdown tables the package writes: model cards, study reports, CLI output."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A GitHub markdown table, without a trailing newline.

    ``align`` holds one letter per column, ``l`` (left, the default for missing letters) or ``r``
    (right, for numbers). Cells are written with ``str`` and their ``|`` escaped, so a title or a
    setting that contains one cannot split its row.
    """
    rule = "|" + "".join("---:|" if letter == "r" else "---|" for letter in align.ljust(len(headers), "l"))
    return "\n".join([_row(headers), rule, *(_row(row) for row in rows)])


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"
