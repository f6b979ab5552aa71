"""stdlib efficient: Arora & Zanette's reward as their server computes it (population std, epsilon)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import shapec


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
