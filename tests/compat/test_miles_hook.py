"""miles / slime `--custom-reward-post-process-path` hook, on samples with miles' and slime's Sample fields.

Neither is on PyPI; the samples here carry the fields their `Sample` dataclasses have and the hook reads
(slime's as of the release each class names).
"""

import logging
import types
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest

import shapec
from shapec.compat import miles
from shapec.compat.miles import post_process_rewards


# slime is not installable here (not on PyPI, and it needs sglang and Megatron): these classes copy the
# field names (and 0.3.0's refusal to read rollout_id) of slime/utils/types.py's Sample at each release.
@dataclass
class SlimeSample:
    """slime 0.2.1 to 0.2.4: no `rollout_id` (every sample is its own rollout, by `index`)."""

    group_index: int | None = None
    index: int | None = None
    response_length: int = 0
    reward: float | dict | None = None
    loss_mask: list | None = None
    remove_sample: bool = False
    metadata: dict = field(default_factory=dict)

    def get_reward_value(self, args):
        return self.reward if not args.reward_key else self.reward[args.reward_key]


@dataclass
class Sample(SlimeSample):
    """miles, and slime from 0.3.1: siblings share `rollout_id`."""

    rollout_id: int | None = None


def _args(**kw):
    base = dict(reward_key=None, advantage_estimator="grpo", rewards_normalization=True,
                grpo_std_normalization=True, n_samples_per_prompt=4, rollout_batch_size=2,
                shapec_spec="miles", shapec_shaper="length_penalty", shapec_params={"coeff": 1.0})
    return types.SimpleNamespace(**{**base, **kw})


def _samples():
    # group 0 all correct (std scaling skipped), group 1 mixed; listed interleaved
    spec = [(0, 1.0, 4), (1, 1.0, 5), (0, 1.0, 8), (1, 0.0, 9), (0, 1.0, 4), (1, 1.0, 10), (0, 1.0, 2), (1, 0.0, 3)]
    return [Sample(group_index=g, index=i, reward=r, response_length=n) for i, (g, r, n) in enumerate(spec)]


def _expected_rewards(samples, lengths):
    """Length penalty per group, then miles' normalisation: all-correct groups mean-centred only."""
    out = np.zeros(len(samples))
    for g in sorted({s.group_index for s in samples}):
        rows = [i for i, s in enumerate(samples) if s.group_index == g]
        raw = np.array([samples[i].reward for i in rows])
        L = np.array([lengths[i] for i in rows], dtype=float)
        ref = max(1.0, L[raw == 1].min())
        shaped = np.where(raw == 1, np.maximum(1, L / ref) ** -1.0, raw)
        centred = shaped - shaped.mean()
        out[rows] = centred if (raw == 1).all() else centred / (shaped.std(ddof=1) + 1e-6)
    return out


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_shapes_then_normalises_per_group(backend, monkeypatch):
    monkeypatch.setenv("SHAPEC_BACKEND", backend)
    samples = _samples()
    raw, rewards = post_process_rewards(_args(), samples)
    assert raw == [s.reward for s in samples]
    np.testing.assert_allclose(rewards, _expected_rewards(samples, [s.response_length for s in samples]), atol=1e-9)


def test_lengths_are_loss_mask_sums_and_siblings_share_one_reward():
    samples = _samples()
    samples[0].loss_mask = [1, 0, 1, 0]  # 2 trainable tokens of 4
    samples[2].remove_sample = True      # counts 0 tokens
    sibling = Sample(group_index=0, index=99, rollout_id=4, reward=1.0, response_length=3, loss_mask=[1, 1, 1])
    samples[4].rollout_id = 4            # samples[4] and its sibling are one rollout of 4 + 3 tokens
    raw, rewards = post_process_rewards(_args(rollout_batch_size=3), samples + [sibling])
    lengths = [2, 5, 0, 9, 7, 10, 2, 3]
    expected = _expected_rewards(samples, lengths)
    np.testing.assert_allclose(rewards[:8], expected, atol=1e-9)
    assert rewards[8] == rewards[4]


def test_without_normalisation_returns_shaped_rewards():
    samples = _samples()
    _, rewards = post_process_rewards(_args(rewards_normalization=False), samples)
    assert rewards[:4] == pytest.approx([0.5, 1.0, 0.25, 0.0])  # 4 and 8 tokens against group 0's shortest, 2


def test_fixed_fanout_without_group_index(monkeypatch):
    monkeypatch.setenv("SHAPEC_SPEC", "miles")
    monkeypatch.setenv("SHAPEC_SHAPER", "length_penalty")
    monkeypatch.setenv("SHAPEC_PARAMS", '{"coeff": 1.0}')
    samples = _samples()
    ordered = sorted(samples, key=lambda s: s.group_index)
    for s in ordered:
        s.group_index = None
    args = _args(shapec_spec=None, shapec_shaper=None, shapec_params=None, advantage_estimator="reinforce_plus_plus_baseline")
    _, rewards = post_process_rewards(args, ordered)
    lengths = [s.response_length for s in ordered]
    L = np.array(lengths[:4], dtype=float)
    shaped = np.maximum(1, L / L.min()) ** -1.0
    np.testing.assert_allclose(rewards[:4], shaped - shaped.mean(), atol=1e-9)


