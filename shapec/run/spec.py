"""Resolve a SPEC argument of any subcommand: a .shape file or a stdlib module name."""

from __future__ import annotations

import difflib
from pathlib import Path

from ..paths import not_a_file, path_kind, printable


class ToolError(Exception):
    """A user-facing error of a CLI tool (bad spec name, bad config, bad data): exit status 1."""


def is_path(spec: str) -> bool:
    """A `.shape` name or anything that exists is a path; any other word names a stdlib module."""
    path = Path(spec)
    return path.suffix == ".shape" or path_kind(path) != "missing"


def stdlib_path(name: str) -> Path:
    """The file of stdlib module `name`; an unknown name gets the closest one, or the full list."""
    from ..api import STDLIB

    known = sorted(p.stem for p in STDLIB.glob("*.shape"))
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; stdlib modules: {', '.join(known)}"
        raise ToolError(f"{printable(name)}: neither a .shape file nor a stdlib module{hint}")
    return STDLIB / f"{name}.shape"


def spec_path(spec: str) -> Path:
    """The .shape file a SPEC argument names (a path as given, or the stdlib module's file)."""
    if not is_path(spec):
        return stdlib_path(spec)
    path = Path(spec)
    kind = path_kind(path)
    if kind == "dir":
        raise ToolError(f"{printable(spec)}: a directory; expected one .shape file or a stdlib module name")
    if kind != "file":
        raise ToolError(f"{printable(spec)}: {not_a_file(kind)}")
    return path


def pick_shaper(module, name: str | None):
    """The shaper or pipeline to run: the named one, the only one, or the module's only pipeline."""
    names = module.names()
    if name is not None:
        if name not in names:
            close = difflib.get_close_matches(name, list(names), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ToolError(f"{printable(module.filename)} has no shaper or pipeline {name!r}{hint} "
                            f"(it has {', '.join(names) or 'none'})")
        return module[name]
    if not names:
        raise ToolError(f"{printable(module.filename)} defines no shaper or pipeline")
    if len(names) == 1:
        return module[names[0]]
    if len(module.pipelines) == 1:
        return module[module.pipelines[0]]
    raise ToolError(f"{printable(module.filename)} defines {', '.join(names)}: choose one with --shaper NAME")


def stage_irs(shaper) -> list:
    """The ShaperIR of every stage, in order (one for a plain shaper)."""
    return [ir for ir, _ in shaper.stages]
