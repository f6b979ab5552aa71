"""Reference interpreter: hand-computed expectations for every reduction and construct."""

import math

import numpy as np
import pytest

from shapec import compile_str
from shapec.runtime.batch import BatchError
from shapec.runtime.params import ParamError

from ..helpers import src


def shaper(body: str, header: str = "shaper s() produces real {", name: str = "s"):
    return compile_str(src(header + "\n" + body + "\n}\n"), backend="interpreter")[name]


def term_of(expr: str, x, where_inputs="input x: float"):
    """Run `term t = EXPR` on one group with input x and reward 0, return the term array."""
    s = shaper(f"{where_inputs}\nterm t = {expr}")
    return s(np.zeros(len(x)), group_size=len(x), channels={"x": x}).terms["t"]


@pytest.mark.parametrize("expr, x, expected", [
    ("count(x > 2)", [1, 2, 3, 4], 2.0),
    ("sum(x)", [1, 2, 3, 4], 10.0),
    ("mean(x)", [1, 2, 3, 4], 2.5),
    ("median(x)", [1, 3, 2, 4], 2.5),          # (2 + 3) / 2
    ("median(x)", [5, 1, 3], 3.0),
    ("std(x)", [1, 2, 3, 4], math.sqrt(5 / 3)),  # sample std: squares 2.25+.25+.25+2.25 = 5, / 3
    ("mad(x)", [1, 2, 3, 4, 100], 1.0),          # median 3; |dev| 2,1,0,1,97 -> median 1
    ("min(x)", [4, 2, 9], 2.0),
    ("max(x)", [4, 2, 9], 9.0),
    ("quantile(x, 0.25)", [4, 1, 3, 2], 1.75),    # sorted 1,2,3,4; position 0.75 -> 1 + 0.75 * (2 - 1)
    ("nth_largest(x, 1)", [4, 1, 3], 3.0),
    ("mean(x where x > 1)", [1, 2, 3], 2.5),
    ("any(x > 2) ? 1 : 0", [1, 2, 3], 1.0),
    ("all(x > 2) ? 1 : 0", [1, 2, 3], 0.0),
    ("count(x > 5)", [1, 2, 3], 0.0),            # empty count is 0
    ("sum(x where x > 5)", [1, 2, 3], 0.0),      # empty sum is 0
    ("all(x > 5 where x > 5) ? 1 : 0", [1, 2, 3], 1.0),  # all of nothing is true
    ("mean(x where x > 5) ?? 7", [1, 2, 3], 7.0),  # empty mean is missing; ?? gives the declared value
    ("group_size", [1, 2, 3], 3.0),
])
def test_group_reductions(expr, x, expected):
    assert term_of(expr, x).tolist() == pytest.approx([expected] * len(x), rel=0, abs=1e-15)


def test_empty_reduction_is_missing_and_the_term_is_not_applied():
    assert term_of("1 + mean(x where x > 5)", [1, 2, 3]).tolist() == [0.0, 0.0, 0.0]
    assert term_of("nth_largest(x, 5)", [1, 2, 3]).tolist() == [0.0, 0.0, 0.0]


def test_argmin_argmax_ties_go_to_the_first_rollout():
    assert term_of("1 on argmin(x)", [3, 1, 1, 2]).tolist() == [0, 1, 0, 0]
    assert term_of("1 on argmax(x)", [3, 5, 5]).tolist() == [0, 1, 0]
    assert term_of("1 on argmin(x where x > 1)", [1, 2, 2]).tolist() == [0, 1, 0]
    assert term_of("1 on argmin(x where x > 9)", [1, 2, 2]).tolist() == [0, 0, 0]  # no target


def test_rollout_valued_reductions():
    assert term_of("minmax(x)", [10, 20, 30]).tolist() == [0.0, 0.5, 1.0]
    assert term_of("minmax(x)", [7, 7]).tolist() == [0.0, 0.0]  # no spread: 0
    assert term_of("centered(x)", [1, 2, 3]).tolist() == [-1.0, 0.0, 1.0]
    assert term_of("centered(x where x > 1)", [1, 2, 3]).tolist() == [-1.5, -0.5, 0.5]


