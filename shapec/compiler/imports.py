"""Where an import may point, and reading what it points at.

A dotted name (`import nemo_rl`) is a module of shapec/stdlib. A string is a path relative to
the importing spec's folder, and must stay inside the *root* folder tree: the folder of the
spec being checked (for a spec given as a string, the current directory; for stdlib
modules, shapec/stdlib). Absolute paths, `..` or symlinks that leave the tree, NUL
characters and targets that are not `.shape` files are refused with a coded diagnostic
(E210, E211, E205), and no diagnostic ever quotes a file that is not a spec being checked.
A spec reached through a symlink (inside the tree) imports relative to the symlink's folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..paths import path_kind
from ..syntax.source import Diagnostic, Span

STDLIB = Path(__file__).resolve().parents[1] / "stdlib"
_IMPORT_KEYWORD = re.compile(r"import(?:\s|#[^\n]*)*")


@dataclass(frozen=True)
class Target:
    """A spec an import may read: where to show it from, its text, and the tree its own imports stay in."""

    shown: Path  # as the importer wrote it (relative to its folder): diagnostics and nested imports use it
    real: Path  # resolved: the identity used to share modules and find cycles
    root: Path
    text: str


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
        text = real.read_bytes().decode("utf-8")
    except OSError as err:
        return Diagnostic("E211", f"cannot import {target!r}: {err.strerror or type(err).__name__}", at)
    except UnicodeDecodeError:
        return Diagnostic("E211", f"cannot import {target!r}: not UTF-8 text, so not a .shape spec", at)
    return Target(path, real, root, text)
