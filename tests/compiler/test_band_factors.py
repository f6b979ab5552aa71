"""A factor `band(x, b)` with a group-level band tests the band's presence once per group and takes
the not-applied loop without one; with one, it looks the band up only where the factor can apply
(statements.py, `step_factor`). Both must give the interpreter's bits: groups with and without a
band, a band from metadata or from a param, a factor after a clamp that zeroes rewards, a factor
that is not a bare band (looked up on every rollout), and the factor rows of the breakdown."""

from __future__ import annotations

import re

import numpy as np
import pytest

import shapec
from shapec.compiler.lowering.module import emit_python

from ..helpers import every_backend, ragged_offsets

SPECS = {
    "meta_band": "factor m = band(y, prof.limit) on right",
    "param_band": "factor m = band(y, fixed) on right when w > 0",
    "band_or_param": "factor m = band(y, prof.limit ?? fixed) on right",
    "after_a_clamp": "term a = -w * y on right\n  clamp >= 0\n  factor m = band(y, prof.limit)",
    "not_bare": "factor m = 0.5 + band(y, prof.limit) / 2 on right",
}
HEAD = ("shaper t(w: float = 0.0, fixed: band? ) requires real produces real {\n  input x: tokens\n"
        "  meta prof: {limit: band}\n  gate right = reward > 0\n  let y = float(x)\n  ")


def band_table(rng, groups: int) -> np.ndarray:
    """(G, 3) bands: a NaN row is a group without one."""
    a = rng.integers(0, 4, groups).astype(float)
    table = np.stack([a, a + rng.integers(1, 4, groups), rng.choice([0.0, 0.5, 1.0], groups)], axis=1)
    table[rng.random(groups) < 0.4] = np.nan
    return table


@pytest.mark.parametrize("name", SPECS)
def test_band_factors_match_the_interpreter(name):
    source = HEAD + SPECS[name] + "\n}\n"
    code = emit_python(shapec.compile_str(source, "t.shape", "interpreter")["t"].ir)
    assert bool(re.search(r"if band\d+ == ", code)) == (name != "not_bare")  # a bare band: its presence, per group
    shapers = every_backend(source)
    rng = np.random.default_rng(len(name))
    for _ in range(40):
        offsets = ragged_offsets(rng, 5, 6)
        n, groups = int(offsets[-1]), len(offsets) - 1
        rewards = rng.choice([-0.0, 0.0, 1.0, 0.5, 2.5], n)
        x = rng.integers(0, 7, n).astype(float)
        params = {"w": float(rng.choice([0.0, 0.5])), "fixed": None if rng.random() < 0.3 else (1.0, 4.0, 0.25)}
        metadata = {"prof": {"limit": band_table(rng, groups)}}
        outs = [s(rewards, offsets=offsets, channels={"x": x}, metadata=metadata, params=params) for s in shapers]
        for out in outs[1:]:
            assert out.rewards.tobytes() == outs[0].rewards.tobytes(), (offsets, rewards, x, params, metadata)
            assert out.factors["m"].tobytes() == outs[0].factors["m"].tobytes(), (offsets, x, params, metadata)
