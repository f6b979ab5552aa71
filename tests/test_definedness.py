"""Definedness-optimised kernels against the fully three-valued lowering, bit for bit.

The lowering writes a condition that is only tested (a `when`, skip, gate rule, selection mask or
guard) as native two-valued code where its operands cannot hold a value other than 0, 1 or
missing (lowering/conditions.py). Switching that rewrite off (`conditions.TWO_VALUED = False`)
gives the plain three-valued lowering, every condition through the helpers. Both are compiled
with numba and run on the same random batches: missing and absent metadata, empty selections
(masks that select nothing, empty groups), absent optional params, per-group params, and bool
metadata holding numbers other than 0 and 1 (which the checker accepts, and which only the
helpers read right). Every
output must be identical to the byte, not just close: the rewrite is exact, not an approximation.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec
from shapec.compiler.lowering import conditions

from .test_differential import EVERY_CONSTRUCT, fixed_specs, random_call, sizes_st

NEMO_RL = (shapec.load("nemo_rl", backend="interpreter").length_penalty.ir.filename, "length_penalty")
# bool metadata (a scalar, a record field, a list field) inside and/or/not, where the rewrite must
# fall back to the helpers: only a number other than 0 and 1 tells the two forms apart
ODD_BOOLS = """
shaper odd_bools(w: float = 0.5, cap: float?, on: bool = true) requires binary produces real {
  input x: tokens
  input flag: bool
  meta ok: bool
  meta lim: float
  meta rec: {good: bool, cap: float}
  meta hist: list(ok: bool, length: tokens)
  skip off unless on and not ok
  gate right = reward > 0
  gate keen = (ok or rec.good) and not (lim > 3)
  let typical = median(hist.length where hist.ok and not rec.good) ?? median(x)
  term a = w on right when keen and (cap ?? 1) > 0
  term b = -w on argmax(x where right and (ok or flag)) when not (rec.good and ok) or count(hist.ok or rec.good) > 1
  term c = -0.25 on right and x > typical when not missing(typical) and (rec.good or not ok)
  clamp >= 0
  metric keen_rate = batch.mean(keen)
}
"""
SOURCES = [("generated_all", EVERY_CONSTRUCT), ("odd_bools", ODD_BOOLS), *((f"generated_{i}", s) for i, s in enumerate(fixed_specs(1)))]
_BOTH: dict = {}


def both(key: str):
    """(definedness-optimised, fully three-valued) numba shapers, compiled once per session."""
    if key not in _BOTH:
        pairs = []
        for two_valued in (True, False):
            conditions.TWO_VALUED = two_valued
            try:
                if key == "nemo_rl":
                    pairs.append(shapec.compile_file(NEMO_RL[0], backend="numba")[NEMO_RL[1]])
                else:
                    source = dict(SOURCES)[key]
                    pairs.append(shapec.compile_str(source, f"{key}.shape", "numba")[key])
            finally:
                conditions.TWO_VALUED = True
        _BOTH[key] = tuple(pairs)
    return _BOTH[key]


def outputs(result) -> list[bytes]:
    """Every array a call returns, as bytes (NaN payloads included)."""
    out = [np.asarray(result.rewards, np.float64).tobytes()]
    for st_ in result.stages:
        out.append(st_.skip_codes.tobytes())
        out += [np.asarray(v, np.float64).tobytes() for _, v in sorted(st_.terms.items())]
        out += [np.asarray(v, np.float64).tobytes() for _, v in sorted(st_.factors.items())]
        out += [np.asarray(v).tobytes() for _, v in sorted(st_.gate_codes.items())]
        out += [np.float64(v).tobytes() for _, v in sorted(st_.metrics.items())]
    return out


def test_the_switch_changes_the_generated_code():
    """The comparison means something: the optimised module has fewer helper calls than the other."""
    optimised, three_valued = (s._kernels[0].fn for s in both("nemo_rl"))
    assert optimised is not three_valued
    from shapec.compiler.lowering import _lower_all

    ir = both("nemo_rl")[0].ir
    text_two = _lower_all(ir)[0]
    conditions.TWO_VALUED = False
    try:
        text_three = _lower_all(ir)[0]
    finally:
        conditions.TWO_VALUED = True
    assert text_two.count("k_and(") < text_three.count("k_and(")
    assert text_two.count("k_cmp(") < text_three.count("k_cmp(")


@pytest.mark.parametrize("key", ["nemo_rl", *dict(SOURCES)])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes_st, seed=st.integers(0, 2**32 - 1), per_group=st.booleans())
def test_optimised_and_three_valued_kernels_agree(key, sizes, seed, per_group):
    optimised, three_valued = both(key)
    kwargs, rewards = random_call(optimised, seed, sizes, per_group)
    odd_bools(optimised.ir, kwargs["metadata"], random.Random(seed))
    results = []
    for shaper in (optimised, three_valued):
        state = {s: {k: random.Random(seed).random() for k in v} for s, v in shaper.state_dict().items()}
        if state:
            shaper.load_state_dict(state)
        try:
            results.append(outputs(shaper(rewards, **kwargs)))
        except (FloatingPointError, ValueError) as err:
            results.append(f"{type(err).__name__}: {err}")
    assert results[0] == results[1]



ODD = [0.0, 1.0, 2.0, 0.5, -1.0, None]


def odd_bools(ir, metadata: dict, rng: random.Random) -> None:
    """Bool metadata values replaced, some of them, by other numbers or missing ones."""
    pick = lambda v: rng.choice(ODD) if rng.random() < 0.5 else v  # noqa: E731
    for spec in ir.metas:
        rows = metadata.get(spec.name)
        if rows is None:
            continue
        if spec.kind == "scalar" and spec.type == "bool":
            metadata[spec.name] = [pick(v) for v in rows]
            continue
        bools = [f for f, t in getattr(spec, "fields", ()) if t == "bool"]
        for row in rows:
            for f in bools:
                if row is not None and f in row:
                    if spec.kind == "list":  # items are numbers (a missing item is an error)
                        row[f] = [x if (y := pick(x)) is None else y for x in row[f]]
                    else:
                        row[f] = pick(row[f])