def test_rank_counts_the_values_before_each_equal_ones_in_rollout_order():
    assert term_of("rank(x)", [30, 10, 20]).tolist() == [2.0, 0.0, 1.0]
    assert term_of("rank(x)", [5, 5, 0.0, -0.0]).tolist() == [2.0, 3.0, 0.0, 1.0]  # -0.0 ties 0.0: first comes first
    assert term_of("rank(-x)", [1, 3, 3]).tolist() == [2.0, 0.0, 1.0]  # the longest first
    assert term_of("rank(x where x > 1) ?? -1", [3, 1, 2]).tolist() == [1.0, -1.0, 0.0]  # missing outside the mask


def test_rank_is_missing_when_a_selected_value_is():
    s = shaper("input x: float\nmeta cap: float\nterm t = rank(x where x < cap) ?? -1\nterm u = rank(x / cap) ?? -1")
    out = s(np.zeros(3), group_size=3, channels={"x": [2.0, 1.0, 3.0]}, metadata={"cap": [None]})
    assert out.terms["t"].tolist() == [-1.0, -1.0, -1.0] and out.terms["u"].tolist() == [-1.0, -1.0, -1.0]


def test_position_is_the_rollouts_place_in_its_group():
    s = shaper("input x: float\nterm t = position")
    assert s(np.zeros(5), offsets=[0, 2, 5], channels={"x": np.zeros(5)}).terms["t"].tolist() == [0, 1, 0, 1, 2]


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_drop_when_marks_the_rollouts_that_leave_the_batch(backend):
    """Any `drop when` that holds drops the rollout; a missing condition, a skipped group or a call
    that is not training drops nothing; the rewards are shaped as without it."""
    spec = src("""shaper s() produces real {
      input x: float
      meta cap: float
      skip off when cap < 0
      drop when x > cap
      drop when rank(-x) == 0
      term t = 1
    }""")
    shaper = compile_str(spec, backend=backend).s
    call = dict(group_size=3, channels={"x": [5.0, 1.0, 2.0, 4.0, 9.0, 3.0, 7.0, 8.0, 9.0]},
                metadata={"cap": [3.0, None, -1.0]})
    out = shaper(np.zeros(9), **call)
    assert out.kept.tolist() == [False, True, True, True, False, True, True, True, True]  # cap missing: the largest
    assert out.rewards.tolist() == [1.0] * 6 + [0.0] * 3 and out.drops
    assert out.stages[0].kept.tolist() == out.kept.tolist()
    assert shaper(np.zeros(9), training=False, **call).kept.all()


def test_a_shaper_without_drop_keeps_every_rollout():
    out = shaper("input x: float\nterm t = x")(np.zeros(2), group_size=2, channels={"x": [1.0, 2.0]})
    assert out.kept.tolist() == [True, True] and not out.drops and out.stages[0].kept is None


def test_reductions_are_per_group_on_ragged_groups():
    s = shaper("input x: float\nterm t = max(x) - min(x)")
    out = s(np.zeros(5), offsets=np.array([0, 2, 5]), channels={"x": [1, 4, 10, 0, 5]})
    assert out.terms["t"].tolist() == [3, 3, 10, 10, 10]


def test_three_valued_logic_fails_closed():
    # `not (missing > 1)` is missing, not true: the term stays off
    assert term_of("1 when not (mean(x where x > 5) > 1)", [1, 2]).tolist() == [0, 0]
    # false and missing is false; true or missing is true
    assert term_of("1 when not (x > 5 and mean(x where x > 5) > 1)", [1, 2]).tolist() == [1, 1]
    assert term_of("1 when x > 0 or mean(x where x > 5) > 1", [1, 2]).tolist() == [1, 1]


def test_elementwise_builtins():
    x = [0.5, 2.0]
    assert term_of("clip(x, 1, 1.5)", x).tolist() == [1.0, 1.5]
    assert term_of("sigmoid(x - x)", x).tolist() == [0.5, 0.5]
    assert term_of("int(x * 3)", x).tolist() == [1.0, 6.0]
    assert term_of("exp(0) + abs(-x) + sqrt(4) + log(1) + cos(0)", x).tolist() == [4.5, 6.0]
    assert term_of("max(x, 1, 0)", x).tolist() == [1.0, 2.0]


def test_helper_functions_are_inlined():
    s = compile_str(src("""
        fn half_range(v) = (max(v) - min(v)) / 2
        shaper s() produces real {
          input x: float
          term t = half_range(x)
        }
    """), backend="interpreter").s
    assert s(np.zeros(3), group_size=3, channels={"x": [1, 5, 3]}).terms["t"].tolist() == [2, 2, 2]


