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
    if isinstance(shaper.ir, PipelineIR):
        return dict(offsets=offsets, channels=channels, metadata=metadata), rewards
    for spec in shaper.ir.params:
        if not spec.required and rng.random() < 0.5:
            continue
        if per_group and spec.kind != "band" and rng.random() < 0.6:
            params[spec.name] = [random_param(spec, rng) for _ in range(G)]
        elif per_group and spec.kind == "band" and not spec.optional and rng.random() < 0.5:
            params[spec.name] = [list(random_param(spec, rng)) for _ in range(G)]
        else:
            params[spec.name] = random_param(spec, rng)
    return dict(offsets=offsets, channels=channels, metadata=metadata, params=params), rewards


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
            assert_close(v, kernel.state_dict()[stage][k], f"state {stage}.{k}")
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
    state = {stage: {k: random.Random(seed).choice([0.0, 0.4, 1.0]) for k in values}
             for stage, values in interp.state_dict().items()}
    assert_agree(interp, kernel, rewards, kwargs, state)


# ------------------------------------------------------------------ generated specs
class SpecWriter:
    """Writes a random well-typed shaper from the language's constructs.

    `pick(options)` and `coin()` come from hypothesis (so failures shrink) or from a seeded
    random.Random (for the fixed set compiled once). Every rollout expression is unitless
    (lengths enter through float(...)); terms are clipped so most batches stay finite.
    """

    def __init__(self, pick, depth: int = 2):
        self.pick = pick
        self.depth = depth
        self.lets_r: list[str] = []  # rollout-level numeric lets
        self.lets_g: list[str] = []  # group-level numeric lets
        self.masks: list[str] = ["right", "flag", "fx > 0"]
        self.gates_g: list[str] = []
        self.terms: list[str] = []

    def coin(self, p_true: float = 0.5) -> bool:
        return self.pick([True, False]) if p_true == 0.5 else self.pick([True] * int(p_true * 10) + [False] * (10 - int(p_true * 10)))

    def lit(self) -> str:
        return self.pick(["0", "1", "2", "0.5", "3", "1.5", "0.25"])

    # --- expressions (strict: certainly rollout-level, as reductions, masks and `on` need)
    def rollout(self, d: int, strict: bool = True) -> str:
        leaves = ["fx", "fy", "ft", "score", "reward", "env_reward"] + self.lets_r
        if not strict:
            leaves += [self.lit(), "c1", "c2"]
        if d <= 0:
            return self.pick(leaves)
        kind = self.pick(["leaf", "bin", "bin", "neg", "call", "cond", "fallback", "group", "minmax", "centered",
                          "rank", "position", "band", "pow"])
        if kind == "leaf":
            return self.pick(leaves)
        if kind == "bin":
            a, b = self.rollout(d - 1), self.rollout(d - 1, strict=False)
            a, b = (a, b) if self.coin() else (b, a)
            return f"({a} {self.pick(['+', '-', '*', '/'])} {b})"
        if kind == "neg":
            return f"-{self.rollout(d - 1, strict)}"
        if kind == "call":
            fn = self.pick(["abs", "sqrt", "log", "sigmoid", "cos", "int", "min", "max", "clip", "exp"])
            if fn in ("min", "max"):
                return f"{fn}({self.rollout(d - 1)}, {self.rollout(d - 1, strict=False)})"
            if fn == "clip":
                return f"clip({self.rollout(d - 1)}, 0, {self.lit()})"
            if fn == "exp":
                return f"exp(-abs({self.rollout(d - 1)}))"
            return f"{fn}({self.rollout(d - 1)})"
        if kind == "cond":
            return f"({self.rollout_bool(d - 1, strict=False)} ? {self.rollout(d - 1)} : {self.rollout(d - 1, strict=False)})"
        if kind == "fallback":
            return f"({self.rollout(d - 1)} ?? {self.rollout(d - 1, strict=False)})"
        if kind == "group" and not strict:
            return self.group(d - 1)
        if kind in ("minmax", "centered", "rank"):
            return f"{kind}({self.rollout(d - 1)} where {self.rollout_bool(d - 1)})"
        if kind == "position":
            return "position"
        if kind == "band":
            return f"band({self.rollout(d - 1)}, {self.band()})"
        return f"({self.rollout(d - 1)} ** {self.pick(['2', '0.5', '-1', 'c2'])})"

    def group(self, d: int) -> str:
        leaves = ["group_size", "c1", "c2", "lim", "(lim ?? c1)", "prof.cap", "float(count(right))"] + self.lets_g
        if d <= 0:
            return self.pick(leaves)
        kind = self.pick(["leaf", "reduce", "reduce", "reduce", "extra", "items", "bin", "bandfield", "cond"])
        if kind == "leaf":
            return self.pick(leaves)
        if kind == "reduce":
            op = self.pick(["sum", "mean", "median", "mad", "std", "min", "max"])
            return f"{op}({self.rollout(d - 1)} where {self.rollout_bool(d - 1)})"
        if kind == "extra":
            if self.coin():
                return f"quantile({self.rollout(d - 1)} where {self.rollout_bool(d - 1)}, {self.pick(['0', '0.25', '0.5', '1', 'q', '1.5'])})"
            return f"nth_largest({self.rollout(d - 1)} where {self.rollout_bool(d - 1)}, {self.pick(['0', '1', '2', 'int(c2)', '-1'])})"
        if kind == "items":
            op = self.pick(["mean", "count", "max", "std", "median", "sum"])
            if op == "count":
                return "float(count(hist.ok))"
            return f"{op}(hist.length where {self.pick(['hist.ok', 'hist.length > 1', 'not hist.ok'])})"
        if kind == "bin":
            return f"({self.group(d - 1)} {self.pick(['+', '-', '*', '/'])} {self.group(d - 1)})"
        if kind == "bandfield":
            # a scalar band meta's fields are reached through an expression; a constant literal's
            # fields crash the interpreter's lift (reported), so fields come from per-group bands only
            band = self.pick(["(pb ?? ob)", "tb", "(ob ?? tb)", "(prof.bd ?? ob ?? tb)", "{c2, c2 + 2, 0.25}"])
            return f"{band}.{self.pick(['a', 'b', 'f'])}"
        return f"({self.group_bool(d - 1)} ? {self.group(d - 1)} : {self.group(d - 1)})"

    def rollout_bool(self, d: int, strict: bool = True) -> str:
        leaves = list(self.masks) + ([] if strict else self.gates_g + ["true"])
        if d <= 0 or self.coin():
            return self.pick(leaves)
        kind = self.pick(["cmp", "and", "or", "not", "missing"])
        if kind == "cmp":
            return f"({self.rollout(d - 1)} {self.pick(['<', '<=', '>', '>=', '==', '!='])} {self.rollout(d - 1, strict=False)})"
        if kind in ("and", "or"):
            return f"({self.rollout_bool(d - 1)} {kind} {self.rollout_bool(d - 1, strict=False)})"
        if kind == "not":
            return f"not {self.rollout_bool(d - 1, strict)}"
        return f"{self.pick(['missing', 'present'])}({self.rollout(d - 1)})"

    def group_bool(self, d: int) -> str:
        kind = self.pick(["any", "all", "count", "cmp", "gate", "mode"])
        if kind in ("any", "all"):
            return f"{kind}({self.rollout_bool(d)})"
        if kind == "count":
            return f"count({self.rollout_bool(d)}) >= {self.pick(['1', '2', '3'])}"
        if kind == "gate" and self.gates_g:
            return self.pick(self.gates_g)
        if kind == "mode":
            return f'mode == "{self.pick(["up", "down"])}"'
        return f"({self.group(d)} {self.pick(['<', '>', '>=', '=='])} {self.group(d)})"

    def band(self) -> str:
        return self.pick(["pb", "tb", "(pb ?? tb)", "(ob ?? tb)", "(prof.bd ?? ob ?? tb)", "{1, 3, 0.5}",
                          "{c2, c2 + 2, 0.25}", "(any(flag) ? pb : tb)"])

    # --- the shaper
    def shaper(self, name: str) -> str:
        d = self.depth
        real = self.coin(0.3)
        body = [
            "input x: tokens", "input y: tokens", "input flag: bool", "input score: float",
            "meta lim: float", "meta pb: band", "meta prof: {cap: float, bd: band}",
            "meta hist: list(ok: bool, length: float)",
        ]
        if self.coin(0.3):
            body.append("skip off unless enabled")
        if self.coin(0.3):
            body.append(f"skip flagged when {self.pick(['any(flag)', 'all(flag)', 'count(flag) >= 2'])}")
        body += ["channel tot = x + y", "channel fx = float(x)", "channel fy = float(y)", "channel ft = float(tot)",
                 "gate right = reward > 0"]
        if self.coin(0.4):
            body += ["let acc = batch.mean(right)",
                     "state best: float = 0 update present(acc) ? max(best, acc) : best",
                     "gate stable = acc >= best - q"]
            self.gates_g.append("stable")
        for k in range(self.pick([1, 2, 3])):
            if self.coin():
                body.append(f"let lg{k} = {self.group(d)}")
                self.lets_g.append(f"lg{k}")
            else:
                body.append(f"let lr{k} = {self.rollout(d)}")
                self.lets_r.append(f"lr{k}")
        if self.coin():
            body.append(f"gate gg = {self.group_bool(d - 1)}")
            self.gates_g.append("gg")
        if self.coin():
            rules = [f"closed none when count({self.rollout_bool(1)}) == 0",
                     f"open high when {self.group_bool(d - 1)}", "closed low"]
            body.append("gate gr { " + " ".join(rules[: self.pick([1, 2, 3])]) + " }")
            self.gates_g.append("gr")
        for k in range(self.pick([1, 2, 3])):
            on = self.pick(["", " on right", f" on {self.rollout_bool(1)}",
                            f" on argmin({self.rollout(1)} where {self.rollout_bool(1)})",
                            f" on argmax({self.rollout(1)} where {self.rollout_bool(1)})"])
            when = self.pick(["", f" when {self.group_bool(1)}", f" when {self.rollout_bool(1, strict=False)}"])
            value = self.rollout(d, strict=False) if not self.terms or self.coin() else f"{self.terms[-1]} * 0.5"
            body.append(f"term t{k} = clip({value}, -{self.lit()}, {self.lit()}){on}{when}")
            self.terms.append(f"t{k}")
        if real and self.coin():
            body.append(f"result = clip({self.rollout(d)} + t0, -3, 3)")
        else:
            if not real or self.coin():
                body.append("clamp >= 0")
            if self.coin():
                body.append(f"clamp >= clip({self.group(1)}, 0, 1) on {self.rollout_bool(1)}")
            if not real:
                for k in range(self.pick([0, 1, 2])):
                    expr = self.pick([f"band(ft, {self.band()})", f"clip({self.rollout(d)}, 0, 1)",
                                      f"max(1, ft / max(1, {self.group(1)})) ** (-c2)", f"sigmoid({self.rollout(1)})"])
                    body.append(f"factor f{k} = {expr}{self.pick(['', ' on right', ' when ' + self.group_bool(1)])}")
        if self.coin(0.3):
            body.append(f"drop when {self.rollout_bool(d - 1, strict=False)}")
        body += [
            "metric delta = batch.mean(shaped - reward)",
            f"metric grouped = batch.mean({self.group(1)} where {self.rollout_bool(1)})",
            f"metric first_term = batch.sum({self.terms[0]})",
            'metric skipped_frac = batch.mean(skipped("non_binary"))',
            f"metric top = batch.max({self.rollout(1)})",
        ]
        params = ("c1: float = 1, c2: float >= 0 = 0.5, q: float in [0, 1] = 0.25, enabled: bool = true, "
                  "mode: enum(up, down) = up, tb: band = {2, 6, 0.5}, ob: band?")
        contract = "produces real" if real else "requires binary produces real"
        return f"shaper {name}({params}) {contract} {{\n  " + "\n  ".join(body) + "\n}\n"


