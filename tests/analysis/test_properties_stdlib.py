"""What --prove says about the stdlib, and every counterexample replays through the CLI on both backends."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import shapec
from shapec.analysis.prove import analyse, decide
from shapec.analysis.properties import Goal
from shapec.analysis.report import set_args, write_counterexample
from shapec.analysis.search import search
from shapec.ir.nodes import Ensure

STDLIB = Path(shapec.__file__).parent / "stdlib"


def ir_of(module: str, name: str):
    return shapec.load(module, backend="interpreter").ir(name)


def verdicts(module: str, name: str) -> dict[str, object]:
    return {("" if v.goal.declared else "general " if not v.goal.outside else "outside ") + v.goal.title(): v
            for v in analyse(ir_of(module, name), trials=300)}


def test_time_efficiency():
    got = verdicts("time_efficiency", "time_efficiency")
    assert got["order_kept over binary"].status == "proved"  # apply_to = correct and floor >= 0
    outside = got["outside order_kept over binary"]
    assert outside.status == "refuted"
    case = outside.found.case
    # a resolved-or-not rollout with reward 1 and over an hour of wall time ends below a reward-0 one
    hi, lo = outside.found.rollouts
    assert case.rewards[hi] == 1 and case.rewards[lo] == 0 and case.inputs["run_time"][hi] > 3600
    assert outside.found.shaped[hi] < outside.found.shaped[lo]
    assert "floor" in outside.breaks and 0 in outside.breaks["floor"][1] and None in outside.breaks["floor"][0]


def test_time_efficiency_correct_without_floor_is_refuted_and_with_floor_proved():
    ir = ir_of("time_efficiency", "time_efficiency")
    apply = [p for p in ir.params if p.name == "apply_to"][0]
    correct = ir.ensures[0].when.args[0]  # apply_to == "correct"
    assert correct.args[0].attr == ("param", "apply_to") and apply.members.index("correct") == correct.args[1].attr
    no_floor = decide(ir, Goal(Ensure("order_kept", "binary", when=correct), False), trials=300)
    assert no_floor.status == "refuted"
    case, (hi, lo) = no_floor.found.case, no_floor.found.rollouts
    assert case.rewards[hi] == 1 and case.inputs["resolved"][hi] == 1 and case.inputs["run_time"][hi] > 3600
    assert no_floor.found.shaped[hi] < no_floor.found.shaped[lo] == 0


def test_nemo_rl_length_penalty_invariants_proved():
    got = verdicts("nemo_rl", "length_penalty")
    assert got["order_kept over binary"].status == "proved"
    assert got["all_wrong_unchanged over binary"].status == "proved"
    assert "every group size" in got["order_kept over binary"].how


def test_short_rl_holds_for_alpha_at_most_one():
    got = verdicts("short_rl", "short_rl")
    assert got["order_kept over binary"].status == "proved"
    assert got["shorter_not_worse(length) over real"].status == "proved"
    outside = got["outside order_kept over binary"]
    assert outside.status == "refuted" and outside.found.case.params["alpha"] > 1
    bad, good = outside.breaks["alpha"]
    assert max(good) <= 1 < min(bad)


def test_miles_invariants_proved():
    got = verdicts("miles", "length_penalty")
    assert {k: v.status for k, v in got.items() if not k.startswith(("general", "outside"))} == {
        "order_kept over binary": "proved", "all_wrong_unchanged over real": "proved",
        "within [0, 1] over unit": "proved"}


def _refuted():
    out = []
    for module, name in (("time_efficiency", "time_efficiency"), ("short_rl", "short_rl"), ("kimi", "kimi_length"),
                         ("l1", "l1_exact"), ("dapo", "overlong")):
        for v in analyse(ir_of(module, name), trials=300):
            if v.status == "refuted":
                out.append(pytest.param(module, v, id=f"{name}-{v.goal.title()}-{v.goal.outside}"))
    return out


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
@pytest.mark.parametrize("module, verdict", _refuted())
def test_counterexample_replays_through_the_cli(tmp_path, module, verdict, backend):
    path = write_counterexample(verdict, tmp_path)
    sets = [a for s in set_args(verdict) for a in ("--set", s)]
    spec = str(STDLIB / f"{module}.shape")
    common = [spec, "--shaper", verdict.shaper.name, "--data", str(path), "--backend", backend, *sets]
    out = tmp_path / "out.jsonl"
    run = subprocess.run([sys.executable, "-m", "shapec.cli", "run", *common, "--out", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    shaped = [json.loads(line)["reward"] for line in out.read_text().splitlines()]
    assert shaped == pytest.approx(verdict.found.shaped, rel=1e-12, abs=1e-12)
    explain = subprocess.run([sys.executable, "-m", "shapec.cli", "explain", *common, "--digits", "6"],
                             capture_output=True, text=True)
    assert explain.returncode == 0, explain.stderr
    assert "counterexample" in explain.stdout


# (module, shaper, a param the clause's `when` bounds, a value that keeps it, one that breaks it)
PUBLISHED = [
    ("kimi", "kimi_length", "weight", 2, 10),
    ("cosine", "cosine_length", "exceed", None, -10),
    ("dapo", "overlong", "past_max", "capped", "linear"),
    ("grpo_lead", "lead_reward", "wrong", -1, 2),
    ("grpo_lead", "lead_advantage", "low", 0, -10),
    ("prime_rl", "linear_length", "input_weight", 0.1, 10),
]


@pytest.mark.parametrize("module, name, param, keeps, breaks", PUBLISHED, ids=[f"{m}.{n}" for m, n, *_ in PUBLISHED])
def test_published_shapers_prove_what_they_declare_and_name_the_param_that_breaks_it(module, name, param, keeps,
                                                                                     breaks):
    got = verdicts(module, name)
    declared = {k: v.status for k, v in got.items() if not k.startswith(("general", "outside"))}
    assert declared and set(declared.values()) == {"proved"}, declared
    outside = [v for k, v in got.items() if k.startswith("outside order_kept")]
    assert [v.status for v in outside] == ["refuted"]
    bad, good = outside[0].breaks[param]
    assert keeps in good and breaks in bad, outside[0].breaks


def test_l1_exact_keeps_neither_invariant_at_its_default_alpha():
    got = verdicts("l1", "l1_exact")
    order, wrong = got["general order_kept over binary"], got["general all_wrong_unchanged over binary"]
    assert order.status == wrong.status == "refuted"
    (hi, lo), case = order.found.rollouts, order.found.case
    assert case.rewards[hi] == 1 > case.rewards[lo] == 0 and order.found.shaped[hi] < order.found.shaped[lo]
    assert wrong.found.shaped[0] < 0 and wrong.found.case.metas["target"] is not None


NEMO_PENALTIES = ["profiled_length_penalty", "longest_total_penalty", "reasoning_zmad_penalty",
                  "pass_rate_length_penalty_weight", "group_total_length_penalty_coeff", "total_bonus"]


@pytest.mark.parametrize("param", NEMO_PENALTIES)
def test_nemo_rl_negative_coefficients_break_nothing(param):
    """NeMo-RL guards each algorithm by its coefficient (`profiled_length_penalty > 0` for the one term
    that reaches wrong rollouts), so a negative value turns it off rather than paying wrong rollouts."""
    ir = ir_of("nemo_rl", "length_penalty")
    fixed = {param: -1.0, "profiled_length_min_samples": 1, "reasoning_zmad_threshold": 0.5,
             "group_length_penalty_profile_gate": False}
    for prop in ("order_kept", "all_wrong_unchanged"):
        found, stats = search(ir, Ensure(prop, "binary"), 300, seed=7, fixed=fixed)
        assert found is None and stats.trials == 300


def test_nemo_rl_report_says_no_param_breaks_its_clauses():
    from shapec.analysis.report import text

    report = text(analyse(ir_of("nemo_rl", "length_penalty"), trials=100))
    assert "refuted" not in report
    for prop in ("order_kept", "all_wrong_unchanged"):
        assert f"{prop} over binary [declared]: proved for every param value in range (static" in report


def test_report_names_params_every_value_of_which_breaks_it():
    from shapec.analysis.report import breaks_text

    outside = verdicts("kimi", "kimi_length")["outside order_kept over binary"]
    assert breaks_text(outside) == ("with the other params as in the counterexample: holds for weight <= 2 in the "
                                    "search; breaks for every scope tried (group, batch)")


def test_static_pass_decides_the_stdlib_clauses_it_can():
    from shapec.analysis.static import decide

    proved = {(m, n, e.prop) for m in ("nemo_rl", "miles", "efficient", "l1", "thinkprune", "grpo_lead", "prime_rl",
                                       "kimi", "cosine", "dapo", "short_rl", "time_efficiency")
              for n, ir in ((n, ir_of(m, n)) for n in shapec.load(m, backend="interpreter").shapers)
              for e in ir.ensures if (decide(ir, e) or ("",))[0] == "proved"}
    both = {"order_kept", "all_wrong_unchanged"}
    assert proved == ({("nemo_rl", "length_penalty", p) for p in both}
                      | {(m, n, p) for m, n in (("miles", "length_penalty"), ("efficient", "efficient_reasoning"),
                                                ("l1", "l1_max"), ("thinkprune", "truncate"))
                         for p in (*both, "within")}
                      | {("grpo_lead", "lead_reward", "order_kept"),
                         ("grpo_lead", "lead_advantage", "all_wrong_unchanged"),
                         ("prime_rl", "linear_length", "all_wrong_unchanged")})
