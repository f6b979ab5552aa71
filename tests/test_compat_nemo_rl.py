"""The NeMo-RL drop-in: config, text extraction, every rule of the guide, and an independent oracle.

Lengths are characters unless a test passes a tokenizer: `row(1, 10, 4)` is a rollout with reward 1,
a 10-character reasoning summary and a 4-character answer.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import statistics
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shapec.compat import _nemo_gym_rows, nemo_rl
from shapec.compat.nemo_rl import (
    LengthPenaltyConfig,
    apply_group_length_penalties,
    length_of,
    response_texts,
)
from shapec.runtime.batch import BatchError

BACKENDS = ["interpreter"] + (["numba"] if importlib.util.find_spec("shapec.compiler.lowering") else [])


@pytest.fixture(params=BACKENDS, autouse=True)
def backend(request, monkeypatch):
    """Every test runs on each available backend; the drop-in compiles for SHAPEC_BACKEND."""
    monkeypatch.setenv("SHAPEC_BACKEND", request.param)
    return request.param


def row(reward, reasoning=0, answer=0, agent="math", **top):
    """One NeMo-Gym result row with `reasoning` and `answer` characters of model output."""
    output = []
    if reasoning:
        output.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": "r" * reasoning}]})
    output.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a" * answer}]})
    full = {"reward": reward, "response": {"output": output}}
    if "reward_components" in top:
        full["reward_components"] = top.pop("reward_components")
    return {"full_result": full, "agent_ref": {"name": agent}, **top}


def rewards(results):
    return [r["full_result"]["reward"] for r in results]


def run(results, default=None, group_size=None, **cfg):
    cfg = {"default": {"length_type": "chars", **(default or {})}, **cfg}
    metrics = apply_group_length_penalties(results, cfg, group_size or len(results))
    return rewards(results), metrics


# ------------------------------------------------------------------------------------- config
class TestConfig:
    def test_defaults_match_nemo_rl(self):
        d = LengthPenaltyConfig().default
        assert (d.enabled, d.length_type, d.top_percentile, d.profiled_length_n_std) == (True, "tokens", 0.5, 1.0)
        assert d.profiled_length_min_samples == 2 and d.pass_rate_length_penalty_weight == 0.0
        assert (d.group_length_penalty_profile_gate_channel, d.group_length_penalty_profile_gate_field) == ("total", "a")
        assert d.group_length_penalty_profile_gate_positive_only is True and d.profile_band_total is False

    def test_unknown_key_names_the_closest(self):
        with pytest.raises(ValueError) as err:
            LengthPenaltyConfig.model_validate({"default": {"group_total_length_coeff": 0.1}})
        msg = str(err.value)
        assert "default" in msg and "unknown key 'group_total_length_coeff'" in msg
        assert "did you mean 'group_total_length_penalty_coeff'?" in msg

    @pytest.mark.parametrize("cfg, where, message", [
        ({"verbos": True}, "", "unknown key 'verbos'; did you mean 'verbose'?"),
        ({"agent_overrides": {"x": {"enabeld": False}}}, "agent_overrides.x",
         "unknown key 'enabeld'; did you mean 'enabled'?"),
        ({"profile_band": {"enabled": True, "defaults": {"totl": {"a": 1, "b": 2, "f": 0.5}}}},
         "profile_band.defaults", "unknown key 'totl'; did you mean 'total'?"),
        # nothing close to "g": the allowed keys are listed instead
        ({"profile_band": {"enabled": True, "defaults": {"total": {"a": 1, "b": 2, "f": 0.5, "g": 1}}}},
         "profile_band.defaults.total", "unknown key 'g'; allowed: ['a', 'b', 'f']"),
    ])
    def test_unknown_keys_at_every_level(self, cfg, where, message):
        with pytest.raises(ValidationError) as err:
            LengthPenaltyConfig.model_validate(cfg)
        first = err.value.errors()[0]
        assert ".".join(map(str, first["loc"])) == where
        assert message in first["msg"]

    @pytest.mark.parametrize("default, field", [
        ({"length_type": "token"}, "default.length_type"),
        ({"group_length_penalty_profile_gate_channel": "totl"}, "default.group_length_penalty_profile_gate_channel"),
        ({"group_length_penalty_profile_gate_field": "x"}, "default.group_length_penalty_profile_gate_field"),
    ])
    def test_literal_values_are_checked(self, default, field):
        with pytest.raises(ValidationError) as err:
            LengthPenaltyConfig.model_validate({"default": default})
        assert ".".join(map(str, err.value.errors()[0]["loc"])) == field

    @pytest.mark.parametrize("band, message", [
        ({"a": 10, "b": 10, "f": 0.5}, "profile band requires b > a, got a=10.0, b=10.0"),
        ({"a": 10, "b": 20, "f": 1.5}, "less than or equal to 1"),
        ({"a": 10, "b": 20, "f": -0.1}, "greater than or equal to 0"),
        ({"a": 10, "f": 0.5}, "Field required"),
    ])
    def test_global_band_channel_validation(self, band, message):
        with pytest.raises(ValidationError) as err:
            LengthPenaltyConfig.model_validate({"profile_band": {"enabled": True, "defaults": {"answer": band}}})
        assert message in str(err.value)
        assert err.value.errors()[0]["loc"][:3] == ("profile_band", "defaults", "answer")

    def test_null_override_and_fields_set(self):
        cfg = LengthPenaltyConfig.model_validate(
            {"default": {"profile_band_total": False}, "agent_overrides": {"judge": None, "math": {"enabled": False}}})
        assert cfg.agent_overrides["judge"] is None
        assert cfg.default.model_fields_set == {"profile_band_total"}
        assert cfg.agent_overrides["math"].model_fields_set == {"enabled"}


# ------------------------------------------------------------------------------------- text and lengths
class FakeTokenizer:
    """One token per whitespace-separated word; records how it was called."""

    def __init__(self):
        self.calls = []

    def encode(self, text, add_special_tokens=True):
        self.calls.append((text, add_special_tokens))
        return text.split()


class TestTextAndLengths:
    def test_reasoning_summaries_and_assistant_messages(self):
        result = {"full_result": {"response": {"output": [
            {"type": "reasoning", "summary": [{"text": "ab"}, {"text": "cd"}]},
            {"type": "message", "role": "user", "content": [{"text": "observation"}]},
            {"type": "message", "content": "plain"},
            {"type": "function_call", "arguments": "{}"},
            {"type": "message", "role": "assistant", "content": [{"text": "x"}, {"text": "yz"}]},
        ]}}}
        assert response_texts(result) == ("abcd", "plainxyz")

    def test_items_as_objects(self):
        ns = SimpleNamespace
        output = [ns(type="reasoning", summary=[ns(text="think")]),
                  ns(type="message", role=None, content=[ns(text="ok")]),
                  ns(type="message", role="user", content="ignored")]
        assert response_texts({"full_result": {"response": ns(output=output)}}) == ("think", "ok")

    def test_missing_response(self):
        assert response_texts({"full_result": {}}) == ("", "")

    @pytest.mark.parametrize("output", [
        [{"type": "reasoning", "summary": [{"text": "abc"}, {"text": "de"}]},
         {"type": "message", "role": "assistant", "content": [{"text": "xy"}]}],
        [{"type": "message", "content": [{"text": "no role"}]}],               # role absent
        [{"type": "message", "role": None, "content": "plain string"}],
        [{"type": "message", "role": "user", "content": [{"text": "observation"}]}],
        [{"type": "reasoning", "summary": [{"type": "summary_text"}]}],          # part without text
        [{"summary": [{"text": "untyped"}]}, {"type": "function_call"}],
        [SimpleNamespace(type="reasoning", summary=[SimpleNamespace(text="obj")])],
        [{"type": "message", "role": "assistant"}],                              # no content
    ])
    def test_fast_character_count_matches_the_texts(self, output):
        result = {"full_result": {"response": {"output": output}}}
        texts = response_texts(result)
        assert _nemo_gym_rows._plain_char_lengths(result) in (None, (len(texts[0]), len(texts[1])))
        # through the drop-in: a 5-char reasoning rival makes the odd row the longer or the shorter one
        rival = row(1, 5)
        results = [{**result, "agent_ref": {"name": "math"}}, rival]
        results[0]["full_result"]["reward"] = 1
        apply_group_length_penalties(results, {"default": {"length_type": "chars", "longest_total_penalty": 0.2}}, 2)
        total = len(texts[0]) + len(texts[1])
        expected = [1, 1] if total == 0 else [0.8, 1] if total > 5 else [1, 0.8]
        assert rewards(results) == pytest.approx(expected)

    def test_length_units(self):
        tok = FakeTokenizer()
        assert length_of("two words here", "tokens", tok) == 3
        assert tok.calls == [("two words here", False)]
        assert length_of("", "tokens", tok) == 0 and len(tok.calls) == 1  # empty text: no encode call
        assert length_of("two words", "chars", tok) == 9
        assert length_of("two words", "tokens", None) == 9  # no tokenizer: characters

    def test_tokens_drive_the_penalty(self):
        # tokens: totals 2 and 4 words; longest_total_penalty 0.2 hits the 4-word one even
        # though its characters ("a a a a" = 7) are fewer than the other's ("long_word longer" = 16)
        results = [row(1), row(1)]
        results[0]["full_result"]["response"]["output"][0]["content"][0]["text"] = "long_word longer"
        results[1]["full_result"]["response"]["output"][0]["content"][0]["text"] = "a a a a"
        tok = FakeTokenizer()
        apply_group_length_penalties(results, {"default": {"longest_total_penalty": 0.2}}, 2, tokenizer=tok)
        assert rewards(results) == [1, 0.8]
        assert all(flag is False for _, flag in tok.calls)

    def test_length_type_per_agent(self):
        # agent "chars" counts characters (10 vs 30), agent "math" tokens (1 word each: lengths equal -> 0)
        results = [row(1, 10, agent="chars"), row(1, 30, agent="chars"), row(1, 10), row(1, 30)]
        cfg = {"default": {"group_total_length_penalty_coeff": 0.2},
               "agent_overrides": {"chars": {"length_type": "chars"}, "math": None}}
        apply_group_length_penalties(results, cfg, 2, tokenizer=FakeTokenizer())
        # chars group: raw [1, 0], mean 0.5 -> [+0.5, -0.5] * 0.2 = [+0.1, -0.1]
        assert rewards(results) == pytest.approx([1.1, 0.9, 1, 1])


# ------------------------------------------------------------------------------------- algorithms
class TestShortestBonus:
    def test_guide_total_bonus(self):
        # totals 40, 12, 25, 5 (wrong): the shortest positive total (12) gets +0.1
        out, _ = run([row(1, 30, 10), row(1, 10, 2), row(1, 20, 5), row(0, 5)], {"total_bonus": 0.1})
        assert out == pytest.approx([1, 1.1, 1, 0])

    def test_ties_go_to_the_first(self):
        out, _ = run([row(1, 20), row(1, 10), row(1, 10)], {"reasoning_bonus": 0.1})
        assert out == pytest.approx([1, 1.1, 1])

    def test_empty_reasoning_is_not_shortest(self):
        out, _ = run([row(1, 0, 3), row(1, 15, 3), row(1, 20, 3)], {"reasoning_bonus": 0.1})
        assert out == pytest.approx([1, 1.1, 1])

    def test_each_channel_and_stacking(self):
        # reasoning 5/9, answer 8/2: reasoning bonus row 0, answer bonus row 1, totals 13/11 -> row 1
        out, _ = run([row(1, 5, 8), row(1, 9, 2)], {"reasoning_bonus": 0.1, "answer_bonus": 0.2, "total_bonus": 0.3})
        assert out == pytest.approx([1.1, 1.5])

    def test_needs_two_positive_rollouts(self):
        out, _ = run([row(1, 5), row(0, 9)], {"reasoning_bonus": 0.1})
        assert out == [1, 0]

    def test_shortest_must_be_a_top_scorer(self):
        # positives 1.0 and 0.9999995 (binary within 1e-6); top index max(0, int(2 * 0.5) - 1) = 0 -> top = 1.0,
        # so the shortest (0.9999995) is not a top scorer and nobody gets the bonus
        out, _ = run([row(1.0, 20), row(0.9999995, 10)], {"reasoning_bonus": 0.1})
        assert out == [1.0, 0.9999995]
        # top_percentile 1: index int(2 * 1) - 1 = 1 -> top = 0.9999995, both are top scorers
        out, _ = run([row(1.0, 20), row(0.9999995, 10)], {"reasoning_bonus": 0.1, "top_percentile": 1.0})
        assert out == pytest.approx([1.0, 1.0999995])


class TestLongestPenalty:
    def test_reference_example(self):
        out, _ = run([row(1, 10), row(1, 20)], {"longest_total_penalty": 0.2})
        assert out == pytest.approx([1.0, 0.8])

    def test_ties_go_to_the_first_and_wrong_rollouts_do_not_count(self):
        out, _ = run([row(0, 90), row(1, 20), row(1, 20), row(1, 10)], {"longest_reasoning_penalty": 0.2})
        assert out == pytest.approx([0, 0.8, 1, 1])

    def test_needs_two_non_empty_top_scorers(self):
        # answer lengths 0 and 7: only one non-empty answer -> no answer penalty
        out, _ = run([row(1, 3, 0), row(1, 3, 7)], {"longest_answer_penalty": 0.2})
        assert out == [1, 1]

    def test_only_top_scorers(self):
        # top = 1.0 (see the bonus test): the longest (0.9999995) is not a top scorer; of the two
        # top scorers, 20 is the longest
        out, _ = run([row(1.0, 10), row(1.0, 20), row(0.9999995, 50)], {"longest_reasoning_penalty": 0.2})
        assert out == pytest.approx([1.0, 0.8, 0.9999995])


class TestGroupRelative:
    def test_dense_zero_centred(self):
        # totals 10, 20, 40: raw 1 - (L - 10) / 30 = [1, 2/3, 0], mean 5/9 -> [4/9, 1/9, -5/9] * 0.3
        out, _ = run([row(1, 10), row(1, 20), row(1, 40), row(0, 99)], {"group_total_length_penalty_coeff": 0.3})
        assert out == pytest.approx([1 + 0.4 / 3, 1 + 0.1 / 3, 1 - 0.5 / 3, 0])

    def test_equal_lengths_give_zero(self):
        out, _ = run([row(1, 10), row(1, 10)], {"group_total_length_penalty_coeff": 0.3})
        assert out == [1, 1]

    def test_channels_add(self):
        # reasoning 10/30 -> [+0.5, -0.5] * 0.1; answer 6/2 -> [-0.5, +0.5] * 0.4; total 16/32 -> [+.5, -.5] * 0.2
        out, _ = run([row(1, 10, 6), row(1, 30, 2)], {"group_reasoning_length_penalty_coeff": 0.1,
                                                      "group_answer_length_penalty_coeff": 0.4,
                                                      "group_total_length_penalty_coeff": 0.2})
        assert out == pytest.approx([1 + 0.05 - 0.2 + 0.1, 1 - 0.05 + 0.2 - 0.1])


class TestZmad:
    def test_long_outlier(self):
        # totals 10, 11, 12, 13, 100: median 12, |dev| 2, 1, 0, 1, 88 -> MAD 1; MAD/median = 1/12 >= 0.015;
        # z(100) = 0.6745 * 88 = 59.4 > 3.5, z(13) = 0.6745 <= 3.5; short side never flagged
        results = [row(1, 10), row(1, 11), row(1, 12), row(1, 13), row(1, 100)]
        out, _ = run(results, {"total_zmad_threshold": 3.5, "total_zmad_penalty": 0.2})
        assert out == pytest.approx([1, 1, 1, 1, 0.8])

    def test_mad_floor(self):
        # 1000..1003, 5000: MAD 1, 1/1002 < 0.015 -> nothing flagged
        results = [row(1, 1000), row(1, 1001), row(1, 1002), row(1, 1003), row(1, 5000)]
        assert run(results, {"total_zmad_threshold": 3.5, "total_zmad_penalty": 0.2})[0] == [1] * 5

    def test_zero_mad(self):
        results = [row(1, 10), row(1, 10), row(1, 10), row(1, 50)]
        assert run(results, {"reasoning_zmad_threshold": 1, "reasoning_zmad_penalty": 0.2})[0] == [1] * 4

    @pytest.mark.parametrize("threshold, penalty", [(0.0, 0.2), (-1.0, 0.2), (3.5, 0.0)])
    def test_channel_off(self, threshold, penalty):
        results = [row(1, 10), row(1, 11), row(1, 12), row(1, 13), row(1, 100)]
        out, _ = run(results, {"total_zmad_threshold": threshold, "total_zmad_penalty": penalty})
        assert out == [1] * 5

    def test_only_positive_rollouts_form_the_statistics(self):
        # positives 10, 11, 40 (median 11, MAD 1, z(40) = 0.6745 * 29 = 19.6 > 2); the wrong 500 is ignored
        results = [row(1, 10), row(1, 11), row(1, 40), row(0, 500)]
        out, _ = run(results, {"reasoning_zmad_threshold": 2, "reasoning_zmad_penalty": 0.1})
        assert out == pytest.approx([1, 1, 0.9, 0])


class TestProfiled:
    def test_reference_metrics_example(self):
        # passing profiled lengths [10, 10] -> threshold 10 + 1 * 0; totals 8, 20, 20, 20 -> rows 1-3 get -1.5;
        # rows 1, 2 clamp 1 - 1.5 -> 0 (wiped); row 3 (wrong) clamps back to 0 = its original
        results = [row(1, 8, profiled_rewards=[1, 1], profiled_output_lengths=[10, 10]), row(1, 20), row(1, 20),
                   row(0, 20)]
        out, metrics = run(results, {"profiled_length_penalty": 1.5})
        assert out == [1, 0, 0, 0]
        assert metrics == pytest.approx({
            "length_penalty/env_reward_mean": 0.75, "length_penalty/reward_delta_mean": -0.5,
            "length_penalty/wiped_correct_frac": 0.5, "length_penalty/adjusted_frac": 0.5,
            "length_penalty/skipped_non_binary_frac": 0.0})

    def test_sample_std_and_at_threshold(self):
        # passing [10, 20, 30] (the failing 99 is ignored): mean 20, sample std 10 -> threshold 30; totals >= 30
        meta = {"profiled_rewards": [1, 0, 1, 1], "profiled_output_lengths": [10, 99, 20, 30]}
        out, _ = run([row(1, 29, **meta), row(1, 30), row(1, 31)], {"profiled_length_penalty": 0.25})
        assert out == pytest.approx([1, 0.75, 0.75])

    def test_min_samples(self):
        meta = {"profiled_rewards": [1, 0], "profiled_output_lengths": [10, 5]}
        assert run([row(1, 29, **meta), row(1, 30)], {"profiled_length_penalty": 0.25})[0] == [1, 1]
        # one passing sample allowed: std 0, threshold 10
        meta = {"profiled_rewards": [1, 0], "profiled_output_lengths": [10, 5]}
        out, _ = run([row(1, 9, **meta), row(1, 10)], {"profiled_length_penalty": 0.25,
                                                       "profiled_length_min_samples": 1})
        assert out == pytest.approx([1, 0.75])

    def test_only_first_row_metadata_is_read(self):
        meta = {"profiled_rewards": [1, 1], "profiled_output_lengths": [10, 10]}
        assert run([row(1, 29), row(1, 30, **meta)], {"profiled_length_penalty": 0.25})[0] == [1, 1]

    def test_no_double_penalty_after_group_terms(self):
        # longest_total_penalty hits row 1 (-0.2 < 0), so its profiled penalty is dropped; row 2 keeps it
        meta = {"profiled_rewards": [1, 1], "profiled_output_lengths": [5, 5]}
        out, _ = run([row(1, 3, **meta), row(1, 30), row(1, 20)],
                     {"profiled_length_penalty": 0.25, "longest_total_penalty": 0.2})
        assert out == pytest.approx([1, 0.8, 0.75])

    def test_needs_no_second_positive(self):
        # one correct rollout: the additive block is off but the profiled penalty still applies
        meta = {"profiled_rewards": [1, 1], "profiled_output_lengths": [5, 5]}
        assert run([row(1, 30, **meta), row(0, 1)], {"profiled_length_penalty": 0.25})[0] == pytest.approx([0.75, 0])


class TestPassRate:
    def test_mai_penalty(self):
        # rho = 3/4; l_max = 40 (longest CORRECT; the wrong 50 does not count); -0.2 * 0.75 * L / 40
        out, _ = run([row(1, 10), row(1, 20), row(0, 50), row(1, 40)], {"pass_rate_length_penalty_weight": 0.2})
        assert out == pytest.approx([1 - 0.0375, 1 - 0.075, 0, 1 - 0.15])

    def test_all_wrong_group_gets_nothing(self):
        assert run([row(0, 10), row(0, 20)], {"pass_rate_length_penalty_weight": 0.2})[0] == [0, 0]

    def test_group_of_one(self):
        # rho = 1, l_max = L: the only rollout loses exactly w
        out, _ = run([row(1, 10), row(1, 20)], {"pass_rate_length_penalty_weight": 0.2}, group_size=1)
        assert out == pytest.approx([0.8, 0.8])

    def test_zero_longest_correct(self):
        assert run([row(1, 0), row(1, 0)], {"pass_rate_length_penalty_weight": 0.2})[0] == [1, 1]


class TestClampAndBands:
    def test_clamp_at_zero(self):
        out, metrics = run([row(1, 10), row(1, 20)], {"longest_total_penalty": 1.5})
        assert out == [1, 0.0]
        assert metrics["length_penalty/wiped_correct_frac"] == 0.5

    def test_row_band_total(self):
        # band {10, 20, 0.5}: totals 5 -> 1, 15 -> 1 - 0.5 * 0.5 = 0.75, 25 -> 0.5; wrong rollout untouched
        band = {"total": {"a": 10, "b": 20, "f": 0.5}}
        out, _ = run([row(1, 5, profile_band=band), row(1, 15), row(1, 25), row(0, 25)], {"profile_band_total": True})
        assert out == pytest.approx([1, 0.75, 0.5, 0])

    def test_band_after_clamp_on_positive_base(self):
        # longest penalty 0.4 on row 1 (1 - 0.4 = 0.6), then x0.5 -> 0.3; penalty 1.5 wipes: no band on 0
        band = {"total": {"a": 10, "b": 20, "f": 0.5}}
        out, _ = run([row(1, 5, profile_band=band), row(1, 25)], {"profile_band_total": True,
                                                                  "longest_total_penalty": 0.4})
        assert out == pytest.approx([1, 0.3])

    def test_channels_multiply_in_order(self):
        # total 30 in {10, 50, 0.5}: 1 - 20/40 * 0.5 = 0.75; reasoning 20 in {0, 10, 0.8}: 0.8; answer 10: 1
        band = {"total": {"a": 10, "b": 50, "f": 0.5}, "reasoning": {"a": 0, "b": 10, "f": 0.8},
                "answer": {"a": 10, "b": 20, "f": 0.1}}
        out, _ = run([row(1, 20, 10, profile_band=band)], {"profile_band_total": True, "profile_band_reasoning": True,
                                                           "profile_band_answer": True})
        assert out == pytest.approx([0.75 * 0.8])

    def test_global_band_implicitly_enabled(self):
        # reasoning {10, 20, 0.5} from the config: 15 -> 0.75 without setting profile_band_reasoning
        pb = {"enabled": True, "defaults": {"reasoning": {"a": 10, "b": 20, "f": 0.5}}}
        out, _ = run([row(1, 15), row(1, 5)], profile_band=pb)
        assert out == pytest.approx([0.75, 1])

    def test_global_band_explicit_false_wins(self):
        pb = {"enabled": True, "defaults": {"reasoning": {"a": 10, "b": 20, "f": 0.5}}}
        out, _ = run([row(1, 15), row(1, 5)], {"profile_band_reasoning": False}, profile_band=pb)
        assert out == [1, 1]

    def test_override_turns_a_global_channel_off(self):
        pb = {"enabled": True, "defaults": {"total": {"a": 10, "b": 20, "f": 0.5}}}
        results = [row(1, 15, agent="math"), row(1, 15, agent="code")]
        out, _ = run(results, group_size=1, profile_band=pb, agent_overrides={"math": None,
                                                                              "code": {"profile_band_total": False}})
        assert out == pytest.approx([0.75, 1])

    def test_disabled_global_band_is_ignored(self):
        pb = {"enabled": False, "defaults": {"total": {"a": 10, "b": 20, "f": 0.5}}}
        assert run([row(1, 15)], profile_band=pb)[0] == [1]

    def test_row_band_beats_global_per_channel(self):
        # row gives total {0, 100, 0.5} (30 -> 0.85); reasoning falls back to the global {10, 20, 0.5} (15 -> 0.75)
        pb = {"enabled": True, "defaults": {"total": {"a": 10, "b": 20, "f": 0.1},
                                            "reasoning": {"a": 10, "b": 20, "f": 0.5}}}
        out, _ = run([row(1, 15, 15, profile_band={"total": {"a": 0, "b": 100, "f": 0.5}})], profile_band=pb)
        assert out == pytest.approx([0.85 * 0.75])

    @pytest.mark.parametrize("bad, message", [
        ({"a": 0, "f": 0.5}, r"results\[1\]\.profile_band\.total: band is missing 'b'"),
        ({"a": 50, "b": 50, "f": 0.5}, r"results\[1\]\.profile_band\.total: band needs b > a, got a=50, b=50"),
        ({"a": 60, "b": 50, "f": 0.5}, r"results\[1\]\.profile_band\.total: band needs b > a"),
        ({"a": 0, "b": 50, "f": 1.05}, r"results\[1\]\.profile_band\.total: band needs 0 <= f <= 1, got f=1.05"),
        ({"a": 0, "b": 50, "f": -1}, r"results\[1\]\.profile_band\.total: band needs 0 <= f <= 1, got f=-1"),
        ({"a": 0, "b": float("inf"), "f": 0.5}, r"results\[1\]\.profile_band\.total\.b: expected a finite number"),
        ({"a": "0", "b": 50, "f": 0.5}, r"results\[1\]\.profile_band\.total\.a: expected a finite number, got '0'"),
        ({"a": 0, "b": 50, "f": True}, r"results\[1\]\.profile_band\.total\.f: expected a finite number, got True"),
        (None, r"results\[1\]\.profile_band\.total: expected a band \{a, b, f\}, got None"),
        ({}, r"results\[1\]\.profile_band\.total: band is missing 'a'"),
    ])
    def test_malformed_row_band_is_an_error_and_nothing_changes(self, bad, message):
        # NeMo-RL skips a malformed listed channel (or applies f outside [0, 1] as given); the drop-in
        # refuses the batch, names the row and channel, and leaves every reward as it was
        pb = {"enabled": True, "defaults": {"total": {"a": 10, "b": 20, "f": 0.1}}}
        results = [row(1, 30), row(1, 30, profile_band={"total": bad}), row(1, 10), row(1, 40)]
        before = copy.deepcopy(results)
        with pytest.raises(BatchError, match=message):
            run(results, profile_band=pb, group_size=1)
        assert results == before

    def test_row_profile_band_that_is_not_a_mapping_is_an_error(self):
        with pytest.raises(BatchError, match=r"results\[0\]\.profile_band: expected a mapping of channel"):
            run([row(1, 30, profile_band=[1, 2, 0.5])], {"profile_band_total": True})

    def test_empty_or_null_row_profile_band_falls_back_to_the_global_band(self):
        pb = {"enabled": True, "defaults": {"total": {"a": 10, "b": 20, "f": 0.5}}}
        for block in (None, {}):
            assert run([row(1, 30, profile_band=block)], profile_band=pb)[0] == [0.5]

    def test_band_only_on_originally_correct(self):
        band = {"total": {"a": 0, "b": 10, "f": 0.5}}
        out, _ = run([row(0, 20, profile_band=band), row(1, 20)], {"profile_band_total": True})
        assert out == [0, 0.5]


class TestProfileGate:
    GATE = {"group_total_length_penalty_coeff": 0.2, "group_length_penalty_profile_gate": True}

    def results(self, **meta):
        return [row(1, 10, **meta), row(1, 30), row(0, 200)]

    def test_mean_gt_limit_opens(self):
        # positive mean (10 + 30) / 2 = 20 > a = 19 -> coefficients apply: [+0.1, -0.1]
        out, _ = run(self.results(profile_band={"total": {"a": 19, "b": 40, "f": 1}}), self.GATE)
        assert out == pytest.approx([1.1, 0.9, 0])

    def test_mean_le_limit_closes(self):
        assert run(self.results(profile_band={"total": {"a": 20, "b": 40, "f": 1}}), self.GATE)[0] == [1, 1, 0]

    def test_positive_only_false_uses_all(self):
        # mean over all (10 + 30 + 200) / 3 = 80 > 20 -> open
        out, _ = run(self.results(profile_band={"total": {"a": 20, "b": 40, "f": 1}}),
                     {**self.GATE, "group_length_penalty_profile_gate_positive_only": False})
        assert out == pytest.approx([1.1, 0.9, 0])

    def test_missing_profile_limit_closes(self):
        assert run(self.results(), self.GATE)[0] == [1, 1, 0]
        # the field exists on another channel only
        assert run(self.results(profile_band={"answer": {"a": 1, "b": 2, "f": 1}}), self.GATE)[0] == [1, 1, 0]

    def test_global_band_feeds_the_gate(self):
        pb = {"enabled": True, "defaults": {"reasoning": {"a": 5, "b": 400, "f": 1}}}
        gate = {**self.GATE, "group_length_penalty_profile_gate_channel": "reasoning"}
        out, _ = run(self.results(), gate, profile_band=pb)
        # open (20 > 5); the global reasoning band (implicitly enabled, f = 1) multiplies by 1
        assert out == pytest.approx([1.1, 0.9, 0])

    def test_field_b(self):
        gate = {**self.GATE, "group_length_penalty_profile_gate_field": "b"}
        out, _ = run(self.results(profile_band={"total": {"a": 0, "b": 19.5, "f": 1}}), gate)
        assert out == pytest.approx([1.1, 0.9, 0])

    def test_closed_gate_leaves_other_terms(self):
        out, _ = run(self.results(), {**self.GATE, "longest_total_penalty": 0.3})
        assert out == pytest.approx([1, 0.7, 0])


# ------------------------------------------------------------------------------------- group rules
class TestGroups:
    def test_short_last_group(self):
        # groups [10, 30] and [10, 20, 30] -> the last (3 rows, group_size 3) and first 2 rows...
        results = [row(1, 10), row(1, 30), row(1, 10), row(1, 20), row(1, 50)]
        out, _ = run(results, {"longest_total_penalty": 0.2}, group_size=3)
        # group 0 = rows 0-2 (longest 30), group 1 = rows 3-4 (longest 50)
        assert out == pytest.approx([1, 0.8, 1, 1, 0.8])

    def test_groups_of_one_get_no_block(self):
        out, _ = run([row(1, 10), row(1, 30)], {"longest_total_penalty": 0.2, "total_bonus": 0.1}, group_size=1)
        assert out == [1, 1]

    def test_non_binary_group_untouched_and_warned_once(self, caplog):
        nemo_rl._NON_BINARY_WARNED_AGENTS.discard("grader")
        results = [row(0.5, 10, agent="grader"), row(1, 30, agent="grader"), row(1, 10), row(1, 30)]
        with caplog.at_level(logging.WARNING, logger="shapec.compat.nemo_rl"):
            out, metrics = run(results, {"longest_total_penalty": 0.2}, group_size=2)
            run([row(0.3, agent="grader")], {"longest_total_penalty": 0.2})
        assert out == pytest.approx([0.5, 1, 1, 0.8])
        assert metrics["length_penalty/skipped_non_binary_frac"] == 0.5
        mine = [r for r in caplog.records if r.name == "shapec.compat.nemo_rl"]
        assert len(mine) == 1 and "agent grader produced non-binary or multi-component rewards" in mine[0].message

    def test_negative_reward_is_non_binary(self):
        out, metrics = run([row(-1, 10), row(1, 30)], {"longest_total_penalty": 0.2})
        assert out == [-1, 1] and metrics["length_penalty/skipped_non_binary_frac"] == 1.0

    def test_multi_component_group_skipped(self):
        results = [row(1, 10, reward_components={"a": 0.5, "b": 0.5}), row(1, 30)]
        out, metrics = run(results, {"longest_total_penalty": 0.2})
        assert out == [1, 1] and metrics["length_penalty/skipped_non_binary_frac"] == 1.0
        # empty components are falsy: the group is shaped
        assert run([row(1, 10, reward_components={}), row(1, 30)], {"longest_total_penalty": 0.2})[0] == [1, 0.8]

    def test_disabled_graded_agent_is_silent(self, caplog):
        nemo_rl._NON_BINARY_WARNED_AGENTS.discard("judge")
        results = [row(0.7, agent="judge"), row(0.3, agent="judge")]
        with caplog.at_level(logging.WARNING):
            out, metrics = run(results, agent_overrides={"judge": {"enabled": False}})
        assert out == [0.7, 0.3] and metrics["length_penalty/skipped_non_binary_frac"] == 0.0
        assert not [r for r in caplog.records if "non-binary" in r.getMessage()]

    def test_low_effort_group_no_adjustment_but_clamped(self):
        # any low_effort_applied row: no penalty, no band; the tiny negative (binary within 1e-6) clamps to 0
        band = {"total": {"a": 0, "b": 1, "f": 0.5}}
        results = [row(1, 10, profile_band=band), row(1, 30, low_effort_applied=True), row(-5e-7, 5)]
        out, metrics = run(results, {"longest_total_penalty": 0.2, "profile_band_total": True})
        assert out == [1, 1, 0.0]
        assert metrics["length_penalty/adjusted_frac"] == pytest.approx(1 / 3)

    def test_null_and_missing_overrides_use_defaults(self, capsys):
        results = [row(1, 10, agent="a"), row(1, 30, agent="a"), row(1, 10, agent="b"), row(1, 30, agent="b"),
                   row(1, 10, agent="c"), row(1, 30, agent="c")]
        out, _ = run(results, {"longest_total_penalty": 0.2}, group_size=2,
                     agent_overrides={"a": None, "b": {"longest_total_penalty": 0.5}})
        assert out == pytest.approx([1, 0.8, 1, 0.5, 1, 0.8])
        assert "[length_penalty] WARNING: agent 'c' not found in agent_overrides, falling back to defaults" \
            in capsys.readouterr().out

    def test_override_replaces_only_its_keys(self):
        # reference test: default coeff 0.2, override 0.1; totals 10 vs 30 -> [1.05, 0.95]
        out, _ = run([row(1, 10), row(1, 30)], {"group_total_length_penalty_coeff": 0.2, "total_bonus": 0.01},
                     agent_overrides={"math": {"group_total_length_penalty_coeff": 0.1}})
        assert out == pytest.approx([1.06, 0.95])  # total_bonus inherited from default


class TestEntryPoint:
    def test_disabled_returns_empty_and_touches_nothing(self):
        results = [row(1, 10), row(1, 30)]
        before = copy.deepcopy(results)
        assert apply_group_length_penalties(results, {"default": {"enabled": False, "longest_total_penalty": 1}},
                                            group_size=0) == {}
        assert results == before

    def test_empty_results(self):
        assert apply_group_length_penalties([], {}, group_size=0) == {}

    def test_bad_group_size(self):
        with pytest.raises(ValueError, match="group_size must be greater than zero"):
            apply_group_length_penalties([row(1)], {}, group_size=0)

    def test_disabled_default_with_overrides_runs(self):
        results = [row(1, 10, agent="on"), row(1, 30, agent="on"), row(1, 10, agent="off"), row(1, 30, agent="off")]
        cfg = {"default": {"enabled": False, "longest_total_penalty": 0.2, "length_type": "chars"},
               "agent_overrides": {"on": {"enabled": True}}}
        metrics = apply_group_length_penalties(results, cfg, 2)
        assert rewards(results) == pytest.approx([1, 0.8, 1, 1])
        assert metrics["length_penalty/adjusted_frac"] == 0.25

    def test_config_model_accepted_and_shaped_rows_written_back_as_floats(self):
        cfg = LengthPenaltyConfig.model_validate({"default": {"longest_total_penalty": 0.2, "length_type": "chars"}})
        results = [row(1, 10), row(1, 30)]
        apply_group_length_penalties(results, cfg, 2)
        # as NeMo-RL: a binary-checked group's rows are all written back, as floats
        assert rewards(results) == [1, 0.8] and type(rewards(results)[0]) is float

    def test_metrics(self):
        # group 0 shaped: [1, 0.8 -> clamp... ] ; group 1 non-binary
        results = [row(1, 10), row(1, 30), row(0, 5), row(0.5, 1), row(1, 2), row(0, 3)]
        out, metrics = run(results, {"longest_total_penalty": 1.2}, group_size=3)
        assert out == [1, 0, 0, 0.5, 1, 0]
        assert metrics == pytest.approx({
            "length_penalty/env_reward_mean": 3.5 / 6,        # (1 + 1 + 0 + 0.5 + 1 + 0) / 6
            "length_penalty/reward_delta_mean": -1 / 6,       # row 1: 1 -> 0
            "length_penalty/wiped_correct_frac": 1 / 6,
            "length_penalty/adjusted_frac": 1 / 6,
            "length_penalty/skipped_non_binary_frac": 3 / 6})

    def test_verbose_breakdown(self, capsys):
        results = [row(1, 10), row(1, 30)]
        apply_group_length_penalties(results, {"verbose": True, "default": {
            "length_type": "chars", "longest_total_penalty": 0.2, "group_length_penalty_profile_gate": True}}, 2)
        out = capsys.readouterr().out
        assert "group 0 agent=math length_type=chr" in out
        assert "profile_gate channel=total field=a positive_only=True open=False reason=missing_profile_limit" in out
        assert "[1] reward=1.0000 reasoning_len=30 answer_len=0 total_len=30 longest_total=-0.2000" \
               " final_reward=0.8000" in out


# ------------------------------------------------------------------------------------- oracle
PARAM_DEFAULTS = {field: info.default for field, info in nemo_rl.LengthPenaltyParams.model_fields.items()}


def oracle(results, cfg, group_size):
    """The guide and the issue read plainly, one group at a time, on characters.

    Returns (final rewards, metrics), or None when the config enables nothing.
    """
    default = {**PARAM_DEFAULTS, **cfg.get("default", {})}
    overrides = cfg.get("agent_overrides")
    pb = cfg.get("profile_band") or {}
    global_band = {ch: v for ch, v in (pb.get("defaults") or {}).items() if v is not None} if pb.get("enabled") else {}
    if not default["enabled"] and not overrides and not global_band:
        return None
    for ch in global_band:
        if f"profile_band_{ch}" not in cfg.get("default", {}):
            default[f"profile_band_{ch}"] = True

    def texts(res):
        reasoning = answer = ""
        for item in res["full_result"]["response"]["output"]:
            if item["type"] == "reasoning":
                reasoning += "".join(s["text"] for s in item["summary"])
            elif item["type"] == "message" and item.get("role") in (None, "assistant"):
                answer += "".join(c["text"] for c in item["content"])
        return len(reasoning), len(answer)

    def band_value(first, ch):
        own = first.get("profile_band")
        if own and ch in own:
            return own[ch]
        return global_band.get(ch)

    def multiplier(length, blk):
        if not blk or any(blk.get(k) is None for k in "abf") or blk["b"] <= blk["a"]:
            return 1.0
        a, b, f = blk["a"], blk["b"], blk["f"]
        return 1.0 if length <= a else f if length >= b else 1.0 - (length - a) / (b - a) * (1.0 - f)

    n = len(results)
    orig = [r["full_result"]["reward"] for r in results]
    final = list(orig)
    verified = [False] * n
    skipped = 0
    for start in range(0, n, group_size):
        rows = list(range(start, min(start + group_size, n)))
        first = results[start]
        agent = first["agent_ref"]["name"]
        p = dict(default)
        if overrides is not None and overrides.get(agent) is not None:
            p.update(overrides[agent])
        if not p["enabled"]:
            continue
        if any(not (abs(orig[i]) <= 1e-6 or abs(orig[i] - 1) <= 1e-6) or results[i]["full_result"].get(
                "reward_components") for i in rows):
            skipped += len(rows)
            continue
        for i in rows:
            verified[i] = True
        if any(results[i].get("low_effort_applied") for i in rows):
            for i in rows:
                final[i] = max(orig[i], 0.0)
            continue
        lens = {i: texts(results[i]) for i in rows}
        L = {"reasoning": {i: lens[i][0] for i in rows}, "answer": {i: lens[i][1] for i in rows},
             "total": {i: lens[i][0] + lens[i][1] for i in rows}}
        pos = [i for i in rows if orig[i] > 0]
        coeff = {ch: p[f"group_{ch}_length_penalty_coeff"] for ch in ("reasoning", "answer", "total")}
        if p["group_length_penalty_profile_gate"]:
            blk = band_value(first, p["group_length_penalty_profile_gate_channel"])
            limit = blk.get(p["group_length_penalty_profile_gate_field"]) if isinstance(blk, dict) else None
            pool = pos if p["group_length_penalty_profile_gate_positive_only"] else rows
            chan = L[p["group_length_penalty_profile_gate_channel"]]
            if not isinstance(limit, (int, float)) or not pool or not sum(chan[i] for i in pool) / len(pool) > limit:
                coeff = dict.fromkeys(coeff, 0.0)
        delta = dict.fromkeys(rows, 0.0)
        if len(pos) >= 2:
            top = sorted((orig[i] for i in pos), reverse=True)[max(0, int(len(pos) * p["top_percentile"]) - 1)]
            for ch in ("reasoning", "answer", "total"):
                cands = [i for i in pos if L[ch][i] > 0]
                if p[f"{ch}_bonus"] > 0 and cands:
                    best = min(cands, key=lambda i: L[ch][i])
                    if orig[best] >= top:
                        delta[best] += p[f"{ch}_bonus"]
            for ch in ("reasoning", "answer", "total"):
                cands = [i for i in pos if orig[i] >= top and L[ch][i] > 0]
                if p[f"longest_{ch}_penalty"] > 0 and len(cands) >= 2:
                    delta[max(cands, key=lambda i: L[ch][i])] -= p[f"longest_{ch}_penalty"]
            if any(c > 0 for c in coeff.values()):
                weights = {}
                for ch in ("reasoning", "answer", "total"):
                    lo, hi = min(L[ch][i] for i in pos), max(L[ch][i] for i in pos)
                    raw = {i: 1.0 if hi == lo else 1.0 - (L[ch][i] - lo) / (hi - lo) for i in pos}
                    mean = sum(raw.values()) / len(pos)
                    weights[ch] = {i: raw[i] - mean for i in pos}
                for i in pos:
                    delta[i] += sum(weights[ch][i] * coeff[ch] for ch in ("reasoning", "answer", "total"))
            for ch in ("reasoning", "answer", "total"):
                thr, pen = p[f"{ch}_zmad_threshold"], p[f"{ch}_zmad_penalty"]
                if thr <= 0 or pen == 0:
                    continue
                xs = [L[ch][i] for i in pos]
                med = statistics.median(xs)
                mad = statistics.median(abs(x - med) for x in xs)
                if mad == 0 or mad / max(med, 1e-9) < 0.015:
                    continue
                for i in pos:
                    if 0.6745 * (L[ch][i] - med) / mad > thr:
                        delta[i] -= pen
        profiled, pass_rate = dict.fromkeys(rows, 0.0), dict.fromkeys(rows, 0.0)
        pr, pl = first.get("profiled_rewards"), first.get("profiled_output_lengths")
        if p["profiled_length_penalty"] > 0 and pr is not None and pl is not None:
            passing = [length for r, length in zip(pr, pl) if r > 0]
            if passing and len(passing) >= p["profiled_length_min_samples"]:
                spread = statistics.stdev(passing) if len(passing) > 1 else 0.0
                threshold = statistics.mean(passing) + p["profiled_length_n_std"] * spread
                for i in rows:
                    if L["total"][i] >= threshold and delta[i] >= 0:
                        profiled[i] = -p["profiled_length_penalty"]
        w = p["pass_rate_length_penalty_weight"]
        if w > 0 and pos:
            rho = len(pos) / len(rows)
            longest = max(L["total"][i] for i in pos)
            if longest > 0:
                for i in pos:
                    pass_rate[i] = -w * rho * L["total"][i] / longest
        for i in rows:
            # NeMo-RL adds one delta to the reward: (group adjustments + profiled + pass rate)
            base = max(orig[i] + (delta[i] + profiled[i] + pass_rate[i]), 0.0)
            if orig[i] > 0 and base > 0:
                for ch in ("total", "reasoning", "answer"):
                    if p[f"profile_band_{ch}"]:
                        base *= multiplier(L[ch][i], band_value(first, ch))
            final[i] = base
    metrics = {
        "length_penalty/env_reward_mean": sum(orig) / n,
        "length_penalty/reward_delta_mean": sum(f - o for f, o in zip(final, orig)) / n,
        "length_penalty/wiped_correct_frac": sum(verified[i] and orig[i] > 0 and final[i] <= 0 for i in range(n)) / n,
        "length_penalty/adjusted_frac": sum(f != o for f, o in zip(final, orig)) / n,
        "length_penalty/skipped_non_binary_frac": skipped / n,
    }
    return final, metrics


def test_oracle_agrees_with_hand_computed_example():
    results = [row(1, 10), row(1, 20), row(0, 50), row(1, 40)]
    final, _ = oracle(results, {"default": {"pass_rate_length_penalty_weight": 0.2}}, 4)
    assert final == pytest.approx([1 - 0.0375, 1 - 0.075, 0, 1 - 0.15])


REWARDS = st.sampled_from([0, 0, 1, 1, 1, 1.0, 0.0, 0.9999995, 1e-7, -5e-7, 0.5])
band_block = st.fixed_dictionaries({"a": st.integers(0, 20), "b": st.integers(5, 40),
                                    "f": st.sampled_from([0.0, 0.5, 0.9, 1.0])})
valid_band = band_block.filter(lambda b: b["b"] > b["a"])
# a listed row channel must be a valid band (a malformed one is a BatchError, tested above)
row_band = st.dictionaries(st.sampled_from(["total", "reasoning", "answer"]), valid_band, max_size=3)
params = st.fixed_dictionaries({}, optional={
    "top_percentile": st.sampled_from([0.25, 0.5, 1.0]),
    "reasoning_bonus": st.sampled_from([0.0, 0.1]), "answer_bonus": st.sampled_from([0.0, 0.2]),
    "total_bonus": st.sampled_from([0.0, 0.05]),
    "longest_reasoning_penalty": st.sampled_from([0.0, 0.2]), "longest_answer_penalty": st.sampled_from([0.0, 0.1]),
    "longest_total_penalty": st.sampled_from([0.0, 0.3]),
    "group_reasoning_length_penalty_coeff": st.sampled_from([0.0, 0.1]),
    "group_answer_length_penalty_coeff": st.sampled_from([0.0, 0.2]),
    "group_total_length_penalty_coeff": st.sampled_from([0.0, 0.3]),
    "reasoning_zmad_threshold": st.sampled_from([0.0, 0.5, 2.0]), "reasoning_zmad_penalty": st.sampled_from([0.0, 0.1]),
    "answer_zmad_threshold": st.sampled_from([0.0, 1.0]), "answer_zmad_penalty": st.sampled_from([0.0, 0.1]),
    "total_zmad_threshold": st.sampled_from([0.0, 0.5]), "total_zmad_penalty": st.sampled_from([0.0, 0.2]),
    "profiled_length_penalty": st.sampled_from([0.0, 0.3]), "profiled_length_n_std": st.sampled_from([0.0, 0.5, 1.0]),
    "profiled_length_min_samples": st.sampled_from([1, 2, 3]),
    "pass_rate_length_penalty_weight": st.sampled_from([0.0, 0.2]),
    "profile_band_total": st.booleans(), "profile_band_reasoning": st.booleans(), "profile_band_answer": st.booleans(),
    "group_length_penalty_profile_gate": st.booleans(),
    "group_length_penalty_profile_gate_channel": st.sampled_from(["total", "reasoning", "answer"]),
    "group_length_penalty_profile_gate_field": st.sampled_from(["a", "b", "f"]),
    "group_length_penalty_profile_gate_positive_only": st.booleans(),
    "enabled": st.sampled_from([True, True, True, False]),
})
configs = st.fixed_dictionaries({"default": params}, optional={
    "agent_overrides": st.dictionaries(st.sampled_from(["math", "code"]), st.one_of(st.none(), params), max_size=2),
    "profile_band": st.fixed_dictionaries({"enabled": st.booleans()}, optional={
        "defaults": st.fixed_dictionaries({}, optional={"total": valid_band, "reasoning": valid_band,
                                                        "answer": valid_band})}),
})
rows = st.builds(
    lambda reward, r, a, agent, low, comps, band, profiled: row(
        reward, r, a, agent, **({"low_effort_applied": True} if low else {}),
        **({"reward_components": [0.5]} if comps else {}), **({"profile_band": band} if band is not None else {}),
        **({"profiled_rewards": [x for x, _ in profiled], "profiled_output_lengths": [y for _, y in profiled]}
           if profiled is not None else {})),
    REWARDS, st.integers(0, 30), st.integers(0, 12), st.sampled_from(["math", "code"]),
    st.sampled_from([False] * 12 + [True]), st.sampled_from([False] * 15 + [True]), st.one_of(st.none(), row_band),
    st.one_of(st.none(), st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(0, 40)), max_size=5)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(results=st.lists(rows, min_size=1, max_size=12), cfg=configs, group_size=st.integers(1, 5))
def test_drop_in_matches_oracle(results, cfg, group_size):
    expected = oracle(copy.deepcopy(results), cfg, group_size)
    metrics = apply_group_length_penalties(results, copy.deepcopy(cfg), group_size)
    if expected is None:
        assert metrics == {}
        return
    final, expected_metrics = expected
    assert rewards(results) == pytest.approx(final, abs=1e-12)
    assert metrics == pytest.approx(expected_metrics, abs=1e-12)


def test_no_config_block_touches_nothing():
    from shapec.compat.nemo_rl import apply_group_length_penalties as apply_

    rows = [{"full_result": {"reward": 1.0, "response": {"output": []}}, "agent_ref": {"name": "a"}}]
    assert apply_(rows, None, 1) == {}
    assert rows[0]["full_result"]["reward"] == 1.0


def test_rows_of_shaped_groups_get_float_rewards_back():
    from shapec.compat.nemo_rl import apply_group_length_penalties as apply_

    rows = [{"full_result": {"reward": r, "response": {"output": []}}, "agent_ref": {"name": "a"}} for r in (1, 0)]
    rows.append({"full_result": {"reward": 1, "response": {"output": []}, "reward_components": {"x": 1}},
                 "agent_ref": {"name": "a"}})
    apply_(rows, {"default": {"longest_total_penalty": 0.1}}, 2)
    # the binary-checked group is written back as floats (values unchanged); the skipped one is untouched
    assert [type(r["full_result"]["reward"]) for r in rows] == [float, float, int]


def test_a_foreign_pydantic_config_is_accepted_with_its_set_keys():
    from pydantic import BaseModel

    from shapec.compat.nemo_rl import apply_group_length_penalties as apply_

    class Default(BaseModel):
        enabled: bool = True
        longest_total_penalty: float = 0.0

    class Foreign(BaseModel):
        default: Default = Default()

    def rows():
        return [{"full_result": {"reward": 1.0, "response": {"output": [
            {"type": "message", "content": "x" * n}]}}, "agent_ref": {"name": "a"}} for n in (10, 20)]

    ours, theirs = rows(), rows()
    apply_(ours, {"default": {"longest_total_penalty": 0.2}}, 2)
    apply_(theirs, Foreign(default=Default(longest_total_penalty=0.2)), 2)
    assert [r["full_result"]["reward"] for r in theirs] == [r["full_result"]["reward"] for r in ours] == [1.0, 0.8]
