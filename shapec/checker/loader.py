"""Reading a spec and every spec it imports, each parsed and checked once: the module loader.

Imports may point only where checker/imports.py allows; a loader remembers what each import
resolved to (`imports`), so a pickled shaper carries the text of every spec it was built from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..syntax.parser import parse
from ..syntax.source import Diagnostic, ShapeError, Span
from .import_names import name_clashes
from .imports import STDLIB, ImportKey, Target, newlines, read_spec, resolve, target_span
from .module import CheckedModule, check_module


class Loader:
    """Resolves imports (see checker/imports.py for where they may point) and caches checked modules.

    Every import it resolves is kept in `imports` (key -> Target), so a pickled shaper carries the
    text of every spec it was built from; a loader given `pickled` (an unpickled shaper's) reads
    its imports from them instead of the disk, where a helper may have been edited or deleted."""

    def __init__(self, pickled: Mapping[ImportKey, Target] | None = None):
        self.done: dict[Path, CheckedModule] = {}
        self.active: list[Path] = []
        self.imports: dict[ImportKey, Target] = {}
        self.reads: list[tuple[str, bool, Path, Path, Target]] = []  # every resolve that read a file, and its Target
        self.pickled = pickled or {}

    def file(self, path: Path) -> CheckedModule:
        """A spec the caller named: its imports stay inside its folder's tree."""
        path = Path(path)
        return self.source(read_spec(path), str(path), path.parent)

    def source(self, text: str, filename: str, folder: Path) -> CheckedModule:
        """Text given as a string follows a file's newline rule (imports.newlines) too."""
        text = newlines(text)
        root = folder.absolute().resolve()
        if root.is_relative_to(STDLIB):
            root = STDLIB
        real = Path(filename).absolute().resolve() if Path(filename).name.endswith(".shape") else None
        if real is not None:
            self.active.append(real)
        try:
            return self.checked(text, filename, folder, root)
        finally:
            if real is not None:
                self.active.pop()

    def checked(self, text: str, filename: str, folder: Path, root: Path) -> CheckedModule:
        def load(target: str, is_path: bool, span: Span) -> CheckedModule | Diagnostic:
            key = (is_path, str(folder), target)
            found = self.pickled.get(key)
            if found is None:
                found = resolve(target, is_path, folder, root, span)
                if isinstance(found, Diagnostic):
                    return found
                self.reads.append((target, is_path, folder, root, found))
            self.imports[key] = found
            return self.imported(found, span)

        module = parse(text, filename)
        diags = name_clashes(module)  # a clash fails the file, so which import check_module keeps never shows
        try:
            checked = check_module(module, text, filename, load)
        except ShapeError as err:
            diags += err.diagnostics
        if diags:
            raise ShapeError(sorted(diags, key=lambda d: (d.path, d.span.start)))
        return checked

    def imported(self, t: Target, span: Span) -> CheckedModule | Diagnostic:
        if t.real in self.done:
            return self.done[t.real]
        if t.real in self.active:
            return Diagnostic("E212", f"import cycle through {t.shown.name}", target_span(span))
        self.active.append(t.real)
        try:
            mod = self.checked(t.text, str(t.shown), t.shown.parent, t.root)
        finally:
            self.active.pop()
        self.done[t.real] = mod
        return mod
