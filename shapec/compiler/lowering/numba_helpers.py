"""The numba helpers of generated modules, as plain Python: each restates one rule of
runtime/interp.py for scalars (three-valued logic, missing values, reductions over a buffer).

shapec never calls them itself: helper_source.py copies the source of the ones a generated
module calls into that module, each under `@njit`, so the module (and numba's on-disk cache of
it) depends on nothing in shapec. Here they stay lintable and testable without numba.
"""

from math import isnan, nan

import numpy as np


def k_and(a, b):
    if a == 0.0 or b == 0.0:
        return 0.0
    if isnan(a) or isnan(b):
        return nan
    return 1.0


def k_or(a, b):
    if a == 1.0 or b == 1.0:
        return 1.0
    if isnan(a) or isnan(b):
        return nan
    return 0.0


def k_cond(c, a, b):
    if c == 1.0:
        return a
    if c == 0.0:
        return b
    return nan


def k_fallback(a, b):
    return b if isnan(a) else a


def k_min(a, b):
    if isnan(a) or isnan(b):
        return nan
    return a if a <= b else b


def k_max(a, b):
    if isnan(a) or isnan(b):
        return nan
    return a if a >= b else b


def k_clip(x, lo, hi):
    if isnan(x) or isnan(lo) or isnan(hi):
        return nan
    y = x if x >= lo else lo
    return y if y <= hi else hi


def k_log(x):
    return np.log(x) if x > 0.0 else nan


def k_sqrt(x):
    return np.sqrt(x) if x >= 0.0 else nan


def k_pow(a, b):
    """a ** b as np.power (nan for a negative base and a fractional exponent). Written inline as
    `a ** b`, numba folds a power of two constants with Python's `**`, a complex number there, and
    the kernel does not compile; a call's arguments are never folded."""
    return np.power(a, b)


def k_state(old, new):
    """A state's next value: the update where it is finite, else the previous value."""
    return new if np.isfinite(new) else old


def k_flag(b):
    return 1.0 if b else 0.0


def k_at(index, k):
    """The rollout an index names, as an int, if it is a whole number in [0, k); else -1."""
    if index >= 0.0 and index < k and float(int(index)) == index:
        return int(index)
    return -1


def k_cmp(op, a, b):
    if isnan(a) or isnan(b):
        return nan
    if op == 0:
        return k_flag(a == b)
    if op == 1:
        return k_flag(a != b)
    if op == 2:
        return k_flag(a < b)
    if op == 3:
        return k_flag(a <= b)
    if op == 4:
        return k_flag(a > b)
    return k_flag(a >= b)


def k_band(x, a, b, f, present):
    """1 up to a, linear to f at b, f past b; 1 for a malformed band; missing for no band."""
    if present != 1.0:
        return nan
    if isnan(a) or isnan(b) or isnan(f) or not (b > a):
        return 1.0
    if x <= a:
        return 1.0
    if x >= b:
        return f
    return 1.0 - (x - a) / (b - a) * (1.0 - f)


def k_gate_code(v):
    if v == 1.0:
        return 0
    if v == 0.0:
        return 1
    return 2


def k_usable(buf, k):
    """A non-empty selection without missing values."""
    if k == 0:
        return False
    for t in range(k):
        if isnan(buf[t]):
            return False
    return True


def k_rank(buf, k, t):
    """buf[t]'s rank among buf[:k]: how many values come before it, ascending, equal values in
    their order (so every rank differs). Quadratic in k, with no allocation: groups are small."""
    x = buf[t]
    r = 0
    for u in range(k):
        v = buf[u]
        r += (v < x) | ((v == x) & (u < t))
    return float(r)


def k_seq_sum(buf, k):
    total = 0.0
    for t in range(k):
        total += buf[t]
    return total


def k_sort(buf, k):
    """Sort buf[:k] in place, stably (0.0 and -0.0 are equal, so which comes first is the rollout
    order, as in the interpreter's np.sort(kind="stable")): insertion sort for a group-sized
    selection, a bottom-up merge sort beyond (the left run first on ties). Numba's own sort is not
    stable, and its stable argsort takes seconds to compile in every kernel that sorts (so does a
    slice assignment: the copy back is a loop)."""
    if k > 32:
        merged = np.empty(k)
        width = 1
        while width < k:
            for lo in range(0, k, 2 * width):
                mid = min(lo + width, k)
                hi = min(lo + 2 * width, k)
                a = lo
                b = mid
                for t in range(lo, hi):
                    if a < mid and (b >= hi or buf[a] <= buf[b]):
                        merged[t] = buf[a]
                        a += 1
                    else:
                        merged[t] = buf[b]
                        b += 1
            for t in range(k):
                buf[t] = merged[t]
            width *= 2
        return
    for t in range(1, k):
        v = buf[t]
        u = t - 1
        while u >= 0 and buf[u] > v:
            buf[u + 1] = buf[u]
            u -= 1
        buf[u + 1] = v


