"""The value rules of the language, on numpy values: three-valued logic and comparisons, bands and
reductions, written once. The reference interpreter evaluates the IR with them, and the
specialiser and the batch-reach check fold param-level values with them; the kernels' helpers
(compiler/lowering/numba_helpers.py) restate them for scalars and are held to them by tests.

Booleans are three-valued: 1.0 true, 0.0 false, NaN missing.
"""

from __future__ import annotations

import math

import numpy as np

NAN = math.nan


# ----------------------------------------------------------------- three-valued ops
def k_and(a, b):
    return np.where((a == 0) | (b == 0), 0.0, np.where(np.isnan(a) | np.isnan(b), NAN, 1.0))


def k_or(a, b):
    return np.where((a == 1) | (b == 1), 1.0, np.where(np.isnan(a) | np.isnan(b), NAN, 0.0))


_CMP = {
    "==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
}


def k_cmp(op, a, b):
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(a) | np.isnan(b), NAN, _CMP[op](a, b).astype(np.float64))


def band_multiplier(x, a, b, f, present):
    """1 up to a, linear to f at b, f past b; 1 for a malformed band; missing for no band."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        malformed = np.isnan(a) | np.isnan(b) | np.isnan(f) | ~(b > a)
        inner = 1.0 - (x - a) / (b - a) * (1.0 - f)
        m = np.where(x <= a, 1.0, np.where(x >= b, f, inner))
        m = np.where(malformed, 1.0, m)
        return np.where(present == 1, m, NAN)


def state_update(old: float, new: float) -> float:
    """A state's next value: the update where it is finite, else the previous value. A missing
    update (a mean over no correct rollout) or an overflowing one fails closed, so a state is
    always finite and every state_dict() loads back (load_state_dict refuses NaN and infinity)."""
    return new if math.isfinite(new) else old


def seq_sum(values) -> float:
    total = 0.0
    for v in values:
        total += v
    return total


def _sorted(x):
    """Stably: 0.0 and -0.0 are equal, so their order is the rollout order (as k_sort keeps it)."""
    return np.sort(x, kind="stable")


def _median(s):
    k = len(s)
    mid = k // 2
    return float(s[mid]) if k % 2 else (float(s[mid - 1]) + float(s[mid])) / 2.0


def reduce_values(op: str, x: np.ndarray, extra: tuple[float, ...]) -> float:
    """One reduction over an already-selected set of values (mask applied). Sums, squares and
    differences of finite values may pass float64 (inf, then inf - inf is NaN) as the kernels' do,
    silently: a non-finite reward is refused and a missing value fails closed."""
    with np.errstate(over="ignore", invalid="ignore"):  # a fresh one per call: reentrant, per thread
        return _reduce(op, x, extra)


def _reduce(op: str, x: np.ndarray, extra: tuple[float, ...]) -> float:
    k = len(x)
    if op == "count":
        return float(np.sum(x == 1))
    if op == "any":
        return 1.0 if np.any(x == 1) else 0.0
    if op == "all":
        return 1.0 if np.all(x == 1) else 0.0
    if op == "sum":
        return seq_sum(x)
    if k == 0 or np.isnan(x).any():
        return NAN
    if op == "mean":
        return seq_sum(x) / k
    if op == "min":  # the first of equal values, as the kernels' strict comparisons keep (0.0 before -0.0)
        return float(x[np.argmin(x)])
    if op == "max":
        return float(x[np.argmax(x)])
    if op == "argmin":
        return float(np.argmin(x))
    if op == "argmax":
        return float(np.argmax(x))
    if op == "median":
        return _median(_sorted(x))
    if op == "mad":
        med = _median(_sorted(x))
        return _median(_sorted(np.abs(x - med)))
    if op == "std":
        if k < 2:
            return NAN
        mean = seq_sum(x) / k
        return math.sqrt(seq_sum((x - mean) ** 2) / (k - 1))
    if op == "quantile":
        q = extra[0]
        if math.isnan(q) or q < 0 or q > 1:
            return NAN
        s = _sorted(x)
        pos = q * (k - 1)
        lo = int(math.floor(pos))
        if pos == lo:  # the order statistic itself, as np.quantile gives it
            return float(s[lo])
        return float(s[lo] + (s[lo + 1] - s[lo]) * (pos - lo))
    if op == "nth_largest":
        i = extra[0]
        if math.isnan(i) or i < 0 or i >= k:
            return NAN
        return float(x[np.argsort(-x, kind="stable")][int(i)])  # from the top, equal values in rollout order
    raise ValueError(f"interpreter: unknown reduction {op}")