@st.composite
def shaper_sources(draw, depth: int = 2):
    return SpecWriter(lambda options: draw(st.sampled_from(options)), depth).shaper("generated")


def fixed_specs(count: int) -> list[str]:
    """A fixed set of generated specs (seeded), compiled once and reused by many batches."""
    out = []
    for seed in range(count):
        rng = random.Random(1000 + seed)
        out.append(SpecWriter(rng.choice, depth=2 + seed % 2).shaper(f"generated_{seed}"))
    return out


# Every reduction and combinator at least once, whatever the seeds above happen to draw.
EVERY_CONSTRUCT = """
shaper generated_all(c1: float = 1, c2: float >= 0 = 0.5, q: float in [0, 1] = 0.25, enabled: bool = true,
                     mode: enum(up, down) = up, tb: band = {2, 6, 0.5}, ob: band?) requires binary produces real {
  input x: tokens
  input y: tokens
  input flag: bool
  input score: float
  meta lim: float
  meta pb: band
  meta prof: {cap: float, bd: band}
  meta hist: list(ok: bool, length: float)
  skip off unless enabled
  skip flagged when count(flag) >= 3
  channel tot = x + y
  channel ft = float(tot)
  gate right = reward > 0
  let acc = batch.mean(right)
  state best: float = 0 update present(acc) ? max(best, acc) : best
  gate stable = acc >= best - q
  let spread = mad(ft where right) / max(median(ft where right), 1e-9)
  let z = (ft - mean(ft where right)) / std(ft where right)
  let upper = quantile(ft where right, q) ?? nth_largest(ft where right, int(c2 * 4))
  let typical = median(hist.length where hist.ok) ?? lim ?? prof.cap
  gate enough = count(right) >= 2 and any(flag) or all(right)
  gate history {
    closed no_history when count(hist.ok) == 0
    open long when upper > typical
    closed short
  }
  let chosen = mode == "up" ? (pb ?? ob ?? tb) : (prof.bd ?? tb)
  term shortest = c1 on argmin(ft where right and ft > 0) when enough
  term longest = -c1 on argmax(ft where right) when stable and history
  term relative = clip(centered(1 - minmax(ft where right) where right) * c2, -1, 1) on right
  term kept = c1 * (rank(-ft where right) ?? position) / group_size when rank(ft) < 2
  drop when rank(ft where right) >= 2 or lim > 3
  term outlier = -0.5 on right when present(z) and 0.6745 * z > spread and not missing(upper)
  term gap = clip(-abs(score - float(sum(x where flag)) / group_size) ** 0.5, -2, 0) when shortest + longest >= 0
  clamp >= 0
  clamp >= clip(chosen.a / 10, 0, 0.5) on flag when mode == "down"
  factor fit = band(ft, chosen) on right
  factor power = max(1, ft / max(1, min(ft where right))) ** (-c2) on right
  factor smooth = sigmoid(exp(-abs(z)) + log(ft + 1) + cos(ft) + sqrt(ft)) when enough
  metric delta = batch.mean(shaped - reward)
  metric grouped = batch.mean(spread where right)
  metric longest_sum = batch.sum(longest)
  metric non_binary = batch.mean(skipped("non_binary"))
  metric lowest = batch.min(ft where right)
  metric any_flag = batch.any(flag)
}
"""
FIXED = [EVERY_CONSTRUCT] + fixed_specs(5)


