"""Shared test helpers: locate a snippet in source, and collect diagnostics."""

from __future__ import annotations

import textwrap

from shapec import check_source


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def position(source: str, snippet: str, nth: int = 0) -> tuple[int, int]:
    """1-based line and column of the nth occurrence of snippet."""
    start = -1
    for _ in range(nth + 1):
        start = source.index(snippet, start + 1)
    line = source.count("\n", 0, start) + 1
    col = start - (source.rfind("\n", 0, start) + 1) + 1
    return line, col


def codes(source: str) -> list[str]:
    return [d.code for d in check_source(source)]


def assert_error(source: str, code: str, snippet: str, nth: int = 0, message: str | None = None):
    """The source has exactly one diagnostic, with this code, at this snippet."""
    diags = check_source(source)
    assert [d.code for d in diags] == [code], [d.render() for d in diags]
    line, col, _, _ = diags[0].location()
    assert (line, col) == position(source, snippet, nth), diags[0].render()
    if message is not None:
        assert message in diags[0].message, diags[0].message
    return diags[0]


def assert_ok(source: str):
    diags = check_source(source)
    assert diags == [], [d.render() for d in diags]


def every_backend(source: str, name: str = "t") -> list:
    """One shaper of a spec on the interpreter, numba and numba parallel (the first is the oracle)."""
    import shapec

    return [shapec.compile_str(source, "t.shape", "interpreter")[name],
            shapec.compile_str(source, "t.shape", "numba")[name],
            shapec.compile_str(source, "t.shape", "numba", parallel=True)[name]]


def ragged_offsets(rng, largest: int, most_groups: int):
    """Offsets of 1..most_groups groups of 0..largest rollouts each (empty groups included)."""
    import numpy as np

    sizes = rng.integers(0, largest + 1, int(rng.integers(1, most_groups + 1)))
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def fresh_cache(tmp_path, monkeypatch):
    """An empty cache folder, and nothing this process remembers of other folders: no kernel
    loaded before, no fall back to a private folder. Returns the folder kernels go to."""
    from shapec import files
    from shapec.compiler import store

    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(store, "_LOADED", {})
    monkeypatch.setattr(files, "_FALLBACK", [])
    return tmp_path / "cache" / "kernels"
