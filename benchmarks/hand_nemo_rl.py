"""A hand-written numba kernel for `nemo_rl.length_penalty` (all eight algorithms): the limit the
generated kernel is measured against (benchmarks/bench_limit.py).

It is written the way one would write it by hand: one pass per group for the selections and
reductions, group-level values as scalars, uniform params as scalars, two-valued logic except
where metadata can be missing, one pass for terms, clamp, factors and the output. Its arithmetic
follows the spec's definitions in the same order (sequential sums, min-max then centring, the
median-outward MAD), so its outputs are bit-identical to shapec's; bench_limit.py checks that on
random batches before it times anything.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# the params vector: uniform params as scalars, in this order
PARAMS = ("enabled", "top_percentile", "reasoning_bonus", "answer_bonus", "total_bonus",
          "longest_reasoning_penalty", "longest_answer_penalty", "longest_total_penalty",
          "group_reasoning_length_penalty_coeff", "group_answer_length_penalty_coeff",
          "group_total_length_penalty_coeff", "reasoning_zmad_threshold", "reasoning_zmad_penalty",
          "answer_zmad_threshold", "answer_zmad_penalty", "total_zmad_threshold", "total_zmad_penalty",
          "profiled_length_penalty", "profiled_length_n_std", "profiled_length_min_samples",
          "pass_rate_length_penalty_weight", "profile_band_total", "profile_band_reasoning",
          "profile_band_answer", "group_length_penalty_profile_gate", "group_length_penalty_profile_gate_channel",
          "group_length_penalty_profile_gate_field", "group_length_penalty_profile_gate_positive_only")
ENUMS = {"group_length_penalty_profile_gate_channel": ("total", "reasoning", "answer"),
         "group_length_penalty_profile_gate_field": ("a", "b", "f")}
BANDS = ("global_band_total", "global_band_reasoning", "global_band_answer")


def param_vector(params: dict) -> tuple[np.ndarray, np.ndarray]:
    """(28 scalars, (3, 4) global bands as a, b, f, present) from a resolved params dict."""
    pv = np.empty(len(PARAMS))
    for k, name in enumerate(PARAMS):
        v = params[name]
        pv[k] = ENUMS[name].index(v) if name in ENUMS else float(v)
    gb = np.full((3, 4), np.nan)
    gb[:, 3] = 0.0
    for c, name in enumerate(BANDS):
        if params.get(name) is not None:
            gb[c] = (*map(float, params[name]), 1.0)
    return pv, gb


@njit(cache=True, error_model="numpy")
def _sort(buf, k):
    """Insertion sort of buf[:k] (numpy's sort past 32), as shapec sorts a selection."""
    if k > 32:
        s = buf[:k]
        s.sort()
        return
    for t in range(1, k):
        v = buf[t]
        u = t - 1
        while u >= 0 and buf[u] > v:
            buf[u + 1] = buf[u]
            u -= 1
        buf[u + 1] = v


@njit(cache=True, error_model="numpy")
def _median(s, k):
    mid = k // 2
    if k % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2.0


@njit(cache=True, error_model="numpy")
def _mad(s, tmp, k):
    """Median of |x - median| of a sorted s[:k] (k > 0), merging outwards from the median."""
    med = _median(s, k)
    b = 0
    while b < k and s[b] < med:
        b += 1
    a = b - 1
    for t in range(k):
        if a >= 0 and (b >= k or med - s[a] <= s[b] - med):
            tmp[t] = med - s[a]
            a -= 1
        else:
            tmp[t] = s[b] - med
            b += 1
    return _median(tmp, k)


@njit(cache=True, error_model="numpy")
def _band(x, a, b, f):
    if not (b > a) or x <= a:
        return 1.0
    if x >= b:
        return f
    return 1.0 - (x - a) / (b - a) * (1.0 - f)


@njit(cache=True, error_model="numpy")
def _minmax_centred(x, right, s, e, buf, cen, c):
    """centered(1 - minmax(x where right) where right) * c into cen[:e-s] (right rollouts only)."""
    lo = np.inf
    hi = -np.inf
    for i in range(s, e):
        if right[i - s]:
            if x[i] < lo:
                lo = x[i]
            if x[i] > hi:
                hi = x[i]
    k = 0
    total = 0.0
    for i in range(s, e):
        r = 0.0 if hi == lo else (x[i] - lo) / (hi - lo)
        buf[i - s] = 1.0 - r
        if right[i - s]:
            total += 1.0 - r
            k += 1
    mean = total / k
    for i in range(s, e):
        cen[i - s] = (buf[i - s] - mean) * c


@njit(cache=True, error_model="numpy")
def _zmad(x, right, s, e, buf, tmp, thr, flag):
    """flag[t] |= the zMAD outlier test of x among the right rollouts."""
    k = 0
    for i in range(s, e):
        if right[i - s]:
            buf[k] = x[i]
            k += 1
    _sort(buf, k)
    mad = _mad(buf, tmp, k)
    if not mad > 0.0:
        return False
    med = _median(buf, k)
    if not mad / (med if med >= 1e-09 else 1e-09) >= 0.015:
        return False
    for i in range(s, e):
        flag[i - s] = right[i - s] and 0.6745 * (x[i] - med) / mad > thr
    return True


@njit(cache=True, error_model="numpy")
def length_penalty(rewards, offsets, reasoning, answer, low_effort, bands, prof_off, prof_reward, prof_length,
                   pv, gb, out, terms, factors, skip, gates, metrics, breakdown):
    """bands: (3, G, 4) profile bands (total, reasoning, answer); terms (12, n) and factors (3, n)
    are written only with breakdown. Returns the first non-finite reward's rollout, or -1."""
    G = offsets.shape[0] - 1
    n = rewards.shape[0]
    width = 1
    for g in range(G):
        width = max(width, offsets[g + 1] - offsets[g], prof_off[g + 1] - prof_off[g])
    total = np.empty(width)
    right = np.empty(width, np.bool_)
    buf = np.empty(width)
    tmp = np.empty(width)
    flag = np.empty(width, np.bool_)
    cr = np.empty(width)
    ca = np.empty(width)
    ct = np.empty(width)
    tv = np.empty((12, width))
    fv = np.empty((3, width))
    ba = np.empty(3)
    bb = np.empty(3)
    bf = np.empty(3)
    bp = np.empty(3, np.bool_)
    chan = int(pv[25])
    field = int(pv[26])
    bad = -1
    for g in range(G):
        s = offsets[g]
        e = offsets[g + 1]
        k = e - s
        code = 0 if pv[0] == 1.0 else 1
        # one pass: channels, the binary check, right, low effort, counts, the gate pool's mean
        low = False
        nright = 0
        pool = 0
        pool_sum = 0.0
        lmax = -np.inf
        for i in range(s, e):
            r = rewards[i]
            if code == 0 and not (abs(r) <= 1e-06 or abs(r - 1.0) <= 1e-06):
                code = 2
            t = reasoning[i] + answer[i]
            total[i - s] = t
            ok = r > 0.0
            right[i - s] = ok
            low = low or low_effort[i] == 1.0
            if ok:
                nright += 1
                if t > lmax:
                    lmax = t
            if ok or pv[27] != 1.0:
                pool += 1
                pool_sum += t if chan == 0 else (reasoning[i] if chan == 1 else answer[i])
        skip[g] = code
        full = not low
        block = full and nright >= 2
        for q in range(12):
            for t in range(k):
                tv[q, t] = 0.0
        # top: the nth largest reward among the right ones
        top = np.nan
        if nright > 0:
            m = 0
            for i in range(s, e):
                if right[i - s]:
                    buf[m] = rewards[i]
                    m += 1
            _sort(buf, m)
            idx = max(0.0, np.trunc(nright * pv[1]) - 1.0)
            if idx < m:
                top = buf[m - 1 - int(idx)]
        # profile bands: the metadata's, else the global param's
        for c in range(3):
            src = bands[c, g] if bands[c, g, 3] == 1.0 else gb[c]
            ba[c] = src[0]
            bb[c] = src[1]
            bf[c] = src[2]
            bp[c] = src[3] == 1.0
        limit = (ba[chan] if field == 0 else (bb[chan] if field == 1 else bf[chan])) if bp[chan] else np.nan
        if pv[24] != 1.0:
            gate, gcode = True, 0
        elif limit != limit:
            gate, gcode = False, 1
        elif pool == 0:
            gate, gcode = False, 2
        elif pool_sum / pool > limit:
            gate, gcode = True, 3
        else:
            gate, gcode = False, 4
        if block:
            # 1. shortest bonus, 2. longest top-scorer penalty
            for c in range(3):
                x = reasoning if c == 0 else (answer if c == 1 else total)
                off = s if c == 2 else 0  # total is indexed within the group, the inputs by rollout
                bonus = pv[2 + c]
                if bonus > 0.0:
                    best = -1
                    for i in range(s, e):
                        if right[i - s] and x[i - off] > 0.0 and (best < 0 or x[i - off] < x[best + s - off]):
                            best = i - s
                    if best >= 0 and rewards[best + s] >= top:
                        tv[c, best] = bonus
                pen = pv[5 + c]
                if pen > 0.0:
                    cnt = 0
                    best = -1
                    for i in range(s, e):
                        if right[i - s] and rewards[i] >= top and x[i - off] > 0.0:
                            cnt += 1
                            if best < 0 or x[i - off] > x[best + s - off]:
                                best = i - s
                    if cnt >= 2:
                        tv[3 + c, best] = -pen
            # 3. group relative length
            c0 = pv[8] if gate else 0.0
            c1 = pv[9] if gate else 0.0
            c2 = pv[10] if gate else 0.0
            if c0 > 0.0 or c1 > 0.0 or c2 > 0.0:
                _minmax_centred(reasoning, right, s, e, buf, cr, c0)
                _minmax_centred(answer, right, s, e, buf, ca, c1)
                _minmax_centred(total, right, s - s, e - s, buf, ct, c2)
                for t in range(k):
                    if right[t]:
                        tv[6, t] = cr[t] + ca[t] + ct[t]
            # 4. zMAD outliers
            for c in range(3):
                thr = pv[11 + 2 * c]
                pen = pv[12 + 2 * c]
                if thr > 0.0 and pen != 0.0:
                    if c == 2:
                        hit = _zmad(total, right, 0, k, buf, tmp, thr, flag)
                    else:
                        hit = _zmad(reasoning if c == 0 else answer, right, s, e, buf, tmp, thr, flag)
                    if hit:
                        for t in range(k):
                            if flag[t]:
                                tv[7 + c, t] = -pen
        # 5. profiled length threshold (metadata: may be missing or empty)
        if full and pv[17] > 0.0:
            js = prof_off[g]
            je = prof_off[g + 1]
            passing = 0
            psum = 0.0
            for j in range(js, je):
                if prof_reward[j] > 0.0:
                    passing += 1
                    psum += prof_length[j]
            if passing >= pv[19]:
                spread = 0.0
                mean = psum / passing if passing > 0 else np.nan
                if passing >= 2:
                    ss = 0.0
                    for j in range(js, je):
                        if prof_reward[j] > 0.0:
                            d = prof_length[j] - mean
                            ss += d * d
                    spread = np.sqrt(ss / (passing - 1))
                threshold = mean + pv[18] * spread
                for t in range(k):
                    adj = 0.0
                    for q in range(10):
                        adj += tv[q, t]
                    if total[t] >= threshold and adj >= 0.0:
                        tv[10, t] = -pv[17]
        # 8. pass-rate-scaled length penalty
        rate = nright / float(k)
        if full and pv[20] > 0.0 and rate > 0.0 and lmax > 0.0:
            for t in range(k):
                if right[t]:
                    tv[11, t] = -pv[20] * rate * total[t] / lmax
        # terms, clamp, factors and the output in one pass
        for t in range(k):
            i = s + t
            if code != 0:
                out[i] = rewards[i]
                for c in range(3):
                    fv[c, t] = 1.0
                continue
            acc = 0.0
            for q in range(12):
                acc += tv[q, t]
            run = rewards[i] + acc
            run = 0.0 if run < 0.0 else run
            base = run
            for c in range(3):
                fv[c, t] = 1.0
                if full and pv[21 + c] == 1.0 and right[t] and bp[c] and base > 0.0:
                    x = total[t] if c == 0 else (reasoning[i] if c == 1 else answer[i])
                    m = _band(x, ba[c], bb[c], bf[c])
                    fv[c, t] = m
                    run = run * m
            out[i] = run
            if bad < 0 and not np.isfinite(run):
                bad = i
        if code == 0:
            gates[0, g] = 0 if full else 1
            gates[1, g] = 0 if block else 1
            gates[2, g] = gcode
        else:
            gates[0, g] = -1
            gates[1, g] = -1
            gates[2, g] = -1
        if breakdown:
            for t in range(k):
                for q in range(12):
                    terms[q, s + t] = tv[q, t] if code == 0 else 0.0
                for c in range(3):
                    factors[c, s + t] = fv[c, t]
    m0 = 0.0
    m1 = 0.0
    m2 = 0.0
    m3 = 0.0
    m4 = 0.0
    for g in range(G):
        for i in range(offsets[g], offsets[g + 1]):
            m0 += rewards[i]
            m1 += out[i] - rewards[i]
            m2 += 1.0 if skip[g] == 0 and rewards[i] > 0.0 and out[i] <= 0.0 else 0.0
            m3 += 1.0 if out[i] != rewards[i] else 0.0
            m4 += 1.0 if skip[g] == 2 else 0.0
    metrics[0] = m0 / n
    metrics[1] = m1 / n
    metrics[2] = m2 / n
    metrics[3] = m3 / n
    metrics[4] = m4 / n
    return bad
