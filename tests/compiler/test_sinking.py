"""Sinking (lowering/sinking.py): a let only guarded statements read is computed only where one
of them can apply; a let anything else reads is computed for every group. Either way the kernel
gives the interpreter's outputs, with the readers on or off."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import shapec
from shapec.compiler.lowering.module import emit_python

SPEC = """
shaper sunk(w: float = 0.0, v: float = 0.0) requires binary produces real {
  input x: tokens
  gate right = reward > 0
  let top = median(x where right)
  let above = top + 1
  let widest = max(x)
  let spread = max(x) - min(x)
  term a = w on right when w > 0 and x > above
  term b = -v on right when v > 0 and x < top
  term c = 0.0 * float(widest)
  term d = 0.001 * float(spread) on right
  metric mean_widest = batch.mean(widest)
}
"""


def sunk_names(source: str, name: str) -> set[str]:
    text = emit_python(shapec.compile_str(source, "sunk.shape", "interpreter")[name].ir)
    return {line.split("# ", 1)[1].split(":")[0].split(" ", 1)[1] for line in text.splitlines()
            if line.strip().startswith("if ") and "only where a statement reading it can apply" in line}


def test_only_lets_guarded_statements_read_are_sunk():
    names = sunk_names(SPEC, "sunk")
    assert any(n.endswith("_top") for n in names) and any(n.endswith("_above") for n in names), names
    # read by a metric, or by a term with no group-level condition: computed where they stand
    assert not any(n.endswith(("_widest", "_spread", "_right")) for n in names), names


@pytest.mark.parametrize("w, v", list(itertools.product((0.0, 0.25), (0.0, 0.5))))
def test_sunk_lets_give_the_interpreters_outputs(w, v):
    shapers = [shapec.compile_str(SPEC, "sunk.shape", backend)["sunk"] for backend in ("numba", "interpreter")]
    rng = np.random.default_rng(int(w * 8 + v * 4))
    for _ in range(20):
        G, k = int(rng.integers(1, 9)), int(rng.integers(1, 6))
        rewards = (rng.random(G * k) < rng.choice([0.0, 0.5, 1.0])).astype(float)
        x = rng.integers(0, 12, G * k).astype(float)
        out = [s(rewards, group_size=k, channels={"x": x}, params={"w": w, "v": v}) for s in shapers]
        assert out[0].rewards.tobytes() == out[1].rewards.tobytes()
        assert out[0].metrics == out[1].metrics
        for kind in ("terms", "skip_codes"):
            got, want = getattr(out[0].stages[0], kind), getattr(out[1].stages[0], kind)
            if isinstance(got, dict):
                assert all(np.array_equal(got[t], want[t]) for t in want)
            else:
                assert np.array_equal(got, want)
