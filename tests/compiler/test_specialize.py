"""Specialisation (compiler/specialize.py): a shaper's IR with what its params settle folded in
gives the outputs of the original, bit for bit, on every call whose params satisfy the facts;
the kernel compiles a variant per call's facts, at most three; the lowering leaves out what the
facts turn off."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec
from shapec.compiler import store
from shapec.compiler.lowering.module import emit_python, lower_module
from shapec.compiler.specialize import UNKNOWN, Facts, specialize
from shapec.runtime.params import param_arrays
from shapec.runtime.kernel import MAX_VARIANTS
from shapec.runtime.shaper import BoundShaper, CompiledShaper
from shapec.ir.nodes import Op
from tests.compiler.spec_writer import EVERY_CONSTRUCT, fixed_specs
from tests.compiler.test_differential import FILE_TARGETS, random_call, sizes_st

SWITCHED = """
shaper switched(a: float = 0, b: float = 0, on: bool = false, k: enum(x, y) = x, lim: float? , n: int = 2)
    requires binary {
  input length: tokens
  gate right = reward > 0
  let top = max(float(length) where right)
  let scale = k == "x" ? a : b
  let spread = on ? std(float(length) where right) : 0
  gate rule {
    open off when not on
    closed short when count(right) < n
    open wide when spread > 1
    closed narrow
  }
  let weight = rule ? b : 0
  term first = a on argmax(length where right) when a > 0 and count(right) >= 2
  term second = -b * float(length) / max(top, 1) on right when b != 0 and on
  term third = scale * 0.5 when weight > 0 or missing(lim)
  term fourth = spread when on and (a > 0 or b > 0)
  clamp >= 0
  factor fifth = 0.5 on right when not on and n >= 3
  factor sixth = band(length, {2, 6, 0.5}) on right and not on
  metric seconds = batch.mean(second)
  metric on_right = batch.mean(on and right)
  metric scaled = batch.sum(a * float(length) where on or right)
  metric counted = batch.mean(count(on or right) >= n)
}
"""


def _matrix(ir, arrays: dict) -> np.ndarray | None:
    names = [p.name for p in ir.params if p.kind != "band"]
    return np.stack([arrays[n] for n in names]) if names else None


def _switch_params(ir, rng: random.Random, G: int) -> dict:
    """Params that often settle facts: zeros, defaults, the same value in every group, or not."""
    out = {}
    for p in ir.params:
        roll = rng.random()
        if roll < 0.3:
            continue  # the default
        if p.kind == "bool":
            value = [rng.random() < 0.5 for _ in range(G)] if roll < 0.45 else rng.random() < 0.5
        elif p.kind == "enum":
            value = rng.choice(p.members)
        elif p.kind in ("int", "float"):
            lo = p.lo if p.lo is not None else -2.0
            choices = [0.0, -0.0, 1.0, 2.5, lo] if p.kind == "float" else [0, 1, 2, 3]
            if p.lo is not None:
                choices = [c for c in choices if c > p.lo or (c == p.lo and not p.lo_strict)] or [p.lo + 1]
            value = ([rng.choice(choices) for _ in range(G)] if roll < 0.45 else rng.choice(choices))
            if p.optional and rng.random() < 0.2:
                value = None
        else:
            continue
        out[p.name] = value
    return out


def _same(a, b, what: str) -> None:
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b), (what, a, b)
        return
    assert a.rewards.tobytes() == b.rewards.tobytes(), what
    for sa, sb in zip(a.stages, b.stages, strict=True):
        for kind in ("terms", "factors"):
            da, db = getattr(sa, kind), getattr(sb, kind)
            assert da.keys() == db.keys() and all(da[k].tobytes() == db[k].tobytes() for k in da), (what, kind)
        assert sa.skip_codes.tobytes() == sb.skip_codes.tobytes(), what
        assert all(sa.gate_codes[k].tobytes() == sb.gate_codes[k].tobytes() for k in sa.gate_codes), what
        assert np.array(list(sa.metrics.values())).tobytes() == np.array(list(sb.metrics.values())).tobytes(), what


def _call(shaper, rewards, kwargs):
    try:
        return shaper(rewards, **kwargs)
    except (FloatingPointError, ValueError) as err:
        return err


SHAPERS: dict = {}


def _targets():
    out = [(str(p), n) for p, n in FILE_TARGETS]
    out += [("generated", k) for k in range(4)] + [("every", 0), ("switched", 0)]
    return out


def _interpreter(target) -> CompiledShaper:
    if target not in SHAPERS:
        where, name = target
        if where == "generated":
            source = fixed_specs(4)[name]
            mod = shapec.compile_str(source, "generated.shape", backend="interpreter")
            SHAPERS[target] = mod[mod.names()[0]]
        elif where in ("every", "switched"):
            source = EVERY_CONSTRUCT if where == "every" else SWITCHED
            mod = shapec.compile_str(source, f"{where}.shape", backend="interpreter")
            SHAPERS[target] = mod[mod.names()[0]]
        else:
            SHAPERS[target] = shapec.compile_file(where, backend="interpreter")[name]
    return SHAPERS[target]


@pytest.mark.parametrize("target", _targets(), ids=[f"{w.split('/')[-1]}:{n}" for w, n in _targets()])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes_st, seed=st.integers(0, 2**32 - 1), switches=st.booleans())
def test_the_specialised_ir_gives_the_outputs_of_the_original(target, sizes, seed, switches):
    shaper = _interpreter(target)
    if shaper.is_pipeline:
        stages = [s for s, _ in shaper.ir.stages]
        kwargs, rewards = random_call(shaper, seed, sizes, False)
    else:
        stages = [shaper.ir]
        kwargs, rewards = random_call(shaper, seed, sizes, not switches)
        if switches:
            kwargs["params"] = _switch_params(shaper.ir, random.Random(seed), len(sizes))
    before = shaper.state_dict()  # a stateful shaper's state moves with each call
    expected = _call(shaper, rewards, kwargs)
    if isinstance(expected, Exception) and not isinstance(expected, FloatingPointError):
        return  # params the shaper refuses: nothing to specialise on
    specialised = []
    for k, ir in enumerate(stages):
        stage_params = shaper._stage_params(kwargs.get("params"))[k]
        facts = Facts(ir)
        values = facts.of(_matrix(ir, param_arrays(ir, stage_params, len(sizes))))
        specialised.append((ir, specialize(ir, facts, values)))
    twin = CompiledShaper(shaper.ir, "interpreter")
    twin.stages = [(new, args) for (_, args), (_, new) in zip(shaper.stages, specialised)]
    if before:
        twin.load_state_dict(before)
    _same(expected, _call(twin, rewards, kwargs), f"{target} seed={seed}")


def test_facts_hold_only_when_every_group_agrees():
    ir = shapec.compile_str(SWITCHED, "s.shape", backend="interpreter")["switched"].ir
    facts = Facts(ir)
    assert len(facts.conditions) >= 4  # `a > 0`, `not on`, `k == "x"`, `n >= 3`, ...
    zero = {name: len(facts.conditions) + i for i, name in enumerate(facts.zeros)}

    def of(**params):
        return facts.of(_matrix(ir, param_arrays(ir, params, 3)))

    assert of(a=0.0)[zero["a"]] is True
    assert of(a=-0.0)[zero["a"]] is UNKNOWN  # -0.0 is not +0.0: a product's sign would differ
    assert of(a=[0.0, 0.0, 1.0])[zero["a"]] is UNKNOWN
    index = {n: i for i, (_, n) in enumerate(facts.conditions)}
    a_positive = next(i for n, i in index.items() if n.op is Op.CMP and n.args[0].attr == ("param", "a"))
    assert of(a=1.0)[a_positive] == 1.0 and of(a=0.0)[a_positive] == 0.0
    assert of(a=[1.0, 0.0, 1.0])[a_positive] is UNKNOWN
    assert facts.of(None) == facts.general and facts.of(np.zeros((len(facts.rows), 0))) == facts.general


def test_an_absent_optional_param_settles_nothing_about_itself():
    ir = shapec.compile_str(SWITCHED, "s.shape", backend="interpreter")["switched"].ir
    facts = Facts(ir)
    values = facts.of(_matrix(ir, param_arrays(ir, {}, 2)))
    assert values[len(facts.conditions) + facts.zeros.index("lim")] is UNKNOWN


def test_the_lowering_leaves_out_what_the_params_turn_off():
    ir = shapec.load("nemo_rl", backend="interpreter")["length_penalty"].ir
    facts = Facts(ir)
    general = emit_python(ir)

    def variant(**params):
        values = facts.of(_matrix(ir, param_arrays(ir, params, 1)))
        return lower_module(ir, False, specialize(ir, facts, values))[0]

    default = variant()
    assert "k_sort(" in general and "srt_mad(" in general
    assert "k_sort(" not in default and "srt_mad(" not in default and "red_std(" not in default
    assert len(default.splitlines()) < len(general.splitlines()) / 2
    longest = variant(longest_total_penalty=0.2)
    assert "k_sort(" in longest and "srt_mad(" not in longest  # `top` sorts; no zMAD
    # every variant takes the general kernel's arguments
    sig = [line for line in general.splitlines() if line.startswith("SIG_s0_")]
    assert len(sig) == 1 and sig == [line for line in default.splitlines() if line.startswith("SIG_s0_")]


def compiles(monkeypatch) -> list:
    """The specialised IR of every kernel compiled from now on (None: the general kernel)."""
    built = []
    real = store.kernel
    monkeypatch.setattr(store, "kernel", lambda ir, parallel, facts, specialized: built.append(specialized) or real(
        ir, parallel, facts, specialized))
    return built


@pytest.mark.slow
def test_a_kernel_compiles_at_most_three_variants(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path))
    shaper = shapec.compile_str(SWITCHED, "s.shape", backend="numba")["switched"]
    interp = shapec.compile_str(SWITCHED, "s.shape", backend="interpreter")["switched"]
    kernel = shaper._kernels[0]
    built = compiles(monkeypatch)
    rewards = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    channels = {"length": [3.0, 5.0, 8.0, 2.0, 9.0, 4.0]}
    calls = [{}, {}, {"a": 0.5}, {"a": 0.5}, {}, {"b": 1.0, "on": True}, {"a": 2.0, "on": True, "n": 3},
             {"k": "y", "a": [0.0, 1.0]}, {}]
    for k, params in enumerate(calls):
        got = shaper(rewards, group_size=3, channels=channels, params=params)
        _same(interp(rewards, group_size=3, channels=channels, params=params), got, f"call {k}: {params}")
    assert len(built) == MAX_VARIANTS == len(kernel.variants)
    assert built[0] is not None and built[-1] is None  # the first call's facts ... the general kernel
    # the second is what the first two calls' params share: `a` is no longer settled, `on` still is
    second = list(kernel.variants)[1]
    assert UNKNOWN in second and second != kernel.facts.general and second.count(UNKNOWN) < len(second)


def test_prepare_compiles_before_the_first_call(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path))
    shaper = shapec.compile_str(SWITCHED, "s.shape", backend="numba")["switched"]
    assert shaper._kernels[0].variants == {}
    bound = shaper.prepare({"a": 0.5})
    assert isinstance(bound, BoundShaper) and bound.shaper is shaper
    (key,) = shaper._kernels[0].variants
    shaper([1.0, 1.0], group_size=2, channels={"length": [1.0, 2.0]}, params={"a": 0.5})
    assert list(shaper._kernels[0].variants) == [key]  # the call found it
    interp = shapec.compile_str(SWITCHED, "s.shape", backend="interpreter")["switched"]
    assert interp.prepare({"a": 0.5}).shaper is interp


def test_a_negative_zero_param_is_not_the_remembered_positive_one():
    ir = shapec.compile_str(SWITCHED, "s.shape", backend="interpreter")["switched"].ir
    assert not np.signbit(param_arrays(ir, {"a": 0.0}, 2)["a"]).any()
    assert np.signbit(param_arrays(ir, {"a": -0.0}, 2)["a"]).all()
    assert np.signbit(param_arrays(ir, {"a": [0.0, -0.0]}, 2)["a"]).tolist() == [False, True]


def test_threads_on_a_first_call_compile_one_kernel(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("SHAPEC_CACHE_DIR", str(tmp_path))
    shaper = shapec.compile_str(SWITCHED, "s.shape", backend="numba")["switched"]
    built = compiles(monkeypatch)
    call = dict(group_size=2, channels={"length": [3.0, 5.0]}, params={"a": 0.5})
    results = []
    threads = [threading.Thread(target=lambda: results.append(shaper([1.0, 1.0], **call).rewards.tobytes()))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and len(results) == 4 and len(set(results)) == 1