def test_default_combination_terms_then_clamp_then_factors():
    s = shaper(src("""
        input x: float
        term a = -0.7 on x > 1
        term b = -0.6 on x > 2
        clamp >= 0
        factor f = 0.5 on x > 0
        factor g = 0.5 on x > 3
    """), header="shaper s() requires binary produces nonneg {")
    out = s([1, 1, 1, 0], group_size=4, channels={"x": [1, 2, 3, 4]})
    # x=1: 1 * .5; x=2: (1-.7)*.5; x=3: max(1-1.3, 0) = 0, factors skip a zero base; x=4: reward 0, base 0
    assert out.rewards.tolist() == pytest.approx([0.5, 0.15, 0.0, 0.0])
    assert out.factors["f"].tolist() == [0.5, 0.5, 1.0, 1.0]
    assert out.terms["a"].tolist() == [0, -0.7, -0.7, -0.7]


def test_clamp_with_mask_and_missing_bound():
    s = shaper("input x: float\nterm t = -2\nclamp >= 0.25 on x > 1\nclamp >= mean(x where x > 9)")
    out = s([1.0, 1.0], group_size=2, channels={"x": [1, 2]})
    assert out.rewards.tolist() == [-1.0, 0.25]  # a missing bound does not clamp


def test_result_declares_the_combination():
    s = shaper("term bonus = 0.5\nresult = reward * 2 + bonus")
    assert s([1.0, 0.0], group_size=2).rewards.tolist() == [2.5, 0.5]


def test_gates_record_reasons_per_group():
    s = shaper(src("""
        input x: float
        gate enough = count(x > 0) >= 2
        gate level {
          closed empty when count(x > 0) == 0
          open long when mean(x) > 5
          closed short
        }
        term t = 1 when enough and level
    """))
    out = s(np.zeros(6), group_size=2, channels={"x": [0, 0, 1, 2, 9, 9]})
    assert out.gates["enough"] == ["closed", "open", "open"]
    assert out.gates["level"] == ["empty", "short", "long"]
    assert out.terms["t"].tolist() == [0, 0, 0, 0, 1, 1]


def test_skips_binary_check_and_components():
    s = shaper(src("""
        input flag: bool
        skip off unless on_
        skip flagged when any(flag)
        term t = 0.5
    """), header="shaper s(on_: bool = true) requires binary produces nonneg {")
    rewards = [1, 0, 1, 0.5, 1, 1, 1, 1]
    flags = [0, 0, 0, 0, 1, 0, 0, 0]
    comps = [0, 0, 0, 0, 0, 0, 0, 2]
    out = s(rewards, group_size=2, channels={"flag": flags}, reward_components=comps,
            params={"on_": [True, True, True, False]})
    assert out.skip_reasons == ["", "non_binary", "flagged", "off"]
    assert out.rewards.tolist() == [1.5, 0.5, 1, 0.5, 1, 1, 1, 1]
    # group 4 has a component count but is switched off first: config skips run before the binary check


def test_validation_mode_returns_rewards_unchanged():
    s = shaper("term t = 0.5")
    r = np.array([1.0, 0.0])
    out = s(r, group_size=2, training=False)
    assert out.rewards.tolist() == [1.0, 0.0] and out.skip_reasons == ["validation"]


def test_metadata_scalar_list_record_and_band():
    s = compile_str(src("""
        shaper s(fallback: band = {10, 20, 0.5}) requires binary produces unit {
          input x: tokens
          meta target: tokens
          meta hist: list(ok: bool, length: tokens)
          meta pb: {total: band}
          let goal = target ?? 100
          let typical = mean(hist.length where hist.ok)
          term over = -0.1 when x > goal and x > typical
          clamp >= 0
          factor fit = band(x, pb.total ?? fallback) on reward > 0
        }
    """), backend="interpreter").s
    out = s([1, 1, 1, 1, 1, 1], group_size=3, channels={"x": [5, 15, 30, 5, 150, 300]},
            metadata={"target": [4, None],
                      "hist": [{"ok": [1, 0], "length": [10, 99]}, None],
                      "pb": [{"total": {"a": 100, "b": 200, "f": 0.0}}, {}]})
    # group 0: goal 4, typical 10: x=15 and 30 penalised; row band 100..200: all below a -> 1
    # group 1: goal 100 (fallback), no history -> typical missing -> no term; global band 10..20, f .5
    assert out.terms["over"].tolist() == [0, -0.1, -0.1, 0, 0, 0]
    assert out.factors["fit"].tolist() == [1, 1, 1, 1, 0.5, 0.5]
    assert out.rewards.tolist() == pytest.approx([1, 0.9, 0.9, 1, 0.5, 0.5])


