"""An integer past 2**53 would reach the kernels rounded (every value is a float64 there), so the
API refuses it wherever a call takes numbers, as `shapec run` refuses it in a row: the error names
the field, the index (or group) and the value. 2**53 itself is held exactly and accepted."""

from __future__ import annotations

import numpy as np
import pytest

import shapec
from shapec.runtime.batch import BatchError
from shapec.runtime.params import ParamError

from ..helpers import src

SPEC = src("""
    shaper s(k: float = 0, n: int = 0, w: band = {1, 2, 0.5}) {
      input x: tokens
      meta m: float
      meta pb: {total: band}
      meta h: list(length: tokens)
      term t = k * float(n) + (m ?? 0) + float(count(h.length > 0))
      clamp >= 0
      factor fit = band(x, pb.total ?? w) on reward > 0
    }
""")

BIG = 2 ** 53 + 1
EXACT = "expected a number that a float64 holds exactly (at most 2**53)"


@pytest.fixture(scope="module")
def s():
    return shapec.compile_str(SPEC, "t.shape", "interpreter").s


def call(s, rewards=(1.0, 0.0, 1.0, 1.0), x=(1.0, 2.0, 3.0, 4.0), **kw):
    return s(list(rewards), group_size=2, channels={"x": list(x) if isinstance(x, tuple) else x}, **kw)


FORMS = {  # the same big integer at index 2, as a call may pass it
    "python ints": [1, 0, BIG, 1],
    "numpy int64": np.array([1, 0, BIG, 1], dtype=np.int64),
    "numpy uint64": np.array([1, 0, BIG, 1], dtype=np.uint64),
    "ints mixed with floats": [1.0, 0.5, BIG, 1],
    "a tuple": (1.0, 0.0, BIG, 1.0),
}


@pytest.mark.parametrize("form", FORMS)
def test_rewards_past_2_53_are_refused_with_the_index_and_value(s, form):
    with pytest.raises(BatchError) as err:
        call(s, rewards=FORMS[form])
    assert str(err.value) == f"rewards: index 2: {EXACT}, got {BIG}"


@pytest.mark.parametrize("form", FORMS)
def test_channels_past_2_53_are_refused_with_the_index_and_value(s, form):
    with pytest.raises(BatchError) as err:
        call(s, x=FORMS[form])
    assert str(err.value) == f"channels['x']: index 2: {EXACT}, got {BIG}"


def test_negative_integers_past_2_53_are_refused_too(s):
    with pytest.raises(BatchError) as err:
        call(s, rewards=[1.0, -BIG, 1.0, 1.0])
    assert str(err.value) == f"rewards: index 1: {EXACT}, got -{BIG}"


@pytest.mark.parametrize("value", [[0, BIG], np.array([0, BIG]), [0.5, BIG]], ids=["ints", "int64", "mixed"])
def test_metadata_values_past_2_53_are_refused_with_the_index_and_value(s, value):
    with pytest.raises(BatchError) as err:
        call(s, metadata={"m": value})
    assert str(err.value) == f"metadata['m']: index 1: {EXACT}, got {BIG}"


def test_list_metadata_items_past_2_53_are_refused(s):
    with pytest.raises(BatchError) as err:
        call(s, metadata={"h": [{"length": [1, BIG]}, None]})
    assert str(err.value) == f"metadata['h']: group 0, length: index 1: {EXACT}, got {BIG}"
    with pytest.raises(BatchError) as err:
        call(s, metadata={"h": {"offsets": [0, 2, 2], "length": np.array([1, BIG])}})
    assert str(err.value) == f"metadata['h'].length: index 1: {EXACT}, got {BIG}"


def test_band_tables_past_2_53_are_refused_with_the_group_and_value(s):
    with pytest.raises(BatchError) as err:
        call(s, metadata={"pb": {"total": np.array([[1, 2, 0], [1, BIG, 1]], dtype=np.int64)}})
    assert str(err.value) == f"metadata['pb.total']: group 1: {EXACT}, got {BIG}"
    with pytest.raises(BatchError) as err:
        call(s, metadata={"pb": [None, {"total": {"a": 1, "b": BIG, "f": 0.5}}]})
    assert str(err.value) == f"metadata['pb.total']: group 1.b: {EXACT}, got {BIG}"


@pytest.mark.parametrize("params, where", [
    ({"n": BIG}, "param 'n'"),
    ({"k": BIG}, "param 'k'"),
    ({"n": np.int64(BIG)}, "param 'n'"),
    ({"w": (1, BIG, 0.5)}, "param 'w'"),
    ({"n": [0, BIG]}, "group 1: param 'n'"),
    ({"n": np.array([0, BIG], dtype=np.int64)}, "group 1: param 'n'"),
])
def test_params_past_2_53_are_refused_with_the_group_and_value(s, params, where):
    with pytest.raises(ParamError) as err:
        call(s, params=params)
    assert str(err.value) == f"{where} of shaper 's': {EXACT}, got {BIG}"


def test_2_53_itself_is_accepted_everywhere(s):
    edge = 2 ** 53
    out = call(s, rewards=[1, 0, edge, 1], x=np.array([1, 2, edge, 4], dtype=np.int64),
               metadata={"m": [0.5, edge], "h": [{"length": [edge]}, None],
                         "pb": {"total": np.array([[1, edge, 1], [1, 2, 1]], dtype=np.int64)}},
               params={"n": [0, edge], "k": 0.0, "w": (1, edge, 0.5)})
    assert np.isfinite(out.rewards).all()
