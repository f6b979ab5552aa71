"""0.0 and -0.0 are equal, so which of them a min, max or clip returns is a rule, not arithmetic:
the left operand on a tie, the first of equal values in a reduction (k_min, k_max, k_clip and
the kernels' strict running comparisons). np.minimum, np.maximum and np.min leave it to the
platform, and the interpreter used them: the two backends returned zeros of opposite signs."""

from __future__ import annotations

import numpy as np
import pytest

from ..helpers import every_backend

SPEC = """shaper t() requires real produces real {
  result = RESULT
}
"""
RESULTS = ["max(reward)", "min(reward)", "batch.max(reward)", "batch.min(reward)", "max(reward, -reward)",
           "min(reward, -reward)", "clip(reward, -reward, 1)", "clip(-reward, reward, reward)"]


@pytest.mark.parametrize("result", RESULTS)
def test_signed_zeros_come_out_the_same_on_every_backend(result):
    shapers = every_backend(SPEC.replace("RESULT", result))
    for rewards in ([0.0, -0.0], [-0.0, 0.0], [-0.0, -0.0, 0.0, 0.0], [0.0, 0.0, -0.0, -0.0]):
        outs = [s(np.array(rewards), group_size=len(rewards)).rewards.tobytes() for s in shapers]
        assert outs[1] == outs[0] and outs[2] == outs[0], (result, rewards)