def k_sorted_median(buf, k):
    mid = k // 2
    if k % 2:
        return buf[mid]
    return (buf[mid - 1] + buf[mid]) / 2.0


def red_count(buf, ibuf, k, extra):
    c = 0.0
    for t in range(k):
        if buf[t] == 1.0:
            c += 1.0
    return c


def red_any(buf, ibuf, k, extra):
    for t in range(k):
        if buf[t] == 1.0:
            return 1.0
    return 0.0


def red_all(buf, ibuf, k, extra):
    for t in range(k):
        if buf[t] != 1.0:
            return 0.0
    return 1.0


def red_sum(buf, ibuf, k, extra):
    return k_seq_sum(buf, k)


def red_mean(buf, ibuf, k, extra):
    if not k_usable(buf, k):
        return nan
    return k_seq_sum(buf, k) / k


def red_min(buf, ibuf, k, extra):
    if not k_usable(buf, k):
        return nan
    best = buf[0]
    for t in range(1, k):
        if buf[t] < best:
            best = buf[t]
    return best


def red_max(buf, ibuf, k, extra):
    if not k_usable(buf, k):
        return nan
    best = buf[0]
    for t in range(1, k):
        if buf[t] > best:
            best = buf[t]
    return best


def red_argmin(buf, ibuf, k, extra):
    """Index in the group of the first smallest selected value."""
    if not k_usable(buf, k):
        return nan
    best = 0
    for t in range(1, k):
        if buf[t] < buf[best]:
            best = t
    return float(ibuf[best])


def red_argmax(buf, ibuf, k, extra):
    if not k_usable(buf, k):
        return nan
    best = 0
    for t in range(1, k):
        if buf[t] > buf[best]:
            best = t
    return float(ibuf[best])


def red_std(buf, ibuf, k, extra):
    """Sample standard deviation (ddof 1), two sequential passes."""
    if not k_usable(buf, k) or k < 2:
        return nan
    mean = k_seq_sum(buf, k) / k
    ss = 0.0
    for t in range(k):
        d = buf[t] - mean
        ss += d * d
    return np.sqrt(ss / (k - 1))


def srt_median(s, tmp, k, extra):
    """The order statistics below read a selection already sorted by k_sort."""
    if not k_usable(s, k):
        return nan
    return k_sorted_median(s, k)


def srt_mad(s, tmp, k, extra):
    """Median of |x - median|: merging outwards from the median yields the deviations in
    increasing order (med - x is |x - med| below it, but for the sign of a zero: -0.0 - 0.0 is
    -0.0, hence abs), so no second sort."""
    if not k_usable(s, k):
        return nan
    med = k_sorted_median(s, k)
    b = 0
    while b < k and s[b] < med:
        b += 1
    a = b - 1
    for t in range(k):
        if a >= 0 and (b >= k or med - s[a] <= s[b] - med):
            tmp[t] = abs(med - s[a])
            a -= 1
        else:
            tmp[t] = abs(s[b] - med)
            b += 1
    return k_sorted_median(tmp, k)


def srt_quantile(s, tmp, k, q):
    """Linear interpolation between the order statistics around q * (k - 1); at a whole position
    the order statistic itself, as np.quantile gives it (-0.0 stays -0.0, and no inf * 0)."""
    if not k_usable(s, k):
        return nan
    if isnan(q) or q < 0.0 or q > 1.0:
        return nan
    pos = q * (k - 1)
    lo = int(np.floor(pos))
    if pos == lo:
        return s[lo]
    return s[lo] + (s[lo + 1] - s[lo]) * (pos - lo)


def srt_nth_largest(s, tmp, k, i):
    """Counting down from the top with equal values in rollout order, as max takes the first of
    them: the run of values equal to s[p] is read from its other end (s[a + b - p])."""
    if not k_usable(s, k):
        return nan
    if isnan(i) or i < 0.0 or i >= k:
        return nan
    p = k - 1 - int(i)
    a = p
    while a > 0 and s[a - 1] == s[p]:
        a -= 1
    b = p
    while b < k - 1 and s[b + 1] == s[p]:
        b += 1
    return s[a + b - p]
