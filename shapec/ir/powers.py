"""x ** y as the kernels compute it: C's pow, element by element.

The kernels lower `**` to `k_pow` (lowering/numba_helpers.py), whose np.power numba compiles to the
C library's pow on two floats. NumPy's own `np.power` on float arrays (and on its scalars) takes a
vectorised path that differs from C's in the last bit for about one pair in twenty, so the
interpreter cannot use it and stay the kernels' oracle. Python's float pow is C's pow, except that
it raises where C returns an infinity or NaN.
"""

from __future__ import annotations

import math


def _odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2.0) != 0.0


def c_pow(x: float, y: float) -> float:
    """C99 pow: a pole or an overflow is an infinity (negative for a negative base to an odd
    integer power), a negative base to a non-integer power NaN."""
    try:
        return math.pow(x, y)
    except OverflowError:
        return -math.inf if x < 0 and _odd_integer(y) else math.inf
    except ValueError:  # 0 ** negative, or a negative base to a non-integer power
        if x == 0:
            return math.copysign(math.inf, x) if _odd_integer(y) else math.inf
        return math.nan
