"""stdlib cosine: open-r1's cosine test numbers, the authors' exceed margin, thresholds, and the formula.

The differential tests run transcriptions of the authors' code (eddycmu/demystify-long-cot,
`openrlhf/openrlhf/reward/cosine.py`, `CosineScaledSparseReward.reward`) and of open-r1's
`get_cosine_scaled_reward`, written from reading them, in Python float64 as they compute.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import shapec

OPEN_R1 = {"max_length": 100, "correct_short": 1.0, "correct_long": 0.5, "wrong_short": -1.0, "wrong_long": -0.5}


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def cosine(request):
    return shapec.load("cosine", backend=request.param).cosine_length


def paper(correct, length, max_length, cs, cl, ws, wl, exceed=None, margin=0):
    """Yeo et al. section 4.2 (with the authors' exceed rule), transcribed."""
    if exceed is not None and length + margin >= max_length:
        return exceed
    at_zero, at_max = (cs, cl) if correct else (ws, wl)
    return at_max + 0.5 * (at_zero - at_max) * (1 + math.cos(length / max_length * math.pi))


def run(fn, rewards, lengths, **params):
    return fn(rewards, group_size=len(rewards), channels={"length": lengths}, params=params).rewards.tolist()


def test_open_r1_test_cosine_scaled_reward(cosine):
    # open-r1 pads r"\boxed{\frac{63}{400}}" (22 characters) to 20 and 80: the short one stays at 22
    got = run(cosine, [1, 1, 0, 0], [22, 80, 22, 80], exceed=None, **OPEN_R1)
    assert [round(x, 3) for x in got] == [0.943, 0.548, -0.943, -0.548]
    for g, want in zip(got, [0.943, 0.547, -0.942, -0.547]):
        assert round(g - want, 2) == 0  # open-r1's assertAlmostEqual(places=2)


def test_without_exceed_the_cosine_continues_past_max_length(cosine):
    got = run(cosine, [1, 0], [100, 150], exceed=None, **OPEN_R1)
    assert got == pytest.approx([0.5, -1.0 + 0.5 * 0.5 * (1 + math.cos(1.5 * math.pi))], abs=1e-12)


def test_exceed_at_max_length_and_beyond(cosine):
    got = run(cosine, [1, 1, 0, 1], [99, 100, 100, 1000], max_length=100, exceed=-10)
    assert got[1:] == [-10.0, -10.0, -10.0]
    assert got[0] == pytest.approx(1 + 0.5 * (1 + math.cos(0.99 * math.pi)), abs=1e-12)


def test_the_authors_margin_of_16(cosine):
    got = run(cosine, [1, 1, 0], [83, 84, 84], max_length=100, exceed=-10, exceed_margin=16)
    assert got[1:] == [-10.0, -10.0]
    assert got[0] == pytest.approx(1 + 0.5 * (1 + math.cos(0.83 * math.pi)), abs=1e-12)


def test_paper_values_at_zero_and_at_max(cosine):
    got = run(cosine, [1, 0, 1, 0], [0, 0, 50, 50], max_length=100, exceed=-10)
    assert got == pytest.approx([2.0, -10.0, 1.5, -5.0], abs=1e-12)


def test_the_optional_exceed_is_declared_with_the_papers_default():
    spec = {p.name: p for p in shapec.load("cosine", backend="interpreter").ir("cosine_length").params}
    assert spec["exceed"].optional and spec["exceed"].default == -10.0


def test_the_exceed_default_applies_unless_set_to_none(cosine):
    """An optional param's declared default is its value when the caller gives none."""
    by_default = cosine([1.0, 0.0], group_size=2, channels={"length": [100, 150]}, params={"max_length": 100})
    assert by_default.rewards.tolist() == [-10.0, -10.0]
    unset = cosine([1.0, 0.0], group_size=2, channels={"length": [100, 150]},
                   params={"max_length": 100, "exceed": None})
    assert unset.rewards.tolist() == pytest.approx([1.0, -5.0], abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_paper_formula(cosine, seed):
    rng = random.Random(seed)
    max_length = rng.randint(1, 300)
    vals = [rng.choice([-10.0, -1.0, 0.0, 0.5, 1.0, 2.0]) for _ in range(4)]
    exceed = rng.choice([None, -10.0, 0.0])
    margin = rng.choice([0, 16])
    rewards = [float(rng.randint(0, 1)) for _ in range(30)]
    lengths = [float(rng.randint(0, 400)) for _ in range(30)]
    got = run(cosine, rewards, lengths, max_length=max_length, correct_short=vals[0], correct_long=vals[1],
              wrong_short=vals[2], wrong_long=vals[3], exceed=exceed, exceed_margin=margin)
    want = [paper(r > 0, x, max_length, *vals, exceed, margin) for r, x in zip(rewards, lengths)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def open_r1_cosine_scaled_reward(gen_len, is_correct, min_value_wrong, max_value_wrong, min_value_correct,
                                 max_value_correct, max_len):
    """open-r1's `cosine_scaled_reward` after its correctness check, transcribed."""
    progress = gen_len / max_len
    cosine = math.cos(progress * math.pi)
    if is_correct:
        min_value, max_value = min_value_correct, max_value_correct
    else:
        min_value, max_value = max_value_wrong, min_value_wrong
    return float(min_value + 0.5 * (max_value - min_value) * (1.0 + cosine))


def authors_cosine_reward(gen_len, score, min_value_wrong, max_value_wrong, min_value_correct,
                          max_value_correct, max_len, exceed_length):
    """`CosineScaledSparseReward.reward` for one sequence, transcribed (its repetition penalty, a
    separate shaper, left out): `exceed_length` None counts as 0, and MAX_LEN_MARGIN is 16."""
    exceed_length = exceed_length if exceed_length is not None else 0
    if gen_len + 16 >= max_len:
        return exceed_length
    if score == 1:
        min_value, max_value = min_value_correct, max_value_correct
    else:
        min_value, max_value = max_value_wrong, min_value_wrong
    progress = gen_len / max_len
    cosine = math.cos(progress * math.pi)
    return min_value + 0.5 * (max_value - min_value) * (1.0 + cosine)


def random_values(rng):
    """Reward values as the authors' code accepts them: the wrong ones must not be positive."""
    wrong = [rng.choice([-10.0, -1.0, -0.5, 0.0]) for _ in range(2)]
    right = [rng.choice([0.0, 0.5, 1.0, 2.0]) for _ in range(2)]
    return {"min_value_wrong": wrong[0], "max_value_wrong": wrong[1],
            "min_value_correct": right[0], "max_value_correct": right[1]}


def ours(values, max_len):
    return {"max_length": max_len, "wrong_short": values["min_value_wrong"], "wrong_long": values["max_value_wrong"],
            "correct_long": values["min_value_correct"], "correct_short": values["max_value_correct"]}


def random_rollouts(rng, max_len, margin):
    thresholds = [max_len, max_len - 1, max_len + 1, max_len - margin, max_len - margin - 1, 0]
    lengths = [max(0, rng.choice([rng.randint(0, 2 * max_len)] + thresholds)) for _ in range(40)]
    return [float(rng.randint(0, 1)) for _ in lengths], lengths


@pytest.mark.parametrize("seed", range(6))
def test_matches_open_r1_bit_for_bit(cosine, seed):
    """exceed unset: the cosine continues past max_length. TRL's float32 reward tensor holds these
    values rounded, so it matches too."""
    rng = random.Random(seed)
    values, max_len = random_values(rng), rng.choice([1, 17, 100, 1000, 4096])
    rewards, lengths = random_rollouts(rng, max_len, 0)
    got = run(cosine, rewards, [float(x) for x in lengths], exceed=None, **ours(values, max_len))
    assert got == [open_r1_cosine_scaled_reward(x, r > 0, **values, max_len=max_len) for r, x in zip(rewards, lengths)]


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_authors_code_bit_for_bit(cosine, seed):
    """exceed_margin 16, and exceed = exceed_length, 0 where the code's is unset. The code's float
    list becomes a float32 tensor: these values rounded."""
    rng = random.Random(100 + seed)
    values, max_len = random_values(rng), rng.choice([1, 16, 17, 100, 1000, 14336])
    exceed_length = rng.choice([None, -10.0, 0.0, -1.0])
    rewards, lengths = random_rollouts(rng, max_len, 16)
    got = run(cosine, rewards, [float(x) for x in lengths], exceed=exceed_length if exceed_length is not None else 0.0,
              exceed_margin=16, **ours(values, max_len))
    assert got == [authors_cosine_reward(x, r, **values, max_len=max_len, exceed_length=exceed_length)
                   for r, x in zip(rewards, lengths)]