def test_configuration_errors_name_the_setting(monkeypatch):
    monkeypatch.delenv("SHAPEC_SPEC", raising=False)
    with pytest.raises(ValueError, match=r"no spec: set args.shapec_spec or the environment variable SHAPEC_SPEC"):
        post_process_rewards(_args(shapec_spec=None), _samples())
    with pytest.raises(ValueError, match=r"SHAPEC_PARAMS / args.shapec_params is not JSON"):
        post_process_rewards(_args(shapec_params="{coeff: 1}"), _samples())
    with pytest.raises(ValueError, match=r"must be a JSON object, got '\[1\]'"):
        post_process_rewards(_args(shapec_params="[1]"), _samples())
    samples = _samples()
    samples[4].rollout_id = samples[0].rollout_id = 7
    samples[4].reward = 0.0
    with pytest.raises(ValueError, match=r"the samples of rollout 7 \(rows \[0, 4\]\) must share one reward"):
        post_process_rewards(_args(), samples)


@dataclass
class Slime030Sample(SlimeSample):
    """slime 0.3.0: siblings share `group_id`; reading `rollout_id` raises AttributeError."""

    group_id: int | None = None

    def __getattribute__(self, name):
        if name == "rollout_id":
            raise AttributeError("Sample.rollout_id is deprecated and write-only; use Sample.group_id instead.")
        return object.__getattribute__(self, name)


@dataclass
class Slime010Sample:
    """slime 0.1.0: neither `group_index` nor `remove_sample` nor a sibling id."""

    index: int | None = None
    response_length: int = 0
    reward: float | dict | None = None
    loss_mask: list | None = None
    metadata: dict = field(default_factory=dict)

    def get_reward_value(self, args):
        return self.reward if not args.reward_key else self.reward[args.reward_key]


def test_slime_samples_without_rollout_id_are_rollouts_by_index():
    samples = [SlimeSample(group_index=s.group_index, index=s.index, reward=s.reward, response_length=s.response_length)
               for s in _samples()]
    raw, rewards = post_process_rewards(_args(), samples)
    assert raw == [s.reward for s in samples]
    np.testing.assert_allclose(rewards, _expected_rewards(samples, [s.response_length for s in samples]), atol=1e-9)


def test_slime_030_siblings_share_group_id():
    samples = [Slime030Sample(group_index=s.group_index, index=s.index, reward=s.reward,
                              response_length=s.response_length) for s in _samples()]
    samples[4].group_id = 4  # samples[4] (4 tokens) and its sibling (3 tokens) are one rollout of 7
    sibling = Slime030Sample(group_index=0, index=99, group_id=4, reward=1.0, response_length=3)
    _, rewards = post_process_rewards(_args(rollout_batch_size=3), samples + [sibling])
    lengths = [4, 5, 8, 9, 7, 10, 2, 3]
    np.testing.assert_allclose(rewards[:8], _expected_rewards(samples, lengths), atol=1e-9)
    assert rewards[8] == rewards[4]


def test_slime_010_samples_group_in_contiguous_blocks():
    ordered = sorted(_samples(), key=lambda s: s.group_index)
    samples = [Slime010Sample(index=s.index, reward=s.reward, response_length=s.response_length) for s in ordered]
    _, rewards = post_process_rewards(_args(), samples)
    np.testing.assert_allclose(rewards, _expected_rewards(ordered, [s.response_length for s in ordered]), atol=1e-9)


def test_a_batch_that_is_not_full_is_one_group_and_warned_once_with_its_sizes(monkeypatch):
    monkeypatch.setattr(miles, "_warned_one_group", False)
    samples = _samples()[:6]
    for s in samples:
        s.group_index = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, first = post_process_rewards(_args(), samples)
        _, second = post_process_rewards(_args(), samples)
    assert [str(w.message) for w in caught] == [
        "shapec.compat.miles.post_process_rewards: 6 samples without group_index, not n_samples_per_prompt x "
        "rollout_batch_size = 4 x 2 = 8: the whole batch is shaped as one group, as miles then normalises it; give "
        "every sample its group_index to shape each prompt's group (warned once)"]
    assert caught[0].category is UserWarning
    for s in samples:
        s.group_index = 0
    np.testing.assert_allclose(first, _expected_rewards(samples, [s.response_length for s in samples]), atol=1e-9)
    assert second == first


def test_log_line_names_the_shaper_and_its_metrics_or_is_not_written(tmp_path, caplog):
    plain = tmp_path / "plain.shape"
    plain.write_text("shaper plain() produces real {\n  term bonus = 0\n}\n")
    with caplog.at_level(logging.INFO, logger="shapec.compat.miles"):
        post_process_rewards(_args(shapec_spec=str(plain), shapec_shaper=None, shapec_params=None), _samples())
        post_process_rewards(_args(), _samples())
    samples = sorted(_samples(), key=lambda s: s.group_index)
    frac = shapec.load("miles", backend="interpreter").length_penalty(
        [s.reward for s in samples], group_size=4, channels={"loss_tokens": [s.response_length for s in samples]},
        params={"coeff": 1.0}).metrics["penalized_frac"]
    assert [r.getMessage() for r in caplog.records if r.name == "shapec.compat.miles"] == [
        f"shapec length_penalty: penalized_frac={frac:g}"]
