"""The value checks of a call's arrays, as plain Python: one pass over each array, no allocation.

Every call validates each array it is given (runtime/batch.py); on a group of four rollouts a
numpy reduction costs more than the kernel, so the checks are machine code too, and one call
checks all of a call's arrays (each call into numba costs about a microsecond). store.py copies
these functions into a generated module of the private cache under `@njit` (as kernels carry the
numba helpers), compiles the entry points for the signatures below and hands them to the batch
layer. They only say whether everything is clean: runtime/validate.py then looks again and words
the error (the field, the first bad index, what was expected). Here they stay testable without
numba.
"""

import math

import numpy as np

# a numba signature has a fixed arity: a call with more arrays, tables or lists takes more calls
ARRAYS, TABLES, LISTS = 8, 4, 2

# each entry point's numba signature: the batch layer hands them C-contiguous arrays. all_clean takes
# them as separate arguments, which numba types in C (a tuple it types in Python, about twice the cost)
SIGNATURES = {
    "all_clean": "boolean({})".format(", ".join(
        ["int64[::1]"] * LISTS + ["int64"] * LISTS + ["float64[::1]"] * ARRAYS + ["int64[:, ::1]"]
        + ["float64[:, ::1]"] * TABLES + ["float64[:, :, ::1]"])),
    "as_flags": "float64[::1](float64[::1])",
    "clean_offsets": "boolean(int64[::1], int64)",
}
HELPERS = ("clean_values", "clean_whole", "band_rows")  # compiled with the entry points that call them


def all_clean(off0, off1, end0, end1, a0, a1, a2, a3, a4, a5, a6, a7, rules, t0, t1, t2, t3, rows):
    """Whether a call's arrays are all clean, in one call: each list's offsets (off0, off1) slice its
    items (clean_offsets, to end0, end1; a spare slot is [0] ending at 0), each array a_k with
    k < len(rules) holds clean values by rules[k] = (nonneg, allow_nan, whole, flags), and each band
    table t_k with k < len(rows) has good rows, written to rows[k] (band_rows). When all are clean,
    each array with `flags` becomes 0/1 in place (as_flags: the batch layer hands only its own copies
    for it). Spare slots past the call's own are not read."""
    offsets, ends = (off0, off1), (end0, end1)
    arrays, tables = (a0, a1, a2, a3, a4, a5, a6, a7), (t0, t1, t2, t3)
    for k in range(len(ends)):
        if not clean_offsets(offsets[k], ends[k]):
            return False
    for k in range(rules.shape[0]):
        if not clean_values(arrays[k], rules[k, 0] != 0, rules[k, 1] != 0, rules[k, 2] != 0):
            return False
    for k in range(rows.shape[0]):
        if not band_rows(tables[k], rows[k]):
            return False
    for k in range(rules.shape[0]):
        if rules[k, 3] != 0:
            arr = arrays[k]
            for i in range(arr.shape[0]):
                v = arr[i]
                arr[i] = math.nan if v != v else (1.0 if v != 0.0 else 0.0)  # one NaN, whatever its payload
    return True


def clean_values(arr, nonneg, allow_nan, whole):
    """Every value finite (NaN allowed when allow_nan: a missing one), >= 0 when nonneg, whole
    when whole. Bad values are counted over the whole array without an early exit, and the flags
    pick a loop before it starts, so each loop vectorizes (a flag read inside the loop costs 4x)."""
    if whole:
        return clean_whole(arr, nonneg, allow_nan)
    bad = 0
    if nonneg and allow_nan:
        for i in range(arr.shape[0]):
            v = arr[i]
            bad += not ((v != v) | (((v - v) == 0.0) & (v >= 0.0)))
    elif nonneg:
        for i in range(arr.shape[0]):
            v = arr[i]
            bad += not (((v - v) == 0.0) & (v >= 0.0))
    elif allow_nan:
        for i in range(arr.shape[0]):
            v = arr[i]
            bad += not ((v != v) | ((v - v) == 0.0))
    else:
        for i in range(arr.shape[0]):
            v = arr[i]
            bad += not ((v - v) == 0.0)
    return bad == 0


def clean_whole(arr, nonneg, allow_nan):
    """clean_values for whole numbers."""
    bad = 0
    for i in range(arr.shape[0]):
        v = arr[i]
        finite = (v - v) == 0.0
        bad += (not (finite or (allow_nan and v != v))) | (nonneg & (v < 0.0)) | (finite & (v != np.floor(v)))
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
