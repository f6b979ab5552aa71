"""For random specs: whatever the analysis proves, random groups never break; whatever it refutes, the
counterexample does (on the reference interpreter)."""

import random

import pytest

import shapec
from shapec.analysis.prove import analyse
from shapec.analysis.search import Found, evaluate, search

TERMS = ["{c} * float(t) / 100", "{c}", "{c} * min(float(t) / 100, 1)", "{c} * (t > {n} ? 1 : 0)",
         "{c} * float(t) / max(float(max(t where reward > 0)), 1)"]
MASKS = ["", " on reward > 0", " on reward == 0", " when w > 0", " on reward > 0 when w >= 0"]


def random_spec(rng: random.Random) -> str:
    lines = ["shaper s(w: float in [-2, 2] = 1) requires binary produces real {", "  input t: tokens"]
    for i in range(rng.randint(1, 3)):
        body = rng.choice(TERMS).format(c=rng.choice(["w", "-w", "0.5", "-0.5", "-1"]), n=rng.choice([10, 100]))
        lines.append(f"  term t{i} = {body}{rng.choice(MASKS)}")
    if rng.random() < 0.5:
        lines.append("  clamp >= 0")
    return "\n".join(lines + ["}"]) + "\n"


@pytest.mark.parametrize("seed", range(12))
def test_verdicts_agree_with_random_groups(seed):
    src = random_spec(random.Random(seed))
    ir = shapec.compile_str(src, backend="interpreter").ir("s")
    decided = 0
    for v in analyse(ir, trials=150):
        if v.status == "proved":
            found, stats = search(ir, v.goal.ensure, 300, seed=seed + 1000)
            assert found is None, (src, v.goal.title(), found)
            assert stats.trials == 300
            decided += 1
        elif v.status == "refuted":
            again = evaluate(ir, v.goal.ensure, v.found.case)
            assert isinstance(again, Found) and again.shaped == v.found.shaped, (src, v.goal.title())
            decided += 1
    assert decided >= 2, src


GUARDED = ["{c} * float(t) / 100", "{c}", "t > {n} ? {c} : -{c}", "reward * {c}", "{c} * mean(reward)",
           "-{c} * (reward - mean(reward))", "{c} * float(t) / max(float(max(t where reward > 0)), 1)"]
GUARDS = ["", " on reward > 0", " on reward == 0", " when w > 0", " when w < 0", " on reward >= 1",
          " on not (reward > 0)", " on argmin(t where reward > 0)", " when count(reward > 0) >= 2"]


def guarded_spec(rng: random.Random) -> str:
    lines = [f"shaper s(w: float{rng.choice(['', ' >= 0', ' in [-2, 2]'])} = 1) requires "
             f"{rng.choice(['binary', 'unit', 'real'])} produces real {{", "  input t: tokens"]
    for i in range(rng.randint(1, 3)):
        body = rng.choice(GUARDED).format(c=rng.choice(["w", "-w", "0.5", "-1", "2"]), n=rng.choice([10, 100]))
        lines.append(f"  term t{i} = {body}{rng.choice(GUARDS)}")
    if rng.random() < 0.5:
        lines.append(f"  clamp >= {rng.choice(['0', '-1', 'w', '0.5'])}{rng.choice(['', ' on reward > 0'])}")
    if rng.random() < 0.4:
        factor = rng.choice(["0.5", "min(1, 100 / max(float(t), 1))"])
        lines.append(f"  factor f = {factor}{rng.choice(['', ' on reward > 0'])}")
    return "\n".join(lines + ["}"]) + "\n"


def decided_spec(rng: random.Random):
    """The first generated spec the checker accepts and the static pass decides a clause of."""
    from shapec.analysis.properties import goals
    from shapec.analysis.static import decide
    from shapec.ir.nodes import Ensure

    for _ in range(200):
        try:
            ir = shapec.compile_str(guarded_spec(rng), backend="interpreter").ir("s")
        except shapec.ShapeError:  # e.g. a factor that may scale a negative reward
            continue
        clauses = [g.ensure for g in goals(ir)] + [Ensure("within", ir.requires, 0.0, 1.0),
                                                   Ensure("order_kept", "binary")]
        decided = [(e, got) for e in clauses if (got := decide(ir, e)) is not None]
        if decided:
            return ir, decided
    raise AssertionError("no generated spec was decided statically")


@pytest.mark.parametrize("seed", range(16))
def test_static_pass_agrees_with_random_groups(seed):
    """What intervals prove, no random group breaks; what they refute, every random group breaks."""
    from shapec.analysis.search import _trial_case

    rng = random.Random(seed)
    ir, decided = decided_spec(rng)
    for e, (status, how) in decided:
        if status == "proved":
            assert search(ir, e, 200, seed=seed)[0] is None, (e, how)
            continue
        cases = [_trial_case(ir, e, rng, None) for _ in range(60)]
        relevant = [c for c in cases if e.prop != "order_kept" or len(set(c.rewards)) == 2]
        assert relevant and all(isinstance(evaluate(ir, e, c), Found) for c in relevant), (e, how)
