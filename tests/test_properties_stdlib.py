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
from shapec.compiler.ir import Ensure

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
    for module, name in (("time_efficiency", "time_efficiency"), ("short_rl", "short_rl")):
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