def band_shaper():
    """One per-prompt band as a factor on correct rollouts."""
    return compile_str(src("""
        shaper s() requires binary produces unit {
          input x: tokens
          meta pb: band
          factor fit = band(x, pb) on reward > 0
        }
    """), backend="interpreter").s


def test_band_multiplier_shape():
    s = band_shaper()
    x = [100, 150, 200, 250, 150, 150]
    pb = [{"a": 100, "b": 200, "f": 0.6}, {"a": 100, "b": 300, "f": 1}, None]
    out = s(np.ones(6), group_size=2, channels={"x": x}, metadata={"pb": pb})
    # 1 up to a; at 150 halfway: 1 - 0.5 * 0.4 = 0.8; f at and past b; f = 1 is flat; none: 1
    assert out.factors["fit"].tolist() == pytest.approx([1.0, 0.8, 1.0, 1.0, 1.0, 1.0])
    out = s(np.ones(2), group_size=2, channels={"x": [200, 250]}, metadata={"pb": [{"a": 100, "b": 200, "f": 0.6}]})
    assert out.factors["fit"].tolist() == pytest.approx([0.6, 0.6])


def test_malformed_metadata_band_is_an_error():
    s = band_shaper()
    bad = {"a": 200, "b": 100, "f": 0.5}
    with pytest.raises(BatchError, match=r"metadata\['pb'\]: group 1: band needs b > a, got a=200, b=100"):
        s(np.ones(4), group_size=2, channels={"x": [1, 2, 3, 4]}, metadata={"pb": [{"a": 1, "b": 2, "f": 1}, bad]})


STABLE = src("""
    input ok: bool
    let acc = batch.mean(ok)
    state best: float = 0 update max(best, acc)
    gate stable = acc >= best - 0.1
    term t = 1 when stable
""")


def test_state_persists_across_calls_and_round_trips():
    s = shaper(STABLE)
    runs = [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]  # batch accuracies .5, .25, .75
    seen = []
    for ok in runs:
        out = s(np.zeros(4), group_size=2, channels={"ok": ok})
        seen.append((s.state_dict()["s"]["best"], out.terms["t"][0]))
    assert seen == [(0.5, 1.0), (0.5, 0.0), (0.75, 1.0)]
    saved = s.state_dict()
    fresh = shaper(STABLE)
    fresh.load_state_dict(saved)
    assert fresh(np.zeros(4), group_size=2, channels={"ok": [1, 0, 0, 0]}).terms["t"][0] == 0.0


def test_per_group_params():
    s = shaper("term t = k", header="shaper s(k: float >= 0 = 1) produces real {")
    out = s(np.zeros(4), group_size=2, params={"k": [0.5, 2.0]})
    assert out.terms["t"].tolist() == [0.5, 0.5, 2.0, 2.0]


def test_pipeline_keeps_each_stage():
    mod = compile_str(src("""
        shaper plus() produces real {
          term t = 1
        }
        shaper double() produces real {
          result = reward * 2
        }
        pipeline p = plus >> double >> plus
    """), backend="interpreter")
    out = mod.p([0.0, 1.0], group_size=2)
    assert out.rewards.tolist() == [3.0, 5.0]
    assert out.stages[1].reward_in.tolist() == [1.0, 2.0]


# ---------------------------------------------------------------- input validation
@pytest.fixture
def simple():
    return shaper("input length: tokens\nterm t = 0.1", header="shaper s() requires binary produces nonneg {")


def test_rejects_nan_rewards_with_index(simple):
    with pytest.raises(BatchError, match=r"rewards: NaN at index 2"):
        simple([1, 0, float("nan")], group_size=3, channels={"length": [1, 2, 3]})


def test_rejects_negative_lengths_with_index(simple):
    with pytest.raises(BatchError, match=r"channels\['length'\]: negative length at index 1"):
        simple([1, 0, 1], group_size=3, channels={"length": [1, -2, 3]})


