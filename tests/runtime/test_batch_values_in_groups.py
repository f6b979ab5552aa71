"""A batch reduction inside a group statement (a `when`, a term's value) is the same for every
group: the kernel computes it once before the group loop. Written inside the loop it used to
re-bind the loop's `g`, `s` and `e`, so the statement after it shaped the last group's rollouts
with another group's values and left the others unwritten; and `batch.max` there did not compile."""

from __future__ import annotations

import numpy as np
import pytest

from ..helpers import every_backend, ragged_offsets

SPECS = {
    "mean_in_when": "term a = w on right when w > 0 and batch.mean(y where right) > 3",
    "max_in_when": "term a = w on right when w > 0 and batch.max(y where right) > 9",
    "count_in_value": "term a = w * batch.count(right) / 100 on right",
    "two_in_two_terms": "term a = w on right when batch.mean(y) > 4\n"
                        "  term b = -w on right when batch.min(y) < 2 and w > 0",
}
HEAD = ("shaper t(w: float = 0.1) requires binary produces real {\n  input x: tokens\n"
        "  gate right = reward > 0\n  let y = float(x) * 2\n  ")


@pytest.mark.parametrize("name", SPECS)
def test_batch_reductions_in_group_statements_match_the_interpreter(name):
    source = HEAD + SPECS[name] + "\n}\n"
    shapers = every_backend(source)
    rng = np.random.default_rng(len(name))
    for _ in range(25):
        offsets = ragged_offsets(rng, 6, 8)
        n = int(offsets[-1])
        rewards = (rng.random(n) < 0.6).astype(float)
        x = rng.integers(0, 9, n).astype(float)
        w = float(rng.choice([0.0, 0.1, -0.2]))
        outs = [s(rewards, offsets=offsets, channels={"x": x}, params={"w": w}) for s in shapers]
        for out in outs[1:]:
            assert out.rewards.tobytes() == outs[0].rewards.tobytes(), (offsets, w)
            for t in outs[0].terms:
                assert out.terms[t].tobytes() == outs[0].terms[t].tobytes()
