"""stdlib efficient: Arora & Zanette's reward as their server computes it (population std, epsilon).

The differential test runs a transcription of the authors' code (Zanette-Labs/efficient-reasoning,
reward_server/math_server.py, `query` with reward_type sigmoid), written from reading it, in NumPy
float64 as the server computes.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import shapec

from ..helpers import ragged_offsets


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def efficient(request):
    return shapec.load("efficient", backend=request.param).efficient_reasoning


def paper(rewards, lengths, alpha):
    """Section 3, transcribed: 1 - alpha * sigmoid((len - mean) / (std + 1e-7)) over correct rollouts."""
    right = [x for r, x in zip(rewards, lengths) if r > 0]
    if not right:
        return list(rewards)
    mean = sum(right) / len(right)
    std = math.sqrt(sum((x - mean) ** 2 for x in right) / len(right))
    return [r * (1 - alpha / (1 + math.exp(-(x - mean) / (std + 1e-7)))) if r > 0 else r
            for r, x in zip(rewards, lengths)]


def run(fn, rewards, lengths, alpha=0.1):
    return fn(rewards, group_size=len(rewards), channels={"length": lengths}, params={"alpha": alpha}).rewards.tolist()


def test_population_std_of_the_correct_lengths(efficient):
    # correct lengths 100, 300, 200: mean 200, population std sqrt(20000/3) (the sample std would be 100)
    std = math.sqrt(20000 / 3)
    want = [1 - 0.2 / (1 + math.exp(100 / (std + 1e-7))), 1 - 0.2 / (1 + math.exp(-100 / (std + 1e-7))), 0.0, 0.9]
    assert run(efficient, [1, 1, 0, 1], [100, 300, 50, 200], 0.2) == pytest.approx(want, abs=1e-12)


def test_one_correct_rollout_gets_one_minus_half_alpha(efficient):
    assert run(efficient, [0, 1, 0], [10, 500, 20], 0.4) == [0.0, 0.8, 0.0]


def test_tied_correct_lengths_get_one_minus_half_alpha(efficient):
    assert run(efficient, [1, 1, 1, 0], [64, 64, 64, 9], 0.5) == [0.75, 0.75, 0.75, 0.0]


def test_all_wrong_is_unchanged_and_alpha_zero_is_the_identity(efficient):
    assert run(efficient, [0, 0], [10, 30]) == [0.0, 0.0]
    assert run(efficient, [1, 1], [10, 30], 0.0) == [1.0, 1.0]


def test_a_group_of_one(efficient):
    assert run(efficient, [1], [123], 0.1) == [0.95]


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_paper_formula(efficient, seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 10) for _ in range(5)]
    rewards = [float(rng.randint(0, 1)) for _ in range(sum(sizes))]
    lengths = [float(rng.randint(0, rng.choice([3, 4000]))) for _ in range(sum(sizes))]
    alpha = rng.random()
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = efficient(rewards, offsets=offsets, channels={"length": lengths}, params={"alpha": alpha})
    want, start = [], 0
    for n in sizes:
        want += paper(rewards[start:start + n], lengths[start:start + n], alpha)
        start += n
    np.testing.assert_allclose(out.rewards, want, rtol=0, atol=1e-12)


def server_rewards(accuracies, response_lens, alpha):
    """math_server.py `query`, transcribed for one question: the lengths of its correct responses
    (`avg_length[question]`), then each response's reward."""
    lens = [response_len for accuracy, response_len in zip(accuracies, response_lens) if accuracy > 0]
    rewards = []
    for accuracy, response_len in zip(accuracies, response_lens):
        if accuracy > 0:
            relative_length = (response_len - np.mean(lens)) / (np.std(lens) + 1e-7)
            reward = accuracy * (1 - alpha * (1 / (1 + np.exp(-relative_length))))
        else:
            reward = 0.0
        rewards.append(reward)
    return rewards


def random_groups(rng):
    """Ragged groups (empty ones and groups of one included) that are all wrong, all right, or
    mixed, with lengths that tie, sit in a narrow range, spread wide, or all repeat one value."""
    offsets = ragged_offsets(rng, 16, 6)
    accuracies, lengths = [], []
    for g in range(len(offsets) - 1):
        n = int(offsets[g + 1] - offsets[g])
        p_right = rng.choice([0.0, 1.0, 0.5])
        accuracies += [float(rng.random() < p_right) for _ in range(n)]
        kind = rng.integers(0, 3)
        lengths += ([int(rng.integers(0, 5000))] * n if kind == 0 else
                    [int(x) for x in rng.integers(0, 4 if kind == 1 else 5000, n)])
    return offsets, accuracies, lengths


@pytest.mark.parametrize("seed", range(8))
def test_matches_the_authors_server(efficient, seed):
    """float64 to within a few ulps (NumPy's pairwise sums and exp, see the module docstring); the
    float32 tensor OpenRLHF builds from the server's rewards is this spec's float64 rounded."""
    rng = np.random.default_rng(seed)
    offsets, accuracies, lengths = random_groups(rng)
    alpha = float(rng.choice([0.05, 0.1, 0.2, 0.4, 1.0, rng.random()]))
    out = efficient(accuracies, offsets=offsets, channels={"length": [float(x) for x in lengths]},
                    params={"alpha": alpha})
    want = []
    for g in range(len(offsets) - 1):
        s, e = offsets[g], offsets[g + 1]
        want += server_rewards(accuracies[s:e], lengths[s:e], alpha)
    np.testing.assert_allclose(out.rewards, want, rtol=1e-15, atol=0)
    np.testing.assert_allclose(out.rewards.astype(np.float32), np.array(want, dtype=np.float32), rtol=1.2e-7, atol=0)


def test_the_spread_squares_by_multiplication_as_np_std_does(efficient):
    """np.std squares the deviations with a multiply; a power of 2 taken by NumPy's vector pow (the
    interpreter's **) rounds (2 - 1.2) ** 2 to 0.64 where 0.8 * 0.8 is 0.6400000000000001."""
    accuracies, lengths = [0, 1, 0, 0, 1, 1, 1, 1], [0, 2, 1, 0, 2, 0, 1, 1]
    alpha = 0.9107719779539389
    got = run(efficient, accuracies, [float(x) for x in lengths], alpha)
    assert got == server_rewards(accuracies, lengths, alpha)
