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

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec
from shapec.compiler import store
from shapec.compiler.lowering import conditions
from shapec.ir.nodes import Op

from .spec_writer import EVERY_CONSTRUCT, fixed_specs
from .test_differential import random_call, random_state, sizes_st

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
        identity = store.shapec_identity
        for two_valued in (True, False):
            conditions.TWO_VALUED = two_valued
            if not two_valued:  # the switch is not part of the store's key: give these kernels keys of their own
                store.shapec_identity = lambda: identity() + "\0three-valued"
            try:
                if key == "nemo_rl":
                    pairs.append(shapec.compile_file(NEMO_RL[0], backend="numba")[NEMO_RL[1]])
                else:
                    source = dict(SOURCES)[key]
                    pairs.append(shapec.compile_str(source, f"{key}.shape", "numba")[key])
                if not two_valued:  # its general kernel, lowered now: it fits every call, so no other is built
                    pairs[-1]._kernels[0].for_params(None)
            finally:
                conditions.TWO_VALUED = True
                store.shapec_identity = identity
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
    optimised, three_valued = both("nemo_rl")
    optimised.prepare()  # for its default params
    assert len(three_valued._kernels[0].variants) == 1
    assert three_valued._kernels[0].for_params(None) not in optimised._kernels[0].variants.values()
    from shapec.compiler.lowering.module import lower_module

    ir = both("nemo_rl")[0].ir
    text_two = lower_module(ir)[0]
    conditions.TWO_VALUED = False
    try:
        text_three = lower_module(ir)[0]
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
        state = random_state(shaper, seed, [random.Random(seed).random(), 0.0, 2.5])
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


EXTREMES = [0.0, -0.0, 1.0, 1e-308, 1e308, -1e308, 3.0]
# one let per rule of the arithmetic: which can overflow, and which can then be inf - inf or 0 * inf
OVERFLOW = """
shaper overflow(k: float = 2.0, opt: float?) requires binary produces real {
  input x: float
  input y: float
  meta m: float
  let big = x * y
  let twice = big + x
  let cancel = big - x * y
  let zero_inf = big * 0
  let halves = big / 2
  let grown = exp(x) - exp(y)
  let held = (m ?? 1) * x
  let chosen = (opt ?? k) + x
  let picked = x > y ? big : x
  let tested = big > x and y < 2
  let fit = sigmoid(big)
  term t = k on tested when (opt ?? 1) > 0
  clamp >= 0
}
"""
SOUNDNESS = {**dict(SOURCES), "overflow": OVERFLOW}


def extreme_channels(ir, channels: dict, rng: random.Random) -> None:
    """Some channel values replaced by ones that overflow (1e308 * 2) or cancel (1e308 - 1e308)."""
    for name, typ in ir.inputs:
        if typ == "bool":
            continue
        values = [float(v) for v in channels[name]]
        for i in range(len(values)):
            if rng.random() < 0.4:
                v = rng.choice(EXTREMES)
                values[i] = abs(v) if typ not in ("int", "float") else (float(round(v)) if typ == "int" else v)
        channels[name] = values


