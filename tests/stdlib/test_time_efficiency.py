"""Time efficiency (stdlib/time_efficiency.shape, compat._time_efficiency) and string metric names."""

from __future__ import annotations

import copy

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import shapec
from shapec import check_source
from shapec.compat._time_efficiency import TimeEfficiencyConfig, apply_time_efficiency_reward
from shapec.syntax.parser import parse
from shapec.syntax.pretty import pretty

from ..helpers import assert_error, src

KEYS = ["minutes/mean", "minutes/max", "deduction/mean", "deduction/max", "calls/mean", "bonus/mean",
        "seconds_per_call", "bonus_saturated_frac", "floored_frac", "group_has_signal"]


def row(reward, minutes=0.0, resolved=True, calls=0, **extra):
    full = {"reward": reward, "openhands_run_time": minutes * 60, "resolved": resolved,
            "response": {"output": [{"type": "function_call", "name": "bash"}] * calls}}
    full.update(extra)
    return {"full_result": full}


def rewards(results):
    return [r["full_result"]["reward"] for r in results]


def on(**kwargs) -> TimeEfficiencyConfig:
    return TimeEfficiencyConfig(enabled=True, **kwargs)


# ------------------------------------------------------------------------------ the PR's cases
def test_a_sixty_minute_rollout_costs_exactly_one():
    results = [row(1.0, minutes=60)]
    metrics = apply_time_efficiency_reward(results, on())
    assert rewards(results) == [0.0]
    assert metrics["time_efficiency/deduction/max"] == 1.0


def test_default_config_charges_every_row_and_reports_every_metric_in_order():
    # 30 min -> 1.0 - 0.5; 60 min -> 0.0 - 1.0
    results = [row(1.0, minutes=30, resolved=True), row(0.0, minutes=60, resolved=False)]
    metrics = apply_time_efficiency_reward(results, on())
    assert rewards(results) == [0.5, -1.0]
    assert list(metrics) == ["time_efficiency/" + k for k in KEYS]
    assert metrics == {
        "time_efficiency/minutes/mean": 45.0,
        "time_efficiency/minutes/max": 60.0,
        "time_efficiency/deduction/mean": 0.75,
        "time_efficiency/deduction/max": 1.0,
        "time_efficiency/calls/mean": 0.0,
        "time_efficiency/bonus/mean": 0.0,
        "time_efficiency/seconds_per_call": 5400.0,  # 90 min * 60 / max(0 calls, 1)
        "time_efficiency/bonus_saturated_frac": 0.0,
        "time_efficiency/floored_frac": 0.0,
        "time_efficiency/group_has_signal": 1.0,
    }


def test_call_bonus_saturates_at_the_reference():
    # ref 50, lambda 0.1, 20 min each: bonuses 0.1 * min(25/50, 1) = 0.05, 0.1 * 1, 0.1 * min(80/50, 1)
    results = [row(1.0, minutes=20, calls=25), row(1.0, minutes=20, calls=50), row(1.0, minutes=20, calls=80)]
    metrics = apply_time_efficiency_reward(results, on(lambda_call_bonus=0.10, call_bonus_ref=50.0))
    lt = 1.0 / 60.0
    # the reference's own order: base + bonus - lambda_time * minutes, exactly
    assert rewards(results) == [1.0 + 0.05 - lt * 20.0, 1.0 + 0.1 - lt * 20.0, 1.0 + 0.1 - lt * 20.0]
    assert metrics["time_efficiency/bonus/mean"] == (0.05 + 0.1 + 0.1) / 3
    assert metrics["time_efficiency/bonus_saturated_frac"] == 2 / 3
    assert metrics["time_efficiency/deduction/max"] == 1.0 - (1.0 + 0.05 - lt * 20.0)  # = 20/60 - 0.05
    assert metrics["time_efficiency/deduction/max"] == pytest.approx(20 / 60 - 0.05, abs=1e-15)
    assert metrics["time_efficiency/calls/mean"] == 155 / 3
    assert metrics["time_efficiency/seconds_per_call"] == 60.0 * 60.0 / 155  # 3 * 20 min * 60 / 155 calls


