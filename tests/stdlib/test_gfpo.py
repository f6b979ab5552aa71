"""stdlib gfpo: GFPO's advantages against a transcription of TRL's GFPOTrainer (huggingface/trl at
9ad1e89, `trl/experimental/gfpo/gfpo_trainer.py`, `_generate_and_score_completions`), written from
reading it, in numpy float64, on random groups on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def gfpo(request):
    return shapec.load("gfpo", backend=request.param).gfpo


def authors(rewards, lengths, group, k, filter="length", scale="group"):
    """The trainer's steps: score each group (the paper's two filter functions), keep the top k
    (torch.topk; equal scores in position order), then mean and sample std over the kept rewards
    alone; a dropped rollout's advantage is 0 (TRL removes it from the batch)."""
    rewards, lengths = np.asarray(rewards, float), np.asarray(lengths, float)
    scores = -lengths if filter == "length" else rewards / np.maximum(lengths, 1)
    remains = min(k, group)  # torch.topk raises past the group's size
    local = np.argsort(-scores.reshape(-1, group), axis=1, kind="stable")[:, :remains]
    kept_index = (np.arange(0, len(rewards), group)[:, None] + local).ravel()
    kept = rewards[kept_index].reshape(-1, remains)
    advantages = kept - kept.mean(axis=1, keepdims=True)
    if scale == "group":
        if remains == 1:  # torch's std of one value is NaN: the spec gives 0
            advantages = np.zeros_like(kept)
        else:
            advantages = advantages / (kept.std(axis=1, ddof=1, keepdims=True) + 1e-4)
    out = np.zeros(len(rewards))
    out[kept_index] = advantages.ravel()
    kept = np.zeros(len(rewards), dtype=bool)
    kept[kept_index] = True
    return out, kept


@pytest.mark.parametrize("seed", range(100))
def test_matches_trls_advantages_over_the_kept_rollouts(gfpo, seed):
    rng = np.random.default_rng(seed)
    group, groups = int(rng.integers(1, 17)), int(rng.integers(1, 5))
    n = group * groups
    kind = rng.choice(["binary", "graded", "all right", "all wrong"])
    rewards = {"binary": (rng.random(n) < 0.5).astype(float), "graded": np.round(rng.random(n) * 2 - 0.5, 3),
               "all right": np.ones(n), "all wrong": np.zeros(n)}[kind]
    lengths = rng.choice([0, 5, 5, 100], n) if rng.random() < 0.4 else rng.integers(0, 8192, n)
    params = {"k": int(rng.integers(1, group + 3)), "filter": str(rng.choice(["length", "efficiency"])),
              "scale": str(rng.choice(["group", "none"]))}
    got = gfpo(rewards, group_size=group, channels={"length": lengths}, params=params)
    advantages, kept = authors(rewards, lengths, group, **params)
    assert got.rewards.tolist() == pytest.approx(advantages.tolist(), abs=1e-9)
    assert got.kept.tolist() == kept.tolist()  # the rollouts TRL keeps in the batch


def test_equal_scores_keep_the_first_rollouts(gfpo):
    got = gfpo([1, 0, 1, 0], group_size=4, channels={"length": [7, 7, 7, 7]}, params={"k": 2, "scale": "none"})
    assert got.rewards.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert got.kept.tolist() == [True, True, False, False]


def test_efficiency_keeps_the_most_reward_per_token(gfpo):
    got = gfpo([1, 0.5, 0, 1], group_size=4, channels={"length": [400, 100, 10, 200]},
               params={"k": 2, "filter": "efficiency", "scale": "none"})
    assert got.rewards.tolist() == [0.0, -0.25, 0.0, 0.25]  # 0.5 / 100 and 1 / 200 score highest


def test_a_single_kept_rollout_has_no_advantage(gfpo):
    got = gfpo([1, 0, 1], group_size=3, channels={"length": [30, 10, 20]}, params={"k": 1})
    assert got.rewards.tolist() == [0.0, 0.0, 0.0]
