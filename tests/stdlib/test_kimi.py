"""stdlib kimi: open-r1's `len_reward` tests, Short-RL's KimiScorer, edge cases, and the paper's formula.

The differential tests run transcriptions of the authors' code (open-r1 `src/open_r1/rewards.py`,
`len_reward`, with TRL's float32 weighted sum; lblankl/Short-RL
`Logic-RL/verl/utils/reward_score/kk_kimi.py`, `KimiScorer`), written from reading it, in its dtypes.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import shapec

from ..helpers import ragged_offsets

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


def open_r1_len_reward(lengths, correctness):
    """open-r1's `len_reward` after its correctness check, transcribed: Python float64."""
    min_len, max_len = min(lengths), max(lengths)
    if max_len == min_len:
        return [0.0] * len(lengths)
    rewards = []
    for length, is_correct in zip(lengths, correctness):
        lambda_val = 0.5 - (length - min_len) / (max_len - min_len)
        rewards.append(float(lambda_val if is_correct else min(0, lambda_val)))
    return rewards


def kimi_scorer_len_reward(lengths, answer_correct, dtype):
    """Short-RL's `KimiScorer` for one uid, transcribed. dtype float32 is what it runs: lengths are
    0-dim int64 tensors, `+ 1e-5` makes the denominator float32, and so the quotient and lambda."""
    min_len, max_len = min(lengths), max(lengths)
    out = []
    for current_len, correct in zip(lengths, answer_correct):
        length_penalty = dtype(0.5) - dtype(current_len - min_len) / (dtype(max_len - min_len) + dtype(1e-5))
        out.append(length_penalty if correct else min(0, length_penalty))
    return out


def random_call(rng):
    """Ragged groups (empty ones and groups of one included), each all wrong, all right or mixed,
    with lengths that all tie, sit in a narrow range, or spread wide."""
    offsets = ragged_offsets(rng, 12, 6)
    while offsets[-1] == 0:  # open-r1's min() of no lengths raises; a call has a rollout
        offsets = ragged_offsets(rng, 12, 6)
    correct, lengths = [], []
    for g in range(len(offsets) - 1):
        n = int(offsets[g + 1] - offsets[g])
        p_right = rng.choice([0.0, 1.0, 0.5])
        correct += [bool(rng.random() < p_right) for _ in range(n)]
        kind = rng.integers(0, 3)
        lengths += [int(rng.integers(0, 5000))] * n if kind == 0 else [int(x) for x in rng.integers(0, 4 if kind == 1 else 5000, n)]
    return offsets, correct, lengths


def groups_of(offsets, values):
    return [values[offsets[g]:offsets[g + 1]] for g in range(len(offsets) - 1)]


@pytest.mark.parametrize("seed", range(6))
def test_matches_open_r1_on_a_multi_prompt_call(kimi, seed):
    """scope = batch: len_reward sees every completion of the call. Its values bit for bit; the
    reward TRL trains on, sum(float32 reward_i * weight_i), to within float32 rounding."""
    rng = np.random.default_rng(seed)
    offsets, correct, lengths = random_call(rng)
    weight = float(rng.choice([0.5, 1.0, 2.0]))
    rewards = [float(c) for c in correct]
    out = kimi(rewards, offsets=offsets, channels={"length": [float(x) for x in lengths]},
               params={"scope": "batch", "weight": weight})
    length_reward = open_r1_len_reward(lengths, correct)
    assert out.terms["kimi"].tolist() == [weight * x for x in length_reward]
    per_func = np.array([rewards, length_reward], dtype=np.float32).T
    trl = (per_func * np.array([1.0, weight], dtype=np.float32)).sum(axis=1, dtype=np.float32)
    np.testing.assert_allclose(out.rewards, trl.astype(np.float64), rtol=0, atol=4e-7)


@pytest.mark.parametrize("seed", range(6))
def test_matches_open_r1_one_prompt_at_a_time(kimi, seed):
    """scope = group with eps 0 is len_reward called on each prompt's completions alone."""
    rng = np.random.default_rng(100 + seed)
    offsets, correct, lengths = random_call(rng)
    out = kimi([float(c) for c in correct], offsets=offsets, channels={"length": [float(x) for x in lengths]})
    want = [x for ls, cs in zip(groups_of(offsets, lengths), groups_of(offsets, correct)) if ls
            for x in open_r1_len_reward(ls, cs)]
    assert out.terms["kimi"].tolist() == want


@pytest.mark.parametrize("seed", range(6))
def test_matches_short_rls_kimi_scorer(kimi, seed):
    """eps = 1e-5, grouped by uid: KimiScorer's expression bit for bit in float64, and within
    float32 rounding of the float32 it computes (its total adds format and answer scores, which are
    > 0 exactly when the answer is correct: this shaper's reward is that correctness)."""
    rng = np.random.default_rng(200 + seed)
    offsets, correct, lengths = random_call(rng)
    out = kimi([float(c) for c in correct], offsets=offsets, channels={"length": [float(x) for x in lengths]},
               params={"eps": 1e-5})
    groups = list(zip(groups_of(offsets, lengths), groups_of(offsets, correct)))
    want64 = [float(x) for ls, cs in groups if ls for x in kimi_scorer_len_reward(ls, cs, np.float64)]
    assert out.terms["kimi"].tolist() == want64
    want32 = [float(x) for ls, cs in groups if ls for x in kimi_scorer_len_reward(ls, cs, np.float32)]
    np.testing.assert_allclose(out.terms["kimi"], want32, rtol=0, atol=1.2e-7)
