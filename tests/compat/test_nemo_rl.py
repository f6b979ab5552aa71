"""The NeMo-RL drop-in: config, text extraction and the rules of the guide per algorithm (the profile
gate, group rules and entry point are in test_compat_nemo_rl_groups.py, the independent oracle in
test_compat_nemo_rl_oracle.py).

Lengths are characters unless a test passes a tokenizer: `row(1, 10, 4)` is a rollout with reward 1,
a 10-character reasoning summary and a 4-character answer.
"""

from __future__ import annotations

import copy
import importlib.util
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from shapec.run import nemo_gym_rows as _nemo_gym_rows
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


class TestOlderCall:
    """`(results, master_config, tokenizer)`: the block and the group size come from the master config."""

    CFG = {"default": {"longest_total_penalty": 0.2, "total_bonus": 0.1}}

    def _results(self):
        results = [row(1), row(1), row(0), row(1)]
        for r, text in zip(results, ("long_word longer", "a a a a", "b", "c c")):
            r["full_result"]["response"]["output"][0]["content"][0]["text"] = text
        return results

    def test_it_shapes_as_the_current_call_does(self):
        older, current = self._results(), self._results()
        master = {"grpo": {"length_penalty": self.CFG, "num_generations_per_prompt": 2}, "policy": {}}
        metrics = apply_group_length_penalties(older, master, FakeTokenizer())
        assert metrics == apply_group_length_penalties(current, self.CFG, 2, tokenizer=FakeTokenizer())
        assert rewards(older) == rewards(current) == pytest.approx([1.1, 0.8, 0, 1])  # counted in words

    def test_a_model_with_a_grpo_section_is_a_master_config_too(self):
        older, current = self._results(), self._results()
        master = SimpleNamespace(grpo={"length_penalty": self.CFG, "num_generations_per_prompt": 2})
        apply_group_length_penalties(older, master, FakeTokenizer())
        apply_group_length_penalties(current, self.CFG, 2, tokenizer=FakeTokenizer())
        assert rewards(older) == rewards(current)

    def test_without_a_length_penalty_block_nothing_changes(self):
        results = self._results()
        assert apply_group_length_penalties(results, {"grpo": {"num_generations_per_prompt": 2}}, None) == {}
        assert rewards(results) == [1, 1, 0, 1]

    def test_a_master_config_without_its_group_size_is_an_error_naming_it(self):
        with pytest.raises(KeyError, match="master_config: missing grpo.'num_generations_per_prompt'"):
            apply_group_length_penalties(self._results(), {"grpo": {"length_penalty": self.CFG}}, FakeTokenizer())


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
