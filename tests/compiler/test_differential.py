"""The numba kernels against the reference interpreter: every output agrees to 1e-12.

Specs: every tracked .shape file, plus specs generated from the language's constructs (a small
generator of well-typed source). Batches: ragged groups of 1 to 64 rollouts (and the odd empty
group), ties, empty masks, zero lengths, missing metadata, scalar and per-group params.
numba compilation dominates the cost, so compiled shapers are cached across examples. Parallel
kernels: test_differential_parallel.py.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import shapec
from shapec.ir.nodes import PipelineIR

from .spec_writer import EVERY_CONSTRUCT, PER_PROMPT, SpecWriter, fixed_specs, shaper_sources

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILES = sorted(ROOT.glob("shapec/stdlib/*.shape")) + sorted(ROOT.glob("examples/**/*.shape"))
TOL = 1e-12


# ------------------------------------------------------------------ random batches
def stages_of(shaper):
    return [s for s, _ in shaper.ir.stages] if isinstance(shaper.ir, PipelineIR) else [shaper.ir]


def random_param(spec, rng: random.Random):
    if spec.optional and rng.random() < 0.3:
        return None
    if spec.kind == "bool":
        return rng.random() < 0.6
    if spec.kind == "enum":
        return rng.choice(spec.members)
    if spec.kind == "band":
        a = rng.choice([0.0, 1.0, 2.0, 3.0, 5.0])
        return (a, a + rng.choice([0.5, 1.0, 4.0]), rng.choice([0.0, 0.25, 0.5, 1.0]))
    lo = spec.lo if spec.lo is not None else -2.0
    hi = spec.hi if spec.hi is not None else lo + 4.0
    if spec.kind == "int":
        lo_i = math.ceil(lo) + (1 if spec.lo_strict and float(math.ceil(lo)) == lo else 0)
        hi_i = max(lo_i, math.floor(min(hi, lo_i + 6)))
        return rng.randint(lo_i, hi_i)
    value = rng.choice([lo, hi, lo + (hi - lo) * rng.random(), round(lo + (hi - lo) * rng.random(), 1)])
    if (spec.lo_strict and value <= lo) or (spec.hi_strict and value >= hi):
        value = (lo + hi) / 2
    return float(value)


def random_band_block(rng: random.Random):
    roll = rng.random()
    if roll < 0.25:
        return None
    a = float(rng.randint(0, 5))
    return {"a": a, "b": a + rng.choice([0.5, 2.0, 4.0]), "f": rng.choice([0.0, 0.5, 1.0])}


def random_meta(spec, G: int, rng: random.Random):
    if rng.random() < 0.1:
        return None  # absent metadata: every value missing
    if spec.kind == "scalar":
        if spec.type == "band":
            return [random_band_block(rng) for _ in range(G)]
        return [None if rng.random() < 0.2 else float(rng.randint(0, 6)) for _ in range(G)]
    if spec.kind == "record":
        rows = []
        for _ in range(G):
            row = {}
            for fname, ftype in spec.fields:
                if ftype == "band":
                    if (block := random_band_block(rng)) is not None:  # a null key is a malformed band
                        row[fname] = block
                elif rng.random() < 0.8:
                    row[fname] = float(rng.randint(0, 6))
            rows.append(None if rng.random() < 0.1 else row)
        return rows
    rows = []
    for _ in range(G):
        k = rng.choice([0, 1, 2, 3, 5, 8])
        rows.append(None if rng.random() < 0.1 else {
            fname: [float(rng.randint(0, 1) if ftype == "bool" else rng.randint(0, 6)) for _ in range(k)]
            for fname, ftype in spec.fields})
    return rows


def random_call(shaper, seed: int, sizes: list[int], per_group: bool):
    """Keyword arguments for one call of shaper on a random ragged batch."""
    rng = random.Random(seed)
    G = len(sizes)
    n = sum(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    graded = rng.random() < 0.2
    rewards = [float(rng.randint(0, 1)) if not graded or rng.random() < 0.7 else rng.choice([0.5, -1.0, 2.0])
               for _ in range(n)]
    channels, metadata, params = {}, {}, {}
    for ir in stages_of(shaper):
        for name, typ in ir.inputs:
            if typ == "bool":
                channels[name] = [rng.random() < 0.3 for _ in range(n)]
            elif typ in ("int", "float"):
                channels[name] = [float(rng.randint(-3, 3)) for _ in range(n)]
            else:
                top = rng.choice([0, 2, 5, 50])  # small ranges give ties and zero lengths
                channels[name] = [float(rng.randint(0, top)) for _ in range(n)]
        for spec in ir.metas:
            metadata[spec.name] = random_meta(spec, G, rng)
    prompts = [f"prompt {g}" for g in range(G)]  # states kept per prompt read them; other shapers only check them
    if isinstance(shaper.ir, PipelineIR):
        return dict(offsets=offsets, channels=channels, metadata=metadata, prompts=prompts), rewards
    for spec in shaper.ir.params:
        if not spec.required and rng.random() < 0.5:
            continue
        if per_group and spec.kind != "band" and rng.random() < 0.6:
            params[spec.name] = [random_param(spec, rng) for _ in range(G)]
        elif per_group and spec.kind == "band" and not spec.optional and rng.random() < 0.5:
            params[spec.name] = [list(random_param(spec, rng)) for _ in range(G)]
        else:
            params[spec.name] = random_param(spec, rng)
    return dict(offsets=offsets, channels=channels, metadata=metadata, params=params, prompts=prompts), rewards


def random_state(shaper, seed: int, values: list[float]) -> dict:
    """A checkpoint of the shaper's shape: every state one of `values`, and a state kept per prompt
    holding some of the prompts random_call names (the others enter at its initial value)."""
    rng = random.Random(seed)
    return {stage: {k: {f"prompt {g}": rng.choice(values) for g in range(12) if rng.random() < 0.6}
                    if isinstance(v, dict) else rng.choice(values) for k, v in state.items()}
            for stage, state in shaper.state_dict().items()}


def outcome(shaper, rewards, kwargs):
    try:
        return shaper(rewards, **kwargs)
    except FloatingPointError as err:
        return err


def assert_close(a, b, what: str):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, what
    np.testing.assert_allclose(b, a, rtol=TOL, atol=TOL, equal_nan=True, err_msg=what)


def assert_agree(interp, kernel, rewards, kwargs, state=None):
    """Both backends, from the same state, give the same result (or the same error)."""
    if state:
        interp.load_state_dict(state)
        kernel.load_state_dict(state)
    a = outcome(interp, rewards, kwargs)
    b = outcome(kernel, rewards, kwargs)
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b), (a, b)
        return a
    assert_close(a.rewards, b.rewards, "rewards")
    assert len(a.stages) == len(b.stages)
    for sa, sb in zip(a.stages, b.stages):
        assert sa.terms.keys() == sb.terms.keys() and sa.factors.keys() == sb.factors.keys()
        for k in sa.terms:
            assert_close(sa.terms[k], sb.terms[k], f"{sa.name}: term {k}")
        for k in sa.factors:
            assert_close(sa.factors[k], sb.factors[k], f"{sa.name}: factor {k}")
        np.testing.assert_array_equal(sa.skip_codes, sb.skip_codes, err_msg=f"{sa.name}: skip codes")
        assert (sa.kept is None) == (sb.kept is None)
        if sa.kept is not None:
            np.testing.assert_array_equal(sa.kept, sb.kept, err_msg=f"{sa.name}: kept")
        assert sa.gate_codes.keys() == sb.gate_codes.keys()
        for k in sa.gate_codes:
            np.testing.assert_array_equal(sa.gate_codes[k], sb.gate_codes[k], err_msg=f"{sa.name}: gate {k}")
        assert sa.metrics.keys() == sb.metrics.keys()
        for k in sa.metrics:
            assert_close(sa.metrics[k], sb.metrics[k], f"{sa.name}: metric {k}")
    assert interp.state_dict().keys() == kernel.state_dict().keys()
    for stage, values in interp.state_dict().items():
        for k, v in values.items():
            other = kernel.state_dict()[stage][k]
            if isinstance(v, dict):  # kept per prompt
                assert v.keys() == other.keys(), f"state {stage}.{k}"
                v, other = list(v.values()), [other[key] for key in v]
            assert_close(v, other, f"state {stage}.{k}")
    if not kernel.state_dict():  # a second call of a stateful shaper would start from another state
        lean = outcome(kernel, rewards, {**kwargs, "breakdown": False})  # the kernel stores no breakdown
        assert lean.rewards.tobytes() == b.rewards.tobytes()
        for sl, sb in zip(lean.stages, b.stages):
            assert sl.terms == {} and sl.factors == {}
            assert sl.skip_codes.tobytes() == sb.skip_codes.tobytes()
            assert np.array(list(sl.metrics.values())).tobytes() == np.array(list(sb.metrics.values())).tobytes()
    return a


sizes_st = st.lists(st.one_of(st.integers(1, 8), st.integers(1, 64), st.just(0)), min_size=1, max_size=12).filter(
    lambda s: sum(s) > 0)


# ------------------------------------------------------------------ tracked .shape files
_COMPILED: dict = {}


def backends(key, build):
    """(interpreter, numba) shapers, compiled once per test session."""
    if key not in _COMPILED:
        _COMPILED[key] = (build("interpreter"), build("numba"))
    return _COMPILED[key]


FILE_TARGETS = []
for path in SPEC_FILES:
    for name in shapec.compile_file(path, backend="interpreter").names():
        FILE_TARGETS.append((path, name))


@pytest.mark.slow
@pytest.mark.parametrize("path,name", FILE_TARGETS, ids=[f"{p.stem}:{n}" for p, n in FILE_TARGETS])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes_st, seed=st.integers(0, 2**32 - 1), per_group=st.booleans())
def test_tracked_specs_agree(path, name, sizes, seed, per_group):
    interp, kernel = backends((str(path), name), lambda b: shapec.compile_file(path, backend=b)[name])
    kwargs, rewards = random_call(interp, seed, sizes, per_group)
    assert_agree(interp, kernel, rewards, kwargs, random_state(interp, seed, [0.0, 0.4, 1.0, 250.0]))


# ------------------------------------------------------------------ generated specs
FIXED = [(EVERY_CONSTRUCT, "generated_all"), (PER_PROMPT, "generated_prompts")] + [
    (source, f"generated_{k}") for k, source in enumerate(fixed_specs(5))]


@pytest.mark.parametrize("index", range(len(FIXED)))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes_st, seed=st.integers(0, 2**32 - 1), per_group=st.booleans())
def test_generated_specs_agree(index, sizes, seed, per_group):
    source, name = FIXED[index]
    interp, kernel = backends(("fixed", index), lambda b: shapec.compile_str(source, f"{name}.shape", b)[name])
    kwargs, rewards = random_call(interp, seed, sizes, per_group)
    assert_agree(interp, kernel, rewards, kwargs, random_state(interp, seed, [random.Random(seed).random(), 0.0, 3.5]))


# no shrinking: every shrink step recompiles a kernel; the failing source is printed whole anyway
@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@pytest.mark.slow
@given(source=shaper_sources(), sizes=sizes_st, seed=st.integers(0, 2**32 - 1))
def test_freshly_generated_specs_agree(source, sizes, seed):
    interp = shapec.compile_str(source, "generated.shape", "interpreter").generated
    kernel = shapec.compile_str(source, "generated.shape", "numba").generated
    for k in range(3):
        kwargs, rewards = random_call(interp, seed + k, sizes, per_group=k > 0)
        assert_agree(interp, kernel, rewards, kwargs)


def test_generated_specs_are_well_typed_and_varied():
    """The generator's output checks, and the fixed set covers the constructs it is meant to."""
    for source, _ in FIXED:
        assert shapec.check_source(source) == [], source
    drawn = [SpecWriter(random.Random(seed).choice).shaper("g") for seed in range(60)]
    for source in drawn:
        assert shapec.check_source(source) == [], source
    for construct in ("median(", "mad(", "std(", "quantile(", "nth_largest(", "minmax(", "centered(", "rank(", "position", "argmin(",
                      "argmax(", "??", " ? ", "band(", "gate ", "factor ", "clamp", "hist.", "result", "state", "drop when",
                      "per prompt", "let token_var = batch."):
        assert construct in EVERY_CONSTRUCT + PER_PROMPT or construct == "result", construct
        assert any(construct in source for source in drawn), construct
