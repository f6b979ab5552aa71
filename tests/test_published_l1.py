"""stdlib l1: L1-Exact and L1-Max as the authors' math_reward.py computes them, absent targets, thresholds."""

from __future__ import annotations

import random

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def l1(request):
    return shapec.load("l1", backend=request.param)


def code_exact(correct, num_tokens, used, alpha):
    """math_reward_fn with linear_reward: delta (1 - |used - num_tokens| * alpha) - 1, plus correctness."""
    return (1 - abs(used - num_tokens) * alpha) - 1 + (1 if correct else 0)


def code_max(correct, num_tokens, used, alpha):
    """math_reward_fn with multiplier_reward and num_tokens < 0 (get_delta_score_linear_both)."""
    sc = max(-1, min(1, -alpha * (used - abs(num_tokens))))
    return max(0, (sc + 1) / 2) * (1 if correct else 0)


def test_exact_penalises_both_sides_on_every_rollout(l1):
    out = l1.l1_exact([1, 0, 1, 1], group_size=4, channels={"length": [900, 1000, 1500, 1000]},
                      metadata={"target": [1000]}, params={"alpha": 0.001})
    assert out.rewards.tolist() == [0.9, 0.0, 0.5, 1.0]
    assert out.terms["length_gap"].tolist() == [-0.1, 0.0, -0.5, 0.0]


def test_exact_wrong_rollouts_go_negative(l1):
    out = l1.l1_exact([0], group_size=1, channels={"length": [4000]}, metadata={"target": [1000]})
    assert out.rewards.tolist() == pytest.approx([-0.9], abs=1e-12)


def test_an_absent_target_means_no_length_term(l1):
    for meta in ({"target": [None, 100]}, {}):
        out = l1.l1_exact([1, 1, 0, 1], group_size=2, channels={"length": [50, 5000, 50, 100]}, metadata=meta)
        assert out.rewards.tolist()[:2] == [1.0, 1.0]
        out = l1.l1_max([1, 1, 0, 1], group_size=2, channels={"length": [50, 5000, 50, 100]}, metadata=meta)
        assert out.rewards.tolist()[:2] == [1.0, 1.0]


def test_max_is_half_at_the_budget_and_clipped_at_each_end(l1):
    # alpha = 0.0005: full reward from 1000 tokens under the budget, none from 1000 over it
    out = l1.l1_max([1, 1, 1, 1, 1, 0], group_size=6, channels={"length": [0, 1000, 2000, 3000, 5000, 0]},
                    metadata={"target": [2000]}, params={"alpha": 0.0005})
    assert out.rewards.tolist() == [1.0, 1.0, 0.5, 0.0, 0.0, 0.0]


def test_max_matches_the_code_with_the_papers_alpha_half_the_configs(l1):
    config_alpha = 0.001
    lengths = [0.0, 250.0, 1000.0, 1700.0, 2999.0, 3000.0, 4000.0]
    out = l1.l1_max([1.0] * len(lengths), group_size=len(lengths), channels={"length": lengths},
                    metadata={"target": [2000]}, params={"alpha": config_alpha / 2, "delta": 0.5})
    assert out.rewards.tolist() == pytest.approx([code_max(True, -2000, x, config_alpha) for x in lengths], abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_code_and_the_paper(l1, seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 6) for _ in range(6)]
    n = sum(sizes)
    rewards = [float(rng.randint(0, 1)) for _ in range(n)]
    lengths = [float(rng.randint(0, 6000)) for _ in range(n)]
    targets = [float(rng.randint(100, 5000)) for _ in sizes]
    alpha = rng.choice([0.0003, 0.001, 0.01])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    per_rollout = [t for t, k in zip(targets, sizes) for _ in range(k)]
    kw = dict(offsets=offsets, channels={"length": lengths}, metadata={"target": targets})
    exact = l1.l1_exact(rewards, params={"alpha": alpha}, **kw).rewards
    np.testing.assert_allclose(exact, [code_exact(r > 0, t, x, alpha) for r, t, x in zip(rewards, per_rollout, lengths)],
                               rtol=0, atol=1e-12)
    paper_max = [r * min(1, max(0, alpha * (t - x) + 0.5)) for r, t, x in zip(rewards, per_rollout, lengths)]
    np.testing.assert_allclose(l1.l1_max(rewards, params={"alpha": alpha}, **kw).rewards, paper_max, rtol=0, atol=1e-12)
