"""stdlib grpo_lead: the authors' verl reward reweighting and difficulty-weighted advantage, transcribed."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import shapec

F32 = np.float32

@pytest.fixture(scope="module", params=["interpreter", "numba"])
def lead(request):
    return shapec.load("grpo_lead", backend=request.param)


def code_reward(correct, lengths, alpha=0.05, wrong=-1.0, activate_above=None):
    """RewardManager.get_reweight_rewards for one group (binary scores: 1 correct, 0 mapped to `wrong`)."""
    rewards = [1.0 if c else wrong for c in correct]
    shortest = sorted(lengths) + [math.inf] * 3
    if activate_above is not None and sum(shortest[:3]) / 3 <= activate_above:
        return rewards
    right = [x for c, x in zip(correct, lengths) if c]
    mean = sum(right) / len(right) if right else 0.0
    std = math.sqrt(sum((x - mean) ** 2 for x in right) / (len(right) - 1)) if len(right) > 1 else 1.0
    return [r * math.exp(-alpha * (x - mean) / (std + 1e-6)) if c else r for r, c, x in zip(rewards, correct, lengths)]


def logistic(x, low=0.4, high=1.5, k=10.0, pivot=0.75):
    return low + (high - low) / (1 + math.exp(k * (x - pivot)))


def code_advantage(scores, **w):
    """compute_grpo_outcome_advantage for one group."""
    n = len(scores)
    mean, std = (0.0, 1.0) if n == 1 else (sum(scores) / n, math.sqrt(sum((s - sum(scores) / n) ** 2 for s in scores) / (n - 1)))
    rho = sum(s > 0 for s in scores) / n
    out = []
    for s in scores:
        a = (s - mean) / (std + 1e-6)
        out.append(a * (logistic(rho, **w) if a > 0 else logistic(1 - rho, **w)))
    return out


def code_reward_f32(correct, lengths, alpha=0.05, wrong=-1.0, activate_above=None):
    """get_reweight_rewards with the code's types: lengths are int64 tensors, so the mean, the squared
    deviations and z are float32 (std_len and exp are Python floats), and the result lands in a float32 tensor."""
    rewards = [1.0 if c else wrong for c in correct]
    shortest = sorted(lengths)[:3]
    avg_min = F32(sum(shortest)) / F32(3) if len(shortest) == 3 else math.inf
    if activate_above is not None and avg_min <= activate_above:
        return [F32(r) for r in rewards]
    right = [x for c, x in zip(correct, lengths) if c]
    avg = F32(sum(right)) / F32(len(right)) if right else 0.0
    std = 1.0
    if len(right) > 1:
        var = F32(0)
        for x in right:
            var = var + (F32(x) - avg) ** 2
        std = math.sqrt(var / F32(len(right) - 1))
    return [F32(r * math.exp(F32(-alpha) * ((F32(x) - avg) / F32(std + 1e-6)))) if c else F32(r)
            for r, c, x in zip(rewards, correct, lengths)]


def code_advantage_f32(scores, low=0.4, high=1.5, k=10.0, pivot=0.75):
    """compute_grpo_outcome_advantage in the code's float32 (torch.mean, torch.std, logistic_reweight)."""
    s = np.asarray(scores, dtype=np.float32)
    mean, std = (F32(0), F32(1)) if len(s) == 1 else (s.mean(dtype=np.float32), s.std(ddof=1, dtype=np.float32))
    rho = F32(int((s > 0).sum()) / len(s))

    def weight(x):
        return F32(low) + F32(high - low) / (F32(1) + np.exp(F32(k) * (x - F32(pivot))))
    adv = (s - mean) / (std + F32(1e-6))
    return [a * (weight(rho) if a > 0 else weight(F32(1) - rho)) for a in adv]


def reward(lead, correct, lengths, **params):
    return lead.lead_reward([float(c) for c in correct], group_size=len(correct), channels={"length": lengths},
                            params=params).rewards.tolist()


def advantage(lead, scores, **params):
    return lead.lead_advantage(scores, group_size=len(scores), params=params).rewards.tolist()


def test_length_reward_uses_the_sample_std_plus_epsilon(lead):
    got = reward(lead, [1, 1, 0, 1], [100, 300, 50, 200])
    assert got == pytest.approx(code_reward([1, 1, 0, 1], [100, 300, 50, 200]), abs=1e-12)
    assert got[0] == pytest.approx(math.exp(-0.05 * (100 - 200) / (100 + 1e-6)), abs=1e-12)


def test_one_correct_rollout_keeps_its_reward(lead):
    assert reward(lead, [0, 1, 0], [10, 500, 20]) == [-1.0, 1.0, -1.0]


def test_all_wrong_get_the_penalty(lead):
    assert reward(lead, [0, 0, 0], [10, 20, 30], wrong=-0.5) == [-0.5, -0.5, -0.5]


