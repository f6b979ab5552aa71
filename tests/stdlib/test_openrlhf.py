"""stdlib openrlhf: OpenRLHF's overlong and stop-properly penalties against a transcription of
`openrlhf/trainer/ppo_utils/length_penalty.py` (OpenRLHF 0.11.2: `apply_overlong_penalty`, then
`apply_stop_properly_penalty`, as `apply_length_penalties` calls them), written from reading it, in
Python floats; tests/integration/test_openrlhf.py runs OpenRLHF's own code."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.runtime.params import ParamError


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def overlong(request):
    return shapec.load("openrlhf", backend=request.param).overlong


def openrlhf(rewards, lengths, truncated, max_len, buffer=None, factor=1.0, stop_coef=None):
    """apply_length_penalties on one batch, None as the code's unset arguments."""
    out = list(rewards)
    if buffer is not None:
        expected_len = max_len - buffer
        for j, length in enumerate(lengths):
            exceed_len = min(length - expected_len, buffer)
            if exceed_len > 0:
                out[j] += -exceed_len / buffer * factor
    if stop_coef is not None:
        for j, flag in enumerate(truncated):
            if flag:
                out[j] = stop_coef if stop_coef < 0 else out[j] * stop_coef
    return out


def shaped(fn, rewards, lengths, truncated, **params):
    return fn(rewards, group_size=len(rewards), channels={"length": lengths, "truncated": truncated},
              params=params).rewards.tolist()


def test_a_response_past_max_len_minus_buffer_loses_its_share_of_the_buffer(overlong):
    # expected 80: 80 keeps its reward, 81 loses 1/20, 100 and past lose the whole factor
    got = shaped(overlong, [1.0] * 5, [80, 81, 90, 100, 130], [0] * 5, max_len=100, buffer=20, factor=0.5)
    assert got == [1.0, 0.975, 0.75, 0.5, 0.5]


def test_unset_penalties_leave_every_reward_as_it_is(overlong):
    rewards = [1.0, 0.0, 0.3, -2.0]
    assert shaped(overlong, rewards, [5000, 10, 2048, 99999], [1, 1, 0, 1]) == rewards


def test_a_truncated_response_is_scaled_or_replaced_by_the_stop_coefficient(overlong):
    rewards, lengths, flags = [1.0, 1.0, 0.0, 1.0], [90, 10, 90, 10], [1, 1, 1, 0]
    assert shaped(overlong, rewards, lengths, flags, max_len=100, buffer=20, stop_coef=0.5) == [0.25, 0.5, -0.25, 1.0]
    assert shaped(overlong, rewards, lengths, flags, max_len=100, buffer=20, stop_coef=-0.5) == [-0.5, -0.5, -0.5, 1.0]


def test_a_stop_coefficient_above_one_is_refused(overlong):
    with pytest.raises(ParamError, match="stop_coef"):
        shaped(overlong, [1.0], [10], [1], stop_coef=1.5)


@pytest.mark.parametrize("seed", range(40))
def test_matches_openrlhfs_code_on_random_batches(overlong, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 17))
    max_len = int(rng.choice([1, 64, 100, 2048]))
    buffer = None if rng.random() < 0.2 else float(rng.choice([0.0, 1.0, 20.0, float(max_len)]) if max_len >= 20
                                                   else rng.choice([0.0, float(max_len)]))
    factor = float(rng.choice([1.0, 0.5, 2.0, 0.0, -1.0, 0.3]))
    stop_coef = None if rng.random() < 0.3 else float(rng.choice([0.0, 0.5, 1.0, -0.5, -1.0, 0.25]))
    rewards = rng.choice([0.0, 1.0, 0.5, -0.25, 2.0], n).tolist()
    # lengths around every threshold: the buffer's start, max_len, exactly met and past
    edges = [0, max_len, max_len + 7, *([max_len - buffer, max_len - buffer + 1] if buffer is not None else [])]
    lengths = [float(rng.choice(edges)) if rng.random() < 0.5 else float(rng.integers(0, 2 * max_len + 2))
               for _ in range(n)]
    lengths = [max(0.0, x) for x in lengths]
    truncated = rng.integers(0, 2, n).tolist()
    params = {"max_len": max_len, "factor": factor}
    if buffer is not None:
        params["buffer"] = buffer
    if stop_coef is not None:
        params["stop_coef"] = stop_coef
    expected = openrlhf(rewards, lengths, truncated, max_len, buffer, factor, stop_coef)
    assert shaped(overlong, rewards, lengths, truncated, **params) == pytest.approx(expected, abs=1e-12)
