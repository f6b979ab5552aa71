"""stdlib adaptthink: AdaptThink's reward against a transcription of the authors' code (THU-KEG/AdaptThink
at 84cf948, `src/adapt_think_reward_manager.py`, the training branch of `__call__`; the naive
estimator uses it as the advantage), written from reading it, on random groups on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def adaptthink(request):
    return shapec.load("adaptthink", backend=request.param).adaptthink


def authors(acc, enforce_nothinking, ref_mean_acc_thinking, nothinking_bonus):
    return [a - ref_mean_acc_thinking + nothinking_bonus if nothink else a - ref_mean_acc_thinking
            for a, nothink in zip(acc, enforce_nothinking)]


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_authors_code(adaptthink, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 17, int(rng.integers(1, 5))).tolist()
    bonus = float(rng.choice([0.0, 0.05, 0.1, 0.5, -0.05]))
    rewards, nothink, refs, expected = [], [], [], []
    for k in sizes:
        acc = (rng.random(k) < rng.choice([0.0, 0.5, 1.0])).astype(float).tolist()
        flags = rng.integers(0, 2, k).tolist()
        ref = float(rng.choice([0.0, 1.0, 0.5, 0.3125, float(rng.random())]))
        rewards += acc
        nothink += flags
        refs.append(ref)
        expected += authors(acc, flags, ref, bonus)
    got = adaptthink(rewards, offsets=np.concatenate([[0], np.cumsum(sizes)]), channels={"nothink": nothink},
                     metadata={"ref_acc": refs}, params={"nothinking_bonus": bonus})
    assert got.rewards.tolist() == expected  # Python floats, the same operations in the same order


def test_a_group_without_its_reference_accuracy_is_refused(adaptthink):
    with pytest.raises(Exception, match="ref_acc"):
        adaptthink([1.0, 0.0], group_size=2, channels={"nothink": [1, 0]})
