"""Each numba helper a kernel calls is compiled once, for the types it is called with at run time:
a count that numba types as a literal first (`k = 0`) compiles every helper it reaches twice, which
was a second or more of a sorting kernel's cold compile (docs/performance.md, "Compile latency")."""

from __future__ import annotations

import numpy as np
import pytest
from numba.core import types as nt
from numba.core.registry import CPUDispatcher

import shapec
from shapec.compiler.lowering.helper_source import HELPER_FUNCTIONS

from ..helpers import fresh_cache

SPEC = """shaper t() requires real produces real {
  input ok: bool
  term spread = mad(reward where ok) ?? 0
  term middle = median(reward) ?? 0
  term second = nth_largest(reward where ok, 1) ?? 0
  term scale = std(reward where ok) ?? 0
}
"""


@pytest.mark.slow
def test_every_helper_a_kernel_calls_compiles_once_without_literal_types(tmp_path, monkeypatch):
    fresh_cache(tmp_path, monkeypatch)
    shaper = shapec.compile_str(SPEC, backend="numba").t
    shaper(np.array([1.0, 0.0, 1.0, 0.5]), group_size=4, channels={"ok": [1, 1, 0, 1]})
    module = next(iter(shaper._kernels[0].variants.values())).py_func.__globals__
    helpers = {name: f for name, f in module.items() if name in HELPER_FUNCTIONS and isinstance(f, CPUDispatcher)}
    # k_cmp takes its operator as a literal on purpose: one compile per operator a kernel uses
    compiled = {name: f.signatures for name, f in helpers.items() if f.signatures and name != "k_cmp"}
    assert {"k_sort", "srt_mad", "srt_median", "srt_nth_largest", "red_std"} <= set(compiled)
    for name, signatures in compiled.items():
        assert len(signatures) == 1, (name, signatures)
        assert not any(isinstance(t, nt.Literal) for t in signatures[0]), (name, signatures)