@pytest.mark.parametrize("index", range(len(FIXED)))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=sizes_st, seed=st.integers(0, 2**32 - 1), per_group=st.booleans())
def test_generated_specs_agree(index, sizes, seed, per_group):
    source = FIXED[index]
    name = "generated_all" if index == 0 else f"generated_{index - 1}"
    interp, kernel = backends(("fixed", index), lambda b: shapec.compile_str(source, f"{name}.shape", b)[name])
    kwargs, rewards = random_call(interp, seed, sizes, per_group)
    state = {st_: {k: random.Random(seed).random() for k in v} for st_, v in interp.state_dict().items()}
    assert_agree(interp, kernel, rewards, kwargs, state)


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
    for source in FIXED:
        assert shapec.check_source(source) == [], source
    drawn = [SpecWriter(random.Random(seed).choice).shaper("g") for seed in range(60)]
    for source in drawn:
        assert shapec.check_source(source) == [], source
    for construct in ("median(", "mad(", "std(", "quantile(", "nth_largest(", "minmax(", "centered(", "rank(", "position", "argmin(",
                      "argmax(", "??", " ? ", "band(", "gate ", "factor ", "clamp", "hist.", "result", "state", "drop when"):
        assert construct in EVERY_CONSTRUCT or construct == "result", construct
        assert any(construct in source for source in drawn), construct
