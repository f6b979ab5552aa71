"""Public entry points: compile_str, compile_file, load, and check (which never imports numba)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from .checker.imports import STDLIB
from .compiler.spec_store import CheckedSpec, checked_file, checked_source
from .paths import path_kind
from .syntax.source import Diagnostic, ShapeError


class CompiledModule:
    """Shapers and pipelines of one .shape file, reachable by name (`mod.name` or `mod["name"]`).

    `dir(mod)` lists them and `help(mod.name)` shows each one's docstring, params, inputs and metrics.
    A shaper named like an attribute of the module (`names`, `ir`, `doc`, `filename`, `backend`,
    `shapers`, `pipelines`) is reached only as `mod["names"]`.
    """

    def __init__(self, checked: CheckedSpec, backend: str, parallel: bool = False):
        self.filename = checked.filename
        self._imports = checked.imports  # what its shapers pickle with their source
        self.doc = checked.doc
        self.backend = backend
        self.parallel = parallel
        self._irs = {**checked.shapers, **checked.pipelines}
        self._compiled: dict = {}  # name -> its CompiledShaper, made on first use
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
        from .runtime.shaper import compiled_shaper

        if name not in self._irs:
            import difflib

            close = difflib.get_close_matches(name, list(self._irs), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KeyError(f"{self.filename} has no shaper or pipeline {name!r}{hint}")
        if name not in self._compiled:
            ir = self._irs[name]
            self._compiled[name] = compiled_shaper(ir, self.backend, self.parallel, self._imports)
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
    threads for large batches; the rewards are identical either way. A spec checked before, whose
    imports read the same files, is not checked again (compiler/spec_store.py).
    """
    spec = checked_source(source, filename, Path(filename).parent)
    return CompiledModule(spec, resolve_backend(backend), resolve_parallel(parallel))


def compile_file(path: str | Path, backend: str | None = None, parallel: bool | None = None) -> CompiledModule:
    """Parse, check and compile a .shape file (imports resolve relative to it)."""
    return CompiledModule(checked_file(Path(path)), resolve_backend(backend), resolve_parallel(parallel))


def load(name: str, backend: str | None = None, parallel: bool | None = None) -> CompiledModule:
    """A stdlib module by name, e.g. load("nemo_rl")."""
    path = STDLIB / f"{name}.shape"
    if not name.isidentifier() or path_kind(path) != "file":
        known = sorted(p.stem for p in STDLIB.glob("*.shape"))
        raise KeyError(f"no stdlib module {name!r}; available: {', '.join(known)}")
    return compile_file(path, backend, parallel)


def check_file(path: str | Path) -> list[Diagnostic]:
    """Every diagnostic for one file (empty when valid). Imports no backend."""
    from .checker.loader import Loader

    try:
        Loader().file(Path(path))
    except ShapeError as err:
        return err.diagnostics
    return []


def check_source(source: str, filename: str = "<string>") -> list[Diagnostic]:
    from .checker.loader import Loader

    try:
        Loader().source(source, filename, Path(filename).parent)
    except ShapeError as err:
        return err.diagnostics
    return []
