"""Soundness: for random specs over every op, input kind and sign, and for the stages of random pipelines
at the arguments they pass, whatever the analysis proves no group breaks, on random groups, on the edges
of every param range and `when` condition, and on groups of zeros, ties and extremes (the reference
interpreter judges). SHAPEC_SOUNDNESS_EXAMPLES runs it longer."""

import itertools
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import shapec
from shapec.analysis.cases import Case, boundary_params
from shapec.analysis.prove import analyse, analyse_stages, called_with
from shapec.analysis.search import Found, evaluate, search

from .test_prover_soundness import FALSE_CLAUSES

HEAD = ("shaper s(w: float in [-2, 2] = 1, n: int in [0, 4] = 1, flag: bool = false, lo: float >= 0 = 0.5) "
        "requires {over} produces real {{\n  input b: bool\n  input k: int\n  input x: float\n  input t: tokens\n")
NUM_ATOMS = ["reward", "env_reward", "x", "float(k)", "float(t) / 100", "w", "float(n)", "lo", "0", "1", "-1", "0.5",
             "2", "(b ? 1 : 0)", "position"]
BOOL_ATOMS = ["b", "flag", "reward > 0", "reward == 0", "x > 0", "t > 100", "w >= 0"]
UNARY = ["-{}", "abs({})", "float(int({}))", "sigmoid({})", "sqrt(abs({}))", "cos({})", "exp(min({}, 5))",
         "log(abs({}) + 1)"]
REDUCTIONS = ["mean({})", "sum({})", "min({})", "max({})", "std({})", "median({})", "minmax({} where b)",
              "mean({} where reward > 0)", "max({} where b)", "rank({} where b)"]  # of a rollout value: `+ 0 * x` keeps it one
BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} / {}", "min({}, {})", "max({}, {})", "{} ** 2", "({}) ?? {}"]
CONDS = ["{} > {}", "{} <= {}", "{} == {}"]

EXTREMES = (0.0, -1.0, 1.0, 1e6, -1e6, 0.5)


def nums(depth: int):
    atom = st.sampled_from(NUM_ATOMS)
    if depth == 0:
        return atom
    sub, cond = nums(depth - 1), bools(depth - 1)
    return st.one_of(
        atom,
        st.tuples(st.sampled_from(UNARY), sub).map(lambda p: p[0].format(f"({p[1]})")),
        st.tuples(st.sampled_from(REDUCTIONS), sub).map(lambda p: p[0].format(f"({p[1]}) + 0 * x")),
        st.tuples(st.sampled_from(BINARY), sub, sub).map(lambda p: p[0].format(f"({p[1]})", f"({p[2]})")),
        st.tuples(cond, sub, sub).map(lambda p: f"({p[0]} ? {p[1]} : {p[2]})"),
        st.tuples(sub, sub, sub).map(lambda p: f"clip({p[0]}, {p[1]}, {p[2]})"),
    )


def bools(depth: int):
    atom = st.sampled_from(BOOL_ATOMS)
    if depth == 0:
        return atom
    sub = nums(depth - 1)
    return st.one_of(
        atom,
        st.tuples(st.sampled_from(CONDS), sub, sub).map(lambda p: p[0].format(f"({p[1]})", f"({p[2]})")),
        st.tuples(bools(depth - 1), st.sampled_from(["and", "or"]), bools(depth - 1)).map(
            lambda p: f"({p[0]} {p[1]} {p[2]})"),
        bools(depth - 1).map(lambda b: f"not ({b})"),
        sub.map(lambda v: f"missing({v})"),
    )


ENSURES = ["ensure order_kept", "ensure all_wrong_unchanged", "ensure within [0, 1]", "ensure within [-1, 2]",
           "ensure shorter_not_worse(t)", "ensure order_kept when w <= 0.5", "ensure within [0, 1] when n >= 2"]


