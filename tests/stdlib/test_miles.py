"""miles length penalties, the GRPO advantage stage and the nonzero-std filter (stdlib/miles.shape, compat.miles)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shapec
from shapec.compat.miles import group_advantages, keep_groups, loss_tokens, shape_rewards


# ------------------------------------------------------------------------------ length penalty
def test_documented_example_doubling_the_reference_halves_the_reward():
    # c = 1: L = 200 against L_min = 100 -> max(1, 2) ** -1 = 0.5
    assert shape_rewards([1.0, 1.0], [100, 200], group_size=2, coeff=1.0).tolist() == [1.0, 0.5]


def test_power_law_with_fractional_coefficient():
    # c = 0.5: 300 / 100 = 3 -> 3 ** -0.5; 150 / 100 -> 1.5 ** -0.5
    # (pow may differ from Python's in the last place where NumPy uses SIMD math libraries)
    out = shape_rewards([1, 1, 1], [100, 300, 150], group_size=3, coeff=0.5)
    assert out.tolist() == pytest.approx([1.0, 3.0 ** -0.5, 1.5 ** -0.5], rel=1e-15, abs=0)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_matches_the_documented_formula_on_random_groups(data):
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    n = sum(sizes)
    rewards = data.draw(st.lists(st.sampled_from([0.0, 1.0, 0.5]), min_size=n, max_size=n))
    lengths = data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    coeff = data.draw(st.floats(0.0, 4.0, allow_nan=False))
    m = data.draw(st.integers(1, 300))
    offsets = np.cumsum([0] + sizes).tolist()
    expected = list(rewards)
    for s, e in zip(offsets[:-1], offsets[1:]):
        correct = [L for r, L in zip(rewards[s:e], lengths[s:e]) if r == 1.0]
        for i in range(s, e):
            if rewards[i] == 1.0:
                expected[i] = max(1, lengths[i] / max(m, min(correct))) ** (-coeff)
    out = shape_rewards(rewards, lengths, offsets=offsets, coeff=coeff, min_tokens=m)
    assert out.tolist() == pytest.approx(expected, rel=1e-15, abs=0)


def test_ties_and_lengths_at_the_reference_keep_one():
    # L_min = 100 (twice) -> both keep 1.0; 150 / 100 -> 1 / 1.5
    out = shape_rewards([1, 1, 1], [100, 100, 150], group_size=3, coeff=1.0)
    assert out.tolist() == [1.0, 1.0, 1.0 / 1.5]


def test_min_tokens_floors_the_reference():
    # L_min = 7 but m = 10: ref = 10 -> 100/10 = 10 -> 0.1, 200/10 -> 0.05; 7/10 < 1 -> 1.0
    out = shape_rewards([1, 1, 0, 1], [100, 200, 50, 7], group_size=4, coeff=1.0, min_tokens=10)
    assert out.tolist() == [0.1, 0.05, 0.0, 1.0]


def test_only_rewards_of_exactly_one_are_shaped():
    # 0.5 and 0.9999 are not correct: unchanged, and not part of L_min (10 and 5 would be shorter);
    # correct lengths 100 and 300 -> ref 100 -> [1, 1/3]
    out = shape_rewards([0.5, 1.0, 0.9999, 1.0, 0.0], [10, 100, 5, 300, 1], group_size=5, coeff=1.0)
    assert out.tolist() == [0.5, 1.0, 0.9999, 1.0 / 3.0, 0.0]


def test_groups_without_a_correct_rollout_are_unchanged_and_references_are_per_group():
    # group 0: all wrong; group 1: ref 50 -> 100/50 = 2 -> 0.5; group 2 (size 1): its own ref -> 1.0
    out = shape_rewards([0, 0, 1, 1, 1], [10, 900, 50, 100, 400], offsets=[0, 2, 4, 5], coeff=1.0)
    assert out.tolist() == [0.0, 0.0, 1.0, 0.5, 1.0]


def test_zero_length_correct_rollouts_use_min_tokens():
    # a removed sample counts 0 tokens: L_min = 0, ref = max(1, 0) = 1 -> 4/1 = 4 -> 0.25
    out = shape_rewards([1, 1], [0, 4], group_size=2, coeff=1.0)
    assert out.tolist() == [1.0, 0.25]


def test_disabled_shaping_returns_the_rewards_and_counts_no_lengths(caplog):
    with caplog.at_level(logging.INFO, logger="shapec.compat.miles"):
        out = shape_rewards([1, 0, 1], None, group_size=3, session_ids=["s0", "s1", "s2"])
    assert out.tolist() == [1.0, 0.0, 1.0] and out.dtype == np.float64
    assert caplog.records == []


@pytest.mark.parametrize("coeff", [-0.1, math.nan, math.inf, -math.inf, "1", True, None])
def test_invalid_coeff_is_rejected(coeff):
    with pytest.raises(ValueError, match=r"^coeff must be a finite number >= 0, got "):
        shape_rewards([1], [1], group_size=1, coeff=coeff)


@pytest.mark.parametrize("min_tokens", [0, -3, 1.5, 2.0, True, "4", None])
def test_invalid_min_tokens_is_rejected(min_tokens):
    with pytest.raises(ValueError, match=r"^min_tokens must be a positive integer, got "):
        shape_rewards([1], [1], group_size=1, coeff=1.0, min_tokens=min_tokens)


def test_loss_tokens_are_required_when_shaping():
    with pytest.raises(ValueError, match="loss_tokens is required when coeff > 0"):
        shape_rewards([1], None, group_size=1, coeff=1.0)


def test_numpy_integer_min_tokens_is_accepted():
    # ref = max(np.int64(200), 100) = 200 -> 400/200 = 2 -> 0.5
    assert shape_rewards([1, 1], [100, 400], group_size=2, coeff=1.0, min_tokens=np.int64(200)).tolist() == [1.0, 0.5]


# ------------------------------------------------------------------------------ loss tokens
def test_loss_tokens_sum_final_masks_and_removed_rollouts_count_zero():
    masks = [[0, 1, 1, 0, 1], [1, 1], [1, 1, 1]]
    assert loss_tokens(masks).tolist() == [3.0, 2.0, 3.0]
    assert loss_tokens(masks, removed=[False, True, 0]).tolist() == [3.0, 0.0, 3.0]


def test_retained_sibling_samples_add_up_and_removed_samples_count_zero():
    # rollout 0: two retained samples; the shared prefix is owned by the first (masked 0 in the second)
    # -> 3 + 2 = 5; rollout 1: one plain mask -> 1; rollout 2: siblings, the second removed -> 2 + 0
    masks = [[[1, 1, 1], [0, 0, 1, 1]], [0, 1], [[1, 1], [1, 1, 1]]]
    assert loss_tokens(masks, removed=[False, False, [False, True]]).tolist() == [5.0, 1.0, 2.0]
    assert loss_tokens(masks).tolist() == [5.0, 1.0, 5.0]


def test_sibling_samples_share_the_rollout_length_and_shaped_reward():
    # both rollouts are correct; rollout 1 has two samples of 100 tokens -> L = 200 against 100 -> 0.5,
    # one value for the whole rollout, whichever sibling it is written to
    L = loss_tokens([[1] * 100, [[1] * 100, [1] * 100]])
    assert shape_rewards([1, 1], L, group_size=2, coeff=1.0).tolist() == [1.0, 0.5]


def test_numpy_and_boolean_masks_and_empty_masks():
    assert loss_tokens([np.array([1, 0, 1]), [True, False], []]).tolist() == [2.0, 1.0, 0.0]


@pytest.mark.parametrize("masks, removed, message", [
    ([[1, 2, 1]], None, r"loss_masks\[0\]\[1\]: loss mask values are 0 or 1, got 2"),
    ([[1], [[1, 1], [1, 0.5]]], None, r"loss_masks\[1\]\[1\]\[1\]: loss mask values are 0 or 1, got 0.5"),
    ([[1], [1]], [False], r"removed has 1 entries for 2 rollouts"),
    ([[[1], [1]]], [[False]], r"removed\[0\] has 1 flags for 2 samples"),
    ([["a", "b"]], None, r"loss_masks\[0\]: expected a 1-d loss mask of 0/1 values"),
])
def test_bad_loss_masks_name_the_rollout_and_position(masks, removed, message):
    with pytest.raises(ValueError, match=message):
        loss_tokens(masks, removed=removed)


# ------------------------------------------------------------------------------ log lines
def test_one_info_line_per_rollout_with_the_documented_fields(caplog):
    with caplog.at_level(logging.INFO, logger="shapec.compat.miles"):
        shape_rewards([1, 1, 0], [100, 200, 50], group_size=3, coeff=1.0,
                      session_ids=["s0", "s1", "s2"], rollout_ids=[7, 8, 9])
    assert [r.name for r in caplog.records] == ["shapec.compat.miles"] * 3
    assert all(r.levelno == logging.INFO for r in caplog.records)
    assert [r.getMessage() for r in caplog.records] == [
        "Length penalty: session_id=s0 rollout_id=7 generated_tokens=100 multiplier=1 "
        "reward_reduction=0 raw_reward=1 shaped_reward=1",
        # 200 / 100 -> multiplier 0.5, reduction 1 - 0.5
        "Length penalty: session_id=s1 rollout_id=8 generated_tokens=200 multiplier=0.5 "
        "reward_reduction=0.5 raw_reward=1 shaped_reward=0.5",
        # incorrect sessions report multiplier 1
        "Length penalty: session_id=s2 rollout_id=9 generated_tokens=50 multiplier=1 "
        "reward_reduction=0 raw_reward=0 shaped_reward=0",
    ]


def test_no_log_lines_without_ids_and_missing_ids_log_as_none(caplog):
    with caplog.at_level(logging.INFO, logger="shapec.compat.miles"):
        shape_rewards([1, 1], [100, 300], group_size=2, coeff=1.0)
        assert caplog.records == []
        shape_rewards([1, 1], [100, 300], group_size=2, coeff=1.0, rollout_ids=["r0", "r1"])
    # 300 / 100 = 3 -> 1/3 (%g: 6 significant digits), reduction 2/3
    assert caplog.records[1].getMessage() == (
        "Length penalty: session_id=None rollout_id=r1 generated_tokens=300 multiplier=0.333333 "
        "reward_reduction=0.666667 raw_reward=1 shaped_reward=0.333333")


def test_ids_of_the_wrong_length_are_rejected():
    with pytest.raises(ValueError, match="session_ids has 1 entries for 2 rewards"):
        shape_rewards([1, 1], [1, 2], group_size=2, coeff=1.0, session_ids=["only"])


# ------------------------------------------------------------------------------ advantage stage
def test_all_correct_groups_are_mean_centred_without_std_scaling():
    # raw rewards all 1.0; shaped [1, 0.5, 0.25]: mean = 1.75 / 3; no division by the std
    mean = (1.0 + 0.5 + 0.25) / 3
    out = group_advantages([1.0, 0.5, 0.25], [1, 1, 1], group_size=3)
    assert out.tolist() == [1.0 - mean, 0.5 - mean, 0.25 - mean]


def test_mixed_groups_divide_by_the_sample_std_plus_epsilon():
    # shaped [1, 0.5, 0, 0], raw [1, 1, 0, 0]: mean 0.375, centred [0.625, 0.125, -0.375, -0.375],
    # sample std = sqrt((0.390625 + 0.015625 + 0.140625 + 0.140625) / 3) = sqrt(0.6875 / 3)
    std = math.sqrt(0.6875 / 3)
    out = group_advantages([1.0, 0.5, 0.0, 0.0], [1, 1, 0, 0], group_size=4)
    assert out.tolist() == pytest.approx([c / (std + 1e-6) for c in (0.625, 0.125, -0.375, -0.375)], rel=1e-14)


def test_without_std_normalisation_mixed_groups_are_only_centred():
    out = group_advantages([1.0, 0.5, 0.0, 0.0], [1, 1, 0, 0], group_size=4, normalize_std=False)
    assert out.tolist() == [0.625, 0.125, -0.375, -0.375]


def test_raw_rewards_decide_all_correct_not_the_shaped_ones():
    # same shaped rewards; group 0 raw all 1 -> centred only ([0.25, -0.25]); group 1 raw [1, 0]:
    # centred [0.25, -0.25] / (std + 1e-6) with std = sqrt(2 * 0.0625 / 1) = 0.3535533905932738
    std = math.sqrt(0.125)
    out = group_advantages([1.0, 0.5, 1.0, 0.5], [1, 1, 1, 0], group_size=2)
    assert out[:2].tolist() == [0.25, -0.25]
    assert out[2:].tolist() == pytest.approx([0.25 / (std + 1e-6), -0.25 / (std + 1e-6)], rel=1e-14)
    # without raw rewards, the shaped ones are the raw ones: neither group is all-correct
    assert group_advantages([1.0, 0.5], group_size=2).tolist() == pytest.approx([0.25 / (std + 1e-6),
                                                                                -0.25 / (std + 1e-6)], rel=1e-14)


def test_one_rollout_groups_and_zero_std_groups_get_zero():
    # group sizes 1, 2 (both 0: std 0, no division) and 1 (all-correct, centred: 0)
    out = group_advantages([0.7, 0.0, 0.0, 1.0], [0.7, 0, 0, 1], offsets=[0, 1, 3, 4])
    assert out.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert np.all(np.isfinite(out))


# ------------------------------------------------------------------------------ filter
def test_filter_threshold_for_all_correct_groups_is_a_shaped_range_above_1e_6():
    # all-correct groups: range 2e-6 -> kept; range 5e-7 -> dropped; range 0 -> dropped
    shaped = [1.0, 1.0 - 2e-6, 1.0, 1.0 - 5e-7, 1.0, 1.0]
    keep = keep_groups(shaped, [1] * 6, group_size=2)
    assert keep.tolist() == [True, False, False]


def test_filter_keeps_mixed_groups_with_any_std_and_drops_zero_std_and_singletons():
    # group 0 mixed with a tiny spread (std > 0, below the all-correct range threshold) -> kept;
    # group 1 all wrong (std 0) -> dropped; group 2 one rollout (no std) -> dropped;
    # group 3 mixed 1/0 -> kept
    shaped = [0.5, 0.5 + 1e-9, 0.0, 0.0, 1.0, 1.0, 0.0]
    raw = [0.5, 0.5 + 1e-9, 0.0, 0.0, 1.0, 1.0, 0.0]
    keep = keep_groups(shaped, raw, offsets=[0, 2, 4, 5, 7])
    assert keep.tolist() == [True, False, False, True]


def test_filter_uses_shaped_rewards_so_all_correct_groups_with_length_differences_survive():
    raw = [1, 1, 1, 1]
    shaped = shape_rewards(raw, [100, 200, 100, 100], group_size=2, coeff=1.0)
    assert shaped.tolist() == [1.0, 0.5, 1.0, 1.0]
    assert keep_groups(shaped, raw, group_size=2).tolist() == [True, False]
    # on raw rewards the first group would have been dropped too
    assert keep_groups(raw, group_size=2).tolist() == [False, False]


def test_gate_reasons_name_why_a_group_is_kept_or_dropped():
    m = shapec.load("miles")
    out = m.grpo_advantage([1.0, 0.5, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0], group_size=2,
                           env_rewards=[1, 1, 1, 1, 1, 0, 0, 0])
    assert out.gates["keep"] == ["length_spread", "flat_lengths", "nonzero_std", "zero_std"]
    assert out.gates["all_correct"] == ["open", "open", "closed", "closed"]


# ------------------------------------------------------------------------------ the pipeline
def test_grpo_pipeline_equals_shaping_then_the_advantage_stage():
    raw = [1, 1, 1, 0, 1, 1, 1, 1]
    L = [100, 200, 400, 50, 10, 10, 30, 10]
    out = shapec.load("miles").grpo(raw, group_size=4, channels={"loss_tokens": L},
                                    params={"length_penalty": {"coeff": 1.0}})
    shaped = shape_rewards(raw, L, group_size=4, coeff=1.0)
    # group 0 mixed: [1, 0.5, 0.25, 0]; group 1 all-correct: [1, 1, 1/3, 1]
    assert shaped.tolist() == [1.0, 0.5, 0.25, 0.0, 1.0, 1.0, 1.0 / 3.0, 1.0]
    assert out.stage("length_penalty").rewards.tolist() == shaped.tolist()
    assert out.stage("grpo_advantage").reward_in.tolist() == shaped.tolist()
    assert out.rewards.tolist() == group_advantages(shaped, raw, group_size=4).tolist()
    # the all-correct group is centred only: mean (3 + 1/3) / 4
    mean = (1.0 + 1.0 + 1.0 / 3.0 + 1.0) / 4
    assert out.rewards[4:].tolist() == [1.0 - mean, 1.0 - mean, 1.0 / 3.0 - mean, 1.0 - mean]
    assert out.gates["grpo_advantage.keep"] == ["nonzero_std", "length_spread"]
    assert out.factors["length_penalty.power"].tolist() == [1.0, 0.5, 0.25, 1.0, 1.0, 1.0, 1.0 / 3.0, 1.0]
    assert out.metrics["length_penalty.penalized_frac"] == 3 / 8
