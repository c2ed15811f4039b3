"""User mistakes, reported the way command-line tools report them: one line, no traceback.

``metricbert recommend: error: ...`` tells a user what to change; a traceback whose last line says
the same tells them the program crashed. ``UsageError`` is the mistake (a bad option, file or
folder; ``CatalogError`` and ``AnnotationError`` are the catalog's and the annotations' own), and
a script's ``main`` runs under ``report_usage_errors``, which prints ``<script>: error: <message>``
and exits non-zero. Anything else is a bug and keeps its traceback. ``--traceback`` on the command
line (or ``METRICBERT_TRACEBACK=1``) keeps the traceback of a mistake too, for a bug report.

Every layer of the package may raise these, so this module imports nothing of it.
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


def report_usage_errors(
    main: Callable[[Sequence[str]], Result], argv: Sequence[str] | None = None, prog: str | None = None
) -> Result:
    """Runs ``main(argv)``; a ``UsageError`` is printed as ``<prog>: error: <message>`` (by the
    first process of a launch only, so a multi-process launch prints it once) and exits with
    status 1. ``--traceback`` is taken out of ``argv`` and lets the exception through."""
    argv = list(sys.argv[1:] if argv is None else argv)
    keep_traceback = TRACEBACK_FLAG in argv or os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0")
    argv = [argument for argument in argv if argument != TRACEBACK_FLAG]
    try:
        return main(argv)
    except UsageError as error:
        if keep_traceback:
            raise
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"{prog or script_name()}: error: {error}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE_ERROR) from None


def script_name() -> str:
    """The name of the script the user ran (each recipe script calls its entry point itself, so
    ``sys.argv[0]`` is it, under ``accelerate launch`` too)."""
    return Path(sys.argv[0]).name
