"""Pipelines: NeMo-Gym's training order, ordering errors, per-stage results, and env_rewards."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.runtime.batch import BatchError
from shapec.syntax.source import ShapeError

from ..helpers import position, src

LT = 1.0 / 60.0  # the default lambda_time


def gym_channels(**overrides):
    channels = {
        "reasoning": [10, 30, 5, 7], "answer": [0, 0, 0, 0], "low_effort": [0, 0, 0, 0],
        "run_time": [600, 1200, 60, 0], "calls": [1, 2, 3, 0], "resolved": [1, 1, 0, 0], "masked": [0, 0, 0, 1],
    }
    channels.update(overrides)
    return channels


PARAMS = {"length_penalty": {"longest_total_penalty": 0.2}}


# ------------------------------------------------------------------------------ NeMo-Gym's order
def test_length_penalties_then_time_efficiency_keeping_every_stage():
    out = shapec.load("nemo_gym").train([1, 1, 0, 0], group_size=4, channels=gym_channels(), params=PARAMS)
    assert [st.name for st in out.stages] == ["length_penalty", "time_efficiency"]
    length, time = out.stage("length_penalty"), out.stage("time_efficiency")
    # the env reward enters the length stage; the longer correct rollout (30 tokens) loses 0.2
    assert length.reward_in.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert length.rewards.tolist() == [1.0, 0.8, 0.0, 0.0]
    # time efficiency charges 10, 20 and 1 minutes; the masked rollout is exempt
    assert time.reward_in.tolist() == [1.0, 0.8, 0.0, 0.0]
    assert out.rewards.tolist() == [1.0 - LT * 10.0, 0.8 - LT * 20.0, 0.0 - LT * 1.0, 0.0]
    assert out.terms["length_penalty.longest_total"].tolist() == [0.0, -0.2, 0.0, 0.0]
    assert out.terms["time_efficiency.time_cost"].tolist() == [-LT * 10.0, -LT * 20.0, -LT * 1.0, 0.0]
    assert length.terms["longest_total"].tolist() == [0.0, -0.2, 0.0, 0.0]
    assert out.metrics["length_penalty.env_reward_mean"] == 0.5
    assert out.metrics["length_penalty.reward_delta_mean"] == (0.8 - 1.0) / 4
    assert out.metrics["time_efficiency.minutes/mean"] == (10.0 + 20.0 + 1.0 + 0.0) / 4
    assert time.metrics["group_has_signal"] == 1.0
    assert set(length.metrics) | set(time.metrics) == {k.split(".", 1)[1] for k in out.metrics}


def test_graded_rewards_skip_the_length_stage_but_are_still_charged_for_time():
    # group 0 is graded (0.5): length penalties pass it through as non-binary; time efficiency runs last
    out = shapec.load("nemo_gym").train([0.5, 1, 1, 0], group_size=2, channels=gym_channels(masked=[0, 0, 0, 0]),
                                        params=PARAMS)
    assert out.stage("length_penalty").skip_reasons[out.stage("length_penalty").skip_codes[0]] == "non_binary"
    assert out.skip_reasons == ["non_binary", ""]
    assert out.stage("length_penalty").rewards.tolist() == [0.5, 1.0, 1.0, 0.0]
    assert out.rewards.tolist() == [0.5 - LT * 10.0, 1.0 - LT * 20.0, 1.0 - LT * 1.0, 0.0 - LT * 0.0]


def test_validation_returns_the_raw_rewards():
    out = shapec.load("nemo_gym").train([1, 1, 0, 0], group_size=4, channels=gym_channels(), params=PARAMS,
                                        training=False)
    assert out.rewards.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert all(st.skip_reasons[c] == "validation" for st in out.stages for c in st.skip_codes)
    assert all(not v.any() for v in out.terms.values())
    assert out.metrics == {}


def test_stage_params_are_checked_per_stage():
    with pytest.raises(ValueError, match="unknown stage 'time_efficency'.*did you mean 'time_efficiency'"):
        shapec.load("nemo_gym").train([1, 0], group_size=2, channels=gym_channels(
            reasoning=[1, 2], answer=[0, 0], low_effort=[0, 0], run_time=[0, 0], calls=[0, 0], resolved=[1, 0],
            masked=[0, 0]), params={"time_efficency": {"lambda_time": 0.1}})


# ------------------------------------------------------------------------------ ordering errors
def test_time_efficiency_before_the_length_penalties_is_e401():
    text = src('''
        import nemo_rl
        import time_efficiency

        pipeline swapped = time_efficiency.time_efficiency >> nemo_rl.length_penalty
    ''')
    with pytest.raises(ShapeError) as err:
        shapec.compile_str(text)
    [diag] = err.value.diagnostics
    assert diag.code == "E401"
    assert diag.location()[:2] == position(text, "nemo_rl.length_penalty") == (4, 55)
    assert diag.message == (
        "shaper 'length_penalty' requires binary rewards but follows 'time_efficiency', which produces real "
        "rewards; move 'time_efficiency' after 'length_penalty'")


def test_appending_a_binary_stage_after_the_gym_pipeline_is_e401():
    text = src('''
        import nemo_gym
        import nemo_rl
        pipeline again = nemo_gym.train >> nemo_rl.length_penalty
    ''')
    with pytest.raises(ShapeError) as err:
        shapec.compile_str(text)
    assert [(d.code, d.location()[:2]) for d in err.value.diagnostics] == [
        ("E401", position(text, "nemo_rl.length_penalty", 0))]


def test_the_advantage_stage_must_be_last_e505():
    text = src('''
        import miles
        pipeline early = miles.grpo_advantage >> miles.length_penalty
    ''')
    with pytest.raises(ShapeError) as err:
        shapec.compile_str(text)
    [diag] = err.value.diagnostics
    assert (diag.code, diag.location()[:2]) == ("E505", position(text, "miles.grpo_advantage"))
    assert diag.message == "advantage stage 'grpo_advantage' must be the last stage of the pipeline"


def test_the_shipped_order_compiles():
    text = src('''
        import nemo_rl
        import time_efficiency
        import miles
        pipeline gym = nemo_rl.length_penalty >> time_efficiency.time_efficiency
        pipeline grpo = miles.length_penalty >> miles.grpo_advantage
    ''')
    assert shapec.compile_str(text).pipelines == ("gym", "grpo")


# ------------------------------------------------------------------------------ env_rewards
def test_env_rewards_feed_env_reward_and_are_validated():
    adv = shapec.load("miles").grpo_advantage
    # shaped [1, 0.5] with raw [1, 1]: all-correct, centred only
    assert adv([1.0, 0.5], group_size=2, env_rewards=[1, 1]).rewards.tolist() == [0.25, -0.25]
    with pytest.raises(BatchError, match=r"^env_rewards: expected 2 values \(one per rollout\), got 3$"):
        adv([1.0, 0.5], group_size=2, env_rewards=[1, 1, 1])
    with pytest.raises(BatchError, match=r"^env_rewards: not finite at index 1$"):
        adv([1.0, 0.5], group_size=2, env_rewards=np.array([1.0, np.nan]))


def test_env_reward_is_the_pipeline_entry_reward_in_every_stage():
    # the advantage stage sees the length-shaped rewards, but env_reward is still the raw 1.0s
    out = shapec.load("miles").grpo([1, 1], group_size=2, channels={"loss_tokens": [100, 200]},
                                    params={"length_penalty": {"coeff": 1.0}})
    assert out.stage("grpo_advantage").reward_in.tolist() == [1.0, 0.5]
    assert out.gates["grpo_advantage.all_correct"] == ["open"]
    assert out.rewards.tolist() == [0.25, -0.25]


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_a_shaper_that_comes_back_is_a_stage_of_its_own(backend):
    """`a >> a(w=2) >> b >> a`: each a keeps its own state, metrics and params; under one stage name
    they shared one state (it rose by 3 a call) and the last copy's metrics overwrote the others'."""
    pipe = shapec.compile_str(src("""
        shaper a(w: float = 1) produces real {
          state st: float = 0 update st + 1
          term t = w
          metric m = batch.mean(t)
        }
        shaper b() produces real {
          result = reward * 2
        }
        pipeline p = a >> a(w=2) >> b >> a
    """), backend=backend).p
    out = pipe([0.0, 1.0], group_size=2)
    assert out.rewards.tolist() == [7.0, 9.0]
    assert [s.name for s in out.stages] == ["a", "a#2", "b", "a#3"]
    assert out.metrics == {"a.m": 1.0, "a#2.m": 2.0, "a#3.m": 1.0}
    assert pipe.state_dict() == {"a": {"st": 1.0}, "a#2": {"st": 1.0}, "a#3": {"st": 1.0}}
    out = pipe([0.0, 1.0], group_size=2, params={"a#2": {"w": 5}})
    assert out.rewards.tolist() == [13.0, 15.0]
    assert pipe.state_dict() == {"a": {"st": 2.0}, "a#2": {"st": 2.0}, "a#3": {"st": 2.0}}
