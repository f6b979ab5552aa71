"""stdlib shorterbetter: the sample-optimal length reward against a transcription of the authors'
code (JingyangYi/ShorterBetter at 6399366, `verl/verl/workers/reward_manager/naive.py`:
`check_correctness_and_length` and `sb_compute_score`), written from reading it in float64, on
random groups on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def shorterbetter(request):
    return shapec.load("shorterbetter", backend=request.param).shorterbetter


def authors(correct, lengths, alpha=2.0, beta=0.001):
    """One prompt's group: the shortest correct length, or the mean length, is optimal."""
    correct_lengths = [n for c, n in zip(correct, lengths) if c]
    optimal = min(correct_lengths) if correct_lengths else sum(lengths) / len(lengths)
    return [(alpha if c else 0.0) - abs(n - optimal) * beta for c, n in zip(correct, lengths)]


@pytest.mark.parametrize("seed", range(80))
def test_matches_the_authors_code(shorterbetter, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 17, int(rng.integers(1, 5))).tolist()
    alpha, beta = float(rng.choice([2.0, 1.0, 0.5, 0.0])), float(rng.choice([0.001, 0.01, 0.0, 0.5]))
    rewards, lengths, expected = [], [], []
    for k in sizes:
        p = float(rng.choice([0.0, 1.0, 0.5]))
        correct = (rng.random(k) < p).astype(float).tolist()
        group = rng.choice([0, 7, 7, 100, 4096], k).astype(float).tolist() if rng.random() < 0.3 \
            else rng.integers(0, 5000, k).astype(float).tolist()
        rewards += correct
        lengths += group
        expected += authors(correct, group, alpha, beta)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    got = shorterbetter(rewards, offsets=offsets, channels={"length": lengths}, params={"alpha": alpha, "beta": beta})
    assert got.rewards.tolist() == pytest.approx(expected, abs=1e-12)


def test_the_shortest_correct_length_is_optimal_and_the_mean_without_one(shorterbetter):
    got = shorterbetter([1, 1, 0, 0, 0], group_size=5, channels={"length": [300, 200, 100, 1000, 250]})
    assert got.rewards.tolist() == pytest.approx([1.9, 2.0, -0.1, -0.8, -0.05], abs=1e-15)
    none_right = shorterbetter([0, 0, 0], group_size=3, channels={"length": [100, 300, 500]})
    assert none_right.rewards.tolist() == pytest.approx([-0.2, 0.0, -0.2], abs=1e-15)


def test_graded_rewards_are_passed_through(shorterbetter):
    got = shorterbetter([0.5, 1.0], group_size=2, channels={"length": [10, 20]})
    assert got.rewards.tolist() == [0.5, 1.0] and got.skip_reasons == ["non_binary"]
