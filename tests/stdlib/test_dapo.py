"""stdlib dapo: TRL's / open-r1's soft overlong punishment tests, verl's variant, thresholds, cache 0.

The differential tests run transcriptions of the authors' code (TRL `trl/rewards/other_rewards.py`,
`_SoftOverlongPunishment.__call__`; verl `verl/workers/reward_manager/dapo.py`, the overlong block of
`DAPORewardManager.__call__`) written from reading it, in its own dtypes.
"""

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


def trl_soft_overlong_punishment(lengths, max_completion_len, soft_punish_cache):
    """TRL's (and open-r1's) `get_soft_overlong_punishment` body, transcribed: Python float64."""
    rewards = []
    for completion_length in lengths:
        if completion_length <= max_completion_len - soft_punish_cache:
            rewards.append(0.0)
        elif max_completion_len - soft_punish_cache < completion_length <= max_completion_len:
            rewards.append((max_completion_len - soft_punish_cache - completion_length) / soft_punish_cache)
        else:
            rewards.append(-1.0)
    return rewards


def verl_overlong_reward(valid_response_length, max_resp_len, overlong_buffer_len, penalty_factor, dtype):
    """verl's DAPORewardManager overlong block, transcribed. dtype float32 is what verl runs: the
    length is an int64 tensor, so `-exceed_len / overlong_buffer_len` and the product are float32."""
    expected_len = max_resp_len - overlong_buffer_len
    exceed_len = valid_response_length - expected_len
    overlong_reward = dtype(-exceed_len) / dtype(overlong_buffer_len) * dtype(penalty_factor)
    return min(overlong_reward, 0)


def random_case(rng):
    max_length, cache = rng.randint(1, 300), rng.choice([0, 1, 2, 7, 16, 50, 299])
    thresholds = [max_length, max_length + 1, max_length - cache, max_length - cache + 1, max_length - cache - 1]
    lengths = [max(0, rng.choice([rng.randint(0, 400)] + thresholds)) for _ in range(30)]
    return max_length, cache, lengths


@pytest.mark.parametrize("seed", range(6))
def test_matches_trls_code_bit_for_bit(overlong, seed):
    """TRL's values are Python floats; GRPOTrainer stores them in a float32 tensor, which is this
    spec's float64 result rounded to float32. Covers cache 0 and lengths at each threshold."""
    rng = random.Random(seed)
    max_length, cache, lengths = random_case(rng)
    got = np.array(term(overlong, [float(x) for x in lengths], max_length=max_length, cache=cache))
    want = np.array(trl_soft_overlong_punishment(lengths, max_length, cache))
    assert got.tolist() == want.tolist()
    assert got.astype(np.float32).tolist() == want.astype(np.float32).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_matches_verls_code(overlong, seed):
    """verl: bit for bit against its expression in float64, and within float32 rounding of the
    float32 it computes. Its reward is the score plus the overlong reward (`reward += ...`)."""
    rng = random.Random(seed)
    max_length, cache, lengths = random_case(rng)
    cache = cache or 1  # verl divides by the buffer length: NaN and -inf at a zero buffer
    factor = rng.choice([0.0, 0.1, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0])
    scores = [rng.choice([1.0, -1.0, 0.0]) for _ in lengths]
    out = overlong(scores, group_size=len(lengths), channels={"length": [float(x) for x in lengths]},
                   params={"max_length": max_length, "cache": cache, "penalty_factor": factor, "past_max": "linear"})
    want64 = [verl_overlong_reward(x, max_length, cache, factor, np.float64) for x in lengths]
    assert out.terms["overlong"].tolist() == [float(w) for w in want64]
    want32 = [np.float32(s) + verl_overlong_reward(x, max_length, cache, factor, np.float32)
              for s, x in zip(scores, lengths)]
    np.testing.assert_allclose(out.rewards, np.array(want32, dtype=np.float64), rtol=2e-7, atol=2e-7)


def test_the_ramp_is_divided_before_it_is_scaled_as_in_verl(overlong):
    """verl computes -exceed / buffer * factor: at max_length exactly -factor. Scaling first,
    0.1 * -3 / 3, gives -0.10000000000000002."""
    assert term(overlong, [100.0], max_length=100, cache=3, penalty_factor=0.1) == [-0.1]
