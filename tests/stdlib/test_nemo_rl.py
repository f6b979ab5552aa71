"""stdlib/nemo_rl.shape at the array level: per-term breakdown, gate reasons, skips, bands, per-group params."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

import shapec
from shapec.runtime.batch import BatchError

BACKENDS = ["interpreter"] + (["numba"] if importlib.util.find_spec("shapec.compiler.lowering") else [])


@pytest.fixture(params=BACKENDS, scope="module")
def mod(request):
    return shapec.load("nemo_rl", backend=request.param)


def call(mod, rewards, reasoning, answer=None, low_effort=None, group_size=None, metadata=None,
         reward_components=None, **params):
    n = len(rewards)
    return mod.length_penalty(
        rewards, group_size=group_size or n,
        channels={"reasoning": reasoning, "answer": answer or [0] * n, "low_effort": low_effort or [0] * n},
        metadata=metadata, params=params, reward_components=reward_components)


def band(a, b, f, G=1):
    """A (G, 4) block of present bands."""
    return np.tile([a, b, f, 1.0], (G, 1))


def test_argmax_is_a_group_index_under_a_mask(mod):
    # positives are rows 1, 2 (10, 30): the longest is row 2, not position 1 of the selection
    out = call(mod, [0, 1, 1], [50, 10, 30], longest_total_penalty=0.2)
    assert out.terms["longest_total"].tolist() == [0, 0, -0.2]
    out = call(mod, [0, 1, 1], [5, 30, 10], total_bonus=0.1)
    assert out.terms["shortest_total"].tolist() == [0, 0, 0.1]


def test_per_term_breakdown(mod):
    # totals 10, 20, 40: group-relative [4/9, 1/9, -5/9] * 0.3; longest (40) -0.1; then clamp, then bands
    out = call(mod, [1, 1, 1], [10, 20, 40], group_total_length_penalty_coeff=0.3, longest_total_penalty=0.1)
    assert out.terms["group_relative"] == pytest.approx([0.4 / 3, 0.1 / 3, -0.5 / 3])
    assert out.terms["longest_total"].tolist() == [0, 0, -0.1]
    assert out.rewards == pytest.approx([1 + 0.4 / 3, 1 + 0.1 / 3, 1 - 0.5 / 3 - 0.1])
    assert set(out.factors) == {"band_total_multiplier", "band_reasoning_multiplier", "band_answer_multiplier"}


def test_per_group_params(mod):
    # two groups in one call, each with its own penalty
    out = call(mod, [1, 1, 1, 1], [10, 20, 10, 20], group_size=2, longest_total_penalty=[0.2, 0.5])
    assert out.rewards == pytest.approx([1, 0.8, 1, 0.5])


def test_pipeline_is_the_shaper(mod):
    args = dict(group_size=3, channels={"reasoning": [10, 20, 40], "answer": [0, 0, 0], "low_effort": [0, 0, 0]})
    a = mod.length_penalty([1, 1, 0], params={"longest_total_penalty": 0.2}, **args)
    b = mod.nemo_rl_length([1, 1, 0], params={"length_penalty": {"longest_total_penalty": 0.2}}, **args)
    assert a.rewards.tolist() == b.rewards.tolist() == [1, 0.8, 0]


class TestProfileGate:
    ON = dict(group_total_length_penalty_coeff=0.2, group_length_penalty_profile_gate=True)

    def gate(self, out):
        return out.gates["profile_gate"]

    def test_disabled(self, mod):
        out = call(mod, [1, 1], [10, 30], group_total_length_penalty_coeff=0.2)
        assert self.gate(out) == ["disabled"] and out.rewards == pytest.approx([1.1, 0.9])

    def test_missing_profile_limit(self, mod):
        out = call(mod, [1, 1], [10, 30], **self.ON)
        assert self.gate(out) == ["missing_profile_limit"] and out.rewards.tolist() == [1, 1]

    def test_present_band_with_a_missing_field_is_an_error(self, mod):
        meta = {"profile_band": {"total": np.array([[math.nan, 40, 1, 1]])}}
        with pytest.raises(BatchError, match=r"metadata\['profile_band.total'\]: group 0: band fields must be finite"):
            call(mod, [1, 1], [10, 30], metadata=meta, **self.ON)

    def test_no_lengths(self, mod):
        # positive_only and nobody scored: nothing to average
        out = call(mod, [0, 0], [10, 30], metadata={"profile_band": {"total": band(1, 2, 1)}}, **self.ON)
        assert self.gate(out) == ["no_lengths"]

    def test_mean_le_limit(self, mod):
        out = call(mod, [1, 1], [10, 30], metadata={"profile_band": {"total": band(20, 40, 1)}}, **self.ON)
        assert self.gate(out) == ["mean_le_limit"] and out.rewards.tolist() == [1, 1]

    def test_mean_gt_limit(self, mod):
        # (10 + 30) / 2 = 20 > 19.5
        out = call(mod, [1, 1], [10, 30], metadata={"profile_band": {"total": band(19.5, 40, 1)}}, **self.ON)
        assert self.gate(out) == ["mean_gt_limit"] and out.rewards == pytest.approx([1.1, 0.9])

    def test_global_band_and_answer_channel(self, mod):
        # answer lengths 4, 8: mean 6 > a = 5 from the global answer band
        out = call(mod, [1, 1], [10, 30], [4, 8], global_band_answer=(5, 9, 1.0),
                   group_length_penalty_profile_gate_channel="answer", **self.ON)
        assert self.gate(out) == ["mean_gt_limit"]

    def test_per_group_decisions(self, mod):
        # group 0 mean 20 > 15 opens; group 1 mean 20 <= 25 closes
        meta = {"profile_band": {"total": np.array([[15.0, 40, 1, 1], [25, 40, 1, 1]])}}
        out = call(mod, [1, 1, 1, 1], [10, 30, 10, 30], group_size=2, metadata=meta, **self.ON)
        assert self.gate(out) == ["mean_gt_limit", "mean_le_limit"]
        assert out.rewards == pytest.approx([1.1, 0.9, 1, 1])


class TestSkips:
    def test_disabled_before_binary_check(self, mod):
        out = call(mod, [0.7, 0.3], [1, 2], enabled=False)
        assert out.skip_reasons == ["disabled"] and out.metrics["skipped_non_binary_frac"] == 0

    def test_non_binary_and_components(self, mod):
        assert call(mod, [0.5, 1], [1, 2]).skip_reasons == ["non_binary"]
        out = call(mod, [1, 1], [1, 2], reward_components=[0, 2], longest_total_penalty=0.2)
        assert out.skip_reasons == ["non_binary"] and out.rewards.tolist() == [1, 1]
        assert out.metrics["skipped_non_binary_frac"] == 1.0

    def test_low_effort_closes_every_adjustment(self, mod):
        meta = {"profile_band": {"total": band(0, 1, 0.5)}}
        out = call(mod, [1, 1, -5e-7], [10, 30, 5], low_effort=[0, 1, 0], metadata=meta,
                   longest_total_penalty=0.2, pass_rate_length_penalty_weight=0.5, profile_band_total=True)
        assert out.gates["full_effort"] == ["closed"] and out.skip_reasons == [""]
        assert out.rewards.tolist() == [1, 1, 0]  # only the clamp acts

    def test_validation_mode_passes_through(self, mod):
        out = mod.length_penalty([1, 1], group_size=2, params={"longest_total_penalty": 0.2}, training=False,
                                 channels={"reasoning": [1, 2], "answer": [0, 0], "low_effort": [0, 0]})
        assert out.rewards.tolist() == [1, 1]


class TestBands:
    def test_row_band_present_but_malformed_is_an_error(self, mod):
        meta = {"profile_band": {"total": np.array([[50.0, 50, 0.5, 1]])}}
        with pytest.raises(BatchError, match=r"metadata\['profile_band.total'\]: group 0: band needs b > a"):
            call(mod, [1], [30], metadata=meta, global_band_total=(0, 10, 0.1), profile_band_total=True)

    def test_absent_row_band_falls_back(self, mod):
        meta = {"profile_band": {"total": np.array([[math.nan, math.nan, math.nan, 0]])}}
        out = call(mod, [1], [30], metadata=meta, global_band_total=(0, 60, 0.5), profile_band_total=True)
        # 1 - 30/60 * 0.5 = 0.75
        assert out.rewards == pytest.approx([0.75])

    def test_records_of_dicts(self, mod):
        meta = {"profile_band": [{"total": {"a": 10, "b": 20, "f": 0.5}}]}
        out = call(mod, [1, 1], [15, 25], metadata=meta, profile_band_total=True)
        assert out.factors["band_total_multiplier"] == pytest.approx([0.75, 0.5])

    def test_flag_off_no_factor(self, mod):
        out = call(mod, [1], [30], global_band_total=(0, 10, 0.1))
        assert out.rewards.tolist() == [1]


def test_metrics(mod):
    # longest penalty 1.5 wipes row 1 (1 -> 0); group 1 is non-binary
    out = call(mod, [1, 1, 0.5, 1], [10, 20, 1, 2], group_size=2, longest_total_penalty=1.5)
    assert out.metrics == pytest.approx({"env_reward_mean": 3.5 / 4, "reward_delta_mean": -1 / 4,
                                         "wiped_correct_frac": 1 / 4, "adjusted_frac": 1 / 4,
                                         "skipped_non_binary_frac": 2 / 4})
