"""The names imports bind in a spec, and the clashes between them (E202)."""

from __future__ import annotations

from pathlib import Path

from ..syntax import ast as A
from ..syntax.source import Diagnostic, Span
from .imports import target_span


def alias_span(it: A.Import) -> Span:
    """Where the name an import binds is written: its `as` name (the statement's last token), else its target."""
    span = it.span
    return Span(span.source, span.end - len(it.alias), span.end) if it.alias else target_span(span)


def bound_name(it: A.Import) -> str:
    """The name an import binds in its file: its `as` name, else its target's stem."""
    return it.alias or Path(it.target).stem.replace("-", "_")


def name_clashes(module: A.Module) -> list[Diagnostic]:
    """E202 for each import whose name (`bound_name`) an earlier import or a fn, shaper or
    pipeline of the same file also defines: each name of a file means one thing, and a second
    import must not silently replace the first."""
    kinds = {A.FnDef: "fn", A.Shaper: "shaper", A.Pipeline: "pipeline", A.Import: "import"}
    defined = {it.name: it for it in module.items if isinstance(it, (A.FnDef, A.Shaper, A.Pipeline))}
    bound: dict[str, A.Import] = {}
    clashes = []
    for it in module.items:
        if not isinstance(it, A.Import):
            continue
        name = bound_name(it)
        other = bound.setdefault(name, it) if name not in defined else defined[name]
        if other is not it:
            line = other.span.source.position(other.span.start)[0]
            how = "is already defined" if isinstance(other, A.Import) else "is also defined"
            clashes.append(Diagnostic("E202", f"{name!r} {how} (by the {kinds[type(other)]} at line {line})",
                                      alias_span(it)))
    return clashes