@pytest.mark.parametrize("key", ["nemo_rl", *SOUNDNESS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes_st, seed=st.integers(0, 2**32 - 1), per_group=st.booleans())
def test_values_the_analysis_calls_defined_are_never_missing(key, sizes, seed, per_group):
    """lowering/definedness.py is sound: on batches with missing metadata, absent optional params,
    empty selections and values that overflow or cancel, no let, gate or channel it calls never
    missing holds a NaN in the interpreter, and none it calls finite holds an infinity."""
    from shapec.compiler.lowering.definedness import FINITE, NUMBER, Definedness
    from shapec.runtime.binder import make_batch
    from shapec.runtime.interp import Interpreter
    from shapec.runtime.params import param_arrays

    source = open(NEMO_RL[0], encoding="utf-8").read() if key == "nemo_rl" else SOUNDNESS[key]
    shaper = shapec.compile_str(source, f"{key}.shape", "interpreter")[NEMO_RL[1] if key == "nemo_rl" else key]
    ir = shaper.ir
    rng = random.Random(seed)
    kwargs, rewards = random_call(shaper, seed, sizes, per_group)
    odd_bools(ir, kwargs["metadata"], rng)
    extreme_channels(ir, kwargs["channels"], rng)
    batch = make_batch(ir, rewards, offsets=kwargs["offsets"], channels=kwargs["channels"],
                       metadata=kwargs["metadata"])
    interp = Interpreter(ir, batch, param_arrays(ir, kwargs["params"], batch.groups),
                         {name: rng.random() for name, _ in ir.states},
                         prompt_state={name: np.array([rng.random() for _ in range(batch.groups)])
                                       for name, _, _ in ir.prompt_states})
    with np.errstate(all="ignore"):
        try:
            interp.run()
        except FloatingPointError:
            pass  # a non-finite reward: the values computed up to there are still checked
    levels = Definedness(ir).var_levels()
    checked = 0
    for name, level in levels.items():
        if name not in interp.env or level < NUMBER or name in (*ir.terms, *ir.factors):
            continue
        values = np.asarray(interp.env[name], dtype=np.float64)
        assert not np.isnan(values).any(), (name, level)
        if level == FINITE:
            assert np.isfinite(values).all(), (name, values)
        checked += 1
    assert checked or not any(level >= NUMBER for level in levels.values())


def _definedness_trees():
    """Random expressions over an input (never missing), metadata (maybe missing) and literals,
    with the arithmetic, logic, conditionals, fallbacks and `missing` the analysis reasons about."""
    from shapec.ir.nodes import ROLLOUT, Node, Type, TypeKind

    from .test_conditions import LEAVES

    nums = st.sampled_from([LEAVES["x"], LEAVES["y"], Node(Op.CONST, (), Type(TypeKind.NUM), 2.0),
                            Node(Op.CONST, (), Type(TypeKind.NUM), -0.0)])
    bools = st.sampled_from([LEAVES["flag"], Node(Op.CONST, (), Type(TypeKind.BOOL), 1.0)])

    def num_tree(kids):
        return st.one_of(
            st.builds(lambda op, a, b: Node(Op.BIN, (a, b), Type(TypeKind.NUM, ROLLOUT), op),
                      st.sampled_from("+-*/"), kids, kids),
            st.builds(lambda a, b: Node(Op.FALLBACK, (a, b), Type(TypeKind.NUM, ROLLOUT)), kids, kids),
            st.builds(lambda c, a, b: Node(Op.COND, (c, a, b), Type(TypeKind.NUM, ROLLOUT)), bools, kids, kids),
            st.builds(lambda fn, a: Node(Op.CALL, (a,), Type(TypeKind.NUM, ROLLOUT), fn), st.sampled_from(["abs", "exp"]),
                      kids))

    values = st.recursive(nums, num_tree, max_leaves=6)
    cmp = st.builds(lambda op, a, b: Node(Op.CMP, (a, b), Type(TypeKind.BOOL, ROLLOUT), op),
                    st.sampled_from(["==", "!=", "<", ">="]), values, values)
    logic = st.recursive(st.one_of(bools, cmp, st.builds(
        lambda a: Node(Op.CALL, (a,), Type(TypeKind.BOOL, ROLLOUT), "missing"), values)), lambda kids: st.builds(
        lambda op, a, b: Node(op, (a, b), Type(TypeKind.BOOL, ROLLOUT)), st.sampled_from([Op.AND, Op.OR]), kids, kids),
        max_leaves=6)
    return st.one_of(values, logic)


@settings(max_examples=400, deadline=None)
@given(tree=_definedness_trees(), flag=st.sampled_from([0.0, 1.0]),
       x=st.sampled_from([0.0, -0.0, 1.0, 2.0, 0.5, -3.0, 1e308, -1e308]),
       y=st.sampled_from([math.nan, 0.0, 1.0, 2.0, -1e308, 1e308]))
def test_the_forms_for_present_values_are_the_helpers(tree, flag, x, y):
    """Where an operand cannot be missing, ex() writes a comparison, logic, a conditional or a
    fallback without its helper (and `missing(x)` as 0): on every value the batch layer lets
    the leaves hold, the result is the helper form's, bit for bit."""
    from shapec.compiler.lowering import numba_helpers
    from shapec.compiler.lowering.definedness import Definedness
    from shapec.compiler.lowering.emitter import Scope

    from .test_conditions import Lowering

    env = {name: getattr(numba_helpers, name) for name in dir(numba_helpers) if name.startswith("k_")}
    f64 = np.float64  # IEEE arithmetic, as numba's error_model="numpy" (0/0 is NaN, not an error)
    env.update(f64=f64, isnan=math.isnan, nan=f64(math.nan), np=np, i=0, g=0, s=0, in_flag=[f64(flag)],
               in_x=[f64(x)],
               m_odd=[f64(0.0)], m_y=[f64(y)])
    results = []
    for low in (Lowering(Definedness(None)), Lowering()):
        with np.errstate(all="ignore"):
            code = low.ex(tree, "rollout", Scope())
            for name, part in low.pending.items():
                env[name] = eval(as_float64(part), env)
            results.append(np.float64(eval(as_float64(code), env)).tobytes())
    assert results[0] == results[1]


def as_float64(code: str) -> str:
    """Generated code with its number literals as float64, so Python divides as numba does."""
    import re

    return re.sub(r"(?<![\w.])(\d+\.\d*(?:e[-+]?\d+)?)", r"f64(\1)", code)