@st.composite
def specs(draw) -> str:
    lines = [f"  {e}" for e in draw(st.lists(st.sampled_from(ENSURES), min_size=1, max_size=3, unique=True))]
    for i in range(draw(st.integers(1, 2))):
        guard = draw(st.sampled_from(["", " on reward > 0", " on b", " when w > 0", " when flag"]))
        lines.append(f"  term t{i} = {draw(nums(2))}{guard}")
    ending = draw(st.integers(0, 4))
    if ending == 0:
        lines.append(f"  result = {draw(nums(2))}")
    elif ending == 1:
        lines.append(f"  clamp >= {draw(st.sampled_from(['0', '-1', 'lo', 'w']))}")
    elif ending == 2:  # a factor scales only what a clamp at 0 has made non-negative
        lines.append("  clamp >= 0")
        lines.append(f"  factor f = {draw(st.sampled_from(['0.5', 'sigmoid(x)', 'clip(x, 0, 1)', 'clip(w, 0, 1)']))}")
    over = draw(st.sampled_from(["binary", "unit", "real"]))
    return HEAD.format(over=over) + "\n".join(lines) + "\n}\n"


def edge_cases(ir, ensure) -> list[Case]:
    """Groups of zeros, ties and extremes, at every edge of the params and of the `when` condition."""
    params = [{}, *boundary_params(ir, ensure.when)]
    rewards = {"binary": ([0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0])}.get(
        ensure.over, ([0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [0.0, 0.25]))
    out = []
    for p, r, v, u in itertools.product(params, rewards, EXTREMES, EXTREMES):
        inputs = {"b": [1.0, 0.0], "k": [v, u], "x": [v, u], "t": [abs(v), abs(u)]}
        out.append(Case(list(r), inputs, {}, dict(p)))
        out.append(Case(list(r), inputs, {}, dict(p), env_rewards=[u, v]))
    return out


def counterexample(ir, ensure, seed: int) -> Found | None:
    found, _ = search(ir, ensure, 200, seed=seed)
    if found is not None:
        return found
    for case in edge_cases(ir, ensure):
        got = evaluate(ir, ensure, case)
        if isinstance(got, Found):
            return got
    return None


EXAMPLES = int(os.environ.get("SHAPEC_SOUNDNESS_EXAMPLES", "25"))


def examples(n: int):
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


def checked(source: str, name: str):
    """The IR of `name`, or the example is dropped: a spec the checker refuses has nothing to prove."""
    try:
        return shapec.compile_str(source, backend="interpreter").ir(name)
    except shapec.ShapeError:
        assume(False)


@examples(EXAMPLES)
@given(specs(), st.integers(0, 2**16))
def test_no_group_breaks_a_proved_property(source, seed):
    ir = checked(source, "s")
    for v in analyse(ir, trials=60):
        if v.status == "proved":
            assert counterexample(ir, v.goal.ensure, seed) is None, (source, v.goal.title(), v.how)


@st.composite
def pipelines(draw) -> str:
    """A spec and a pipeline calling its shaper once or twice, with arguments at and inside the params' edges."""
    def call() -> str:
        args = {"w": draw(st.sampled_from([-2, -0.5, 0, 0.5, 2])), "n": draw(st.integers(0, 4)),
                "flag": draw(st.sampled_from(["true", "false"])), "lo": draw(st.sampled_from([0, 0.5, 3]))}
        chosen = draw(st.lists(st.sampled_from(sorted(args)), unique=True))
        return "s(" + ", ".join(f"{k}={args[k]}" for k in chosen) + ")"
    stages = [call() for _ in range(draw(st.integers(1, 2)))]
    return draw(specs()) + "pipeline p = " + " >> ".join(stages) + "\n"


@examples(EXAMPLES // 2 + 1)
@given(pipelines(), st.integers(0, 2**16))
def test_no_group_breaks_a_property_proved_of_a_pipeline_stage_at_its_arguments(source, seed):
    for v in analyse_stages(checked(source, "p"), trials=60):
        if v.status == "proved":
            goal = called_with(v.shaper, v.arguments, v.goal)
            assert counterexample(v.shaper, goal.ensure, seed) is None, (source, v.goal.title(), v.arguments, v.how)


@pytest.mark.parametrize("name", FALSE_CLAUSES)
def test_the_harness_finds_a_counterexample_to_each_false_clause_the_prover_once_proved(name):
    source, false, _ = FALSE_CLAUSES[name]
    ir = shapec.compile_str(source, backend="interpreter").ir("s")
    for ensure in ir.ensures:
        if ensure.prop in false:
            assert counterexample(ir, ensure, seed=0) is not None, ensure.prop
