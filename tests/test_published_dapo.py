"""stdlib dapo: TRL's / open-r1's soft overlong punishment tests, verl's variant, thresholds, cache 0."""

from __future__ import annotations

import random

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def overlong(request):
    return shapec.load("dapo", backend=request.param).overlong


def paper(length, max_length, cache, factor=1.0, linear=False):
    """DAPO equation 13 (times verl's penalty factor), transcribed."""
    if length <= max_length - cache:
        return 0.0
    if length <= max_length:
        return factor * ((max_length - cache) - length) / cache
    return factor * ((max_length - cache) - length) / cache if linear and cache > 0 else -factor


def term(fn, lengths, **params):
    return fn([1.0] * len(lengths), group_size=len(lengths), channels={"length": lengths},
              params=params).terms["overlong"].tolist()


# TRL tests/test_rewards.py, TestSoftOverlongPunishmentReward (max_completion_len=100, soft_punish_cache=20)
def test_trl_short_completion(overlong):
    assert term(overlong, [50], max_length=100, cache=20) == [0.0]


def test_trl_long_completion(overlong):
    assert term(overlong, [110], max_length=100, cache=20) == [-1.0]


def test_trl_intermediate_completion(overlong):
    assert term(overlong, [90], max_length=100, cache=20) == pytest.approx([-0.5], abs=1e-4)


def test_lengths_exactly_at_each_threshold(overlong):
    # 80 is the last length without punishment, 81 the first in the ramp, 100 the ramp's end
    assert term(overlong, [80, 81, 100, 101], max_length=100, cache=20) == [0.0, -0.05, -1.0, -1.0]


def test_cache_zero_is_a_step_at_max_length(overlong):
    assert term(overlong, [0, 100, 101, 5000], max_length=100, cache=0) == [0.0, 0.0, -1.0, -1.0]
    assert term(overlong, [100, 101], max_length=100, cache=0, past_max="linear") == [0.0, -1.0]


def test_verl_penalty_factor_scales_the_ramp_and_the_floor(overlong):
    assert term(overlong, [90, 100, 110], max_length=100, cache=20, penalty_factor=0.5) == [-0.25, -0.5, -0.5]


def test_verl_keeps_the_ramp_past_max_length(overlong):
    assert term(overlong, [110, 140], max_length=100, cache=20, past_max="linear") == [-1.5, -3.0]


def test_the_term_is_added_to_the_reward(overlong):
    out = overlong([1.0, 0.0, 0.5], group_size=3, channels={"length": [90, 90, 200]},
                   params={"max_length": 100, "cache": 20})
    assert out.rewards.tolist() == [0.5, -0.5, -0.5]


def test_defaults_are_dapos_lengths(overlong):
    assert term(overlong, [16384, 18432, 20481]) == [0.0, -0.5, -1.0]


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_paper_formula(overlong, seed):
    rng = random.Random(seed)
    max_length, cache = rng.randint(1, 400), rng.choice([0, 1, 7, 50])
    factor, linear = rng.choice([0.0, 0.5, 1.0, 2.0]), rng.random() < 0.5
    lengths = [float(rng.randint(0, 500)) for _ in range(40)]
    got = term(overlong, lengths, max_length=max_length, cache=cache, penalty_factor=factor,
               past_max="linear" if linear else "capped")
    want = [paper(x, max_length, cache, factor, linear) for x in lengths]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
