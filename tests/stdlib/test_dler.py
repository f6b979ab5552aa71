"""stdlib dler: DLER's truncation penalty and advantage against a transcription of the authors' code
(NVlabs/DLER at ea7d4f7, `verl-dler/`: `DAPORewardManager._apply_stop_properly_penalty`,
`compute_reinforce_plus_plus_baseline_outcome_advantage` with `verl_F.masked_whiten` over the
response tokens), written from reading it in float64 numpy, on random batches on both backends;
and against the four-stage pipeline `dler` was before a batch reduction could read group values."""

from __future__ import annotations

import numpy as np
import pytest

import shapec

# dler as it was: one stage per batch reduction, each reading the rewards the stage before gave
PIPELINE = '''
shaper truncation(penalty_coef: float = 0.1) produces real {
  input stop: bool
  let stopped = stop ? 1 : 0
  result = reward * ((1 - stopped) * penalty_coef + stopped)
}
shaper center() produces real {
  result = group_size == 1 ? reward : reward - mean(reward)
}
shaper whiten_center() produces real {
  input length: tokens
  result = reward - batch.sum(float(length) * reward) / (float(batch.sum(length)) + 1e-8)
}
shaper whiten() produces advantage {
  input length: tokens
  let tokens = float(batch.sum(length))
  let variance = tokens > 1 ? batch.sum(float(length) * reward * reward) / (tokens + 1e-8) * (tokens / (tokens - 1))
    : 0
  result = tokens > 1 ? reward / sqrt(variance + 1e-8) : 0
}
pipeline dler = truncation >> center >> whiten_center >> whiten
'''


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def backend(request):
    return request.param


@pytest.fixture(scope="module")
def dler(backend):
    return shapec.load("dler", backend=backend)


@pytest.fixture(scope="module")
def pipeline(backend):
    return shapec.compile_str(PIPELINE, "dler_pipeline.shape", backend).dler


def authors(scores, stop, lengths, index, penalty_coef):
    """The penalty on each score, then the RF++-baseline advantage whitened over the token mask:
    the (responses, tokens) advantage tensor the code returns."""
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
    mask = np.array([[1.0] * n + [0.0] * (width - n) for n in lengths]).reshape(len(lengths), width)
    values = centred[:, None] * mask
    mean = (values * mask).sum() / (mask.sum() + 1e-8)
    variance = ((values - mean) ** 2 * mask).sum() / (mask.sum() + 1e-8)
    variance = variance * (mask.sum() / (mask.sum() - 1))
    return (values - mean) / np.sqrt(variance + 1e-8) * mask, mask


def random_batch(seed):
    """Groups of 1 to 16 rollouts; all wrong, all right, tied graded scores or mixed; some
    responses of no tokens; at least two tokens (fewer has no variance: the code raises)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 17, int(rng.integers(1, 5)))
    if seed % 7 == 0:
        sizes = np.array([1])  # one rollout
    n = int(sizes.sum())
    kind = seed % 4
    scores = (np.zeros(n) if kind == 0 else np.ones(n) if kind == 1 else
              rng.choice([0.0, 0.5, 1.0], n) if kind == 2 else rng.choice([0.0, 1.0], n))
    lengths = rng.integers(0, 60, n) * (rng.random(n) > 0.2)
    if lengths.sum() < 2:
        lengths[0] = 2
    stop = rng.integers(0, 2, n)
    coef = float(rng.choice([0.1, 0.0, 0.5, 1.0]))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return scores, stop, lengths, offsets, coef


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_authors_code(dler, seed):
    scores, stop, lengths, offsets, coef = random_batch(seed)
    index = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    expected, mask = authors(scores, stop, lengths.tolist(), index, coef)
    got = dler.dler(scores, offsets=offsets, channels={"stop": stop, "length": lengths},
                    params={"penalty_coef": coef})
    assert got.rewards[:, None] * mask == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("seed", range(30))
def test_matches_the_pipeline_it_replaces(dler, pipeline, seed):
    scores, stop, lengths, offsets, coef = random_batch(seed)
    channels = {"stop": stop, "length": lengths}
    got = dler.dler(scores, offsets=offsets, channels=channels, params={"penalty_coef": coef})
    before = pipeline(scores, offsets=offsets, channels=channels, params={"truncation": {"penalty_coef": coef}})
    assert got.rewards.tolist() == pytest.approx(before.rewards.tolist(), abs=1e-12)


def test_the_penalty_scales_only_responses_that_did_not_stop(dler):
    got = dler.truncation([1.0, 1.0, 0.5], group_size=3, channels={"stop": [1, 0, 0]}, params={"penalty_coef": 0.25})
    assert got.rewards.tolist() == [1.0, 0.25, 0.125]


@pytest.mark.parametrize("lengths", [[1], [0, 1], [0, 0]])
def test_a_batch_of_fewer_than_two_tokens_gets_advantage_zero(dler, lengths):
    got = dler.dler([1.0] * len(lengths), group_size=1, channels={"stop": [1] * len(lengths), "length": lengths})
    assert got.rewards.tolist() == [0.0] * len(lengths)
