"""stdlib jet: JET's reward against a transcription of the authors' code (JinyiHan99/Just-Enough-Think
at 89cf33e, `EasyR1/examples/reward_function/math.py`, `compute_score` on a whole batch), written
from reading it, in Python floats, on random batches on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def jet(request):
    return shapec.load("jet", backend=request.param).jet


def authors(accuracy, formatted, lengths, format_weight=0.1, alpha=1.2, delta=0.05):
    scores = [(1 - format_weight) * a + format_weight * f for a, f in zip(accuracy, formatted)]
    correct = [i for i, a in enumerate(accuracy) if a == 1.0]
    if correct:
        length_min = min(lengths[i] for i in correct)
        length_max = max(lengths[i] for i in correct)
        denom = length_max - length_min + 1e-8
        for i in correct:
            length_reward = (length_max - lengths[i]) / denom
            length_reward = length_reward * alpha
            length_reward = length_reward * (1 - delta) + delta
            scores[i] += length_reward
    return scores


@pytest.mark.parametrize("seed", range(80))
def test_matches_the_authors_code_over_the_whole_batch(jet, seed):
    rng = np.random.default_rng(seed)
    k, groups = int(rng.integers(1, 17)), int(rng.integers(1, 5))
    n = k * groups
    accuracy = (rng.random(n) < rng.choice([0.0, 0.3, 1.0])).astype(float).tolist()
    formatted = rng.integers(0, 2, n).tolist()
    lengths = (rng.choice([5, 5, 100, 4096], n) if rng.random() < 0.3 else rng.integers(1, 8192, n)).tolist()
    params = {"format_weight": float(rng.choice([0.1, 0.0, 0.5])), "alpha": float(rng.choice([1.2, 1.0, 2.0])),
              "delta": float(rng.choice([0.05, 0.0, 0.2]))}
    got = jet(accuracy, group_size=k, channels={"length": lengths, "formatted": formatted}, params=params)
    assert got.rewards.tolist() == pytest.approx(authors(accuracy, formatted, lengths, **params), abs=1e-12)


def test_the_batch_not_the_group_sets_the_shortest_and_longest(jet):
    # the second group's one correct answer is scored against the first group's lengths
    got = jet([1, 1, 0, 1], group_size=2, channels={"length": [100, 300, 5, 200], "formatted": [1, 1, 1, 1]})
    assert got.rewards.tolist() == pytest.approx(authors([1, 1, 0, 1], [1, 1, 1, 1], [100, 300, 5, 200]), abs=1e-15)
    assert got.rewards.tolist()[3] == pytest.approx(1.0 + 0.6 * 0.95 + 0.05)
