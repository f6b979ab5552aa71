"""Where an import may point, and reading what it points at.

A dotted name (`import nemo_rl`) is a module of shapec/stdlib. A string is a path relative to
the importing spec's folder, and must stay inside the *root* folder tree: the folder of the
spec being checked (for a spec given as a string, the current directory; for stdlib
modules, shapec/stdlib). Absolute paths, `..` or symlinks that leave the tree, NUL
characters and targets that are not `.shape` files are refused with a coded diagnostic
(E210, E211, E205), and no diagnostic ever quotes a file that is not a spec being checked.
A spec reached through a symlink (inside the tree) imports relative to the symlink's folder.

Every spec file shapec reads (a command's SPEC, an import, a stdlib module, `fmt`) is read by
`read_spec`, so a file means the same thing however it is reached.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..paths import path_kind
from ..syntax.source import BOM, Diagnostic, ShapeError, Source, Span

STDLIB = Path(__file__).resolve().parents[1] / "stdlib"
ImportKey = tuple[bool, str, str]  # (is a path, the importing spec's folder, the target as written)
_IMPORT_KEYWORD = re.compile(r"import(?:\s|#[^\n]*)*")


@dataclass(frozen=True)
class Target:
    """A spec an import may read: where to show it from, its text, and the tree its own imports stay in."""

    shown: Path  # as the importer wrote it (relative to its folder): diagnostics and nested imports use it
    real: Path  # resolved: the identity used to share modules and find cycles
    root: Path
    text: str


def newlines(text: str) -> str:
    """Python's rule (its tokenizer's, and universal newlines'): CRLF, a lone CR and LF each end a
    line, and become LF. The grammar and the line:col of diagnostics count LF only, so a lone CR
    left in would end a line in an editor but not in the spec (a comment would hide what follows)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def spec_source(data: bytes, filename: str) -> str:
    """A spec file's bytes as text: strict UTF-8, newlines by `newlines`. Bytes that are not UTF-8
    raise ShapeError E102 at the first bad byte's line and column."""
    try:
        return newlines(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        text = newlines(data.decode("utf-8", errors="replace")).removeprefix(BOM)  # positions as parse counts
        at = len(newlines(data[:err.start].decode("utf-8")).removeprefix(BOM))
        msg = f"byte 0x{data[err.start]:02x} is not UTF-8 text; a .shape spec is UTF-8 (save it as UTF-8)"
        raise ShapeError([Diagnostic("E102", msg, Span(Source(filename, text), at, at + 1))]) from None


def read_spec(path: Path) -> str:
    """The text of the spec file at path (see `spec_source`); raises OSError or ShapeError."""
    return spec_source(Path(path).read_bytes(), str(path))


def target_span(span: Span) -> Span:
    """The string or dotted name inside an `import` statement's span (carets go there)."""
    if span.source is None:
        return span
    m = _IMPORT_KEYWORD.match(span.source.text, span.start)
    if m is None or m.end() >= span.end:
        return span
    text = span.source.text
    end = m.end()
    if text[end] == '"':
        end += 1
        while end < span.end and text[end] != '"':
            end += 2 if text[end] == "\\" else 1
        return Span(span.source, m.end(), min(end + 1, span.end))
    while end < span.end and (text[end].isalnum() or text[end] in "._"):
        end += 1
    return Span(span.source, m.end(), end)


def resolve(target: str, is_path: bool, folder: Path, root: Path, span: Span) -> Target | Diagnostic:
    """The spec `target` names, imported from a spec in `folder` whose tree is `root` (resolved)."""
    at = target_span(span)
    if not is_path:
        path = STDLIB.joinpath(*target.split(".")).with_suffix(".shape")
        found = _inside(path, STDLIB, target, at)
        if isinstance(found, Diagnostic):
            return found
        if path_kind(found) != "file":  # missing, or a name no module can have (too long for the system)
            known = ", ".join(sorted(p.stem for p in STDLIB.glob("*.shape")))
            return Diagnostic("E205", f"no stdlib module {target!r}; available: {known}", at)
        return _read(path, found, STDLIB, target, at)
    if "\0" in target:
        return Diagnostic("E210", "an import path cannot contain a NUL character", at)
    if PurePosixPath(target).is_absolute() or PureWindowsPath(target).is_absolute() or target.startswith("\\"):
        return Diagnostic("E210", f"cannot import {target!r}: import paths are relative to the importing spec's "
                          "folder, not absolute", at)
    if not target.endswith(".shape"):
        return Diagnostic("E211", f"cannot import {target!r}: only .shape specs can be imported", at)
    path = folder / target
    found = _inside(path, root, target, at)
    if isinstance(found, Diagnostic):
        return found
    kind = path_kind(found)
    if kind == "missing":
        return Diagnostic("E205", f"cannot import {target!r}: no such file", at)
    if kind != "file":  # a folder, a FIFO that would block, a device; or a name the system refuses
        reason = "not a regular file" if kind in ("dir", "other") else kind
        return Diagnostic("E211", f"cannot import {target!r}: {reason}", at)
    return _read(path, found, root, target, at)


def _inside(path: Path, root: Path, target: str, at: Span) -> Path | Diagnostic:
    """The resolved path when it lies inside root (symlinks followed), else why not."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as err:  # a symlink loop
        return Diagnostic("E211", f"cannot import {target!r}: {getattr(err, 'strerror', None) or 'symlink loop'}", at)
    if real.is_relative_to(root):
        return real
    lexical = Path(os.path.normpath(path.absolute()))
    how = "`..` leads" if not lexical.is_relative_to(root) else "a symlink leads"
    return Diagnostic("E210", f"cannot import {target!r}: {how} outside the spec's folder tree ({root})", at)


def _read(path: Path, real: Path, root: Path, target: str, at: Span) -> Target | Diagnostic:
    """The text of a regular file (its callers have looked)."""
    try:
        text = read_spec(real)
    except OSError as err:
        return Diagnostic("E211", f"cannot import {target!r}: {err.strerror or type(err).__name__}", at)
    except ShapeError as err:  # where the bad byte is, without quoting a file that may not be a spec
        line, col = err.diagnostics[0].location()[:2]
        return Diagnostic("E211", f"cannot import {target!r}: not UTF-8 text (line {line}, column {col}), "
                          "so not a .shape spec", at)
    return Target(path, real, root, text)
