"""Every form of a call a user may pass (arrays in kernel form, wrong dtypes, lengths and layouts,
bad values anywhere, unknown keys, other mapping types, rows instead of columns, per-group params)
gives the same on the numba kernel as on the interpreter (codes and errors exactly, numbers to the
differential suites' 1e-12), and through the handle `prepare(params)` returns bit for bit what a
call with `params=` gives: the same rewards, breakdown, codes, metrics and state, or the same error."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec

from ..compiler.spec_writer import EVERY_CONSTRUCT
from ..compiler.test_differential import TOL

UNREAD = """
shaper unread(w: float = 0.5, n_max: int >= 1 = 3) requires binary {
  input steps: int
  input secs: seconds
  meta budget: tokens
  meta cap: int
  meta note: {size: float, tier: int}
  meta spare: list(v: float)
  gate right = reward > 0
  term short = -w * float(steps) / n_max on right when budget > 0
  clamp >= 0
}
"""

SPECS = {
    "every": (EVERY_CONSTRUCT, "generated_all"),
    "unread": (UNREAD, "unread"),
    "nemo_rl": (None, "length_penalty"),
    "pipeline": (None, "nemo_rl_length"),  # one stage: params by stage name
}


def pair(name: str):
    """The same shaper on the numba kernel and on the interpreter."""
    source, shaper = SPECS[name]
    build = ((lambda backend: shapec.load("nemo_rl", backend=backend)[shaper]) if source is None
             else (lambda backend: shapec.compile_str(source, f"{shaper}.shape", backend)[shaper]))
    return build("numba"), build("interpreter")


@pytest.fixture(scope="module", params=list(SPECS))
def shapers(request):
    return request.param, pair(request.param)


def canonical(ir, rng: np.random.Generator, G: int, k: int) -> dict:
    """A call in the lane's own forms: float64 columns, (G, 3) band tables, flat lists."""
    n = G * k
    channels = {}
    for name, typ in ir.inputs:
        if typ == "bool":
            channels[name] = rng.choice([0.0, 1.0, 2.0], n)
        elif typ == "float":
            channels[name] = rng.normal(0, 3, n)
        else:
            channels[name] = rng.integers(0, 60, n).astype(np.float64)
    metadata = {}
    for m in ir.metas:
        if m.kind == "scalar":
            metadata[m.name] = column(rng, m.type, G)
        elif m.kind == "record":
            metadata[m.name] = {f: column(rng, t, G) for f, t in m.fields if rng.random() < 0.85}
        else:
            sizes = rng.integers(0, 4, G)
            off = np.zeros(G + 1, np.int64)
            off[1:] = np.cumsum(sizes)
            metadata[m.name] = {"offsets": off, **{f: column(rng, t, int(off[-1]), missing=False)
                                                   for f, t in m.fields}}
    rewards = (rng.random(n) < 0.5).astype(np.float64)
    if rng.random() < 0.2:
        rewards[: k] = 0.5  # a graded group
    return {"rewards": rewards, "group_size": k, "channels": channels, "metadata": metadata}


def column(rng: np.random.Generator, typ: str, length: int, missing: bool = True) -> np.ndarray:
    if typ == "band":
        a = rng.integers(0, 40, length).astype(np.float64)
        table = np.stack([a, a + rng.integers(1, 30, length), rng.choice([0.0, 0.5, 1.0], length)], axis=1)
        table[rng.random(length) < 0.3] = np.nan
        return table
    values = (rng.choice([0.0, 1.0], length) if typ == "bool" else rng.integers(0, 50, length).astype(np.float64))
    if missing:
        values[rng.random(length) < 0.2] = np.nan
    return values


BAD_VALUES = [np.nan, np.inf, -np.inf, -1.0, 2.5, 1e308]


