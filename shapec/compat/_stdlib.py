"""The compiled stdlib shapers the drop-ins call, compiled once per backend and process."""

from __future__ import annotations

from functools import lru_cache

from ..api import load
from ..runtime.shaper import CompiledShaper, default_backend


def stdlib_shaper(module: str, name: str, backend: str | None = None) -> CompiledShaper:
    """`load(module)[name]` on `backend` (default: SHAPEC_BACKEND), shared by every caller."""
    return _compiled(module, name, backend or default_backend())


@lru_cache(maxsize=None)
def _compiled(module: str, name: str, backend: str) -> CompiledShaper:
    return load(module, backend=backend)[name]
