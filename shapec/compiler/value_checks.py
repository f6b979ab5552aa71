"""The value checks of a call's arrays, as plain Python: one pass over an array each, no allocation.

Every call validates each array it is given (runtime/batch.py); on a group of four rollouts a
numpy reduction costs more than the kernel, so the checks are machine code too. store.py copies
these functions into a generated module of the private cache under `@njit` (as kernels carry
the numba helpers), compiles them for the signatures below and hands them to the batch layer.
They only say whether an array is clean: on False, runtime/validate.py looks again and words the
error (the field, the first bad index, what was expected). Here they stay testable without numba.
"""

import math

import numpy as np

# each function's numba signature: the batch layer hands them fresh C-contiguous arrays
SIGNATURES = {
    "clean_values": "boolean(float64[::1], boolean, boolean, boolean)",
    "as_flags": "float64[::1](float64[::1])",
    "band_rows": "boolean(float64[:, ::1], float64[:, ::1])",
    "clean_offsets": "boolean(int64[::1], int64)",
}


def clean_values(arr, nonneg, allow_nan, whole):
    """Every value finite (NaN allowed when allow_nan: a missing one), >= 0 when nonneg, whole
    when whole. Bad values are counted over the whole array without an early exit, so the loop
    vectorizes."""
    bad = 0
    for i in range(arr.shape[0]):
        v = arr[i]
        finite = (v - v) == 0.0
        bad += (not (finite or (allow_nan and v != v))) | (nonneg & (v < 0.0)) | (whole & finite & (v != np.floor(v)))
    return bad == 0


def as_flags(arr):
    """A bool column as the kernels read it: any non-zero number is 1, zero is 0, NaN stays missing."""
    out = np.empty(arr.shape[0])
    for i in range(arr.shape[0]):
        v = arr[i]
        out[i] = math.nan if v != v else (1.0 if v != 0.0 else 0.0)
    return out


def band_rows(table, out):
    """Fill `out` (rows a, b, f, present) from a (G, 3) or (G, 4) table; False when a row is bad.
    Three columns: three NaNs are an absent row; four: the last column says which, 0 or 1. An
    absent row becomes NaN, NaN, NaN, 0; a present one must have finite a < b and 0 <= f <= 1."""
    flagged = table.shape[1] == 4
    for g in range(table.shape[0]):
        a, b, f = table[g, 0], table[g, 1], table[g, 2]
        if flagged:
            flag = table[g, 3]
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


def clean_offsets(off, total):
    """Group boundaries that start at 0, never go back and end at `total`."""
    if off.shape[0] < 1 or off[0] != 0 or off[off.shape[0] - 1] != total:
        return False
    for i in range(1, off.shape[0]):
        if off[i] < off[i - 1]:
            return False
    return True