def test_floor_with_apply_to_correct():
    # row 0: correct, 60 min, no calls: 1 + 0 - 1 = 0 < 0.05 -> floored to 0.05;
    # row 1: unresolved -> skipped; row 2: 1 + 0.1 * min(60/56, 1) - 1/60 -> above the floor
    results = [row(1.0, minutes=60, calls=0), row(0.0, minutes=10, resolved=False, calls=70),
               row(1.0, minutes=1, calls=60)]
    cfg = on(apply_to="correct", lambda_call_bonus=0.10, call_bonus_ref=56.0, floor=0.05)
    metrics = apply_time_efficiency_reward(results, cfg)
    assert rewards(results) == [0.05, 0.0, 1.0 + 0.1 - 1.0 / 60.0]
    assert metrics["time_efficiency/floored_frac"] == 1 / 3
    # deductions: 1 - 0.05, 0 (skipped), 1 - (1.1 - 1/60)
    assert metrics["time_efficiency/deduction/max"] == 1.0 - 0.05
    assert metrics["time_efficiency/deduction/mean"] == ((1.0 - 0.05) + 0.0 + (1.0 - (1.0 + 0.1 - 1.0 / 60.0))) / 3
    # saturation counts every row, the skipped one too: 70 >= 56 and 60 >= 56
    assert metrics["time_efficiency/bonus_saturated_frac"] == 2 / 3
    # the skipped row's bonus counts 0: (0 + 0 + 0.1) / 3
    assert metrics["time_efficiency/bonus/mean"] == 0.1 / 3


def test_floor_lifts_only_rewards_strictly_below_it():
    # 1 - 30/60 = 0.5 == floor: not floored; 1 - 45/60 = 0.25 < 0.5: floored
    results = [row(1.0, minutes=30), row(1.0, minutes=45)]
    metrics = apply_time_efficiency_reward(results, on(floor=0.5))
    assert rewards(results) == [0.5, 0.5]
    assert metrics["time_efficiency/floored_frac"] == 0.5


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_matches_the_pr_rule_on_random_results(data):
    """The PR's rule restated row by row; rewards must agree bit for bit, the bonus on or off."""
    n = data.draw(st.integers(1, 8))
    cfg = on(
        lambda_time=data.draw(st.sampled_from([1.0 / 60.0, 0.02, 0.0])),
        apply_to=data.draw(st.sampled_from(["all", "correct"])),
        lambda_call_bonus=data.draw(st.sampled_from([0.0, 0.1, 0.37])),
        call_bonus_ref=data.draw(st.sampled_from([56.0, 3.0, 7.5])),
        floor=data.draw(st.sampled_from([None, 0.05, -0.3])),
    )
    results = [row(data.draw(st.sampled_from([0.0, 1.0, 0.7, None])),
                   minutes=data.draw(st.floats(0.0, 120.0, allow_nan=False)),
                   resolved=data.draw(st.booleans()), calls=data.draw(st.integers(0, 80))) for _ in range(n)]
    mask = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    expected, floored = [], 0
    for r, masked in zip(results, mask):
        fr = r["full_result"]
        minutes = max(float(fr["openhands_run_time"]), 0.0) / 60.0
        if masked or (cfg.apply_to == "correct" and not (fr["resolved"] and fr["reward"])):
            expected.append(fr["reward"])
            continue
        bonus = cfg.lambda_call_bonus * min(len(fr["response"]["output"]) / cfg.call_bonus_ref, 1.0) \
            if cfg.lambda_call_bonus > 0 else 0.0
        new = float(fr["reward"] or 0.0) + bonus - cfg.lambda_time * minutes
        if cfg.floor is not None and new < cfg.floor:
            new, floored = cfg.floor, floored + 1
        expected.append(new)
    metrics = apply_time_efficiency_reward(results, cfg, mask_sample=mask)
    assert rewards(results) == expected
    assert metrics["time_efficiency/floored_frac"] == floored / n


# ------------------------------------------------------------------------------ gates
def test_disabled_none_or_empty_returns_nothing_and_touches_nothing():
    results = [row(1.0, minutes=30)]
    before = copy.deepcopy(results)
    assert apply_time_efficiency_reward(results, None) == {}
    assert apply_time_efficiency_reward(results, TimeEfficiencyConfig()) == {}
    assert apply_time_efficiency_reward([], on()) == {}
    assert results == before


def test_mask_sample_of_the_wrong_length_names_both_lengths():
    with pytest.raises(ValueError, match=r"^mask_sample has 1 entries for 2 results$"):
        apply_time_efficiency_reward([row(1.0), row(0.0)], on(), mask_sample=[True])


def test_masked_rows_keep_their_reward_and_leave_group_has_signal():
    # row 1 masked: untouched, deduction 0; one trainable row left -> no signal
    results = [row(1.0, minutes=30), row(0.0, minutes=60, resolved=False)]
    metrics = apply_time_efficiency_reward(results, on(), mask_sample=[False, True])
    assert rewards(results) == [0.5, 0.0]
    assert metrics["time_efficiency/deduction/mean"] == 0.25
    assert metrics["time_efficiency/minutes/mean"] == 45.0  # minutes still count every row
    assert metrics["time_efficiency/group_has_signal"] == 0.0


