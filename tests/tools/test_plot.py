"""`shapec plot`: the values of the curves it draws, the inputs it sets, and the notes it writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shapec
from shapec.cli import main
from shapec.tools.config import build_plan
from shapec.tools.plot import caption, plot
from shapec.tools.plotdata import GRID
from shapec.run.rundata import FlatLayout, Grouping
from shapec.run.spec import ToolError, pick_shaper

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "data"


def curves_of(tmp_path, module: str, *sets, shaper=None, config=None, backend="interpreter", **kw):
    mod = shapec.load(module, backend=backend)
    s = pick_shaper(mod, shaper)
    plan = build_plan(s, mod.names(), config, list(sets))
    return s, plot(s, plan, tmp_path / "p.png", **kw)


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_short_rl_correct_curve_is_not_flat(tmp_path, backend):
    _, c = curves_of(tmp_path, "short_rl", backend=backend, max_length=1000)
    # `correct` follows the curve: the probe is a correct rollout on the solid curve, so RightGate lets
    # SlackBand pay it; background correct lengths are 200, 400, 600, 800 (20-80% of 1000)
    assert c.inputs["correct"] == "true on the correct curve, false on the wrong one"
    assert np.all(c.wrong == 0)
    assert c.correct[0] == 1.5  # the shortest correct rollout: within tau_l = 200 of the shortest
    assert c.correct[np.searchsorted(c.xs, 400)] == 1.5  # 400 <= lo + tau_l = 200 + 200
    hi = np.searchsorted(c.xs, 800)
    assert c.correct[hi] == pytest.approx(1 + 0.5 - (800 - 200) / (800 - 200 + 1e-5))
    assert c.notes == ["state short_rl.acc_max = 0 entering the curves' call (its initial value); the call updates "
                       "it before shaping, as every call does"]


def test_a_stateful_shaper_is_drawn_from_its_initial_state_whatever_the_data_pass_left(tmp_path):
    """A --data pass of all-correct groups lifts acc_max to 1, which would close the switch on the
    curves' batch (accuracy 0.6): the curves are those without --data, and the note says which state."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(f'{{"prompt_id": "p{g}", "reward": 1, "correct": true, "length": {100 + 50 * i}}}\n'
                            for g in range(3) for i in range(4)))
    mod = shapec.load("short_rl", backend="interpreter")
    s = pick_shaper(mod, None)
    plan = build_plan(s, mod.names(), None, [])
    alone = plot(s, plan, tmp_path / "a.png", max_length=1000)
    with_data = plot(s, plan, tmp_path / "b.png", max_length=1000, data=data, layout=FlatLayout(None),
                     grouping=Grouping(key="prompt_id"))
    assert np.array_equal(with_data.correct, alone.correct) and with_data.correct[0] == 1.5
    assert with_data.notes == ["state short_rl.acc_max = 0 entering the curves' call (its initial value, not the 1 "
                               "the --data pass left); the call updates it before shaping, as every call does"]
    assert s.state_dict() == {"short_rl": {"acc_max": 0.0}}


def test_negated_flags_are_false_and_other_lengths_take_a_quarter_of_the_range(tmp_path):
    _, c = curves_of(tmp_path, "nemo_rl", "longest_total_penalty=0.1", max_length=2000)
    assert c.inputs == {"reasoning": "the x axis", "answer": "500 tokens",
                        "low_effort": "false (the spec only uses it negated: true switches shaping off)"}
    # the longest correct total loses 0.1: the probe is longest past the background's last correct
    # rollout (reasoning 1600 + answer 500) and shortest before it
    assert c.correct[-1] == pytest.approx(0.9) and c.correct[0] == 1.0


def test_default_params_note_the_flat_curve(tmp_path):
    _, c = curves_of(tmp_path, "nemo_rl")
    assert np.all(c.correct == 1) and np.all(c.wrong == 0)
    assert c.notes == ["flat: no term or factor applies at these params (zero here: reasoning_bonus, answer_bonus, "
                       "total_bonus, longest_reasoning_penalty, ...); turn one on with --set KEY=VALUE"]


