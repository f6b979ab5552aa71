"""stdlib lc_r1: LC-R1's length reward and sequence-level advantage against a transcription of the
authors' code (zxiangx/LC-R1 at 7a6bd8b, `trl/trainer/grpo_trainer.py`, the `len_penalty_coef`
block of `_generate_and_score_completions` and the mean baseline after it), written from reading it
in float64, on random groups (format and accuracy rewards 0, 1, 2) on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def lc_r1(request):
    return shapec.load("lc_r1", backend=request.param).lc_r1


def authors(rewards, eos_idx, coef):
    """One group: the code's loop body for row i, then `advantages -= adv_mean`."""
    rewards = np.array(rewards, dtype=np.float64)
    lengths = np.array(eos_idx, dtype=np.float64)
    right = rewards == 2
    if right.any():
        lengths = 1 - lengths / (lengths[right].max() + 1e-4)
    else:
        lengths = np.zeros_like(lengths)
    advantages = rewards + coef * lengths
    return (advantages - advantages.mean()).tolist()


@pytest.mark.parametrize("seed", range(80))
def test_matches_the_authors_code(lc_r1, seed):
    rng = np.random.default_rng(seed)
    k, groups = int(rng.integers(1, 17)), int(rng.integers(1, 5))
    coef = float(rng.choice([1.5, 1.0, 0.0, 0.5]))
    rewards, lengths, expected = [], [], []
    for _ in range(groups):
        r = rng.choice([0.0, 1.0, 2.0], k, p=rng.dirichlet([1, 1, 1])).tolist()
        n = rng.choice([0, 1, 64, 64, 4096], k).tolist() if rng.random() < 0.3 else rng.integers(0, 8192, k).tolist()
        rewards += r
        lengths += [float(x) for x in n]
        expected += authors(r, n, coef)
    got = lc_r1(rewards, group_size=k, channels={"length": lengths}, params={"coef": coef})
    assert got.rewards.tolist() == pytest.approx(expected, abs=1e-9)


def test_a_group_without_a_right_response_is_only_centred(lc_r1):
    got = lc_r1([1.0, 0.0, 1.0], group_size=3, channels={"length": [10, 5000, 20]})
    assert got.rewards.tolist() == pytest.approx([1 / 3, -2 / 3, 1 / 3], abs=1e-15)
