"""User mistakes reported the way command-line tools report them: one line, no traceback.

``metricbert recommend: error: ...`` tells a user what to change; a traceback whose last line says
the same tells them the program crashed. A script's ``main`` runs under ``report_usage_errors``,
which prints ``<script>: error: <message>`` for the mistakes below and exits non-zero. Anything
else is a bug and keeps its traceback. ``--traceback`` on the command line (or
``METRICBERT_TRACEBACK=1``) keeps the traceback of user mistakes too, for a bug report.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

TRACEBACK_FLAG = "--traceback"
TRACEBACK_VARIABLE = "METRICBERT_TRACEBACK"
EXIT_USAGE_ERROR = 1

Result = TypeVar("Result")


class UsageError(ValueError):
    """A mistake in what the user asked for: an option, a file, a folder. A ``ValueError``, as the
    configuration dataclasses raise for a bad value."""


def user_mistakes() -> tuple[type[Exception], ...]:
    """The exception types that report a user's mistake rather than a bug."""
    from .annotations import AnnotationError
    from .catalog import CatalogError

    return UsageError, CatalogError, AnnotationError


def report_usage_errors(
    main: Callable[[Sequence[str]], Result], argv: Sequence[str] | None = None, prog: str | None = None
) -> Result:
    """Runs ``main(argv)``; a user mistake is printed as ``<prog>: error: <message>`` (by the
    first process of a launch only, so a multi-process launch prints it once) and exits with
    status 1. ``--traceback`` is taken out of ``argv`` and lets the exception through."""
    argv = list(sys.argv[1:] if argv is None else argv)
    keep_traceback = TRACEBACK_FLAG in argv or os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0")
    argv = [argument for argument in argv if argument != TRACEBACK_FLAG]
    try:
        return main(argv)
    except user_mistakes() as error:
        if keep_traceback:
            raise
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"{prog or Path(sys.argv[0]).name}: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE_ERROR) from None
