"""A term `on argmin(...)` or `on argmax(...)` applies at one rollout of its group at most. The
kernel writes 0 across the group and then the value at that rollout (statements.py,
`term_at_one_rollout`), where the general loop tested the index at every rollout; both must
give the interpreter's bits, -0.0 terms and totals and an empty selection included. A term a
group skips adds its 0.0s to the interpreter's sum, which turns a -0.0 sum into 0.0; the kernel
adds them once at the end (`term_sum`), and `group_when` fails without it."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.compiler.lowering.module import emit_python

from ..helpers import every_backend, ragged_offsets

SPECS = {  # after a term that is -0.0 wherever it applies when w is 0 (rewards -0.0 included), so totals can be -0.0
    "first_term": "term b = v on argmin(y where right)\n  term a = -w on not right",
    "after_a_term": "term a = -w on not right\n  term b = v on argmax(y where y > 3)",
    "rollout_when": "term a = -w on not right\n  term b = v on argmin(y) when y > 2 and w >= 0",
    "group_when": "term a = -w * y on not right\n  term b = -v on argmax(y) when count(right) >= 1",
    "two_indices": "term a = -w on not right\n  term b = v on argmin(y where right)\n  term c = v * y on argmax(y)",
}
HEAD = ("shaper t(w: float = 0.0, v: float = 0.0) requires real produces real {\n  input x: tokens\n"
        "  gate right = reward > 0\n  let y = float(x)\n  ")


@pytest.mark.parametrize("name", SPECS)
def test_terms_at_one_rollout_match_the_interpreter(name):
    source = HEAD + SPECS[name] + "\n}\n"
    assert "k_at(" in emit_python(shapec.compile_str(source, "t.shape", "interpreter")["t"].ir)
    shapers = every_backend(source)
    rng = np.random.default_rng(len(name))
    for _ in range(40):
        offsets = ragged_offsets(rng, 5, 6)
        n = int(offsets[-1])
        rewards = rng.choice([-0.0, 0.0, 1.0, -0.0, 2.5], n)
        x = rng.integers(0, 6, n).astype(float)
        params = {"w": float(rng.choice([0.0, 0.5])), "v": float(rng.choice([0.0, -0.0, 0.25]))}
        outs = [s(rewards, offsets=offsets, channels={"x": x}, params=params) for s in shapers]
        for out in outs[1:]:
            assert out.rewards.tobytes() == outs[0].rewards.tobytes(), (offsets, rewards, x, params)
            for t in outs[0].terms:
                assert out.terms[t].tobytes() == outs[0].terms[t].tobytes(), (t, offsets, x, params)

