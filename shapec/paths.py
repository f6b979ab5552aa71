"""What is at a path the user named, without the file system's refusals escaping as exceptions.

pathlib's `is_file()`, `is_dir()` and `exists()` answer False for a missing file but raise for a
name too long for the file system, a permission denied on a folder on the way, and the like; a
spec, data or output path given on the command line or in an import must get a clear error
instead, so every probe of such a path goes through `path_kind`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def path_kind(path: str | Path) -> str:
    """"file", "dir", "other" (a FIFO, a device, a socket), "missing", or the system's reason the
    path cannot be looked up at all ("File name too long", "Permission denied", ...)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except (OSError, ValueError) as err:  # ValueError: an embedded NUL
        return getattr(err, "strerror", None) or str(err)
    if stat.S_ISREG(mode):
        return "file"
    return "dir" if stat.S_ISDIR(mode) else "other"


def not_a_file(kind: str) -> str:
    """Why a path of this kind (not "file") cannot be read as a file, for an error message."""
    return {"missing": "no such file", "dir": "a directory, not a file", "other": "not a regular file"}.get(kind, kind)


def printable(name: object) -> str:
    """A file name, field name or key as one line of plain text in a message: every character that
    is not printable (a line break, an escape code, a NUL) written as its escape, `\\n`, `\\x1b`, so
    a name can neither break the message's line nor reach the terminal as a control sequence."""
    text = str(name)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
