"""Public entry points: compile_str, compile_file, load, and check (which never imports numba)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Mapping

from .compiler.check import CheckedModule, check_module
from .compiler.imports import STDLIB, Target, name_clashes, newlines, read_spec, resolve, target_span
from .helptext import documented
from .paths import path_kind
from .syntax.parser import parse
from .syntax.source import Diagnostic, ShapeError, Span


ImportKey = tuple[bool, str, str]  # (is a path, the importing spec's folder, the target as written)


class _Loader:
    """Resolves imports (see compiler/imports.py for where they may point) and caches checked modules.

    Every import it resolves is kept in `imports` (key -> Target), so a pickled shaper carries the
    text of every spec it was built from; a loader given `pickled` (an unpickled shaper's) reads
    its imports from them instead of the disk, where a helper may have been edited or deleted."""

    def __init__(self, pickled: Mapping[ImportKey, Target] | None = None):
        self.done: dict[Path, CheckedModule] = {}
        self.active: list[Path] = []
        self.imports: dict[ImportKey, Target] = {}
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
            found = self.pickled.get(key) or resolve(target, is_path, folder, root, span)
            if isinstance(found, Diagnostic):
                return found
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
            return Diagnostic("E205", f"import cycle through {t.shown.name}", target_span(span))
        self.active.append(t.real)
        try:
            mod = self.checked(t.text, str(t.shown), t.shown.parent, t.root)
        finally:
            self.active.pop()
        self.done[t.real] = mod
        return mod


class CompiledModule:
    """Shapers and pipelines of one .shape file, reachable by name (`mod.name` or `mod["name"]`).

    `dir(mod)` lists them and `help(mod.name)` shows each one's docstring, params, inputs and metrics.
    A shaper named like an attribute of the module (`names`, `ir`, `doc`, `filename`, `backend`,
    `shapers`, `pipelines`) is reached only as `mod["names"]`.
    """

    def __init__(self, checked: CheckedModule, backend: str, parallel: bool = False,
                 imports: Mapping[ImportKey, Target] | None = None):
        self.filename = checked.filename
        self._imports = dict(imports or {})  # what its shapers pickle with their source (api._rebuild)
        self.doc = checked.doc
        self.backend = backend
        self.parallel = parallel
        self._irs = {**checked.shapers, **checked.pipelines}
        self._compiled: dict[str, CompiledShaper] = {}
        self.shapers = tuple(checked.shapers)
        self.pipelines = tuple(checked.pipelines)

    def names(self) -> tuple[str, ...]:
        return tuple(self._irs)

    def imported_files(self) -> tuple[Path, ...]:
        """Every spec file this module's imports read, nested ones too (as resolved, links followed)."""
        return tuple(dict.fromkeys(t.real for t in self._imports.values()))

    def ir(self, name: str):
        return self._irs[name]

    def __getitem__(self, name: str):
        from .runtime.shaper import CompiledShaper

        if name not in self._irs:
            import difflib

            close = difflib.get_close_matches(name, list(self._irs), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KeyError(f"{self.filename} has no shaper or pipeline {name!r}{hint}")
        if name not in self._compiled:
            ir = self._irs[name]
            self._compiled[name] = documented(CompiledShaper, ir)(ir, self.backend, self.parallel, self._imports)
        return self._compiled[name]

    def __getattr__(self, name: str):
        # only called when no attribute of that name exists; a shaper named like one (`names`, `ir`,
        # `doc`, `filename`, `shapers`) is reached as mod["names"]
        irs = self.__dict__.get("_irs", {})
        if name.startswith("_") and name not in irs:
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(str(err)) from None

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._irs))

    def __iter__(self) -> Iterator[str]:
        return iter(self._irs)

    def __repr__(self) -> str:
        return f"<shapec module {self.filename} ({', '.join(self._irs)})>"


def resolve_backend(backend: str | None) -> str:
    """The backend asked for, else SHAPEC_BACKEND's (default numba), checked."""
    from .runtime.shaper import BACKENDS, default_backend

    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; expected one of {', '.join(BACKENDS)}")
    return backend


def resolve_parallel(parallel: bool | None) -> bool:
    """The parallel option asked for, else SHAPEC_PARALLEL's (default off)."""
    from .runtime.shaper import default_parallel

    return default_parallel() if parallel is None else bool(parallel)


def compile_str(source: str, filename: str = "<string>", backend: str | None = None,
                parallel: bool | None = None) -> CompiledModule:
    """Parse, check and compile .shape source text.

    Path imports are relative to filename's folder and stay inside its tree; with the default
    filename (a spec with no file), that is the current directory.

    parallel=True (or SHAPEC_PARALLEL=1) makes numba kernels run chunks of groups on several
    threads for large batches; the rewards are identical either way.
    """
    loader = _Loader()
    checked = loader.source(source, filename, Path(filename).parent)
    return CompiledModule(checked, resolve_backend(backend), resolve_parallel(parallel), loader.imports)


def compile_file(path: str | Path, backend: str | None = None, parallel: bool | None = None) -> CompiledModule:
    """Parse, check and compile a .shape file (imports resolve relative to it)."""
    loader = _Loader()
    checked = loader.file(Path(path))
    return CompiledModule(checked, resolve_backend(backend), resolve_parallel(parallel), loader.imports)


def load(name: str, backend: str | None = None, parallel: bool | None = None) -> CompiledModule:
    """A stdlib module by name, e.g. load("nemo_rl")."""
    path = STDLIB / f"{name}.shape"
    if not name.isidentifier() or path_kind(path) != "file":
        known = sorted(p.stem for p in STDLIB.glob("*.shape"))
        raise KeyError(f"no stdlib module {name!r}; available: {', '.join(known)}")
    return compile_file(path, backend, parallel)


def check_file(path: str | Path) -> list[Diagnostic]:
    """Every diagnostic for one file (empty when valid). Imports no backend."""
    try:
        _Loader().file(Path(path))
    except ShapeError as err:
        return err.diagnostics
    return []


def check_source(source: str, filename: str = "<string>") -> list[Diagnostic]:
    try:
        _Loader().source(source, filename, Path(filename).parent)
    except ShapeError as err:
        return err.diagnostics
    return []


def pickled_imports(imports: Mapping[ImportKey, Target]) -> tuple:
    """A shaper's imports as plain values (key, shown, real, root, text), for its pickle."""
    return tuple((key, str(t.shown), str(t.real), str(t.root), t.text) for key, t in imports.items())


def _rebuild(source: str, filename: str, name: str, backend: str, state: dict, parallel: bool = False,
             imports: tuple = ()):
    """Unpickle a compiled shaper: recompile from the pickled text of its spec and of every spec it
    imports, never from the files (the kernel cache makes this cheap)."""
    pickled = {key: Target(Path(shown), Path(real), Path(root), text) for key, shown, real, root, text in imports}
    loader = _Loader(pickled)
    checked = loader.source(source, filename, Path(filename).parent)
    shaper = CompiledModule(checked, backend, parallel, loader.imports)[name]
    shaper.load_state_dict(state)
    return shaper
