"""stdlib dler: DLER's truncation penalty and advantage against transcriptions of the authors' code
(NVlabs/DLER at ea7d4f7, `verl-dler/`: `DAPORewardManager._apply_stop_properly_penalty`,
`compute_reinforce_plus_plus_baseline_outcome_advantage` with `verl_F.masked_whiten` over the
response tokens), written from reading it in float64 numpy, on random batches on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import shapec


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def dler(request):
    return shapec.load("dler", backend=request.param)


def authors(scores, stop, lengths, index, penalty_coef):
    """The penalty on each score, then the RF++-baseline advantage whitened over a token mask."""
    scores = np.array(scores, dtype=np.float64)
    stop = np.array(stop, dtype=np.float64)
    scores = scores * ((1.0 - stop) * penalty_coef + stop)
    groups: dict = {}
    for i, key in enumerate(index):
        groups.setdefault(key, []).append(i)
    centred = scores.copy()
    for members in groups.values():
        mean = 0.0 if len(members) == 1 else scores[members].mean()
        centred[members] = scores[members] - mean
    width = max(lengths)
    mask = np.array([[1.0] * n + [0.0] * (width - n) for n in lengths])
    values = centred[:, None] * mask
    mean = (values * mask).sum() / (mask.sum() + 1e-8)
    variance = ((values - mean) ** 2 * mask).sum() / (mask.sum() + 1e-8)
    variance = variance * (mask.sum() / (mask.sum() - 1))
    whitened = (values - mean) / np.sqrt(variance + 1e-8) * mask
    return [whitened[i, 0] for i in range(len(lengths))]


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_authors_code(dler, seed):
    rng = np.random.default_rng(seed)
    k, groups = int(rng.integers(1, 17)), int(rng.integers(1, 5))
    n = k * groups
    if n < 2:  # a batch of one token has no variance (the code raises)
        k, n = 2, 2 * groups
    coef = float(rng.choice([0.1, 0.0, 0.5, 1.0]))
    scores = rng.choice([0.0, 1.0], n).tolist()
    stop = rng.integers(0, 2, n).tolist()
    lengths = rng.integers(1, 60, n).tolist()
    expected = authors(scores, stop, lengths, [i // k for i in range(n)], coef)
    got = dler.dler(scores, group_size=k, channels={"stop": stop, "length": lengths},
                    params={"truncation": {"penalty_coef": coef}})
    assert got.rewards.tolist() == pytest.approx(expected, abs=1e-9)


def test_the_penalty_scales_only_responses_that_did_not_stop(dler):
    got = dler.truncation([1.0, 1.0, 0.5], group_size=3, channels={"stop": [1, 0, 0]}, params={"penalty_coef": 0.25})
    assert got.rewards.tolist() == [1.0, 0.25, 0.125]


def test_a_batch_of_one_token_gets_advantage_zero(dler):
    got = dler.dler([1.0], group_size=1, channels={"stop": [1], "length": [1]})
    assert got.rewards.tolist() == [0.0]
