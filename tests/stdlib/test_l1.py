"""stdlib l1: L1-Exact and L1-Max as the authors' math_reward.py computes them, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def l1(request):
    return shapec.load("l1", backend=request.param)


def code_delta(num_tokens, used, alpha):
    """get_delta_score_linear_both (and get_delta_score_linear it falls back to), cmu-l3/l1 math_reward.py."""
    if num_tokens < 0:
        sc = alpha * (used - abs(num_tokens)) * -1
        return (max(-1, min(1, sc)) + 1) / 2
    return (1 - abs(used - num_tokens) * alpha) - 1


def code_score(correct, num_tokens, used, alpha, multiplier):
    """math_reward_fn past the grader: linear_reward (multiplier False) or multiplier_reward, sigmoid off."""
    if num_tokens == -1:
        return float(correct)
    delta = code_delta(num_tokens, float(used), alpha)
    correctness = 1 if correct else 0
    return max(0, delta) * correctness if multiplier else delta + correctness


def code_exact(correct, target, used, alpha):
    return code_score(correct, -1 if target is None else target, used, alpha, multiplier=False)


def code_max(correct, target, used, config_alpha):
    return code_score(correct, -1 if target is None else -target, used, config_alpha, multiplier=True)


def test_exact_penalises_both_sides_on_every_rollout(l1):
    out = l1.l1_exact([1, 0, 1, 1], group_size=4, channels={"length": [900, 1000, 1500, 1000]},
                      metadata={"target": [1000]}, params={"alpha": 0.001})
    assert out.rewards.tolist() == pytest.approx([0.9, 0.0, 0.5, 1.0], abs=1e-15)
    # the code's (1 - x) - 1, not -x
    assert out.terms["length_gap"].tolist() == [(1 - 0.1) - 1, 0.0, (1 - 0.5) - 1, 0.0]
    assert out.terms["length_gap"].tolist()[0] != -0.1


def test_exact_wrong_rollouts_go_negative(l1):
    out = l1.l1_exact([0], group_size=1, channels={"length": [4000]}, metadata={"target": [1000]})
    assert out.rewards.tolist() == [code_exact(False, 1000, 4000, 0.0003)]
    assert out.rewards.tolist() == pytest.approx([-0.9], abs=1e-12)


def test_an_absent_target_means_no_length_term(l1):
    for meta in ({"target": [None, 100]}, {"target": None}):
        out = l1.l1_exact([1, 1, 0, 1], group_size=2, channels={"length": [50, 5000, 50, 100]}, metadata=meta)
        assert out.rewards.tolist()[:2] == [1.0, 1.0]
        out = l1.l1_max([1, 1, 0, 1], group_size=2, channels={"length": [50, 5000, 50, 100]}, metadata=meta)
        assert out.rewards.tolist()[:2] == [1.0, 1.0]


def test_max_is_half_at_the_budget_and_clipped_at_each_end(l1):
    # alpha = 0.0005: full reward from 1000 tokens under the budget, none from 1000 over it
    out = l1.l1_max([1, 1, 1, 1, 1, 0], group_size=6, channels={"length": [0, 1000, 2000, 3000, 5000, 0]},
                    metadata={"target": [2000]}, params={"alpha": 0.0005})
    assert out.rewards.tolist() == [1.0, 1.0, 0.5, 0.0, 0.0, 0.0]


def test_max_targets_zero_and_one_are_the_codes_encodings(l1):
    kw = dict(group_size=3, channels={"length": [0, 1, 5000]})
    # target 1 is num_tokens = -1, the code's "no target": the reward is left as it is
    assert l1.l1_max([1, 0, 1], metadata={"target": [1]}, **kw).rewards.tolist() == [1.0, 0.0, 1.0]
    # target 0 is num_tokens = 0: L1-Exact's delta inside the multiplier, never above 0
    assert l1.l1_max([1, 0, 1], metadata={"target": [0]}, **kw).rewards.tolist() == [0.0, 0.0, 0.0]
    assert l1.l1_max([1, 1, 1], metadata={"target": [2]}, **kw).rewards.tolist() == [
        code_max(True, 2, x, 0.0006) for x in [0, 1, 5000]]


def test_max_delta_other_than_half_is_the_papers_formula(l1):
    lengths = [0, 500, 1000, 1400, 3000]
    out = l1.l1_max([1.0] * 5, group_size=5, channels={"length": lengths}, metadata={"target": [1000]},
                    params={"alpha": 0.001, "delta": 0.8})
    np.testing.assert_allclose(out.rewards, [min(1, max(0, 0.001 * (1000 - x) + 0.8)) for x in lengths],
                               rtol=0, atol=1e-15)


def _cases(rng):
    """Random groups: ties, groups of one, all right, all wrong, lengths at the target and the clip ends."""
    sizes = [rng.choice([1, 1, 2, 3, 5, 8]) for _ in range(8)]
    targets = [rng.choice([None, 0, 1, 2, 100, rng.randint(100, 4000)]) for _ in sizes]
    config_alpha = rng.choice([0.0003, 0.0006, 0.001, 1 / 3000, 0.002, 0.01])
    rewards, lengths = [], []
    for n, t in zip(sizes, targets):
        kind = rng.choice(["mixed", "right", "wrong"])
        rewards += [float(rng.randint(0, 1)) if kind == "mixed" else float(kind == "right") for _ in range(n)]
        base = t or 500
        edge = int(round(1 / config_alpha))
        tied = rng.randint(0, 6000)
        lengths += [rng.choice([base, base + 1, max(base - 1, 0), base + edge, max(base - edge, 0), tied, tied,
                                rng.randint(0, 9000)]) for _ in range(n)]
    return sizes, targets, config_alpha, rewards, lengths


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_code_bit_for_bit(l1, seed):
    sizes, targets, config_alpha, rewards, lengths = _cases(random.Random(seed))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    per_rollout = [t for t, k in zip(targets, sizes) for _ in range(k)]
    kw = dict(offsets=offsets, channels={"length": lengths}, metadata={"target": targets})
    exact = l1.l1_exact(rewards, params={"alpha": config_alpha}, **kw).rewards.tolist()
    assert exact == [code_exact(r > 0, t, x, config_alpha) for r, t, x in zip(rewards, per_rollout, lengths)]
    best = l1.l1_max(rewards, params={"alpha": config_alpha / 2}, **kw).rewards.tolist()
    assert best == [code_max(r > 0, t, x, config_alpha) for r, t, x in zip(rewards, per_rollout, lengths)]
