"""The prover never says "proved" for a property a small group breaks: each op whose meaning the
intervals or z3 once got wrong, with the counterexample the analysis now finds, replayed on both
backends."""

import shlex

import numpy as np
import pytest

import shapec
from shapec.analysis.prove import analyse
from shapec.analysis.report import replay_command
from shapec.analysis.search import Found, evaluate

from ..helpers import assert_error

CLIP = ("shaper s(floor: float in [0, 2] = 0, cap: float in [1, 2] = 1) requires binary produces real {\n"
        "  ensure within [0, 1]\n  ensure all_wrong_unchanged\n  result = clip(reward, floor, cap)\n}\n")
INT = ("shaper s(k: float in [0.5, 1] = 1) requires binary produces real {\n"
       "  ensure within [0.5, 1.5]\n  result = float(int(k)) + 0.5 * reward\n}\n")
MINMAX = ("shaper s() requires binary produces real {\n  input length: tokens\n  input correct: bool\n"
          "  ensure within [0, 1]\n  result = minmax(float(length) where correct)\n}\n")
SIGNED_INPUT = ("shaper s() requires binary produces real {\n  input score: float\n  ensure order_kept\n"
                "  ensure within [0, 1]\n  ensure all_wrong_unchanged\n  term t = min(score, 0)\n}\n")
POLE = ("shaper s() requires binary produces real {\n  input x: float\n  ensure within [0, 1]\n"
        "  result = x == 0 and 1 / x > 0 ? 2 : reward\n}\n")
ENV_REWARD = ("shaper s() requires binary produces real {\n  ensure within [0, 1]\n  ensure order_kept\n"
              "  ensure all_wrong_unchanged\n  term t = -0.5 * env_reward\n}\n")
CROSSED_CLIP = ("shaper s() requires binary produces real {\n  input x: float\n  ensure order_kept\n  term t0 = reward\n"
                "  term t1 = sigmoid(reward) / clip(x, 1, x)\n  clamp >= 0\n}\n")
WHEN_EDGE = ("shaper s(alpha: float in [0, 3] = 1, target: tokens > 0 = 1000) requires binary produces real {\n"
             "  input length: tokens\n  gate right = reward > 0\n  ensure order_kept when alpha <= 1.5\n"
             "  term pen = -alpha * clip(length / target - 1, 0, 1) on right\n}\n")

# (source, the declared clauses that are false, what the counterexample must hold)
FALSE_CLAUSES = {
    "clip with bounds that cross the value": (CLIP, {"within", "all_wrong_unchanged"}, None),
    "clip is min(max(x, lo), hi) in z3 too": (CROSSED_CLIP, {"order_kept"}, lambda case: min(case.inputs["x"]) < 1),
    "int truncates": (INT, {"within"}, lambda case: case.params["k"] < 1),
    "minmax rescales rollouts outside its mask": (MINMAX, {"within"}, lambda case: 0 in case.inputs["correct"]),
    "a float input can be negative": (SIGNED_INPUT, {"order_kept", "within", "all_wrong_unchanged"},
                                      lambda case: min(case.inputs["score"]) < 0),
    "a non-zero over zero is infinite, not missing": (POLE, {"within"}, lambda case: case.inputs["x"] == [0.0]),
    "env_reward is not reward": (ENV_REWARD, {"within", "order_kept", "all_wrong_unchanged"},
                                 lambda case: case.env_rewards is not None and case.env_rewards != case.rewards),
    "the edge of a when condition": (WHEN_EDGE, {"order_kept"}, lambda case: case.params["alpha"] <= 1.5),
}


def declared(source: str):
    ir = shapec.compile_str(source, backend="interpreter").ir("s")
    return ir, {v.goal.ensure.prop: v for v in analyse(ir, trials=400) if v.goal.declared}


@pytest.mark.parametrize("name", FALSE_CLAUSES)
def test_a_false_clause_is_refuted_by_a_group_both_backends_agree_on(name):
    source, false, holds = FALSE_CLAUSES[name]
    ir, verdicts = declared(source)
    assert {p for p, v in verdicts.items() if v.status == "refuted"} == false, verdicts
    for prop in false:
        found = verdicts[prop].found
        again = evaluate(ir, verdicts[prop].goal.ensure, found.case)
        assert isinstance(again, Found) and again.shaped == found.shaped
        assert holds is None or holds(found.case), found.case
        for backend in ("interpreter", "numba"):
            shaped = found.case.call(getattr(shapec.compile_str(source, backend=backend), "s")).rewards
            assert shaped.tolist() == found.shaped


def test_produces_unit_is_refused_for_a_clip_whose_bounds_leave_the_unit_range():
    source = CLIP.replace("produces real", "produces unit").replace("  ensure within [0, 1]\n", "")
    assert_error(source, "E402", "produces unit", message="only known to be real")


def test_clip_with_bounds_inside_the_unit_range_is_still_proved_within_it():
    ir, verdicts = declared(CLIP.replace("floor: float in [0, 2]", "floor: float in [0, 1]")
                            .replace("cap: float in [1, 2]", "cap: float in [1, 1]"))
    assert verdicts["within"].status == "proved"
    assert verdicts["all_wrong_unchanged"].found.case.params["floor"] > 0  # clip(0, floor, 1) is floor


def test_the_replay_line_is_one_shell_word_per_argument_whatever_the_file_is_called(tmp_path):
    ir, verdicts = declared(CLIP)
    line = replay_command(verdicts["within"], "x;touch PWNED;#.shape", tmp_path / "a b.jsonl")
    words = shlex.split(line)
    assert words[:3] == ["shapec", "explain", "x;touch PWNED;#.shape"]
    assert words[words.index("--data") + 1] == str(tmp_path / "a b.jsonl")
    assert all(w.startswith(("floor=", "cap=")) for w in words[words.index("--data") + 2:] if w != "--set")


def test_env_rewards_reach_the_shaper_as_the_counterexample_says():
    ir, verdicts = declared(ENV_REWARD)
    case = verdicts["within"].found.case
    out = shapec.compile_str(ENV_REWARD).s(np.array(case.rewards), group_size=case.size,
                                          env_rewards=np.array(case.env_rewards))
    assert out.rewards.tolist() == [r - 0.5 * e for r, e in zip(case.rewards, case.env_rewards)]
