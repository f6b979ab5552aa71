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