def test_activation_threshold_on_the_three_shortest(lead):
    correct, lengths = [1, 1, 0, 1], [4000, 4000, 4000, 9000]
    # mean of the three shortest is exactly 4000: the code skips the group (avg_min <= 4000)
    assert reward(lead, correct, lengths, activate_above=4000) == [1.0, 1.0, -1.0, 1.0]
    assert reward(lead, correct, [4000, 4000, 4003, 9000], activate_above=4000) == pytest.approx(
        code_reward(correct, [4000, 4000, 4003, 9000], activate_above=4000), abs=1e-12)
    assert reward(lead, correct, lengths, activate_above=4000) != reward(lead, correct, lengths)


def test_groups_under_three_rollouts_are_always_reweighted(lead):
    got = reward(lead, [1, 1], [10, 30], activate_above=4000)
    assert got == pytest.approx(code_reward([1, 1], [10, 30], activate_above=4000), abs=1e-12)
    assert got[0] > 1.0 > got[1]


def test_advantage_weights_positive_by_rho_and_the_rest_by_one_minus_rho(lead):
    got = advantage(lead, [1.0, -1.0, -1.0, -1.0])
    assert got == pytest.approx(code_advantage([1.0, -1.0, -1.0, -1.0]), abs=1e-12)
    a = 1.5 / (1.0 + 1e-6)
    assert got[0] == pytest.approx(a * logistic(0.25), abs=1e-12)


def test_tied_rewards_give_zero_advantages(lead):
    assert advantage(lead, [1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert advantage(lead, [-1.0, -1.0]) == [0.0, 0.0]


def test_a_group_of_one_uses_mean_zero_and_std_one(lead):
    assert advantage(lead, [0.7]) == pytest.approx([0.7 / (1 + 1e-6) * logistic(1.0)], abs=1e-12)
    assert advantage(lead, [-1.0]) == pytest.approx([-1 / (1 + 1e-6) * logistic(1.0)], abs=1e-12)


def test_the_pipeline_chains_reward_and_advantage(lead):
    correct, lengths = [1, 0, 1, 1], [5000, 6000, 4000, 7000]
    out = lead.grpo_lead([float(c) for c in correct], group_size=4, channels={"length": lengths})
    assert [st.name for st in out.stages] == ["lead_reward", "lead_advantage"]
    assert out.rewards.tolist() == pytest.approx(code_advantage(code_reward(correct, lengths)), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_code(lead, seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 9) for _ in range(5)]
    correct = [rng.randint(0, 1) for _ in range(sum(sizes))]
    lengths = [float(rng.randint(0, rng.choice([3, 9000]))) for _ in range(sum(sizes))]
    above = rng.choice([None, 2000.0, 4000.0])
    weights = {"low": 0.4, "high": rng.choice([1.5, 2.0]), "k": rng.choice([10.0, 3.0]), "pivot": 0.75}
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = lead.grpo_lead([float(c) for c in correct], offsets=offsets, channels={"length": lengths},
                         params={"lead_reward": {"activate_above": above}, "lead_advantage": weights})
    want, start = [], 0
    for n in sizes:
        want += code_advantage(code_reward(correct[start:start + n], lengths[start:start + n],
                                           activate_above=above), **weights)
        start += n
    np.testing.assert_allclose(out.rewards, want, rtol=0, atol=1e-9)


def _groups(rng):
    """Random groups: ties, groups of one and two, all right, all wrong, three shortest exactly at 4000."""
    correct, lengths, sizes = [], [], []
    for _ in range(8):
        n = rng.choice([1, 2, 3, 4, 8, 16])
        kind = rng.choice(["mixed", "right", "wrong"])
        correct += [rng.randint(0, 1) if kind == "mixed" else int(kind == "right") for _ in range(n)]
        tie = rng.randint(0, 9000)
        lengths += [float(rng.choice([tie, tie, 4000, rng.randint(0, 20000)])) for _ in range(n)]
        sizes.append(n)
    return correct, lengths, sizes


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_codes_float32_arithmetic(lead, seed):
    # the code computes z, the advantage and its weights in float32; this spec in float64
    rng = random.Random(seed)
    correct, lengths, sizes = _groups(rng)
    above = rng.choice([None, 4000.0])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = lead.grpo_lead([float(c) for c in correct], offsets=offsets, channels={"length": lengths},
                         params={"lead_reward": {"activate_above": above}})
    rewards, advantages, start = [], [], 0
    for n in sizes:
        shaped = code_reward_f32(correct[start:start + n], lengths[start:start + n], activate_above=above)
        rewards += shaped
        advantages += code_advantage_f32(shaped)
        start += n
    np.testing.assert_allclose(out.stage("lead_reward").rewards, rewards, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out.rewards, advantages, rtol=0, atol=1e-5)