def test_a_gate_closed_by_missing_metadata_says_which_and_meta_opens_it(tmp_path):
    config = EXAMPLES / "nemo_rl_config.yaml"
    _, closed = curves_of(tmp_path, "nemo_rl", config=config)
    assert set(closed.gates["profile_gate"]) == {"missing_profile_limit"}
    assert closed.notes == ["gate profile_gate: closed (missing_profile_limit) everywhere (limit = missing); it "
                            "depends on --meta profile_band=..., --set global_band_answer=..., "
                            "--set global_band_reasoning=..., --set global_band_total=..."]
    _, opened = curves_of(tmp_path, "nemo_rl", config=config,
                          metas=["profile_band={total: {a: 500, b: 3000, f: 0.8}}"])
    assert "missing_profile_limit" not in opened.gates["profile_gate"]
    assert "mean_gt_limit" in opened.gates["profile_gate"]
    # the group-relative term and the band multiplier now shape the correct rollout
    assert not np.allclose(opened.correct, closed.correct)
    x = np.searchsorted(opened.xs, 3500)
    assert opened.correct[x] < closed.correct[x]


def test_a_gate_closed_by_its_limit_shows_the_values_compared(tmp_path):
    _, c = curves_of(tmp_path, "nemo_rl", "group_length_penalty_profile_gate=true",
                     "global_band_total=[100000, 200000, 0.5]", "group_total_length_penalty_coeff=0.1",
                     max_length=4000)
    (note,) = [n for n in c.notes if n.startswith("gate profile_gate")]
    assert note.startswith("gate profile_gate: closed (mean_le_limit) everywhere (limit = 100000, "
                           "count(gate_pool) = 5, mean(gate_length where gate_pool) = ")
    assert note.endswith("it depends on --meta profile_band=..., --set global_band_answer=..., "
                         "--set global_band_reasoning=..., --set global_band_total=...")


def test_an_advantage_pipeline_is_labelled_advantage(tmp_path):
    _, c = curves_of(tmp_path, "miles", "length_penalty.coeff=1", shaper="grpo", max_length=1000)
    assert c.ylabel == "advantage"
    _, c = curves_of(tmp_path, "miles", "coeff=1", shaper="length_penalty", max_length=1000)
    assert c.ylabel == "shaped reward"