def perturb(call: dict, rng: np.random.Generator, how: str) -> dict:
    """One variant of a canonical call: another form of the same data, or a bad value."""
    call = {**call, **{key: dict(call[key]) for key in ("channels", "metadata") if type(call[key]) is dict}}
    bad = BAD_VALUES[int(rng.integers(len(BAD_VALUES)))]
    pick = lambda d: list(d)[int(rng.integers(len(d)))] if d else None  # noqa: E731
    if how == "rewards":
        r = np.array(call["rewards"], dtype=np.float64)
        r[int(rng.integers(len(r)))] = bad
        call["rewards"] = r
    elif how == "rewards_form":
        r = np.array(call["rewards"], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # a bad value planted before has no int form
            call["rewards"] = [r.astype(np.float32), r.tolist(), np.repeat(r, 2)[::2], r.astype(np.int64),
                               read_only(r)][int(rng.integers(5))]
    elif how == "channel" and type(call["channels"]) is dict and call["channels"]:
        name = pick(call["channels"])
        arr = np.array(call["channels"][name], dtype=np.float64).ravel()
        if len(arr):
            arr[int(rng.integers(len(arr)))] = bad
        call["channels"][name] = arr
    elif how == "channel_form" and type(call["channels"]) is dict and call["channels"]:
        name = pick(call["channels"])
        arr = np.array(call["channels"][name], dtype=np.float64).ravel()
        with np.errstate(over="ignore", invalid="ignore"):  # a bad value planted before has no int form
            call["channels"][name] = [arr.tolist(), arr[:-1], arr.astype(np.int32), None, np.repeat(arr, 2)[::2],
                                      arr.reshape(1, -1), read_only(arr)][int(rng.integers(7))]
        if rng.random() < 0.2:
            del call["channels"][name]
    elif how == "meta" and type(call["metadata"]) is dict and call["metadata"]:
        call["metadata"][pick(call["metadata"])] = bad_meta(call["metadata"][pick(call["metadata"])], rng, bad)
    elif how == "group" and type(call.get("group_size")) is int and call.get("offsets") is None:
        choice = int(rng.integers(5))
        n = len(call["rewards"])
        if choice == 0:
            call["group_size"] = np.int64(call["group_size"])
        elif choice == 1:
            call["offsets"] = np.arange(0, n + 1, call["group_size"], dtype=np.int64)
            call["group_size"] = None
        elif choice == 2:
            call["offsets"] = np.arange(0, n + 1, dtype=np.int64)
        elif choice == 3:
            call["group_size"] = None
            call["offsets"] = np.array([0, n + 1], np.int64)
        else:
            call["group_size"] = True
    elif how == "mappings":
        key = ["channels", "metadata"][int(rng.integers(2))]
        call[key] = types.MappingProxyType(call[key]) if rng.random() < 0.7 and call[key] is not None else None
    return call


def read_only(arr: np.ndarray) -> np.ndarray:
    arr = arr.copy()
    arr.setflags(write=False)
    return arr


def bad_meta(value, rng: np.random.Generator, bad: float):
    if isinstance(value, dict) and "offsets" in value:
        value = dict(value)
        choice = int(rng.integers(5))
        if choice == 0:
            value["offsets"] = value["offsets"][::-1].copy()
        elif choice == 1:
            value["extra"] = value["offsets"]
        elif choice == 2:
            value["offsets"] = value["offsets"].astype(np.float64)
        elif choice == 3:
            fld = [k for k in value if k != "offsets"][0]
            value[fld] = np.append(value[fld], bad)
        else:
            return [None] * (len(value["offsets"]) - 1)
        return value
    if isinstance(value, dict):
        value = dict(value)
        if not value or rng.random() < 0.3:
            value["bogus"] = np.zeros(3)
        else:
            fld = list(value)[int(rng.integers(len(value)))]
            value[fld] = bad_meta(value[fld], rng, bad)
        return value
    arr = np.array([np.nan if v is None else v for v in value] if isinstance(value, list) else value, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[0]:  # a band table
        g = int(rng.integers(arr.shape[0]))
        arr[g, :3] = [[5.0, 1.0, 0.5], [np.nan, 1.0, 0.5], [1.0, 2.0, 1.5], [bad, 3.0, 0.5]][int(rng.integers(4))]
        return arr if rng.random() < 0.8 else np.concatenate([arr, np.ones((len(arr), 1))], axis=1)
    if arr.ndim != 1 or not len(arr):
        return arr
    arr[int(rng.integers(len(arr)))] = bad
    return arr if rng.random() < 0.8 else arr.tolist()


def params_for(shaper, rng: np.random.Generator, G: int) -> dict | None:
    """Random params of the shaper (of a one-stage pipeline: by stage name, sometimes a wrong one)."""
    ir = shaper.stages[0][0]
    params = stage_params(ir, rng, G)
    if not shaper.is_pipeline or rng.random() < 0.1:
        return params
    return {[ir.name, "not_a_stage"][int(rng.random() < 0.1)]: params}


def stage_params(ir, rng: np.random.Generator, G: int) -> dict | None:
    if rng.random() < 0.3:
        return None
    out = {}
    for spec in ir.params:
        if rng.random() < 0.4 and spec.kind in ("float", "int"):
            lo = spec.lo if spec.lo is not None else 0
            value = lo + float(rng.integers(0, 3)) if spec.kind == "float" else int(lo) + int(rng.integers(0, 3))
            out[spec.name] = value
        elif rng.random() < 0.2 and spec.kind == "bool":
            out[spec.name] = bool(rng.random() < 0.5)
    if out and rng.random() < 0.2:
        name = list(out)[0]
        out[name] = [out[name]] * G  # per-group
    if rng.random() < 0.1:
        out["not_a_param"] = 1
    return out


def outcome(shaper, call: dict, params, breakdown: bool, bound: bool = False):
    """The call's result or its error; `bound`: through `prepare(params)`'s handle."""
    try:
        shaper, given = (shaper.prepare(params), {}) if bound else (shaper, {"params": params})
        return shaper(call["rewards"], group_size=call.get("group_size"), offsets=call.get("offsets"),
                      channels=call["channels"], metadata=call["metadata"], breakdown=breakdown, **given)
    except Exception as err:  # noqa: BLE001 - the error is part of what must agree
        return err


def same(a, b, what: str, exact: bool = True) -> None:
    """Bit for bit; or, between the backends (`exact=False`), to the differential suites' 1e-12:
    exp, log and cos may differ in the last bit (numba calls the C library, numpy its own SIMD)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    if exact:
        assert a.tobytes() == b.tobytes(), what
    else:
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, equal_nan=True, err_msg=what)


def assert_same(a, b, exact: bool = True) -> None:
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b), (a, b)
        return
    same(a.rewards, b.rewards, "rewards", exact)
    same(a.offsets, b.offsets, "offsets")
    assert len(a.stages) == len(b.stages) == 1
    sa, sb = a.stages[0], b.stages[0]
    same(sa.reward_in, sb.reward_in, "reward_in")
    same(sa.skip_codes, sb.skip_codes, "skip codes")
    for what in ("terms", "factors", "gate_codes"):
        da, db = getattr(sa, what), getattr(sb, what)
        assert list(da) == list(db), what
        for k in da:
            same(da[k], db[k], f"{what}[{k}]", exact or what == "gate_codes")
    assert list(sa.metrics) == list(sb.metrics)
    same(list(sa.metrics.values()), list(sb.metrics.values()), "metrics", exact)


HOW = ["none", "none", "rewards", "rewards_form", "channel", "channel_form", "meta", "meta", "group", "mappings"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), G=st.integers(1, 5), k=st.integers(1, 4),
       how=st.lists(st.sampled_from(HOW), min_size=1, max_size=3), breakdown=st.booleans(), bound=st.booleans())
@pytest.mark.slow
def test_every_form_of_a_call_gives_the_same_on_both_backends(shapers, seed, G, k, how, breakdown, bound):
    _, (kernel, interpreter) = shapers
    rng = np.random.default_rng(seed)
    call = canonical(kernel.stages[0][0], rng, G, k)
    for h in how:
        call = perturb(call, rng, h)
    params = params_for(kernel, rng, G)
    state = {s: {name: float(rng.integers(0, 3)) / 2 for name in v} for s, v in kernel.state_dict().items()}
    if state:
        kernel.load_state_dict(state)
        interpreter.load_state_dict(state)
    assert_same(outcome(kernel, call, params, breakdown, bound), outcome(interpreter, call, params, breakdown, bound),
                exact=False)
    assert kernel.state_dict() == interpreter.state_dict()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), G=st.integers(1, 4), k=st.integers(1, 3), breakdown=st.booleans())
def test_a_bound_handle_gives_what_a_call_with_its_params_gives(shapers, seed, G, k, breakdown):
    _, (kernel, _) = shapers
    rng = np.random.default_rng(seed)
    call = canonical(kernel.stages[0][0], rng, G, k)
    params = params_for(kernel, rng, G)
    state = kernel.state_dict()
    direct = outcome(kernel, call, params, breakdown)
    if state:
        kernel.load_state_dict(state)
    handle = outcome(kernel, call, params, breakdown, bound=True)
    if isinstance(direct, Exception) and isinstance(handle, Exception):
        assert type(direct) is type(handle)  # which of a bad param and bad data is named first may differ
    else:
        assert_same(handle, direct)


def test_the_result_does_not_alias_the_callers_arrays(shapers):
    _, (kernel, _) = shapers
    call = canonical(kernel.stages[0][0], np.random.default_rng(4), 2, 3)
    result = outcome(kernel, call, None, True)
    before = result.stages[0].reward_in.copy()
    call["rewards"][:] = 7.0
    assert result.stages[0].reward_in.tobytes() == before.tobytes()
    result.offsets[:] = 0  # the caller's own copy: the next call's groups are not changed by it
    again = outcome(kernel, {**call, "rewards": before}, None, True)
    assert again.offsets.tolist() == list(range(0, 7, 3))
def test_read_only_arrays_are_read_on_the_numba_kernel():
    """A JIT kernel handed a read-only array would compile a version its group function's signature
    refuses: the batch holds copies, so a caller's read-only arrays shape as writable ones do."""
    source = "shaper ro(w: float = 0.5) requires binary {\n  input x: tokens\n  meta cap: float\n" \
             "  gate right = reward > 0\n  term t = -w * float(x) / (cap ?? 10) on right\n  clamp >= 0\n}\n"
    kernel = shapec.compile_str(source, "ro.shape", "numba").ro
    rewards, x, cap = read_only(np.array([1.0, 0.0, 1.0, 1.0])), read_only(np.array([3.0, 4.0, 5.0, 0.0])), \
        read_only(np.array([20.0, np.nan]))
    result = kernel(rewards, group_size=2, channels={"x": x}, metadata={"cap": cap})
    assert_same(result, kernel(rewards.copy(), group_size=2, channels={"x": x.copy()}, metadata={"cap": cap.copy()}))
    assert result.rewards.tolist() == [0.925, 0.0, 0.75, 1.0]


SIGNED = """shaper s(w: float = 0.5, n: int = 2) requires binary produces real {
  input length: tokens
  gate right = reward > 0
  term t = -w * float(length) / n on right
  term inverse = clip(1 / w, -1, 1) on right
}
"""


@pytest.mark.parametrize("backend", ["numba", "interpreter"])
def test_one_params_dict_changed_in_place_between_calls_is_read_again(backend):
    """Params are remembered by value: a training loop that edits its config dict in place (a
    schedule), to an equal value of another type, or to a zero of the other sign, gets that call's
    rewards, not the remembered ones."""
    shaper = shapec.compile_str(SIGNED, "s.shape", backend)["s"]
    rewards, length = np.array([1.0, 0.0, 1.0, 1.0]), np.array([3.0, 1.0, 0.0, 5.0])
    params = {"w": 0.5, "n": 2}
    for w, n in ((0.5, 2), (0.25, 2), (0.25, 4), (0.0, 4), (-0.0, 4), (0, 4), (1.0, 4), (1, 4)):
        params["w"], params["n"] = w, n
        fresh = shapec.compile_str(SIGNED, "s.shape", "interpreter")["s"]  # has seen no other params
        call = dict(group_size=2, channels={"length": length}, params=params)
        want = fresh(rewards, **call)
        for _ in range(2):  # the second call finds the params remembered
            got = shaper(rewards, **call)
            assert got.terms["t"].tobytes() == want.terms["t"].tobytes(), (w, n)  # a 0 length carries w's sign
            assert got.terms["inverse"].tobytes() == want.terms["inverse"].tobytes(), (w, n)


@pytest.mark.parametrize("backend", ["numba", "interpreter"])
@pytest.mark.parametrize("zero", [-0.0, np.float64(-0.0), np.float32(-0.0), np.float16(-0.0)],
                         ids=["float", "float64", "float32", "float16"])
def test_negative_zero_in_every_float_width_gets_its_own_params(backend, zero):
    """`clip(1 / w, -1, 1)` is +1 at w = 0.0 and -1 at w = -0.0: a -0.0 of any width after a 0.0
    (equal, and hashing alike) must not be served the 0.0's arrays."""
    shaper = shapec.compile_str(SIGNED, "s.shape", backend)["s"]
    call = dict(group_size=2, channels={"length": np.array([3.0, 1.0])})
    assert shaper([1.0, 0.0], params={"w": 0.0}, **call).terms["inverse"].tolist() == [1.0, 0.0]
    assert shaper([1.0, 0.0], params={"w": zero}, **call).terms["inverse"].tolist() == [-1.0, 0.0]
    assert shaper([1.0, 0.0], params={"w": [zero]}, **call).terms["inverse"].tolist() == [-1.0, 0.0]  # per group
    assert shaper([1.0, 0.0], params={"w": np.array([zero])}, **call).terms["inverse"].tolist() == [-1.0, 0.0]


def test_the_params_a_shaper_remembers_are_bounded():
    from shapec.runtime.shaper import BOUND_PARAMS

    shaper = shapec.compile_str(SIGNED, "s.shape", "interpreter")["s"]
    call = dict(group_size=2, channels={"length": np.array([3.0, 1.0])})
    for k in range(BOUND_PARAMS + 10):  # a schedule: new params every step
        assert shaper([1.0, 0.0], params={"w": 1.0 + k}, **call).terms["inverse"][0] == 1.0 / (1.0 + k)
    assert len(shaper._bound) == BOUND_PARAMS


FLAGS = """
shaper flags(w: float = 0.5) {
  input n: tokens
  input hit: bool
  meta tries: list(ok: bool, cost: float)
  term t = -w * float(n) when hit
  term u = -0.25 * sum(tries.cost where tries.ok)
}
"""


@pytest.mark.parametrize("backend", ["numba", "interpreter"])
def test_a_call_never_writes_the_arrays_it_is_given(backend):
    """The binder passes a caller's float64 column to the kernel as it is, and makes a bool column
    0/1 on its own copy: after the call every array holds what it held (and the flags still counted
    as flags: 2.0 and 0.5 are true)."""
    s = shapec.compile_str(FLAGS, backend=backend).flags
    n = np.array([10.0, 20.0, 30.0, 40.0])
    hit = np.array([2.0, 0.0, 0.5, 1.0])
    tries = {"offsets": np.array([0, 2, 3], dtype=np.int64), "ok": np.array([3.0, 0.0, 0.25]),
             "cost": np.array([4.0, 8.0, 12.0])}
    given_bytes = [a.tobytes() for a in (n, hit, *tries.values())]
    res = s(np.ones(4), group_size=2, channels={"n": n, "hit": hit}, metadata={"tries": tries})
    assert [a.tobytes() for a in (n, hit, *tries.values())] == given_bytes
    assert res.terms["t"].tolist() == [-5.0, 0.0, -15.0, -20.0]
    assert res.terms["u"].tolist() == [-1.0, -1.0, -3.0, -3.0]