def test_group_has_signal_needs_deductions_spanning_more_than_1e_6():
    equal = [row(1.0, minutes=30), row(0.0, minutes=30)]
    assert apply_time_efficiency_reward(equal, on())["time_efficiency/group_has_signal"] == 0.0
    # deductions 30/60 * lambda and 30.0001/60 * lambda differ by 1.7e-6 > 1e-6
    apart = [row(1.0, minutes=30), row(0.0, minutes=30.0001)]
    assert apply_time_efficiency_reward(apart, on())["time_efficiency/group_has_signal"] == 1.0


def test_apply_to_correct_needs_resolved_and_a_nonzero_reward():
    results = [
        row(1.0, minutes=30, resolved=True),    # charged: 0.5
        row(0.0, minutes=30, resolved=True),    # zeroed by a penalty: skipped
        row(1.0, minutes=30, resolved=False),   # not resolved: skipped
        row(None, minutes=30, resolved=True),   # no reward: skipped, stays None
        row(1, minutes=30, resolved=None),      # resolved missing: skipped, stays the int 1
    ]
    metrics = apply_time_efficiency_reward(results, on(apply_to="correct"))
    assert rewards(results) == [0.5, 0.0, 1.0, None, 1]
    assert type(results[4]["full_result"]["reward"]) is int
    assert metrics["time_efficiency/deduction/mean"] == 0.5 / 5


def test_apply_to_all_charges_failures_and_a_missing_reward_counts_zero():
    results = [row(None, minutes=6, resolved=False)]
    apply_time_efficiency_reward(results, on())
    assert rewards(results) == [0.0 - (1.0 / 60.0) * 6.0]


# ------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize("run_time, minutes", [
    (None, 0.0), ("n/a", 0.0), ([1], 0.0), (-30.0, 0.0), ("120", 2.0), (90, 1.5),
])
def test_run_time_extraction(run_time, minutes):
    results = [{"full_result": {"reward": 1.0, "openhands_run_time": run_time}}]
    metrics = apply_time_efficiency_reward(results, on())
    assert metrics["time_efficiency/minutes/mean"] == minutes
    assert rewards(results) == [1.0 - (1.0 / 60.0) * minutes]


def test_missing_run_time_charges_nothing():
    results = [{"full_result": {"reward": 1.0}}]
    apply_time_efficiency_reward(results, on())
    assert rewards(results) == [1.0]


def test_missing_run_times_are_counted_and_warned_once(monkeypatch):
    from shapec.compat import _time_efficiency

    monkeypatch.setattr(_time_efficiency, "_WARNED_MISSING", [])
    results = [{"full_result": {"reward": 1.0}}, row(1.0, minutes=6), {"full_result": {"reward": 0.0,
               "openhands_run_time": "n/a"}}]
    with pytest.warns(UserWarning, match=r"2 of 3 rows have no usable full_result.openhands_run_time"):
        metrics = apply_time_efficiency_reward(results, on())
    assert metrics["time_efficiency/missing_run_time"] == 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = apply_time_efficiency_reward([{"full_result": {"reward": 1.0}}], on())
    assert again["time_efficiency/missing_run_time"] == 1.0
    complete = apply_time_efficiency_reward([row(1.0, minutes=6)], on())
    assert "time_efficiency/missing_run_time" not in complete


def test_non_finite_run_time_is_refused_with_its_index():
    with pytest.raises(ValueError, match=r"results\[1\]\.full_result\.openhands_run_time is 'inf'"):
        apply_time_efficiency_reward([row(1.0), {"full_result": {"reward": 1.0, "openhands_run_time": "inf"}}], on())


@pytest.mark.parametrize("response, calls", [
    (None, 0),
    ({}, 0),
    ({"output": "text"}, 0),
    ({"output": [{"type": "function_call"}, {"type": "message"}, "function_call", {"type": "function_call"}]}, 2),
])
def test_call_extraction_counts_function_call_items(response, calls):
    results = [{"full_result": {"reward": 1.0, "openhands_run_time": 60, "response": response}}]
    metrics = apply_time_efficiency_reward(results, on())
    assert metrics["time_efficiency/calls/mean"] == calls
    assert metrics["time_efficiency/seconds_per_call"] == 60.0 / max(calls, 1)


# ------------------------------------------------------------------------------ config
def test_config_defaults_and_extra_keys():
    cfg = TimeEfficiencyConfig(unknown_key=3)
    assert (cfg.enabled, cfg.lambda_time, cfg.apply_to, cfg.lambda_call_bonus, cfg.call_bonus_ref, cfg.floor) == (
        False, 1.0 / 60.0, "all", 0.0, None, None)
    assert cfg.model_extra == {"unknown_key": 3}


