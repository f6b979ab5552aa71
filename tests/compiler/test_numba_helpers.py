"""The numba helpers as plain Python (no numba): each agrees with the value rule it restates (ir/values.py)."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from shapec.compiler.lowering import numba_helpers as h
from shapec.compiler.lowering.helper_source import HELPER_FUNCTIONS, HELPERS
from shapec.ir import values as rules

NAN = math.nan
TRUTH = (0.0, 1.0, NAN)
NUMBERS = (-2.0, -0.0, 0.0, 0.5, 1.0, 3.0, math.inf, NAN)
SELECTIONS = ([], [3.0], [2.0, 2.0], [5.0, 1.0, 4.0, 1.0], [1.0, NAN, 2.0], list(np.linspace(9.0, -3.0, 40)),
              [0.0, 1.0, 1.0, 0.0, 1.0])
REDUCTIONS = ("count", "any", "all", "sum", "mean", "min", "max", "argmin", "argmax", "std")
ORDER_STATISTICS = (("median", (0.0,)), ("mad", (0.0,)), ("quantile", (0.0, 0.3, 1.0, 1.5, NAN)),
                    ("nth_largest", (0.0, 1.0, 2.0, 50.0, -1.0, NAN)))


def same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_three_valued_logic_matches_the_interpreter():
    for a, b in itertools.product(TRUTH, TRUTH):
        assert same(h.k_and(a, b), float(rules.k_and(np.float64(a), np.float64(b))))
        assert same(h.k_or(a, b), float(rules.k_or(np.float64(a), np.float64(b))))
    ops = ("==", "!=", "<", "<=", ">", ">=")
    for a, b in itertools.product(NUMBERS, NUMBERS):
        for code, op in enumerate(ops):
            assert same(h.k_cmp(code, a, b), float(rules.k_cmp(op, np.float64(a), np.float64(b)))), (op, a, b)
    assert (h.k_flag(True), h.k_flag(False)) == (1.0, 0.0)


def test_choices_and_bounds_follow_missing_values():
    assert [h.k_cond(c, 5.0, 7.0) for c in TRUTH][:2] == [7.0, 5.0] and math.isnan(h.k_cond(NAN, 5.0, 7.0))
    assert h.k_fallback(NAN, 2.0) == 2.0 and h.k_fallback(3.0, 2.0) == 3.0
    for a, b in itertools.product(NUMBERS, NUMBERS):
        lo, hi = (NAN, NAN) if math.isnan(a) or math.isnan(b) else (min(a, b), max(a, b))
        assert same(h.k_min(a, b), lo) and same(h.k_max(a, b), hi)
        x = np.float64(a)
        assert same(h.k_clip(a, -1.0, b), float(np.where(np.isnan(x) | np.isnan(b), NAN,
                                                         np.minimum(np.maximum(x, -1.0), b))))
    assert [h.k_gate_code(v) for v in TRUTH] == [1, 0, 2]


def test_log_and_sqrt_are_missing_outside_their_domain():
    assert h.k_log(math.e) == pytest.approx(1.0) and math.isnan(h.k_log(0.0)) and math.isnan(h.k_log(-1.0))
    assert h.k_sqrt(4.0) == 2.0 and h.k_sqrt(0.0) == 0.0 and math.isnan(h.k_sqrt(-1.0))


def test_band_matches_the_interpreters_band_multiplier():
    bands = [(1.0, 3.0, 0.5, 1.0), (1.0, 3.0, 0.5, 0.0), (3.0, 1.0, 0.5, 1.0), (NAN, 3.0, 0.5, 1.0), (0.0, 4.0, 0.0, 1.0)]
    for (a, b, f, present), x in itertools.product(bands, (-1.0, 0.0, 1.0, 2.0, 3.0, 9.0)):
        want = rules.band_multiplier(*(np.array([v]) for v in (x, a, b, f, present)))[0]  # arrays, as it runs
        assert same(h.k_band(x, a, b, f, present), want), (a, b, f, present, x)


def test_k_at_names_the_rollout_the_general_loop_matches():
    for k in (0, 1, 4):
        for index in (-1.0, -0.0, 0.0, 0.5, 1.0, 3.0, 3.999, 4.0, 1e300, math.inf, -math.inf, NAN):
            matches = [i for i in range(k) if float(i) == index]  # the loop's `float(i - s) == index`
            assert h.k_at(index, k) == (matches[0] if matches else -1), (index, k)


def test_buffer_utilities():
    buf = np.array([3.0, NAN, 1.0])
    assert h.k_usable(buf, 1) and not h.k_usable(buf, 2) and not h.k_usable(buf, 0)
    assert h.k_seq_sum(np.array([0.1, 0.2, 0.3, 9.0]), 3) == rules.seq_sum([0.1, 0.2, 0.3])
    for values in SELECTIONS:
        buf = np.array([*values, -99.0])  # a scratch buffer is longer than its selection
        h.k_sort(buf, len(values))
        assert list(buf[:len(values)]) == sorted(values) or any(map(math.isnan, values))
        assert buf[-1] == -99.0
        if values and not any(map(math.isnan, values)):
            assert h.k_sorted_median(buf, len(values)) == float(np.median(values))


@pytest.mark.parametrize("k", [0, 1, 2, 31, 32, 33, 40, 64, 65, 100, 257])
def test_sort_is_the_interpreters_stable_sort_to_the_bit(k):
    """Below and past the insertion sort's 32, signed zeros and ties keep their rollout order."""
    rng = np.random.default_rng(k)
    for _ in range(5):
        values = rng.choice([0.0, 1.0, -1.0, 2.5, 7.0], size=k)
        values[rng.random(k) < 0.3] = -0.0
        buf = np.append(values, -99.0)
        h.k_sort(buf, k)
        expected = np.sort(values, kind="stable")  # the interpreter's (ir/values.py)
        assert buf[:k].view(np.int64).tolist() == expected.view(np.int64).tolist()
        assert buf[k] == -99.0


