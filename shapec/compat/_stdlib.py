"""The compiled stdlib shapers the drop-ins call, compiled once per backend and process."""

from __future__ import annotations

from functools import lru_cache

from ..api import load, resolve_backend, resolve_parallel
from ..runtime.shaper import CompiledShaper


def stdlib_shaper(module: str, name: str, backend: str | None = None, parallel: bool | None = None) -> CompiledShaper:
    """`load(module)[name]` on `backend` (default: SHAPEC_BACKEND) with `parallel` (default:
    SHAPEC_PARALLEL), shared by every caller."""
    return _compiled(module, name, resolve_backend(backend), resolve_parallel(parallel))


@lru_cache(maxsize=None)
def _compiled(module: str, name: str, backend: str, parallel: bool) -> CompiledShaper:
    return load(module, backend=backend, parallel=parallel)[name]
