"""Resolve the SPEC argument of run/explain/plot: a .shape file or a stdlib module name."""

from __future__ import annotations

import difflib
from pathlib import Path


class ToolError(Exception):
    """A user-facing error of a CLI tool (bad spec name, bad config, bad data): exit status 1."""


def load_module(spec: str, backend: str | None = None, parallel: bool | None = None):
    """Compile a .shape file, or load a stdlib module by name (`nemo_rl`)."""
    from ..api import STDLIB, compile_file, load

    path = Path(spec)
    if path.suffix == ".shape" or path.exists():
        if not path.is_file():
            raise ToolError(f"{spec}: no such file")
        return compile_file(path, backend, parallel)
    known = sorted(p.stem for p in STDLIB.glob("*.shape"))
    if spec not in known:
        close = difflib.get_close_matches(spec, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; stdlib modules: {', '.join(known)}"
        raise ToolError(f"{spec}: neither a .shape file nor a stdlib module{hint}")
    return load(spec, backend, parallel)


def pick_shaper(module, name: str | None):
    """The shaper or pipeline to run: the named one, the only one, or the module's only pipeline."""
    names = module.names()
    if name is not None:
        if name not in names:
            close = difflib.get_close_matches(name, list(names), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ToolError(f"{module.filename} has no shaper or pipeline {name!r}{hint} "
                            f"(it has {', '.join(names)})")
        return module[name]
    if len(names) == 1:
        return module[names[0]]
    if len(module.pipelines) == 1:
        return module[module.pipelines[0]]
    raise ToolError(f"{module.filename} defines {', '.join(names)}: choose one with --shaper NAME")


def stage_irs(shaper) -> list:
    """The ShaperIR of every stage, in order (one for a plain shaper)."""
    return [ir for ir, _ in shaper.stages]
