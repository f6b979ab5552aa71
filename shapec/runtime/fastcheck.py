"""One-pass numba checks of a batch's arrays: the fast yes of `validate.py`'s validators.

A numpy validator costs a few microseconds per reduction, and a call on one small group ran a
hundred of them, more than the kernel itself. Each function here answers only "is this array
clean?" in one pass over it; when the answer is no, the numpy validator runs and raises the error
that names the field and index, so messages (and what counts as valid) are defined in one place.
Loaded only by the numba backend (`validate.use_compiled_checks`): the interpreter never imports numba.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def clean_values(arr, nonneg, allow_nan, whole):
    """Every value finite (or NaN, when `allow_nan`), >= 0 when `nonneg`, integral when `whole`.

    The bad values are counted over the whole array, without a branch or an early exit, so the
    compiler vectorizes the loop: 3x faster on batch-sized arrays than a pass that stops at the
    first bad value (which only a bad batch, then worded by the numpy validator, would gain)."""
    bad = 0
    if allow_nan:  # NaN passes: abs(v) == inf and v < 0 are False for it, and `whole` tests v == v first
        for i in range(arr.shape[0]):
            v = arr[i]
            bad += (abs(v) == math.inf) | (nonneg & (v < 0.0)) | (whole & (v == v) & (v != np.floor(v)))
    else:  # v - v is 0 for a finite v, NaN for an infinite or NaN one
        for i in range(arr.shape[0]):
            v = arr[i]
            bad += ((v - v) != 0.0) | (nonneg & (v < 0.0)) | (whole & (v != np.floor(v)))
    return bad == 0


@njit(cache=True, nogil=True)
def clean_flags(arr, allow_nan, out):
    """`clean_values(arr, False, allow_nan, False)` and, when it holds, `out` filled with the flags
    batch.as_flags makes (any non-zero number 1, NaN as numpy's own NaN, whatever the input's sign or
    payload): the check and the conversion in one pass."""
    bad = 0
    for i in range(arr.shape[0]):
        v = arr[i]
        bad += (abs(v) == math.inf) | ((not allow_nan) & (v != v))
        out[i] = math.nan if v != v else (1.0 if v != 0.0 else 0.0)
    return bad == 0


@njit(cache=True, nogil=True)
def clean_offsets(off, total):
    """Start at 0, never go back, end at `total`."""
    if off.shape[0] < 1 or off[0] != 0 or off[off.shape[0] - 1] != total:
        return False
    for i in range(1, off.shape[0]):
        if off[i] < off[i - 1]:
            return False
    return True


@njit(cache=True, nogil=True)
def band_rows(value, out):
    """Fill `out` (G, 4: a, b, f, present) from a (G, 3) or (G, 4) table; False if any row is bad.

    An absent row (three NaNs, or a 0 in the present column) becomes NaN, NaN, NaN, 0; a present
    one must have finite a < b and 0 <= f <= 1."""
    flagged = value.shape[1] == 4
    for g in range(value.shape[0]):
        a, b, f = value[g, 0], value[g, 1], value[g, 2]
        if flagged:
            flag = value[g, 3]
            if flag != 0.0 and flag != 1.0:
                return False
            present = flag == 1.0
        else:
            present = not (math.isnan(a) and math.isnan(b) and math.isnan(f))
        if present:
            if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(f) and b > a and 0.0 <= f <= 1.0):
                return False
            out[g, 0], out[g, 1], out[g, 2], out[g, 3] = a, b, f, 1.0
        else:
            out[g, 0], out[g, 1], out[g, 2], out[g, 3] = math.nan, math.nan, math.nan, 0.0
    return True