def test_a_derived_channel_is_swept_through_its_inputs(tmp_path):
    s, c = curves_of(tmp_path, "nemo_rl", "pass_rate_length_penalty_weight=0.5", channel="total",
                     max_length=4000)
    assert c.inputs["reasoning"] == "the x axis (total) / 2" and c.inputs["answer"] == "the x axis (total) / 2"
    # the probe at x = 4000 has reasoning = answer = 2000: shape that group directly and compare
    bg = np.linspace(0.2, 0.8, 7) * 4000
    correct = np.array([1.0] + [1.0 if k % 2 == 0 else 0.0 for k in range(7)])
    total = np.concatenate([[4000.0], bg])
    out = s(correct, group_size=8, channels={"reasoning": total / 2, "answer": total / 2, "low_effort": np.zeros(8)},
            params={"length_penalty": {"pass_rate_length_penalty_weight": 0.5}})
    assert c.correct[-1] == pytest.approx(out.rewards[0])
    assert c.correct[-1] < c.correct[GRID // 2] < 1


def test_a_channel_that_is_not_a_length_is_refused(tmp_path):
    with pytest.raises(ToolError, match="--channel 'low_effort': not a length input or channel of "
                                        "'nemo_rl_length' \\(lengths: reasoning, answer, total\\)"):
        curves_of(tmp_path, "nemo_rl", channel="low_effort")


def test_with_data_the_curve_uses_and_names_the_first_groups_metadata(tmp_path):
    mod = shapec.load("nemo_rl", backend="interpreter")
    s = pick_shaper(mod, None)
    plan = build_plan(s, mod.names(), EXAMPLES / "nemo_rl_config.yaml", [])
    c = plot(s, plan, tmp_path / "p.png", data=EXAMPLES / "rollouts.jsonl", layout=FlatLayout(None),
             grouping=Grouping(key="prompt_id"))
    # gsm8k-0017's band {1800, 3600, 0.8} gives the gate its limit: it is never missing
    assert "missing_profile_limit" not in c.gates["profile_gate"]
    text = caption(c, {"profile_band": {"total": {"a": 1800.0, "b": 3600.0, "f": 0.8}}}, "gsm8k-0017 (rows 1-8)")
    assert "metadata (from group gsm8k-0017 (rows 1-8) of --data): profile_band = " in text


def test_meta_typo_names_the_closest(tmp_path):
    with pytest.raises(ToolError, match="--meta 'profile_bnd': 'nemo_rl_length' declares no such metadata; "
                                        "did you mean 'profile_band'\\?"):
        curves_of(tmp_path, "nemo_rl", metas=["profile_bnd={}"])


def test_cli_plot_takes_meta(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHAPEC_BACKEND", "interpreter")
    out = tmp_path / "p.png"
    assert main(["plot", "short_rl", "--out", str(out), "--max-length", "500"]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n" and out.stat().st_size > 10_000
    assert main(["plot", "nemo_rl", "--out", str(out), "--meta", "nope=1"]) == 1
    assert "--meta 'nope': 'nemo_rl_length' declares no such metadata (it has profile_band, profiled)" \
        in capsys.readouterr().err


def test_the_caption_names_the_params_given_and_asks_for_metadata_only_where_the_shaper_declares_some(tmp_path):
    s, c = curves_of(tmp_path, "short_rl", "alpha=0.5", max_length=1000)
    plan = build_plan(s, (), None, ["alpha=0.5"])
    given = {k: v for stage in plan.base.values() for k, v in stage.items()}
    text = caption(c, {}, None, given, declares_metadata=False)
    assert "params (from --config and --set; the others at their defaults): alpha = 0.5" in text
    assert "metadata" not in text and c.inputs["length"] == "the x axis"
    assert "metadata: none (give it with --meta NAME=VALUE)" in caption(c, {}, None, {}, declares_metadata=True)


def test_a_band_is_shown_on_the_swept_axis_where_the_band_in_effect_changes_the_curve(tmp_path):
    """nemo_rl's total band on the reasoning axis: the total is reasoning + answer (a quarter of the
    range), so the band starts at a - answer; a group's own band overrides the global one."""
    sets = ("global_band_total=[3000, 5000, 0.5]", "profile_band_total=true")
    _, c = curves_of(tmp_path, "nemo_rl", *sets, max_length=8000)
    factor = c.effects["factor band_total_multiplier"]
    answer = 0.25 * 8000
    first = c.xs[np.flatnonzero(factor != 1)[0]]
    assert first == pytest.approx(3000 - answer, abs=1.01 * (c.xs[1] - c.xs[0]))
    assert factor.min() == 0.5 and factor[c.xs >= 5000 - answer].max() == 0.5
    _, own = curves_of(tmp_path, "nemo_rl", *sets, max_length=8000,
                       metas=["profile_band={total: {a: 4000, b: 6000, f: 0.8}}"])
    factor = own.effects["factor band_total_multiplier"]
    assert factor.min() == 0.8 and own.xs[np.flatnonzero(factor != 1)[0]] == pytest.approx(
        4000 - answer, abs=1.01 * (c.xs[1] - c.xs[0]))


def test_every_jump_of_the_curve_lines_up_with_the_edge_of_a_term_or_factor(tmp_path):
    _, c = curves_of(tmp_path, "nemo_rl", config=EXAMPLES / "nemo_rl_config.yaml",
                     data=EXAMPLES / "rollouts.jsonl", layout=FlatLayout(None), grouping=Grouping(key="prompt_id"))
    jumps = np.flatnonzero(np.abs(np.diff(c.correct)) > 0.03)
    assert len(jumps) >= 2
    edges = set()
    for name, values in c.effects.items():
        applies = values != (0.0 if name.startswith("term ") else 1.0)
        edges |= set(np.flatnonzero(applies[1:] != applies[:-1]).tolist())
    assert set(jumps.tolist()) <= edges
