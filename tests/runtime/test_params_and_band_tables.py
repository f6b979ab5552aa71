"""Params are resolved once per shaper and values (whatever the dict object), reach the kernel as one
column when every group holds the same bits, and band tables are validated in one pass that still
names the first bad group."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.runtime.batch import BatchError
from shapec.runtime.binder import make_batch
from shapec.runtime.params import ParamError, param_arrays


@pytest.fixture(scope="module")
def ir():
    return shapec.load("nemo_rl", backend="interpreter").ir("length_penalty")


def test_equal_params_are_resolved_once_per_shaper_whatever_the_dict():
    shaper = shapec.load("nemo_rl", backend="interpreter").length_penalty
    first = shaper._bind({"top_percentile": 0.25, "global_band_total": (1.0, 2.0, 0.5)})
    assert shaper._bind({"top_percentile": 0.25, "global_band_total": (1.0, 2.0, 0.5)}) is first
    assert first.resolved[0].columns(3)["top_percentile"].tolist() == [0.25] * 3
    assert first.resolved[0].columns(3)["global_band_total"].tolist() == [[1.0, 2.0, 0.5, 1.0]] * 3
    assert shaper._bind({"top_percentile": 0.5}) is not first
    per_group = shaper._bind({"top_percentile": np.array([0.25, 0.5])})
    assert shaper._bind({"top_percentile": np.array([0.25, 0.5])}) is per_group  # keyed by the values' bits
    assert shaper._bind({"top_percentile": np.array([0.25, 0.75])}) is not per_group
    assert shaper._bind({"top_percentile": [0.25, 0.5]}) is not per_group  # a list is not an array of float64


def test_per_group_params_are_for_as_many_groups_as_given(ir):
    assert param_arrays(ir, {"top_percentile": [0.25, 0.5]}, 2)["top_percentile"].tolist() == [0.25, 0.5]
    with pytest.raises(ParamError, match="param 'top_percentile': expected 3 per-group values, got 2"):
        param_arrays(ir, {"top_percentile": [0.25, 0.5]}, 3)


def test_a_required_param_may_be_given_per_group():
    spec = "shaper s(k: int >= 1, c: float) produces real {\n  term t = c * k\n}\n"
    shaper = shapec.compile_str(spec, backend="interpreter").s
    out = shaper([0.0, 0.0], group_size=1, params={"k": [1, 2], "c": 0.5})
    assert out.rewards.tolist() == [0.5, 1.0]
    with pytest.raises(ParamError, match="param 'c' of shaper 's': required"):
        shaper([0.0, 0.0], group_size=1, params={"k": [1, 2]})
    with pytest.raises(ParamError, match="group 1: param 'k' of shaper 's': expected greater than or equal to 1"):
        shaper([0.0, 0.0], group_size=1, params={"k": [1, 0], "c": 0.5})


def test_a_bad_value_after_remembered_good_ones_is_still_refused(ir):
    param_arrays(ir, {"profile_band_total": True}, 1)
    param_arrays(ir, {"profiled_length_min_samples": 2}, 1)
    with pytest.raises(ParamError, match="param 'profiled_length_min_samples' of shaper 'length_penalty'"):
        param_arrays(ir, {"profiled_length_min_samples": 2.5}, 1)
    with pytest.raises(ParamError, match="param 'profile_band_total' of shaper 'length_penalty'"):
        param_arrays(ir, {"profile_band_total": "maybe"}, 1)


@pytest.mark.parametrize("row, message", [
    ([5.0, 4.0, 0.5], "group 2: band needs b > a, got a=5, b=4"),
    ([1.0, 4.0, 1.5], "group 2: band needs 0 <= f <= 1, got f=1.5"),
    ([1.0, np.inf, 0.5], "group 2: band fields must be finite numbers"),
])
def test_a_band_table_names_its_first_bad_group(ir, row, message):
    table = np.array([[1.0, 2.0, 0.5], [np.nan] * 3, row, [5.0, 4.0, 0.5]])
    with pytest.raises(BatchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_batch(ir, [1.0] * 4, group_size=1, channels={"reasoning": [1] * 4, "answer": [1] * 4,
                                                          "low_effort": [0] * 4},
                   metadata={"profile_band": {"total": table}})


def test_a_valid_band_table_keeps_absent_rows_absent(ir):
    table = np.array([[1.0, 2.0, 0.5], [np.nan] * 3])
    batch = make_batch(ir, [1.0, 1.0], group_size=1, channels={"reasoning": [1, 1], "answer": [1, 1],
                                                              "low_effort": [0, 0]},
                       metadata={"profile_band": {"total": table}})
    got = batch.bands["profile_band.total"]
    assert got[0].tolist() == [1.0, 2.0, 0.5, 1.0]
    assert np.isnan(got[1, :3]).all() and got[1, 3] == 0.0


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_breakdown_off_returns_the_same_rewards_and_no_terms(backend):
    shaper = shapec.load("nemo_rl", backend=backend).length_penalty
    rng = np.random.default_rng(3)
    rewards = (rng.random(24) < 0.5).astype(float)
    channels = {"reasoning": rng.integers(0, 900, 24).astype(float),
                "answer": rng.integers(0, 90, 24).astype(float), "low_effort": np.zeros(24)}
    params = {"longest_total_penalty": 0.1, "group_total_length_penalty_coeff": 0.2}
    full = shaper(rewards, group_size=4, channels=channels, params=params)
    lean = shaper(rewards, group_size=4, channels=channels, params=params, breakdown=False)
    assert lean.rewards.tobytes() == full.rewards.tobytes()
    assert full.terms and full.factors and lean.terms == {} and lean.factors == {}
    assert lean.stages[0].skip_codes.tolist() == full.stages[0].skip_codes.tolist()
    assert lean.metrics == full.metrics
    off = shaper(rewards, group_size=4, channels=channels, params=params, breakdown=False, training=False)
    assert off.terms == {} and off.rewards.tobytes() == rewards.tobytes()


def test_params_the_same_in_every_group_reach_the_kernel_as_one_column():
    """The kernel reads column min(g, columns - 1): one column for uniform params, whether passed as
    scalars or as per-group values that are all the same bits; a row of G otherwise."""
    shaper = shapec.load("nemo_rl", backend="numba").length_penalty
    kernel = shaper._kernels[0]
    P, B = (len(keys) for _, keys in kernel.param_slots)

    def shapes(params, G):
        return [a.shape[:2] for a in kernel.pack(shaper._bind(params).resolved[0].columns(G))]

    assert shapes({"top_percentile": 0.25}, 5) == [(P, 1), (B, 1)]
    assert shapes({"top_percentile": [0.25] * 5}, 5) == [(P, 1), (B, 1)]
    assert shapes({"top_percentile": [0.25, 0.25, 0.5, 0.25, 0.25]}, 5) == [(P, 5), (B, 1)]
    assert shapes({"global_band_total": [None, None, (1.0, 2.0, 0.5), None, None]}, 5) == [(P, 1), (B, 5)]
    # the same value, not the same bits: -0.0 and 0.0 stay apart (a kernel may tell them apart)
    assert shapes({"answer_bonus": [0.0, -0.0]}, 2)[0] == (P, 2)
    assert shapes({"top_percentile": 0.25}, 1) == [(P, 1), (B, 1)]


@pytest.mark.parametrize("G", [1, 3, 40])
def test_one_column_and_a_row_per_group_shape_alike(G):
    """The kernel given one column of uniform params and the kernel given a row of G values (one of
    them different, so the row is kept) agree with each other and with the interpreter."""
    rng = np.random.default_rng(G)
    shaper = shapec.load("nemo_rl", backend="numba").length_penalty
    n = G * 4
    call = dict(rewards=(rng.random(n) < 0.6).astype(float), group_size=4,
                channels={"reasoning": rng.integers(1, 900, n).astype(float),
                          "answer": rng.integers(1, 200, n).astype(float),
                          "low_effort": np.zeros(n)})
    params = {"longest_total_penalty": 0.2, "total_bonus": 0.1, "global_band_total": (300.0, 900.0, 0.5),
              "profile_band_total": True, "pass_rate_length_penalty_weight": 0.3}
    same = {k: [v] * G for k, v in params.items()}  # all the same bits: one column
    rows = {**same, "total_bonus": [0.1] * (G - 1) + [0.2]}  # a row of G
    slow = shapec.load("nemo_rl", backend="interpreter").length_penalty
    for given, expected in ((params, params), (same, params), (rows, rows)):
        fast, oracle = shaper(**call, params=given), slow(**call, params=expected)
        assert fast.rewards.tobytes() == oracle.rewards.tobytes()
        for name in oracle.terms:
            assert fast.terms[name].tobytes() == oracle.terms[name].tobytes(), name


@pytest.mark.parametrize("params, message", [
    ({"n": 1.5, "r": 0.5}, "param 'n' of shaper 's': expected a valid integer, got a number with a fractional part (1.5)"),
    ({"n": "a", "r": 0.5}, "param 'n' of shaper 's': expected an integer, got 'a' (str)"),
    ({"r": 2}, "param 'r' of shaper 's': expected less than or equal to 1, got 2"),
    ({}, "param 'r' of shaper 's': required (it has no default)"),
])
def test_a_bad_param_is_named_with_what_was_expected_and_the_value_given_once(params, message):
    s = shapec.compile_str("shaper s(n: int = 1, r: float in [0, 1]) {\n  input x: float\n  term t = float(n) + r\n}\n",
                           backend="interpreter").s
    with pytest.raises(ParamError) as err:
        s([1.0], group_size=1, channels={"x": [1.0]}, params=params)
    assert str(err.value) == message
