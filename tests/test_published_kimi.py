"""stdlib kimi: open-r1's `len_reward` tests, Short-RL's KimiScorer, edge cases, and the paper's formula."""

from __future__ import annotations

import random

import numpy as np
import pytest

import shapec

BACKENDS = ["interpreter", "numba"]


@pytest.fixture(scope="module", params=BACKENDS)
def kimi(request):
    return shapec.load("kimi", backend=request.param).kimi_length


def lam(lengths, eps):
    lo, hi = min(lengths), max(lengths)
    if eps == 0 and hi == lo:
        return [0.0] * len(lengths)
    return [0.5 - (x - lo) / (hi - lo + eps) for x in lengths]


def paper(rewards, lengths, sizes, weight=1.0, eps=0.0, scope="group"):
    """Kimi k1.5, section 2.3.3, transcribed: lambda per group (or per call), min(0, lambda) when wrong."""
    out, start = [], 0
    whole = lam(lengths, eps) if scope == "batch" else None
    for n in sizes:
        ls = whole[start:start + n] if whole else lam(lengths[start:start + n], eps)
        for r, x in zip(rewards[start:start + n], ls):
            out.append(r + weight * (x if r > 0 else min(0.0, x)))
        start += n
    return out


# open-r1 tests/test_rewards.py: lengths are len(content): r"\boxed{\frac{63}{400}}" is 22 characters,
# the padded one 22 + 2 + 10 = 34
def test_open_r1_same_length_responses(kimi):
    out = kimi([1, 0], group_size=2, channels={"length": [22, 22]})
    assert out.terms["kimi"].tolist() == [0.0, 0.0]


def test_open_r1_different_lengths_correct_answers(kimi):
    out = kimi([1, 1], group_size=2, channels={"length": [22, 34]})
    assert out.terms["kimi"].tolist() == [0.5, -0.5]


def test_open_r1_different_lengths_incorrect_answers(kimi):
    out = kimi([0, 0], group_size=2, channels={"length": [22, 34]})
    assert out.terms["kimi"].tolist() == [0.0, -0.5]


def test_open_r1_mixed_correctness(kimi):
    out = kimi([1, 1, 0, 0], group_size=4, channels={"length": [22, 34, 22, 34]})
    assert out.terms["kimi"].tolist() == [0.5, -0.5, 0.0, -0.5]
    assert out.rewards.tolist() == [1.5, 0.5, 0.0, -0.5]


def test_short_rl_kimi_scorer_ties_give_correct_rollouts_half(kimi):
    out = kimi([1, 0, 1], group_size=3, channels={"length": [40, 40, 40]}, params={"eps": 1e-5})
    assert out.terms["kimi"].tolist() == [0.5, 0.0, 0.5]


def test_short_rl_kimi_scorer_epsilon_in_the_denominator(kimi):
    out = kimi([1, 1], group_size=2, channels={"length": [10, 30]}, params={"eps": 1e-5})
    assert out.terms["kimi"].tolist() == [0.5, 0.5 - 20 / (20 + 1e-5)]


def test_a_group_of_one_ties_with_itself(kimi):
    assert kimi([1], group_size=1, channels={"length": [7]}).terms["kimi"].tolist() == [0.0]
    assert kimi([1], group_size=1, channels={"length": [7]}, params={"eps": 1e-5}).terms["kimi"].tolist() == [0.5]


def test_all_wrong_and_all_right(kimi):
    wrong = kimi([0, 0, 0], group_size=3, channels={"length": [10, 20, 30]})
    assert wrong.terms["kimi"].tolist() == [0.0, 0.0, -0.5]
    right = kimi([1, 1, 1], group_size=3, channels={"length": [10, 20, 30]}, params={"weight": 2})
    assert right.terms["kimi"].tolist() == [1.0, 0.0, -1.0]


def test_batch_scope_takes_min_and_max_over_the_call(kimi):
    # group 1 alone ties (0 under group scope); over the call it sits between 3 and 9
    channels = {"length": [5, 5, 3, 9]}
    group = kimi([1, 0, 1, 0], group_size=2, channels=channels)
    assert group.terms["kimi"].tolist() == [0.0, 0.0, 0.5, -0.5]
    batch = kimi([1, 0, 1, 0], group_size=2, channels=channels, params={"scope": "batch"})
    assert batch.terms["kimi"].tolist() == [0.5 - 2 / 6, 0.0, 0.5, -0.5]


def test_batch_scope_ties_across_the_call_give_zero(kimi):
    out = kimi([1, 0, 1, 1], group_size=2, channels={"length": [4, 4, 4, 4]}, params={"scope": "batch"})
    assert out.terms["kimi"].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_paper_formula(kimi, seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 9) for _ in range(rng.randint(1, 6))]
    n = sum(sizes)
    rewards = [float(rng.randint(0, 1)) for _ in range(n)]
    lengths = [float(rng.choice([rng.randint(0, 4), rng.randint(0, 5000)])) for _ in range(n)]
    weight, eps, scope = rng.choice([0.5, 1.0, 3.0]), rng.choice([0.0, 1e-5]), rng.choice(["group", "batch"])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = kimi(rewards, offsets=offsets, channels={"length": lengths},
               params={"weight": weight, "eps": eps, "scope": scope})
    np.testing.assert_allclose(out.rewards, paper(rewards, lengths, sizes, weight, eps, scope), rtol=0, atol=1e-12)
