"""Bad data gets a BatchError/ParamError naming the field (and group or index), never a crash or garbage.

Every case runs on both backends: validation happens once, in the batch layer, before either runs.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import numpy as np
import pytest

from shapec import compile_str
from shapec.runtime.batch import BatchError
from shapec.runtime.params import ParamError, validate_params

from ..helpers import src

SPEC = src("""
    shaper s(k: float = 1) requires nonneg produces nonneg {
      input x: tokens
      meta h: list(reward: float, length: tokens)
      meta pb: {total: band}
      meta m: float
      term t = k * float(mean(h.length where h.reward > 0) ?? 0) + (m ?? 0)
      clamp >= 0
      factor fit = band(x, pb.total) on reward > 0
    }
""")


@pytest.fixture(scope="module", params=["interpreter", "numba"])
def s(request):
    return compile_str(SPEC, backend=request.param).s


REWARDS = [1.0, 0.0, 1.0, 1.0]
X = [1.0, 2.0, 3.0, 4.0]


def call(s, **kw):
    """A call on two groups; metadata `pb`, which the factor reads with no fallback, is None unless given."""
    metadata = kw.pop("metadata", {})
    if isinstance(metadata, dict):
        metadata = {"pb": None, **metadata}
    return s(REWARDS, **{"group_size": 2, "channels": {"x": X}, "metadata": metadata, **kw})


def flat(offsets, reward=(1, 1, 1), length=(1, 2, 3)):
    return {"h": {"offsets": offsets, "reward": list(reward), "length": list(length)}}


def test_valid_flat_list_metadata(s):
    out = call(s, metadata=flat(np.array([0, 1, 3])))
    # group 0 has one item (length 1), group 1 two (2, 3): mean 2.5
    assert out.terms["t"].tolist() == [1.0, 1.0, 2.5, 2.5]


# ------------------------------------------------------------------ item 5: list offsets
@pytest.mark.parametrize("offsets, message", [
    ([0, 10**7, 3], r"metadata\['h'\]\.offsets: must be non-decreasing; index 2 goes back \(10000000 -> 3\)"),
    ([0, 5, 3], r"metadata\['h'\]\.offsets: must be non-decreasing; index 2 goes back \(5 -> 3\)"),
    ([2, 3, 3], r"metadata\['h'\]\.offsets: must start at 0 and end at 3 \(the number of 'reward' items\), got 2\.\.3"),
    ([0, 1, 2], r"metadata\['h'\]\.offsets: must start at 0 and end at 3 .*got 0\.\.2"),
    ([0, 1, 4], r"metadata\['h'\]\.offsets: must start at 0 and end at 3 .*got 0\.\.4"),
    ([0, 1.5, 3], r"metadata\['h'\]\.offsets: index 1: expected an integer, got 1\.5"),
    ([0, 1.0, 3], r"metadata\['h'\]\.offsets: index 1: expected an integer, got 1\.0"),
    (np.array([0.0, 1.0, 3.0]), r"metadata\['h'\]\.offsets: expected integers, got dtype float64"),
    (np.array([0, np.nan, 3]), r"metadata\['h'\]\.offsets: expected integers, got dtype float64"),
    (np.array([0, np.inf, 3]), r"metadata\['h'\]\.offsets: expected integers, got dtype float64"),
    ([False, 1, 3], r"metadata\['h'\]\.offsets: index 0: expected an integer, got False"),
    (np.array([False, True, True]), r"metadata\['h'\]\.offsets: expected integers, got dtype bool"),
    (np.array([0, 1, "3"], dtype=object), r"metadata\['h'\]\.offsets: index 2: expected an integer, got '3'"),
    (np.array([[0, 1, 3]]), r"metadata\['h'\]\.offsets: expected a 1-d array of integers, got shape \(1, 3\)"),
    ([0, 10**400, 3], r"metadata\['h'\]\.offsets: index 1: expected an integer, got 1000.*\(401 chars\)"),
    ([0, 2**63, 3], r"metadata\['h'\]\.offsets: index 1: expected an integer, got 9223372036854775808"),
    ("013", r"metadata\['h'\]\.offsets: expected a 1-d array of integers, got str"),
    (None, r"metadata\['h'\]\.offsets: expected a 1-d array of integers, got NoneType"),
    ([0, 3], r"metadata\['h'\]\.offsets: expected 3 values \(groups \+ 1\), got 2"),
    ([], r"metadata\['h'\]\.offsets: expected 3 values \(groups \+ 1\), got 0"),
])
def test_bad_list_offsets_are_named_errors(s, offsets, message):
    with pytest.raises(BatchError, match=message):
        call(s, metadata=flat(offsets))


@pytest.mark.parametrize("offsets", [np.array([0, 1, 3], dtype=dt) for dt in (np.int8, np.uint8, np.int32, np.uint64)]
                         + [np.array([0, 1, 3], dtype=object), (0, 1, 3), [np.int64(0), 1, 3]])
def test_integer_offsets_of_any_integer_type(s, offsets):
    assert call(s, metadata=flat(offsets)).terms["t"].tolist() == [1.0, 1.0, 2.5, 2.5]


@pytest.mark.parametrize("value, message", [
    ({"offsets": [0, 1, 3], "reward": [1, 1, 1]}, r"metadata\['h'\]: missing 'length'; expected \{'offsets'"),
    ({"reward": [1], "length": [1]}, r"metadata\['h'\]: missing 'offsets'"),
    ({"offsets": [0, 1, 3], "reward": [1, 1, 1], "length": [1, 2, 3], "lenght": [1]},
     r"metadata\['h'\]: unknown key 'lenght' \(did you mean 'length'\?\)"),
    ({"offsets": [0, 1, 3], "reward": [1, 1, 1], "length": [1, 2]},
     r"metadata\['h'\]\.length: expected 3 items \(as many as 'reward'\), got 2"),
    ({"offsets": [0, 1, 3], "reward": [1, math.nan, 1], "length": [1, 2, 3]},
     r"metadata\['h'\]\.reward: NaN at index 1"),
    ({"offsets": [0, 1, 3], "reward": [1, 1, 1], "length": [1, -2, 3]},
     r"metadata\['h'\]\.length: negative length at index 1; tokens must be >= 0"),
    ({"offsets": [0, 1, 3], "reward": [1, 1, 1], "length": [1, math.inf, 3]},
     r"metadata\['h'\]\.length: infinite at index 1"),
    ({"offsets": [0, 1, 3], "reward": [1, 1, 1], "length": np.ones((3, 1))},
     r"metadata\['h'\]\.length: expected a 1-d array, got shape \(3, 1\)"),
])
def test_bad_flat_list_records(s, value, message):
    with pytest.raises(BatchError, match=message):
        call(s, metadata={"h": value})


# ------------------------------------------------------------------ item 8: list items per group
@pytest.mark.parametrize("rows, message", [
    ([{"reward": [1, math.nan], "length": [1, 2]}, None], r"metadata\['h'\]: group 0, reward: NaN at index 1"),
    ([None, {"reward": [1, 1], "length": [1, -2]}], r"metadata\['h'\]: group 1, length: negative length at index 1"),
    ([{"reward": [1], "length": [math.inf]}, None], r"metadata\['h'\]: group 0, length: infinite at index 0"),
    ([{"reward": [1], "length": [10**400]}, None], r"metadata\['h'\]: group 0, length: index 0: .* too large"),
    ([{"reward": "11", "length": [1, 2]}, None], r"metadata\['h'\]: group 0, reward: expected a 1-d array of numbers, got str"),
    ([{"reward": [1, "x"], "length": [1, 2]}, None], r"metadata\['h'\]: group 0, reward: index 1: expected a number, got 'x'"),
    ([5, None], r"metadata\['h'\]: group 0: expected a mapping with \['reward', 'length'\] or None, got 5"),
    ([{"reward": [1], "lenght": [1]}, None], r"metadata\['h'\]: group 0: unknown field 'lenght' \(did you mean 'length'\?\)"),
    ([None], r"metadata\['h'\]: expected 2 entries \(one per group\), got 1"),
    (7, r"metadata\['h'\]: expected one entry per group \(2\), got int"),
    ({"reward": [1]}, r"metadata\['h'\]: missing 'offsets'"),
])
def test_bad_list_items_are_named_errors(s, rows, message):
    with pytest.raises(BatchError, match=message):
        call(s, metadata={"h": rows})


# ------------------------------------------------------------------ item 7: bands
GOOD = {"a": 1, "b": 3, "f": 0.5}


@pytest.mark.parametrize("bad, message", [
    ({"a": 1, "b": 3, "f": 5}, r"band needs 0 <= f <= 1, got f=5"),
    ({"a": 1, "b": 3, "f": -1}, r"band needs 0 <= f <= 1, got f=-1"),
    ({"a": 3, "b": 3, "f": 0.5}, r"band needs b > a, got a=3, b=3"),
    ({"a": 4, "b": 3, "f": 0.5}, r"band needs b > a, got a=4, b=3"),
    ({"a": 1, "b": 3}, r"band is missing 'f'"),
    ({"a": 1, "b": math.nan, "f": 0.5}, r"\.b: expected a finite number, got nan"),
    ({"a": -math.inf, "b": 3, "f": 0.5}, r"\.a: expected a finite number, got -inf"),
    ({"a": 1, "b": 3, "f": "0.5"}, r"\.f: expected a finite number, got '0.5'"),
    ({"a": 1, "b": 3, "f": 0.5, "g": 1}, r"unknown band field\(s\) \['g'\]"),
    ([1, 3, 2], r"band needs 0 <= f <= 1, got f=2"),
    ("band", r"expected a band \{a, b, f\}, got 'band'"),
])
def test_malformed_band_rows_are_named_errors(s, bad, message):
    with pytest.raises(BatchError, match=r"metadata\['pb\.total'\]: group 1" + message if message.startswith(r"\.")
                       else r"metadata\['pb\.total'\]: group 1: " + message):
        call(s, metadata={"pb": [{"total": GOOD}, {"total": bad}]})


@pytest.mark.parametrize("table, message", [
    (np.array([[1, 3, 0.5], [1, 3, 5]]), r"group 1: band needs 0 <= f <= 1, got f=5"),
    (np.array([[1, 3, -1], [1, 3, 0.5]]), r"group 0: band needs 0 <= f <= 1, got f=-1"),
    (np.array([[3, 1, 0.5, 1], [1, 3, 0.5, 0]]), r"group 0: band needs b > a, got a=3, b=1"),
    (np.array([[1, 3, 0.5, 2], [1, 3, 0.5, 1]]), r"group 0: the present column must be 0 or 1, got 2"),
    (np.array([[np.nan, 3, 0.5], [1, 3, 0.5]]), r"group 0: band fields must be finite numbers"),
    (np.array([[1, 3, 0.5]]), r"expected shape \(2, 3\) or \(2, 4\), got \(1, 3\)"),
    (np.zeros((2, 3, 1)), r"expected shape \(2, 3\) or \(2, 4\), got \(2, 3, 1\)"),
    (np.array([1.0, 2.0]), r"expected shape \(2, 3\) or \(2, 4\), got \(2,\)"),
])
def test_malformed_band_tables_are_named_errors(s, table, message):
    with pytest.raises(BatchError, match=r"metadata\['pb\.total'\]: " + message):
        call(s, metadata={"pb": {"total": table}})


def test_valid_bands_in_every_form(s):
    # group 0 has no band (factor 1); group 1's band (2, 3, 0.5) gives x = 3 and 4 its f
    rows = call(s, metadata={"pb": [None, {"total": {"a": 2, "b": 3, "f": 0.5}}]}).factors["fit"].tolist()
    table = call(s, metadata={"pb": {"total": np.array([[np.nan] * 3, [2, 3, 0.5]])}}).factors["fit"].tolist()
    flagged = call(s, metadata={"pb": {"total": np.array([[9, 1, 7, 0], [2, 3, 0.5, 1]])}}).factors["fit"].tolist()
    assert rows == table == flagged == [1.0, 1.0, 0.5, 0.5]


# ------------------------------------------------------------------ item 8: other inputs
@pytest.mark.parametrize("kw, message", [
    ({"metadata": {"pb": 5}}, r"metadata\['pb'\]: expected one entry per group \(2\), got int"),
    ({"metadata": {"pb": [5, None]}}, r"metadata\['pb'\]: group 0: expected a mapping with \['total'\] or None, got 5"),
    ({"metadata": {"pb": {"totl": None}}}, r"metadata\['pb'\]: unknown field 'totl' \(did you mean 'total'\?\)"),
    ({"metadata": {"m": ["a", 1]}}, r"metadata\['m'\]: index 0: expected a number, got 'a'"),
    ({"metadata": {"m": [math.inf, 1]}}, r"metadata\['m'\]: infinite at index 0"),
    ({"metadata": {"m": np.zeros((2, 2))}}, r"metadata\['m'\]: expected a 1-d array, got shape \(2, 2\)"),
    ({"metadata": [1, 2]}, r"metadata: expected a mapping of names to values, got list"),
    ({"channels": [1, 2]}, r"channels: expected a mapping of names to values, got list"),
    ({"channels": {"x": [1, 2, 3, 10**400]}}, r"channels\['x'\]: index 3: 1000.* is too large for a float"),
    ({"channels": {"x": [1, 2, 3, math.inf]}}, r"channels\['x'\]: infinite at index 3"),
    ({"channels": {"x": [1, 2, 3, None]}}, r"channels\['x'\]: index 3: expected a number, got None"),
    ({"channels": {"x": "1234"}}, r"channels\['x'\]: expected a 1-d array of numbers, got str"),
    ({"channels": {"lenght": X}}, r"channels: missing input 'x' \(tokens.*got unknown channel 'lenght'"),
    ({"reward_components": [0, math.nan, 0, 0]}, r"reward_components: NaN at index 1"),
    ({"reward_components": [0, -1, 0, 0]}, r"reward_components: negative value at index 1"),
    ({"reward_components": [0, math.inf, 0, 0]}, r"reward_components: infinite at index 1"),
])
def test_bad_inputs_are_named_batch_errors(s, kw, message):
    with pytest.raises(BatchError, match=message):
        call(s, **kw)


def test_nan_or_none_in_scalar_metadata_means_missing(s):
    out = call(s, metadata={"m": [None, math.nan]})
    assert out.terms["t"].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("params, message", [
    ([1], r"params of 's': expected a mapping of param names to values, got list"),
    ("k=1", r"params of 's': expected a mapping of param names to values, got str"),
    ({1: 2}, r"params of 's': param names are strings, got the key 1"),
    ({"k": math.inf}, r"param 'k' of shaper 's': expected a finite number, got inf$"),
])
def test_bad_params_are_named_param_errors(s, params, message):
    with pytest.raises(ParamError, match=message):
        call(s, params=params)


def test_an_infinite_param_default_is_a_param_error():
    # the parser refuses the literal 1e400; an IR built any other way is still checked at resolution
    ir = compile_str(src("shaper s(k: float = 1) produces real {\n  term t = k\n}\n"), backend="interpreter").s.ir
    broken = replace(ir, params=(replace(ir.params[0], default=math.inf),))
    with pytest.raises(ParamError, match=r"param 'k' of shaper 's': default inf is not a finite number"):
        validate_params(broken, {})


# ------------------------------------------------------------------ item 6: group_size and offsets
@pytest.mark.parametrize("group_size, message", [
    (0, r"group_size: expected a positive integer, got 0"),
    (-1, r"group_size: expected a positive integer, got -1"),
    (2.5, r"group_size: expected a positive integer, got 2\.5"),
    (2.0, r"group_size: expected a positive integer, got 2\.0"),
    (math.nan, r"group_size: expected a positive integer, got nan"),
    (math.inf, r"group_size: expected a positive integer, got inf"),
    (True, r"group_size: expected a positive integer, got True"),
    ("2", r"group_size: expected a positive integer, got '2'"),
    (3, r"group_size: 4 rewards do not split into groups of 3 \(the last group would have 1\); "
        r"pass allow_short_last_group=True"),
    (sys.maxsize, r"group_size: 4 rewards do not split into groups of 9223372036854775807"),
    (2**55, r"group_size: 4 rewards do not split into groups of 36028797018963968"),
    (10**400, r"group_size: 4 rewards do not split into groups of 1000.*\(401 chars\)"),
])
def test_bad_group_sizes(s, group_size, message):
    with pytest.raises(BatchError, match=message):
        call(s, group_size=group_size)


@pytest.mark.parametrize("group_size", [sys.maxsize, 2**55, 10**400, 4, 5])
def test_a_huge_group_size_with_a_short_group_is_one_group(s, group_size):
    out = call(s, group_size=group_size, allow_short_last_group=True, metadata={"pb": {"total": np.array([[0, 4, 0]])}})
    assert out.offsets.tolist() == [0, 4]
    # x 1..4 on band (0, 4, 0): 0.75, 0.5, 0.25, 0 on the positive rewards, the zero reward untouched
    assert out.rewards.tolist() == [0.75, 0.0, 0.25, 0.0]


def test_short_last_group_when_asked(s):
    out = call(s, group_size=3, allow_short_last_group=True, metadata={"m": [1, 2]})
    assert out.offsets.tolist() == [0, 3, 4] and out.terms["t"].tolist() == [1, 1, 1, 2]


def test_numpy_integer_group_size_and_empty_batch(s):
    assert call(s, group_size=np.int64(2)).offsets.tolist() == [0, 2, 4]
    out = s([], group_size=8, channels={"x": []})
    assert out.offsets.tolist() == [0] and out.rewards.tolist() == []


@pytest.mark.parametrize("offsets, message", [
    ([0, 10**7, 4], r"offsets: must be non-decreasing; index 2 goes back"),
    ([0, 5, 4], r"offsets: must be non-decreasing; index 2 goes back \(5 -> 4\)"),
    ([1, 4], r"offsets: must start at 0 and end at 4 \(the number of rewards\), got 1\.\.4"),
    ([0.0, 2.0, 4.0], r"offsets: index 0: expected an integer, got 0\.0"),
    (np.array([0, 2.5, 4]), r"offsets: expected integers, got dtype float64"),
    ([], r"offsets: expected at least one offset \(0\), got an empty array"),
    (np.array([[0, 4]]), r"offsets: expected a 1-d array of integers, got shape \(1, 2\)"),
])
def test_bad_call_offsets(s, offsets, message):
    with pytest.raises(BatchError, match=message):
        call(s, group_size=None, offsets=offsets)


def test_a_failed_call_changes_nothing(s):
    rewards, x = np.array(REWARDS), np.array(X)
    meta = {"pb": [{"total": GOOD}, {"total": {"a": 1, "b": 3, "f": 5}}]}
    with pytest.raises(BatchError):
        s(rewards, group_size=2, channels={"x": x}, metadata=meta)
    assert rewards.tolist() == REWARDS and x.tolist() == X and meta["pb"][1]["total"]["f"] == 5
