"""The NeMo-Gym row reader's one pass reads every value as the per-value validators read it: the
same arrays for the values it takes itself, and the validators' own error for any other."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapec.run import nemo_gym_rows as rows_mod
from shapec.runtime.validate import BatchError, band, flag

VALUES = st.sampled_from([None, True, False, 0, 1, 2, 0.5, -1.0, [], [0.0], [1, 2], (), (3,), {}, {"a": 1},
                          np.bool_(True), np.array([1.0]), np.array([]), "x", math.nan, 2**60])
NUMBERS = st.sampled_from([0, 1, 0.5, -2.0, 3000, True, False, 2**53 + 1, 1e300, math.inf, math.nan, "1.5", None,
                           [1.0], 2**70])


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except BatchError as err:
        return ("error", str(err))


def row(components, low) -> dict:
    return {"full_result": {"reward": 1.0, "reward_components": components}, "agent_ref": {"name": "a"},
            "low_effort_applied": low}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(VALUES, VALUES), min_size=1, max_size=6))
def test_components_and_flags_are_read_as_the_validators_read_them(values):
    results = [row(c, low) for c, low in values]
    read = rows_mod.read_rows(results)
    expected_c = [outcome(rows_mod.has_components, c, f"results[{i}].full_result.reward_components")
                  for i, (c, _) in enumerate(values)]
    expected_f = [outcome(flag, low, f"results[{i}].low_effort_applied") for i, (_, low) in enumerate(values)]
    first_errors = [next((e[1] for e in col if e[0] == "error"), None) for col in (expected_c, expected_f)]
    assert [str(e) for e in read.deferred] == [e for e in first_errors if e is not None]
    for i, (c, f) in enumerate(zip(expected_c, expected_f)):
        if c[0] == "ok" and first_errors[0] is None:
            assert read.components[i] == float(c[1])
        if f[0] == "ok" and first_errors[1] is None:
            assert read.low_effort[i] == float(f[1])


def profiled_rows(groups) -> list[dict]:
    out = []
    for pr, pl in groups:
        r = {"full_result": {"reward": 1.0}, "agent_ref": {"name": "a"}}
        if pr is not None:
            r["profiled_rewards"] = pr
        if pl is not None:
            r["profiled_output_lengths"] = pl
        out.append(r)
    return out


lists = st.none() | st.lists(NUMBERS, max_size=5) | st.lists(st.sampled_from([0, 1, 0.5, 7, 100.0]), max_size=5)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(lists, lists), min_size=1, max_size=5))
def test_profiled_rollouts_of_all_groups_are_those_of_each_group(groups):
    results = profiled_rows(groups)
    starts = range(len(results))
    fast = outcome(rows_mod._all_profiled, results, starts)
    slow = outcome(rows_mod._profiled_by_group, results, starts)
    assert fast[0] == slow[0]
    if fast[0] == "error":
        assert fast[1] == slow[1]
    else:
        (fs, fr, fl), (ss, sr, sl) = fast[1], slow[1]
        assert fs == ss and fr.tobytes() == sr.tobytes() and fl.tobytes() == sl.tobytes()


@pytest.mark.parametrize("value", [
    {"a": 1, "b": 2, "f": 0.5}, {"a": 1.5, "b": 2.5, "f": 1}, {"a": 2, "b": 1, "f": 0.5}, {"a": 1, "b": 2, "f": 1.5},
    {"a": math.nan, "b": 2, "f": 0.5}, {"a": True, "b": 2, "f": 0.5}, {"a": 2**60, "b": 2**61, "f": 0},
    {"a": 1, "b": 2}, {"a": 1, "b": 2, "f": 0.5, "x": 1}, [1, 2, 0.5], "band", None, {"a": "1", "b": 2, "f": 0},
    {"a": -math.inf, "b": 2, "f": 0.5},
])
def test_a_listed_band_is_read_as_band_reads_it(value):
    got = outcome(rows_mod._row_bands, {"profile_band": {"total": value}}, 3)
    expected = outcome(lambda v: {"total": (*band("results[3].profile_band.total", v), 1.0)}, value)
    assert got == expected
