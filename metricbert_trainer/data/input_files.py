"""What a path a command reads is, said truly when it cannot be read as a file.

Catalogs, annotations and judgments are read more than once (a fingerprint, then the table), so
they must be regular files. Each kind of path that is not gets its own message with what to do:
a missing path, a folder, a named pipe (what a shell's ``<(...)`` hands a command), a device or
socket, or a file without read permission. Every loader and the recipes' preflight ask here.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path


def input_file_problem(path: str | Path, what: str) -> str | None:
    """Why ``path`` (the ``what`` file: "catalog", "annotations", ...) cannot be read as a
    regular file, or ``None`` when it can."""
    location = Path(path).expanduser()
    try:
        mode = location.stat().st_mode
    except FileNotFoundError:
        if re.fullmatch(r"/(dev|proc/self)/fd/\d+", str(path)):
            return (
                f"{what} {path} is a shell's <(...) pipe that this process did not receive (a launcher such as "
                "accelerate launch closes it): write it to a file first"
            )
        return f"{what} file not found: {path}"
    except OSError as error:
        return f"{what} file {path} cannot be opened ({error.strerror})"
    if stat.S_ISDIR(mode):
        return f"{what} must be a file; {path} is a folder"
    if stat.S_ISFIFO(mode):
        return (
            f"{what} must be a regular file; {path} is a pipe (as a shell's <(...) gives), which can be read "
            "only once: write it to a file first"
        )
    if not stat.S_ISREG(mode):
        return f"{what} must be a regular file; {path} is a device or socket"
    if not os.access(location, os.R_OK):
        return f"{what} file {path} is not readable (check its permissions)"
    return None
