"""The NeMo-RL drop-in on bad rows and on config values NeMo-RL accepts but then fails on.

Every bad row is a BatchError (a ValueError) naming the row and field, and no reward changes.
"""

from __future__ import annotations

import copy
import math
import re
import warnings

import pytest

from shapec.compat import nemo_rl
from shapec.compat.nemo_rl import LengthPenaltyConfig, apply_group_length_penalties
from shapec.runtime.batch import BatchError
from shapec.runtime.params import ParamError

from .test_nemo_rl import backend, rewards, row, run  # noqa: F401 - backend is an autouse fixture

LONGEST = {"longest_total_penalty": 0.2, "total_bonus": 0.1}


def refused(results, message, group_size=2, default=LONGEST):
    before = copy.deepcopy(results)
    with pytest.raises(BatchError, match=message):
        apply_group_length_penalties(results, {"default": {"length_type": "chars", **default}}, group_size)
    assert results == before


def test_row_without_full_result():
    refused([row(1, 10), {"agent_ref": {"name": "math"}}], r"results\[1\]\.full_result: expected a dict with 'reward'")


def test_row_without_reward():
    bad = row(1, 10)
    del bad["full_result"]["reward"]
    refused([row(1, 10), row(1, 20), bad], r"results\[2\]\.full_result\.reward: missing")


@pytest.mark.parametrize("reward", ["1", None, [1], {"v": 1}])
def test_reward_that_is_not_a_number(reward):
    refused([row(1, 10), row(reward, 20)],
            r"results\[1\]\.full_result\.reward: expected a number, got " + re.escape(repr(reward)))


def test_nan_reward():
    refused([row(1, 10), row(math.nan, 20)], r"full_result\.reward: NaN at index 1")


@pytest.mark.parametrize("agent_ref", [None, {}, "math"])
def test_row_without_agent_name(agent_ref):
    bad = row(1, 20)
    bad["agent_ref"] = agent_ref
    refused([row(1, 10), row(1, 5), bad, row(1, 3)], r"results\[2\]\.agent_ref\.name: missing")
    del bad["agent_ref"]
    refused([row(1, 10), row(1, 5), bad, row(1, 3)], r"results\[2\]\.agent_ref\.name: missing")


@pytest.mark.parametrize("where, item, message", [
    ("summary", {"type": "reasoning", "summary": [{"text": None}]},
     r"results\[1\]\.full_result\.response\.output\[0\]\.summary\[0\]\.text: expected a string, got None"),
    ("content", {"type": "message", "content": [{"text": "ok"}, {"text": 5}]},
     r"results\[1\]\.full_result\.response\.output\[0\]\.content\[1\]\.text: expected a string, got 5"),
    ("list text", {"type": "message", "content": [{"text": ["a", "b"]}]},
     r"output\[0\]\.content\[0\]\.text: expected a string, got \['a', 'b'\]"),
    ("summary", {"type": "reasoning", "summary": None},
     r"results\[1\]\.full_result\.response\.output\[0\]\.summary: expected a list, got None"),
])
def test_texts_that_are_not_strings(where, item, message):
    bad = row(1)
    bad["full_result"]["response"]["output"] = [item]
    refused([row(1, 10), bad], message)


def test_output_that_is_not_a_list():
    bad = row(1)
    bad["full_result"]["response"]["output"] = None
    refused([row(1, 10), bad], r"results\[1\]\.full_result\.response\.output: expected a list, got None")


@pytest.mark.parametrize("profiled, message", [
    ({"profiled_rewards": "1101", "profiled_output_lengths": [1, 2, 3, 4]},
     r"results\[2\]\.profiled_rewards: expected a 1-d array of numbers, got str"),
    ({"profiled_rewards": [1, "1"], "profiled_output_lengths": [1, 2]},
     r"results\[2\]\.profiled_rewards: index 1: expected a number, got '1'"),
    ({"profiled_rewards": [1, math.nan], "profiled_output_lengths": [1, 2]},
     r"results\[2\]\.profiled_rewards: NaN at index 1"),
    ({"profiled_rewards": [1, 1], "profiled_output_lengths": [1, -2]},
     r"results\[2\]\.profiled_output_lengths: negative value at index 1"),
    ({"profiled_rewards": [1, 1], "profiled_output_lengths": [1, math.inf]},
     r"results\[2\]\.profiled_output_lengths: infinite at index 1"),
])
def test_bad_profiled_lists(profiled, message):
    refused([row(1, 10), row(1, 20), row(1, 30, **profiled), row(1, 5)], message,
            default={"profiled_length_penalty": 0.3})


@pytest.mark.parametrize("group_size, message", [
    (2.5, r"group_size: expected a positive integer, got 2\.5"),
    (2.0, r"group_size: expected a positive integer, got 2\.0"),
    (True, r"group_size: expected a positive integer, got True"),
    ("2", r"group_size: expected a positive integer, got '2'"),
    (-1, r"group_size must be greater than zero"),
])
def test_bad_group_size(group_size, message):
    refused([row(1, 10), row(1, 20)], message, group_size=group_size)