def test_rank_is_the_place_of_each_value_in_a_stable_sort():
    for values in SELECTIONS:
        if values and not any(map(math.isnan, values)):
            buf = np.array([*values, -99.0])
            order = np.argsort(np.array(values), kind="stable")
            expected = np.empty(len(values))
            expected[order] = np.arange(len(values))
            assert [h.k_rank(buf, len(values), t) for t in range(len(values))] == expected.tolist()
    assert [h.k_rank(np.array([0.0, -0.0, 0.0]), 3, t) for t in range(3)] == [0.0, 1.0, 2.0]  # equal zeros in order


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions_match_reduce_values(op):
    fn = getattr(h, f"red_{op}")
    for values in SELECTIONS:
        k = len(values)
        buf = np.array([*values, 7.0])
        ibuf = np.arange(10, 11 + k)  # indices in the group: argmin and argmax report these
        got, want = fn(buf, ibuf, k, 0.0), rules.reduce_values(op, np.array(values), ())
        if op in ("argmin", "argmax") and not math.isnan(want):
            want = float(ibuf[int(want)])
        assert same(got, want) if op != "std" else same(got, want) or got == pytest.approx(want), (op, values)


@pytest.mark.parametrize("op, extras", ORDER_STATISTICS)
def test_order_statistics_on_a_sorted_selection_match_reduce_values(op, extras):
    fn = getattr(h, f"srt_{op}")
    for values, extra in itertools.product(SELECTIONS, extras):
        k = len(values)
        s = np.array([*values, 7.0])
        h.k_sort(s, k)
        got = fn(s, np.empty(k + 1), k, extra)
        assert same(got, rules.reduce_values(op, np.array(values), (extra,))), (op, values, extra)


def test_pow_is_np_power_with_nan_for_a_negative_base_and_a_fractional_exponent():
    with np.errstate(all="ignore"):
        for a, b in itertools.product(NUMBERS, NUMBERS):
            assert same(h.k_pow(a, b), float(np.power(np.float64(a), np.float64(b)))), (a, b)
        assert math.isnan(h.k_pow(-8.0, 0.5))


def test_a_state_takes_its_update_only_where_it_is_finite():
    for old, new in itertools.product((0.5, -0.0), (*NUMBERS, -math.inf)):
        got = h.k_state(old, new)
        assert np.float64(got).tobytes() == np.float64(rules.state_update(old, new)).tobytes(), (old, new)
        assert np.float64(got).tobytes() == np.float64(new if math.isfinite(new) else old).tobytes(), (old, new)


def test_every_helper_is_tested_here_and_emitted_under_njit():
    called = set(re.findall(r"\bh\.(k_[a-z_]+)\(", Path(__file__).read_text()))
    tested = called | {f"red_{op}" for op in REDUCTIONS} | {f"srt_{op}" for op, _ in ORDER_STATISTICS}
    assert tested == set(HELPER_FUNCTIONS)
    for name, source in HELPERS.items():
        assert source.startswith('@njit(error_model="numpy", cache=True)\ndef ' + name + "(")


def running(op: str, values: list[float]) -> float:
    """The lowering's running form of a reduction (reductions.RUNNING, which group selections and
    batch reductions share) over `values`, executed as Python: what the kernel's loop does."""
    from shapec.compiler.lowering.reductions import FLAGGED, RUNNING, undefined_when

    init, update, done = RUNNING[op]
    env = {"isnan": math.isnan, "nan": NAN, "acc": eval(init, {"nan": NAN}), "k": 0, "missing": False, "best": 0}
    for t, x in enumerate(values):
        env["x"] = x
        if op in FLAGGED:
            exec("missing = missing or isnan(x)", env)
        if op in ("argmin", "argmax"):
            exec(f"best = {t} if k == 0 or x {'<' if op == 'argmin' else '>'} acc else best", env)
        exec(update.format(acc="acc", x="x", k="k"), env)
        env["k"] += 1
    return eval(done.format(acc="acc", k="k", undefined=undefined_when("k", "missing"), best="best"), env)


SIGNED_ZEROS = ([0.0, -0.0], [-0.0, 0.0, -0.0], [-0.0], [2.0, -0.0, 0.0, 2.0], [NAN], [1.0, 1.0, NAN, 0.0])


@pytest.mark.parametrize("op", ("count", "any", "all", "sum", "mean", "min", "max", "argmin", "argmax"))
def test_running_group_reductions_are_the_helpers_to_the_bit(op):
    """A selection whose reductions are all running ones is never buffered: each accumulator must
    give red_<op>'s result bit for bit (signed zeros, ties, NaN, empty selections)."""
    rng = np.random.default_rng(3)
    cases = [*SELECTIONS, *SIGNED_ZEROS,
             *(list(rng.choice([-0.0, 0.0, 1.0, 2.5, -1.0, NAN], size=int(rng.integers(0, 9)))) for _ in range(300))]
    helper = getattr(h, f"red_{op}")
    for values in cases:
        buf = np.array(values, dtype=np.float64)
        idx = np.arange(len(values), dtype=np.int64)
        expected = helper(buf, idx, len(values), 0.0)
        got = running(op, [float(v) for v in values])
        assert np.array(got).tobytes() == np.array(expected, dtype=np.float64).tobytes(), (op, values, got, expected)
