"""The one-pass numba checks (runtime/fastcheck.py) pass exactly the arrays the numpy validators pass.

They only say "clean"; an array they do not pass goes to the numpy validator, which raises. So a
fast check that passed a bad array would let it into a kernel, and one that refused a good array
would only cost time: both are bugs, and both are tested here against the numpy code alone.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapec.runtime import fastcheck, validate
from shapec.runtime.batch import as_flags
from shapec.runtime.validate import BatchError

VALUES = st.one_of(st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.0, 3.0, math.nan, math.inf, -math.inf, 1e308]),
                   st.floats(allow_nan=True, allow_infinity=True))


def numpy_verdict(fn) -> bool:
    try:
        fn()
    except BatchError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, max_size=12), st.booleans(), st.booleans(), st.booleans())
def test_clean_values_agrees_with_numpy(values, nonneg, allow_nan, whole):
    arr = np.array(values, dtype=np.float64)
    fast = bool(fastcheck.clean_values(arr, nonneg, allow_nan, whole))
    probe = np.where(np.isnan(arr), 0.0, arr) if allow_nan else arr
    saved = validate._FAST
    validate._FAST = None
    try:
        ok = numpy_verdict(lambda: validate.finite("x", probe, "tokens" if nonneg else None))
    finally:
        validate._FAST = saved
    if whole and ok:
        ok = not (~np.isnan(arr) & (arr != np.floor(arr))).any()
    assert fast == ok


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2000), st.data(), st.booleans(), st.booleans(), st.booleans())
def test_clean_values_finds_one_bad_value_anywhere_in_a_long_array(n, data, nonneg, allow_nan, whole):
    """Arrays longer than a vectorized loop's chunks, clean but for at most one value: its tail is tested too."""
    arr = np.arange(n, dtype=np.float64) % 7
    if n and data.draw(st.booleans()):
        arr[data.draw(st.integers(0, n - 1))] = data.draw(VALUES)
    bad = ~np.isfinite(arr) & ~(np.isnan(arr) & allow_nan)
    bad |= nonneg & (arr < 0)
    bad |= whole & np.isfinite(arr) & (arr != np.floor(arr))
    assert bool(fastcheck.clean_values(arr, nonneg, allow_nan, whole)) == (not bad.any())


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, max_size=40), st.booleans())
def test_clean_flags_is_clean_values_then_as_flags(values, allow_nan):
    """The fused pass gives the verdict of clean_values and, when clean, the flags of batch.as_flags, bit for bit."""
    arr = np.array(values, dtype=np.float64)
    out = np.full(len(arr), 7.0)
    ok = bool(fastcheck.clean_flags(arr, allow_nan, out))
    assert ok == bool(fastcheck.clean_values(arr, False, allow_nan, False))
    if ok:
        assert out.tobytes() == as_flags(arr).tobytes()


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, max_size=40), st.booleans())
def test_a_bool_column_checked_in_one_pass_is_what_numpy_makes_of_it(values, allow_nan):
    """The general path's bool columns (batch._checked): the compiled pass's flags, or its error,
    are the numpy validators' bit for bit."""
    from shapec.runtime.batch import _checked

    arr = np.array(values, dtype=np.float64)

    def outcome(checks):
        saved = validate._FAST
        validate._FAST = checks
        try:
            return _checked("b", arr, "bool", allow_nan).tobytes()
        except BatchError as err:
            return str(err)
        finally:
            validate._FAST = saved

    assert outcome(fastcheck) == outcome(None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(VALUES, min_size=3, max_size=3), min_size=1, max_size=6), st.booleans(),
       st.lists(st.sampled_from([0.0, 1.0, 0.5, math.nan]), min_size=6, max_size=6))
def test_band_rows_agree_with_numpy(rows, flagged, flags):
    table = np.array(rows, dtype=np.float64)
    if flagged:
        table = np.column_stack([table, flags[:len(rows)]])
    G = len(rows)
    out = np.empty((G, 4))
    fast = bool(fastcheck.band_rows(table, out))
    saved = validate._FAST
    validate._FAST = None
    try:
        expected = None
        try:
            expected = validate.band_table("b", table, G)
        except BatchError:
            pass
    finally:
        validate._FAST = saved
    assert fast == (expected is not None)
    if fast:
        assert out.tobytes() == expected.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), min_size=0, max_size=8), st.integers(0, 12))
def test_clean_offsets_agree_with_numpy(values, total):
    off = np.array(values, dtype=np.int64)
    fast = bool(fastcheck.clean_offsets(off, total))
    saved = validate._FAST
    validate._FAST = None
    try:
        ok = numpy_verdict(lambda: validate.check_offsets("offsets", off, total))
    finally:
        validate._FAST = saved
    assert fast == ok


def test_bad_arrays_still_get_the_numpy_message():
    validate.use_compiled_checks(fastcheck)
    with pytest.raises(BatchError, match=r"x: negative length at index 2"):
        validate.finite("x", np.array([1.0, 2.0, -1.0]), "tokens")
    with pytest.raises(BatchError, match=r"b: group 1: band needs b > a"):
        validate.band_table("b", np.array([[1.0, 2.0, 0.5], [3.0, 2.0, 0.5]]), 2)
