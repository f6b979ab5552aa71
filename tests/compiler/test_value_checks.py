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


NONNEG = ("tokens", "chars", "seconds", "components")
NO_LISTS = ((np.zeros(1, dtype=np.int64),) * value_checks.LISTS, (0,) * value_checks.LISTS)
NO_TABLES = ((np.zeros((0, 3)),) * value_checks.TABLES, np.empty((0, 0, 4)))


def all_clean(fn, lists: tuple, arrays: tuple, rules_: np.ndarray, tables: tuple) -> bool:
    """all_clean (`fn`: compiled or plain) called as the binder calls it: every slot an argument."""
    (offsets, ends), (band_tables, rows) = lists, tables
    return fn(*offsets, *ends, *arrays, rules_, *band_tables, rows)


def rules(kinds: list[tuple[str, bool]]) -> np.ndarray:
    return np.array([(t in NONNEG, nan, t == "int", t == "bool") for t, nan in kinds], dtype=np.int64).reshape(-1, 4)


def spare(arrays: list[np.ndarray]) -> tuple:
    return tuple(arrays) + (np.zeros(0),) * (value_checks.ARRAYS - len(arrays))


@settings(max_examples=300, deadline=None)
@given(values, st.sampled_from(TYPES), st.booleans())
def test_a_clean_array_is_one_the_validators_accept(items, typ, allow_nan):
    arr = np.array(items, dtype=np.float64)
    compiled = all_clean(store.value_checks().all_clean, NO_LISTS, spare([arr.copy()]), rules([(typ, allow_nan)]),
                         NO_TABLES)
    assert compiled == accepted(checked, "x", arr, typ, allow_nan)
    with np.errstate(invalid="ignore"):  # inf - inf, in the plain Python version only
        plain = all_clean(value_checks.all_clean, NO_LISTS, spare([arr.copy()]), rules([(typ, allow_nan)]), NO_TABLES)
    assert compiled == plain


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(values, st.sampled_from(TYPES), st.booleans()), min_size=1, max_size=value_checks.ARRAYS))
def test_arrays_are_clean_together_when_the_validators_accept_each(arrays):
    given_arrays = [np.array(items, dtype=np.float64) for items, _, _ in arrays]
    every = all(accepted(checked, "x", arr, typ, nan) for arr, (_, typ, nan) in zip(given_arrays, arrays))
    checked_arrays = spare([a.copy() for a in given_arrays])
    clean = all_clean(store.value_checks().all_clean, NO_LISTS, checked_arrays,
                      rules([(t, nan) for _, t, nan in arrays]), NO_TABLES)
    assert clean == every
    if clean:  # every array as the validators make it: a bool column as 0/1 flags, in place
        for arr, got, (_, typ, nan) in zip(given_arrays, checked_arrays, arrays):
            assert got.tobytes() == checked("x", arr, typ, nan).tobytes()


@settings(max_examples=200, deadline=None)
@given(values)
def test_flags_are_one_for_any_non_zero_and_keep_nan(items):
    arr = np.array(items, dtype=np.float64)
    flags = store.value_checks().as_flags(arr)
    expected = np.where(np.isnan(arr), math.nan, (arr != 0).astype(np.float64))
    assert flags.tobytes() == expected.tobytes()


@st.composite
def band_tables(draw) -> list[np.ndarray]:
    """One to value_checks.TABLES tables of the same G rows, each (G, 4) flagged or (G, 3)."""
    G = draw(st.integers(0, 6))
    row = st.tuples(*[st.sampled_from(SPECIAL)] * 3, st.sampled_from([0.0, 1.0, 0.5, math.nan]))
    tables = []
    for _ in range(draw(st.integers(1, value_checks.TABLES))):
        table = np.array(draw(st.lists(row, min_size=G, max_size=G)), dtype=np.float64).reshape(G, 4)
        tables.append(np.ascontiguousarray(table if draw(st.booleans()) else table[:, :3]))
    return tables


@settings(max_examples=300, deadline=None)
@given(band_tables())
def test_band_rows_are_the_band_tables_of_the_validator(tables):
    G = len(tables[0])
    rows = np.empty((len(tables), G, 4))
    spare_tables = tuple(tables) + (np.zeros((0, 3)),) * (value_checks.TABLES - len(tables))
    clean = all_clean(store.value_checks().all_clean, NO_LISTS, spare([]), rules([]), (spare_tables, rows))
    assert clean == all(accepted(band_table, "t", table, G) for table in tables)
    if clean:
        for k, table in enumerate(tables):
            assert rows[k].tobytes() == band_table("t", table, G).tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=6), st.integers(0, 12))
def test_clean_offsets_are_the_offsets_the_validator_accepts(items, total):
    off = np.array(items, dtype=np.int64)
    assert store.value_checks().clean_offsets(off, total) == accepted(check_offsets, "o", off, total)
    lists = ((off,) + NO_LISTS[0][1:], (total,) + NO_LISTS[1][1:])
    assert all_clean(store.value_checks().all_clean, lists, spare([]), rules([]), NO_TABLES) == accepted(
        check_offsets, "o", off, total)


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