def test_rejects_wrong_length_and_dtype(simple):
    with pytest.raises(BatchError, match=r"channels\['length'\]: expected 3 values"):
        simple([1, 0, 1], group_size=3, channels={"length": [1, 2]})
    with pytest.raises(BatchError, match="rewards: index 0: expected a number, got 'a'"):
        simple(np.array(["a", "b"]), group_size=2, channels={"length": [1, 2]})
    with pytest.raises(BatchError, match="missing input 'length'"):
        simple([1, 0], group_size=2)
    with pytest.raises(BatchError, match="offsets: must start at 0 and end at 3"):
        simple([1, 0, 1], offsets=np.array([0, 2]), channels={"length": [1, 2, 3]})


def test_never_mutates_inputs(simple):
    r = np.array([1.0, 0.0, 1.0])
    length = np.array([1.0, 2.0, 3.0])
    simple(r, group_size=3, channels={"length": length})
    assert r.tolist() == [1.0, 0.0, 1.0] and length.tolist() == [1.0, 2.0, 3.0]


def test_params_are_validated_with_suggestions():
    s = shaper("term t = coeff", header="shaper s(coeff: float >= 0 = 1) produces real {")
    with pytest.raises(ParamError, match="unknown param 'cofe'.*did you mean 'coeff'"):
        s([1.0], group_size=1, params={"cofe": 1})
    with pytest.raises(ParamError, match=r"param 'coeff' of shaper 's': expected greater than or equal to 0, "
                                         r"got -1$"):
        s([1.0], group_size=1, params={"coeff": -1})
    assert set(s.params_model.model_fields) == {"coeff"}


def test_non_finite_result_is_an_error():
    s = shaper("input x: float\nterm t = 1 / x")
    with pytest.raises(FloatingPointError, match="rollout 0 \\(group 0\\)"):
        s([1.0], group_size=1, channels={"x": [0.0]})


NULL_KEY = src("""
    shaper s(fallback: band = {10, 20, 0.5}) requires binary produces unit {
      input x: tokens
      meta pb: {total: band}
      factor fit = band(x, pb.total ?? fallback) on reward > 0
    }
""")


def test_band_metadata_absent_key_falls_back():
    s = compile_str(NULL_KEY, backend="interpreter").s
    out = s(np.ones(3), group_size=1, channels={"x": [30, 30, 30]},
            metadata={"pb": [None, {}, {"total": {"a": 1, "b": 2, "f": 0.25}}]})
    # no row or no key: the fallback band -> f = 0.5; given: f = 0.25
    assert out.factors["fit"].tolist() == [0.5, 0.5, 0.25]


def test_band_metadata_null_key_is_malformed_not_absent():
    s = compile_str(NULL_KEY, backend="interpreter").s
    with pytest.raises(BatchError, match=r"metadata\['pb.total'\]: group 1: null; a band key that is present"):
        s(np.ones(2), group_size=1, channels={"x": [30, 30]}, metadata={"pb": [{}, {"total": None}]})


def test_integer_band_arrays_are_accepted():
    s = band_shaper()
    out = s(np.ones(2), group_size=1, channels={"x": [15, 30]}, metadata={"pb": np.array([[10, 20, 0], [10, 20, 1]])})
    assert out.factors["fit"].tolist() == [0.5, 1.0]


def test_band_fields_of_literals_and_scalar_band_metadata():
    s = compile_str(src("""
        shaper s() produces real {
          input x: tokens
          meta pb: band
          term t = clip({1, 3, 0.5}.b, 0, 5) + (pb.a ?? 0)
        }
    """), backend="interpreter").s
    out = s(np.zeros(2), group_size=1, channels={"x": [1, 2]}, metadata={"pb": [{"a": 7, "b": 9, "f": 1}, None]})
    assert out.terms["t"].tolist() == [10.0, 3.0]


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_factors_apply_where_the_reward_entering_them_is_positive(backend):
    # NeMo-RL checks the clamped base once, before its band chain: a first band (f = 0) that wipes
    # the reward out does not stop the second one
    s = compile_str(src("""
        shaper s() requires binary produces nonneg {
          input x: tokens
          meta pb: {total: band, reasoning: band}
          factor first = band(x, pb.total) on reward > 0
          factor second = band(x, pb.reasoning) on reward > 0
        }
    """), backend=backend).s
    out = s([1.0], group_size=1, channels={"x": [10]},
            metadata={"pb": [{"total": {"a": 0, "b": 5, "f": 0}, "reasoning": {"a": 0, "b": 5, "f": 0.5}}]})
    assert out.rewards.tolist() == [0.0] and out.factors["first"].tolist() == [0.0]
    assert out.factors["second"].tolist() == [0.5]
