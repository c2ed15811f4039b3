"""Types of command-line values that the commands share, in a module that imports argparse alone:
``recommend --index`` parses its options before anything heavy is imported (``indexed_recommend``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for whole numbers of at least ``minimum``: a bad value is refused when
    the command line is read, before any catalog is loaded or encoded."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}; got {value}")
        return value

    return parse