def test_the_last_group_may_be_short_as_in_nemo_rl():
    # groups [10, 30], [10, 20], [40]: the lone last row has nobody to compare with
    out, _ = run([row(1, 10), row(1, 30), row(1, 10), row(1, 20), row(1, 40)], {"longest_total_penalty": 0.2},
                 group_size=2)
    assert out == pytest.approx([1, 0.8, 1, 0.8, 1])


def test_a_bad_row_in_one_group_changes_no_other_group():
    results = [row(1, 10), row(1, 30), row(1, 10), row("1", 20)]
    refused(results, r"results\[3\]\.full_result\.reward")
    assert rewards(results)[:2] == [1, 1]


# ------------------------------------------------------------ values NeMo-RL's config accepts
def config(**default):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = LengthPenaltyConfig.model_validate({"default": {"length_type": "chars", **default}})
    return cfg, [str(w.message) for w in caught]


@pytest.mark.parametrize("tp", [5, 1.5])
def test_top_percentile_past_the_correct_rollouts_fails_closed(tp):
    cfg, caught = config(top_percentile=tp, **LONGEST)
    assert caught == [f"length_penalty top_percentile {float(tp)} is outside [0, 1]: a group whose top-scorer index "
                      "falls past its correct rollouts (NeMo-RL raises IndexError there) gets no shortest bonus and "
                      "no longest penalty; a value <= 0 keeps only the best score, as in NeMo-RL"]
    results = [row(1, 10), row(1, 30), row(1, 20), row(0, 5)]
    apply_group_length_penalties(results, cfg, 4)
    assert rewards(results) == [1, 1, 1, 0]  # index int(3 * tp) - 1 >= 3: no top scorer


def test_top_percentile_within_reach_matches_nemo_rl():
    # 1.2 with 3 correct rollouts: index int(3.6) - 1 = 2 is in range, so NeMo-RL runs and so does this
    cfg, _ = config(top_percentile=1.2, **LONGEST)
    results = [row(1, 10), row(1, 30), row(1, 20), row(0, 5)]
    apply_group_length_penalties(results, cfg, 4)
    assert rewards(results) == pytest.approx([1.1, 0.8, 1, 0])


@pytest.mark.parametrize("tp", [-1, 0])
def test_non_positive_top_percentile_keeps_the_best_score_as_nemo_rl(tp):
    cfg, caught = config(top_percentile=tp, **LONGEST)
    assert len(caught) == (1 if tp < 0 else 0)
    results = [row(1, 10), row(1, 30), row(1, 20), row(0, 5)]
    apply_group_length_penalties(results, cfg, 4)
    assert rewards(results) == pytest.approx([1.1, 0.8, 1, 0])


@pytest.mark.parametrize("tp", [math.nan, math.inf])
def test_non_finite_top_percentile_is_a_param_error_when_called(tp):
    cfg, caught = config(top_percentile=tp, **LONGEST)
    assert "is not a finite number" in caught[0]
    results = [row(1, 10), row(1, 30)]
    with pytest.raises(ParamError, match=r"param 'top_percentile' of shaper 'length_penalty': .*finite number"):
        apply_group_length_penalties(results, cfg, 2)
    assert rewards(results) == [1, 1]


@pytest.mark.parametrize("ms", [-1, 0])
def test_min_samples_below_one_acts_as_one(ms):
    cfg, caught = config(profiled_length_penalty=0.2, profiled_length_min_samples=ms)
    assert caught == [f"length_penalty profiled_length_min_samples {ms} is below 1: it acts as 1 (a prompt without "
                      "a passing profiled rollout gets no profiled penalty; NeMo-RL raises StatisticsError there)"]
    none_pass = {"profiled_rewards": [0, 0], "profiled_output_lengths": [1, 2]}
    one_pass = {"profiled_rewards": [1, 0], "profiled_output_lengths": [15, 2]}
    results = [row(1, 10, **none_pass), row(1, 30), row(1, 10, **one_pass), row(1, 30)]
    apply_group_length_penalties(results, cfg, 2)
    # group 0: no threshold, no penalty; group 1: threshold 15 (one passing, std 0): 30 pays 0.2
    assert rewards(results) == pytest.approx([1, 1, 1, 0.8])


def test_min_samples_must_be_an_integer_as_in_nemo_rl():
    with pytest.raises(ValueError, match="profiled_length_min_samples"):
        LengthPenaltyConfig.model_validate({"default": {"profiled_length_min_samples": 2.5}})


def test_tokens_without_a_tokenizer_counts_characters_and_warns_once(monkeypatch):
    monkeypatch.setattr(nemo_rl, "_WARNED_TOKENS", [])
    cfg = {"default": {"length_type": "tokens", "longest_total_penalty": 0.2}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            results = [row(1, 10), row(1, 30)]
            apply_group_length_penalties(results, cfg, 2)
    assert rewards(results) == pytest.approx([1, 0.8])
    assert [str(w.message) for w in caught] == [
        "length_penalty length_type is 'tokens' but no tokenizer was passed: lengths are counted in characters "
        "(as NeMo-RL does); pass tokenizer= to count tokens"]
