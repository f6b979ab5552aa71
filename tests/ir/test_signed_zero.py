"""0.0 and -0.0 are equal, so which of them a min, max or clip returns is a rule, not arithmetic:
the left operand on a tie, the first of equal values in a reduction (k_min, k_max, k_clip and
the kernels' strict running comparisons). np.minimum, np.maximum and np.min leave it to the
platform, and the interpreter used them: the two backends returned zeros of opposite signs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ..helpers import every_backend

SPEC = """shaper t() requires real produces real {
  result = RESULT
}
"""
RESULTS = ["max(reward)", "min(reward)", "batch.max(reward)", "batch.min(reward)", "max(reward, -reward)",
           "min(reward, -reward)", "clip(reward, -reward, 1)", "clip(-reward, reward, reward)"]


@pytest.mark.parametrize("result", RESULTS)
def test_signed_zeros_come_out_the_same_on_every_backend(result):
    shapers = every_backend(SPEC.replace("RESULT", result))
    for rewards in ([0.0, -0.0], [-0.0, 0.0], [-0.0, -0.0, 0.0, 0.0], [0.0, 0.0, -0.0, -0.0]):
        outs = [s(np.array(rewards), group_size=len(rewards)).rewards.tobytes() for s in shapers]
        assert outs[1] == outs[0] and outs[2] == outs[0], (result, rewards)


# ------------------------------------------------------------------ order statistics and minmax
# equal values (0.0 and -0.0, and other ties) keep their rollout order: sorting is stable on both
# backends, nth_largest counts the first of equal values first (as max does), quantile at a whole
# position is that order statistic, mad takes |x - median|. Each reduction is a term of its own
# (`?? 7` where it is missing), and so is clip(1 / it, -1, 1), the sign of the infinity a zero gives.
# q and i are never 0 in a call (a zero param compiles a kernel of its own, compiler/specialize.py):
# quantile(x, 0) and nth_largest(x, 0) are written out.
SELECTIONS = {"all": "reward", "ok": "reward where ok", "items": "h.v", "items_ok": "h.v where h.ok"}
REDUCTIONS = {"median": "median({})", "mad": "mad({})", "quantile": "quantile({}, q)", "quantile0": "quantile({}, 0)",
              "nth": "nth_largest({}, i)", "nth0": "nth_largest({}, 0)", "min": "min({})", "max": "max({})"}
ORDERED = {
    **{f"{op}_{sel}": form.format(x) for op, form in REDUCTIONS.items() for sel, x in SELECTIONS.items()},
    "minmax_all": "minmax(reward)", "minmax_ok": "minmax(reward where ok)",
    "bmin_all": "batch.min(reward)", "bmin_ok": "batch.min(reward where ok)",
    "bmax_all": "batch.max(reward)", "bmax_ok": "batch.max(reward where ok)",
}
ORDERED_SPEC = "shaper t(q: float in [0, 1] = 0.5, i: int >= 1 = 1) requires real produces real {\n" \
    "  input ok: bool\n  meta h: list(v: float, ok: bool)\n" + "".join(
        f"  term {name} = {e} ?? 7\n  term inv_{name} = clip(1 / {e}, -1, 1) ?? 7\n"
        for name, e in ORDERED.items()) + "}\n"
_SHAPERS: list = []


def ordered(groups: list[list[float]], oks=None, items=None, q: float = 0.5, i: int = 1) -> dict[str, np.ndarray]:
    """Every term of ORDERED_SPEC on a call of these groups, the same to the bit on every backend."""
    if not _SHAPERS:
        _SHAPERS.extend(every_backend(ORDERED_SPEC))
    rewards = np.array([v for g in groups for v in g], dtype=np.float64)
    kwargs = dict(offsets=np.cumsum([0] + [len(g) for g in groups]), params={"q": q, "i": i},
                  channels={"ok": oks if oks is not None else [1.0] * len(rewards)},
                  metadata={"h": items if items is not None else [None] * len(groups)})
    outs = [s(rewards, **kwargs) for s in _SHAPERS]
    for out in outs[1:]:
        assert out.rewards.tobytes() == outs[0].rewards.tobytes(), (groups, oks, items, q, i)
        for name, values in outs[0].terms.items():
            assert out.terms[name].tobytes() == values.tobytes(), (name, groups, oks, items, q, i)
    return outs[0].terms


def bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.int64).tolist()


@pytest.mark.parametrize("term, group, i, value", [
    ("median_all", [0.0, -0.0, 5.0], 1, -0.0),  # the middle of the stable order: the second zero
    ("median_all", [-0.0, 0.0, 5.0], 1, 0.0),
    ("median_all", [-0.0, 0.0] * 20 + [1.0], 1, -0.0),  # 41 rollouts: the merge sort past 32 is stable too
    ("mad_all", [0.0, -0.0, -1.0], 1, 0.0),  # |-0.0 - 0.0|, not -0.0 - 0.0
    ("quantile_all", [0.0, -0.0, 0.0], 1, -0.0),  # q = 0.5, position 1: s[1], not s[1] + (s[2] - s[1]) * 0
    ("quantile0_all", [-0.0, 1.0], 1, -0.0),
    ("nth0_all", [0.0, -0.0, -1.0, -1.0], 1, 0.0),  # the first of the equal largest, as max
    ("nth_all", [0.0, -0.0, -1.0, -1.0], 1, -0.0),
    ("nth_all", [-0.0, 0.0] * 20 + [1.0], 1, -0.0),
    ("nth_all", [-0.0, 0.0] * 20 + [1.0], 2, 0.0),
])
def test_order_statistics_read_equal_values_in_rollout_order(term, group, i, value):
    terms = ordered([group], i=i)
    assert bits(terms[term]) == bits([value] * len(group))
    assert terms[f"inv_{term}"].tolist() == [math.copysign(1.0, value)] * len(group)  # 1 / value is +-inf


def test_minmax_subtracts_the_first_of_equal_minima():
    terms = ordered([[0.0, -0.0, 1.0], [-0.0, 0.0, 1.0]])
    assert bits(terms["minmax_all"]) == bits([0.0, -0.0, 1.0, 0.0, 0.0, 1.0])  # -0.0 - 0.0, then 0.0 - -0.0
    assert terms["inv_minmax_all"].tolist() == [1.0, -1.0, 1.0, 1.0, 1.0, 1.0]


ZEROS_AND_TIES = st.sampled_from([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 2.0])


@st.composite
def groups_of_ties(draw):
    sizes = draw(st.lists(st.one_of(st.integers(0, 6), st.integers(30, 40)), min_size=1, max_size=4))
    groups = [draw(st.lists(ZEROS_AND_TIES, min_size=k, max_size=k)) for k in sizes]
    oks = [float(draw(st.booleans())) for _ in range(sum(sizes))]
    items = [draw(st.none() | st.integers(0, 35).flatmap(lambda k: st.fixed_dictionaries({
        "v": st.lists(ZEROS_AND_TIES, min_size=k, max_size=k),
        "ok": st.lists(st.sampled_from([0.0, 1.0]), min_size=k, max_size=k)}))) for _ in sizes]
    return groups, oks, items


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=groups_of_ties(), q=st.sampled_from([0.25, 0.5, 0.3, 1.0]), i=st.integers(1, 5))
def test_order_statistics_of_signed_zeros_and_ties_are_the_same_bits_on_every_backend(case, q, i):
    groups, oks, items = case
    assume(sum(map(len, groups)))  # a call has at least one rollout
    ordered(groups, oks, items, q, i)
