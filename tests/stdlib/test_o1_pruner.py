"""stdlib o1_pruner: O1-Pruner's weights against a transcription of the authors' code
(StarDewXXX/O1-Pruner at 04c0863, `o1_scripts/construct_dataset.py`, `generate_pruning_dataset`
after its shuffle: the selected solutions are passed), written from reading it, on random
batches on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def o1(request):
    return shapec.load("o1_pruner", backend=request.param)


def authors(correctness, lengths, selected, K, alpha):
    """Each problem's K solutions in order; the weights of the selected ones, standardised."""
    weights, where = [], []
    for p in range(len(lengths) // K):
        idx = range(p * K, (p + 1) * K)
        avg_length = sum(lengths[i] for i in idx) / K
        avg_acc = sum(int(correctness[i]) for i in idx) / K
        for i in idx:
            if not selected[i]:
                continue
            length_term = (avg_length - lengths[i]) / lengths[i]
            acc_term = alpha * (int(correctness[i]) - avg_acc)
            weight = length_term + acc_term
            if weight <= -2:
                weight = -2
            if weight > 4:
                weight = 4
            weights.append(weight)
            where.append(i)
    out = [0.0] * len(lengths)
    mean, std = np.mean(weights), np.std(weights)
    for i, w in zip(where, weights):
        out[i] = (w - mean) / std
    return out, dict(zip(where, weights))


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_authors_code(o1, seed):
    rng = np.random.default_rng(seed)
    K, problems = int(rng.integers(2, 17)), int(rng.integers(1, 6))
    n = K * problems
    alpha = float(rng.choice([5, 2, 3, 0]))
    correctness = (rng.random(n) < rng.choice([0.0, 0.5, 1.0])).astype(float).tolist()
    lengths = rng.integers(1, 8000, n).tolist()
    selected = [0] * n
    for p in range(problems):  # the code's used_count_per_problem = 2
        for i in rng.choice(K, 2, replace=False):
            selected[p * K + int(i)] = 1
    expected, weights = authors(correctness, lengths, selected, K, alpha)
    if np.std(list(weights.values())) > 1e-6:
        got = o1.o1_pruner(correctness, group_size=K, channels={"length": lengths, "selected": selected},
                           params={"alpha": alpha})
        assert got.rewards.tolist() == pytest.approx(expected, abs=1e-9)


def test_weights_are_clipped_to_minus_two_and_four(o1):
    # unclipped 5002 and -3 in the first group, 2.5 and -2.5 in the second: clipped, then standardised
    got = o1.o1_pruner([1, 0, 1, 0], group_size=2, channels={"length": [1, 10000, 5, 5], "selected": [1, 1, 1, 1]})
    weights = np.array([4.0, -2.0, 2.5, -2.0])
    assert got.rewards.tolist() == pytest.approx(((weights - weights.mean()) / weights.std()).tolist(), abs=1e-12)


def test_a_solution_of_no_tokens_counts_as_one_token_long(o1):
    # the code divides by the length and stops; here (mean 2 - 0) / 1 + 5 * (1 - 0.5) = 4.5, clipped to 4
    got = o1.o1_pruner([1, 0, 1, 0], group_size=2, channels={"length": [0, 4, 4, 4], "selected": [1, 0, 1, 0]})
    weights = np.array([4.0, 2.5])
    assert got.rewards.tolist() == pytest.approx([*((weights - weights.mean()) / weights.std())[:1], 0.0,
                                                  *((weights - weights.mean()) / weights.std())[1:], 0.0], abs=1e-12)
