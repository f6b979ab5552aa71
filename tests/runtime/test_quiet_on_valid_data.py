"""Valid data at the edges of float64 ([1e308, 1e308], [-1e308, 1e308]) and zeros run without a
numpy RuntimeWarning on both backends (a suite run with -W error would fail on one, and a caller
would get the warning instead of the result or of shapec's error): each value is the documented
one, overflow and 0 / 0 included, and a shaped reward that is not finite is refused as always."""

from __future__ import annotations

import numpy as np
import pytest

from shapec import compile_str

pytestmark = pytest.mark.filterwarnings("error")
BACKENDS = ["interpreter", "numba"]
# every value is a term clip(value, -5, 5) ?? 7, so its rollouts read: 5 for +inf (or anything
# past 5), -5 for -inf, 7 where it is missing (0 / 0, inf - inf, a log of a negative number)
VALUES = {
    "count": "count(x > 0)", "any": "any(x > 0) ? 1 : 0", "all": "all(x > 0) ? 1 : 0", "sum": "sum(x)",
    "mean": "mean(x)", "mean_pos": "mean(x where x > 0)", "median": "median(x)", "std": "std(x)", "mad": "mad(x)",
    "min": "min(x)", "max": "max(x)", "quantile": "quantile(x, 0.25)", "nth": "nth_largest(x, 1)",
    "minmax": "minmax(x)", "centered": "centered(x)", "bsum": "batch.sum(x)", "bmean": "batch.mean(x)",
    "bmin": "batch.min(x)", "bmax": "batch.max(x)", "square": "x * x", "power": "x ** 2", "root": "x ** 0.5",
    "exp": "exp(x)", "sigmoid": "sigmoid(x)", "log": "log(x)", "sqrt": "sqrt(x)", "band": "band(x, {0, 1e308, 0.5})",
    "wide_band": "band(x, {-1e308, 1e308, 0.5})",
    "to_top": "x / (x - max(x))", "share": "x / sum(x)", "twice": "reward + reward",
}
SPEC = "shaper t() requires real produces real {\n  input x: float\n" + "".join(
    f"  term {name} = clip({value}, -5, 5) ?? 7\n" for name, value in VALUES.items()) + \
    "  term argmin = 1 on argmin(x)\n  term argmax = 1 on argmax(x)\n}\n"
EXPECTED = {  # per data, each term's two rollouts (one number: both)
    (1e308, 1e308): dict(
        count=2, any=1, all=1, sum=5, mean=5, mean_pos=5, median=5, std=5, mad=5, min=5, max=5, quantile=5, nth=5,
        minmax=0, centered=-5, bsum=5, bmean=5, bmin=5, bmax=5, square=5, power=5, root=5, exp=5, sigmoid=1,
        log=5, sqrt=5, band=0.5, wide_band=0.5, to_top=5, share=0, twice=5, argmin=[1, 0], argmax=[1, 0]),
    # quantile interpolates -1e308 + (1e308 - -1e308) * 0.25 and so overflows; minmax's 2e308 / 2e308 is missing
    (-1e308, 1e308): dict(
        count=1, any=1, all=0, sum=0, mean=0, mean_pos=5, median=0, std=5, mad=5, min=-5, max=5, quantile=5,
        nth=-5, minmax=[0, 7], centered=[-5, 5], bsum=0, bmean=0, bmin=-5, bmax=5, square=5, power=5, root=[7, 5],
        exp=[0, 5], sigmoid=[0, 1], log=[7, 5], sqrt=[7, 5], band=[1, 0.5], wide_band=[1, 0.5], to_top=[0, 5],
        share=[-5, 5], twice=[-5, 5], argmin=[1, 0], argmax=[0, 1]),
    # 0 inside the wide band is 1 - (0 - -1e308) / (1e308 - -1e308) * 0.5, and 1e308 / inf is 0
    (0.0, 0.0): dict(
        count=0, any=0, all=0, sum=0, mean=0, mean_pos=7, median=0, std=0, mad=0, min=0, max=0, quantile=0, nth=0,
        minmax=0, centered=0, bsum=0, bmean=0, bmin=0, bmax=0, square=0, power=0, root=0, exp=1, sigmoid=0.5,
        log=7, sqrt=0, band=1, wide_band=1, to_top=7, share=7, twice=0, argmin=[1, 0], argmax=[1, 0]),
}


@pytest.mark.parametrize("data", list(EXPECTED))
def test_huge_and_zero_values_give_the_documented_values_without_a_warning(data):
    outs = []
    for backend in BACKENDS:
        out = compile_str(SPEC, "t.shape", backend)["t"](np.array(data), group_size=2, channels={"x": list(data)})
        want = {name: v if isinstance(v, list) else [v, v] for name, v in EXPECTED[data].items()}
        assert {name: values.tolist() for name, values in out.terms.items()} == want, backend
        outs.append(out)
    for name, values in outs[0].terms.items():
        assert values.tobytes() == outs[1].terms[name].tobytes(), name


REFUSED = {  # a shaped reward past float64, from valid data
    "result = reward + reward": [1e308, 1e308],
    "result = mean(reward)": [1e308, 1e308],
    "result = std(reward)": [-1e308, 1e308],
    "term a = reward\n  term b = reward": [1e308, 1e308],
    "term a = reward\n  term b = -reward\n  term c = reward": [1e308, 1e308],  # inf - inf on the way
    "clamp >= reward * 10": [1e308, 1e308],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("body", list(REFUSED))
def test_a_reward_that_comes_out_non_finite_is_refused_without_a_warning(backend, body):
    shaper = compile_str(f"shaper t() requires real produces real {{\n  {body}\n}}\n", "t.shape", backend)["t"]
    with pytest.raises(FloatingPointError, match=r"shaper 't' produced a non-finite reward for rollout 0 \(group 0\)"):
        shaper(np.array(REFUSED[body]), group_size=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_missing_result_leaves_the_reward_as_it_came_in(backend):
    """0 / 0, or metadata a group does not have: the result fails closed, as a term that is not applied."""
    shaper = compile_str("shaper t() requires real produces real {\n  meta cap: float\n"
                         "  result = (reward - max(reward)) / (max(reward) - min(reward)) + 0 * cap\n}\n", "t.shape", backend)["t"]
    out = shaper(np.array([0.0, 0.0, 1.0, 3.0, 2.0, 5.0]), group_size=2, metadata={"cap": [1.0, 1.0, None]})
    assert out.rewards.tolist() == [0.0, 0.0, -1.0, 0.0, 2.0, 5.0]
