"""The compiled value checks say an array is clean exactly when the worded validators accept it,
and they come from the private cache like a kernel: made once, never rebuilt by a warm process."""

from __future__ import annotations

import math
import stat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapec.compiler import store, value_checks
from shapec.runtime.batch import BatchError, checked
from shapec.runtime.validate import band_table, check_offsets

from ..helpers import fresh_cache

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e308, -1e308, math.inf, -math.inf, math.nan, 2.0**53, 5e-324]
values = st.lists(st.sampled_from(SPECIAL) | st.floats(allow_nan=True, allow_infinity=True), max_size=12)
TYPES = ["float", "int", "bool", "tokens", "chars", "seconds", "components"]


def accepted(fn, *args) -> bool:
    try:
        fn(*args)
    except BatchError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(values, st.sampled_from(TYPES), st.booleans())
def test_a_clean_array_is_one_the_validators_accept(items, typ, allow_nan):
    arr = np.array(items, dtype=np.float64)
    compiled = store.value_checks()
    verdict = compiled.clean_values(arr, typ in ("tokens", "chars", "seconds", "components"), allow_nan, typ == "int")
    assert verdict == accepted(checked, "x", arr, typ, allow_nan)
    with np.errstate(invalid="ignore"):  # inf - inf, in the plain Python version only
        plain = value_checks.clean_values(arr, typ in ("tokens", "chars", "seconds", "components"), allow_nan,
                                          typ == "int")
    assert verdict == plain


@settings(max_examples=200, deadline=None)
@given(values)
def test_flags_are_one_for_any_non_zero_and_keep_nan(items):
    arr = np.array(items, dtype=np.float64)
    flags = store.value_checks().as_flags(arr)
    expected = np.where(np.isnan(arr), math.nan, (arr != 0).astype(np.float64))
    assert flags.tobytes() == expected.tobytes()


rows = st.lists(st.tuples(*[st.sampled_from(SPECIAL)] * 3, st.sampled_from([0.0, 1.0, 0.5, math.nan])),
                max_size=6)


@settings(max_examples=300, deadline=None)
@given(rows, st.booleans())
def test_band_rows_are_the_band_tables_of_the_validator(table_rows, flagged):
    table = np.array(table_rows, dtype=np.float64).reshape(len(table_rows), 4)
    table = np.ascontiguousarray(table if flagged else table[:, :3])
    out = np.empty((len(table), 4))
    clean = store.value_checks().band_rows(table, out)
    assert clean == accepted(band_table, "t", table, len(table))
    if clean:
        assert out.tobytes() == band_table("t", table, len(table)).tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=6), st.integers(0, 12))
def test_clean_offsets_are_the_offsets_the_validator_accepts(items, total):
    off = np.array(items, dtype=np.int64)
    assert store.value_checks().clean_offsets(off, total) == accepted(check_offsets, "o", off, total)


def test_the_checks_module_is_made_once_and_private(tmp_path, monkeypatch):
    cache = fresh_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(store, "_LOADED", {})
    store.value_checks()
    (module,) = (cache.parent / "checks").glob("*.py")
    assert stat.S_IMODE(module.stat().st_mode) == 0o600
    assert stat.S_IMODE(module.parent.stat().st_mode) == 0o700
    written = module.stat().st_mtime_ns
    monkeypatch.setattr(store, "_LOADED", {})
    store.value_checks()  # a warm process: the module is imported, not written again
    assert module.stat().st_mtime_ns == written


def test_a_bad_value_still_gets_the_worded_error():
    import shapec

    s = shapec.compile_str("shaper s() {\n  input n: tokens\n  term t = -0.1 * float(n)\n}\n", backend="numba").s
    with pytest.raises(BatchError, match=r"channels\['n'\]: negative length at index 1; tokens must be >= 0"):
        s([1.0, 0.0], group_size=2, channels={"n": [3, -2]})
