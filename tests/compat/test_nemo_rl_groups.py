"""The NeMo-RL drop-in: the profile gate, the group rules and the entry point (rows and helpers
from test_compat_nemo_rl.py)."""

from __future__ import annotations

import copy
import logging

import pytest

from shapec.compat import nemo_rl
from shapec.compat.nemo_rl import LengthPenaltyConfig, apply_group_length_penalties

from .test_nemo_rl import backend, rewards, row, run  # noqa: F401  (backend: the autouse fixture)


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
