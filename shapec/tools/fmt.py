"""`shapec fmt`: rewrite .shape files in the pretty-printer's canonical layout, comments kept."""

from __future__ import annotations

import difflib
import re
import shlex
from pathlib import Path

from ..paths import printable
from ..checker.imports import newlines, spec_source
from ..syntax.parser import parse
from ..syntax.pretty import pretty
from ..syntax.source import BOM, ShapeError
from ..run.atomic import OutputError, write_text

_ENDING = re.compile(r"\r\n|\r|\n")
_NAMES = {"\r\n": "CRLF", "\r": "CR", "\n": "LF"}


def format_source(text: str, filename: str = "<string>") -> str:
    """The canonical text of a spec (LF line endings); raises ShapeError when it does not parse. A
    byte-order mark the file starts with stays (formatting changes the layout, not the file's encoding)."""
    text = newlines(text)
    return (BOM if text.startswith(BOM) else "") + pretty(parse(text, filename))


def line_ending(raw: str) -> str:
    """The style a formatted file keeps: CRLF when its first line ends with CRLF, else LF (a lone
    CR is a line break, see imports.newlines, but no editor saves a whole file that way)."""
    first = _ENDING.search(raw)
    return "\r\n" if first is not None and first.group() == "\r\n" else "\n"


def stray_ending(raw: str, style: str) -> str | None:
    """Where the file's first line ending that is not `style` is (fmt rewrites it), or None."""
    for line, m in enumerate(_ENDING.finditer(raw), 1):
        if m.group() != style:
            return f"line {line} ends with {_NAMES[m.group()]}; fmt writes every line ending as {_NAMES[style]}"
    return None


def format_files(files: list[Path], check: bool, out, err) -> int:
    """Format (or with check, diff) each file. Exit status: 0 clean, 1 would change or bad syntax,
    2 a file could not be read or written (it keeps its previous content: the new text is renamed over it).
    Files keep their line ending style, and fmt --check reports any byte fmt would change."""
    status = 0
    changed: list[Path] = []
    for path in files:
        try:
            data = path.read_bytes()
            text = spec_source(data, str(path))
            raw = data.decode("utf-8")  # spec_source has decoded it, so this cannot fail: the endings as saved
            new = format_source(text, str(path))
        except OSError as error:
            print(f"shapec fmt: {printable(path)}: cannot read ({error.strerror or error})", file=err)
            status = 2
            continue
        except ShapeError as error:
            for d in error.diagnostics:
                print(d.render(), file=err)
            status = max(status, 1)
            continue
        style = line_ending(raw)
        written = new.replace("\n", style)
        if written == raw:
            continue
        changed.append(path)
        note = stray_ending(raw, style)
        if check:
            status = max(status, 1)
            out.write("".join(difflib.unified_diff(
                text.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=f"{path} (original)", tofile=f"{path} (formatted)")))
            if note:
                print(f"{printable(path)}: {note}", file=err)
            continue
        try:
            write_text(path, written)
        except OutputError as error:
            print(f"shapec fmt: {error}", file=err)
            status = 2
            continue
        print(f"reformatted {printable(path)}" + (f" ({note})" if note else ""), file=err)
    if check and changed:
        n = len(changed)
        print(f"{n} file{'s' if n != 1 else ''} would be reformatted; to rewrite "
              f"{'it' if n == 1 else 'them'}: shapec fmt {shlex.join(map(printable, changed))}", file=err)
    return status
