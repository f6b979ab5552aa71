"""`shapec fmt`: rewrite .shape files in the pretty-printer's canonical layout, comments kept."""

from __future__ import annotations

import difflib
from pathlib import Path

from ..syntax.parser import BOM, parse
from ..syntax.pretty import pretty
from ..syntax.source import ShapeError
from .atomic import OutputError, write_text


def format_source(text: str, filename: str = "<string>") -> str:
    """The canonical text of a spec; raises ShapeError when it does not parse. A byte-order mark
    the file starts with stays (formatting changes the layout, not the file's encoding)."""
    return (BOM if text.startswith(BOM) else "") + pretty(parse(text, filename))


def format_files(files: list[Path], check: bool, out, err) -> int:
    """Format (or with check, diff) each file. Exit status: 0 clean, 1 would change or bad syntax,
    2 a file could not be written (it keeps its previous content: the new text is renamed over it)."""
    status = 0
    changed = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            new = format_source(text, str(path))
        except ShapeError as error:
            for d in error.diagnostics:
                print(d.render(), file=err)
            status = max(status, 1)
            continue
        if new == text:
            continue
        changed += 1
        if check:
            status = max(status, 1)
            out.write("".join(difflib.unified_diff(
                text.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=f"{path} (original)", tofile=f"{path} (formatted)")))
            continue
        try:
            write_text(path, new)
        except OutputError as error:
            print(f"shapec fmt: {error}", file=err)
            status = 2
            continue
        print(f"reformatted {path}", file=err)
    if check and changed:
        print(f"{changed} file{'s' if changed != 1 else ''} would be reformatted", file=err)
    return status