@pytest.mark.parametrize("kwargs, message", [
    ({"apply_to": "resolved"}, "apply_to"),
    ({"lambda_call_bonus": -0.1}, "lambda_call_bonus"),
    ({"lambda_call_bonus": 0.1}, "call_bonus_ref must be a positive number of tool calls when lambda_call_bonus > 0"),
    ({"lambda_call_bonus": 0.1, "call_bonus_ref": 0.0}, "call_bonus_ref must be a positive number"),
])
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValidationError, match=message):
        TimeEfficiencyConfig(**kwargs)


def test_a_reference_without_the_bonus_is_allowed_and_unused():
    results = [row(1.0, minutes=30, calls=100)]
    metrics = apply_time_efficiency_reward(results, on(call_bonus_ref=-5.0))
    assert rewards(results) == [0.5]
    assert metrics["time_efficiency/bonus_saturated_frac"] == 0.0


def test_a_config_mapping_is_validated():
    results = [row(1.0, minutes=30)]
    apply_time_efficiency_reward(results, {"enabled": True, "lambda_time": 0.02})
    assert rewards(results) == [1.0 - 0.02 * 30.0]


# ------------------------------------------------------------------------------ the shaper itself
def test_shaper_breakdown_and_validation_mode():
    te = shapec.load("time_efficiency").time_efficiency
    channels = {"run_time": [600, 1200], "calls": [4, 0], "resolved": [1, 0], "masked": [0, 0]}
    out = te([1.0, 0.0], group_size=2, channels=channels,
             params={"lambda_call_bonus": 0.2, "call_bonus_ref": 8, "apply_to": "correct"})
    # row 0: bonus 0.2 * min(4/8, 1) = 0.1, time cost -(1/60) * 10; row 1: unresolved, skipped
    assert out.terms["bonus"].tolist() == [0.1, 0.0]
    assert out.terms["time_cost"].tolist() == [-(1.0 / 60.0) * 10.0, 0.0]
    assert out.rewards.tolist() == [1.0 + 0.1 - (1.0 / 60.0) * 10.0, 0.0]
    val = te([1.0, 0.0], group_size=2, channels=channels, training=False)
    assert val.rewards.tolist() == [1.0, 0.0] and val.metrics == {}


def test_negative_run_times_are_rejected_by_the_shaper():
    te = shapec.load("time_efficiency").time_efficiency
    with pytest.raises(ValueError, match=r"channels\['run_time'\]: negative length at index 1"):
        te([1.0, 0.0], group_size=2, channels={"run_time": [1, -1], "calls": [0, 0], "resolved": [1, 1],
                                               "masked": [0, 0]})


# ------------------------------------------------------------------------------ string metric names
def test_metric_names_may_be_strings_and_round_trip():
    text = src('''
        shaper s() {
          input n: calls
          metric "calls/mean" = batch.mean(float(n))
          metric plain = batch.max(float(n))
        }
    ''')
    module = parse(text)
    assert [st.name for st in module.items[0].body[1:]] == ["calls/mean", "plain"]
    printed = pretty(module)
    assert 'metric "calls/mean" = ' in printed and "metric plain = " in printed
    assert parse(printed) == module
    out = shapec.compile_str(text).s([0.0, 0.0], group_size=2, channels={"n": [1, 4]})
    assert out.metrics == {"calls/mean": 2.5, "plain": 4.0}


def test_duplicate_metric_names_are_an_error():
    text = src('''
        shaper s() {
          metric "m" = batch.mean(reward)
          metric m = batch.max(reward)
        }
    ''')
    assert_error(text, "E202", "metric m =", message="metric 'm' is already defined")
    assert check_source(text.replace("metric m =", "metric n =")) == []


def test_negative_lambda_and_non_finite_floor_behave_as_nemo_rl():
    # NeMo-RL accepts a negative lambda_time (a time bonus) and a NaN or -inf floor never lifts anything
    from shapec.compat.nemo_rl import apply_time_efficiency_reward as apply_te

    for floor in (float("nan"), float("-inf")):
        rows = [{"full_result": {"reward": 1.0, "openhands_run_time": 600}}]
        apply_te(rows, {"enabled": True, "lambda_time": -0.01, "floor": floor})
        assert rows[0]["full_result"]["reward"] == 1.0 + 0.01 * 10  # 10 minutes at -0.01 per minute


def test_an_unknown_key_is_kept_but_warned_about_with_the_closest_key():
    results = [row(1.0, minutes=30)]
    with pytest.warns(UserWarning, match=r"grpo\.time_efficiency: unknown key 'lamda_time' ignored; "
                                         r"did you mean 'lambda_time'\?"):
        apply_time_efficiency_reward(results, {"enabled": True, "lamda_time": 0.5})
    assert rewards(results) == [0.5]  # the default lambda_time (1/60 per minute), as NeMo-RL
