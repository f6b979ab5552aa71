"""One validator per kind of input array, shared by the batch layer and the drop-ins.

Each either returns a clean array or raises a BatchError that names the field, the first bad
index and what was expected, so no kernel ever sees a NaN reward, a negative length, offsets
that read past an array or a band that scales a reward up.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping  # isinstance against typing.Mapping is several times slower
from typing import Any

import numpy as np

from ..ir.nodes import MAX_EXACT_INT, UNITS

_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)
_INT64_MAX = np.iinfo(np.int64).max
INEXACT = "expected a number that a float64 holds exactly (at most 2**53)"


class BatchError(ValueError):
    """Bad input data: names the field, the first bad index and what was expected."""


def show(value: Any) -> str:
    """A value for an error message: its repr, cut short (a 400-digit int is not worth printing)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} chars)"


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def is_number(value: Any) -> bool:
    """A real number, bool excluded (True is not a reward, a length or a band field)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def is_finite_number(value: Any) -> bool:
    """A real number (bool excluded) that is finite as a float64; 10**400 is not."""
    try:
        return is_number(value) and math.isfinite(float(value))
    except OverflowError:
        return False


def plain_number(value: Any) -> float | None:
    """A plain Python float or int that a float64 holds exactly and finitely, as a float; None for
    anything else (bools, numpy and torch scalars, strings...), which the validators then read and
    word. The readers of row dicts take the common case here, without a validator call per value."""
    if type(value) is float:
        return value if value - value == 0.0 else None
    if type(value) is int and -MAX_EXACT_INT <= value <= MAX_EXACT_INT:
        return float(value)
    return None


def as_array(name: str, value: Any) -> Any:
    """A torch tensor (any device or dtype, requiring grad or not) as a numpy array of its values,
    and a masked array with a masked entry refused; anything else as it is. numpy reads a CPU
    tensor itself, but raises on one that requires grad, lives on a GPU or is bfloat16, and it
    reads a masked entry's hidden value as if it were data."""
    if type(value) is np.ndarray:  # the common case: a plain array is what it holds
        return value
    masked = sys.modules.get("numpy.ma")  # numpy imports it on first use: until then no value is masked
    if masked is not None and isinstance(value, masked.MaskedArray):
        if masked.is_masked(value):
            raise BatchError(f"{name}: masked entry at index {_first(masked.getmaskarray(value).ravel())}; "
                             f"expected a value everywhere")
        return masked.getdata(value)
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        tensor = value.detach().cpu()
        try:
            return tensor.numpy()
        except TypeError:  # bfloat16, float8, complex32: dtypes numpy has no twin of
            if tensor.is_complex():
                raise BatchError(f"{name}: expected numbers, got dtype {tensor.dtype}") from None
            return tensor.double().numpy()
    return value


def flag(value: Any, where: str) -> bool:
    """A flag read as Python reads one (truthiness), numpy and torch scalars included; an array
    of several values is no flag (Python's `if` raises numpy's "ambiguous" error on it)."""
    value = as_array(where, value)
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise BatchError(f"{where}: expected a flag (true or false), got an array of shape {value.shape}")
        value = value.reshape(()).item()
    try:
        return bool(value)
    except Exception:  # an object whose truth is undefined
        raise BatchError(f"{where}: expected a flag (true or false), got {show(value)}") from None


def numeric(name: str, value: Any, length: int | None = None, what: str = "rollout",
            fresh: bool = True) -> np.ndarray:
    """A 1-d float64 array (booleans become 0/1); anything else names the bad element. `fresh=False`
    (an array only read: kernels never write their inputs) returns the caller's own when it already
    is what a kernel takes: C-contiguous and writeable (numba's signatures take no read-only array)."""
    if type(value) is np.ndarray and value.dtype == _F64 and value.ndim == 1 and length in (None, len(value)):
        if not fresh:
            flags = value.flags  # a new object on every access
            if flags.c_contiguous and flags.writeable:
                return value
        return value.copy()  # the common case, without the checks below
    if isinstance(value, (str, bytes, Mapping)) or value is None:
        raise BatchError(f"{name}: expected a 1-d array of numbers, got {type(value).__name__}")
    value = as_array(name, value)
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError, RuntimeError):  # ragged nesting; tensors that require grad
        if isinstance(value, (list, tuple)):  # name the element that is not a number
            arr = np.array([_element(name, i, v) for i, v in enumerate(value)], dtype=np.float64)
        else:
            raise BatchError(f"{name}: expected a 1-d array of numbers") from None
    if arr.ndim != 1:
        raise BatchError(f"{name}: expected a 1-d array, got shape {arr.shape}")
    if arr.dtype.kind in "OUS":  # mixed or non-numeric elements: name the first bad one
        items = value if isinstance(value, (list, tuple)) else arr.tolist()
        arr = np.array([_element(name, i, v) for i, v in enumerate(items)], dtype=np.float64)
    elif arr.dtype.kind not in "biuf":
        raise BatchError(f"{name}: expected numbers, got dtype {arr.dtype}")
    if length is not None and len(arr) != length:
        raise BatchError(f"{name}: expected {length} values (one per {what}), got {len(arr)}")
    if arr.dtype.kind in "iu":
        exact(name, arr)
    elif arr.dtype.kind == "f" and isinstance(value, (list, tuple)):  # ints mixed with floats became floats
        for i in np.flatnonzero(np.abs(arr) >= MAX_EXACT_INT).tolist():  # 2**53 + 1 rounds to 2**53
            if past_exact(value[i]):
                raise _inexact(f"{name}: index {i}", value[i])
    return arr.astype(np.float64, copy=True)


def past_exact(v: Any) -> bool:
    """An integer (bool excluded) that a float64 would round: past 2**53, as `shapec run` refuses it."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and abs(int(v)) > MAX_EXACT_INT


def _inexact(where: str, v: Any) -> BatchError:
    """The error for an integer past 2**53 (past_exact) at `where`."""
    return BatchError(f"{where}: {INEXACT}, got {show(int(v))}")


def exact(name: str, arr: np.ndarray) -> None:
    """An integer array (1-d, or a (G, k) band table) whose values a float64 holds exactly; a BatchError
    names the first index (group) and value past 2**53: float64 would round it, silently. Every call's
    integer columns pass here, so the common case is two reductions that allocate nothing."""
    if arr.size == 0 or (arr.max() <= MAX_EXACT_INT and (arr.dtype.kind == "u" or arr.min() >= -MAX_EXACT_INT)):
        return
    big = arr > MAX_EXACT_INT
    if arr.dtype.kind == "i":
        big |= arr < -MAX_EXACT_INT
    if big.any():
        at = np.argwhere(big)[0]
        where = f"index {at[0]}" if arr.ndim == 1 else f"group {at[0]}"
        raise _inexact(f"{name}: {where}", arr[tuple(at)])


def _element(name: str, i: int, v: Any) -> float:
    if isinstance(v, (bool, np.bool_)):
        return float(v)
    if not isinstance(v, numbers.Real):
        raise BatchError(f"{name}: index {i}: expected a number, got {show(v)}")
    try:
        number = float(v)
    except OverflowError:
        raise BatchError(f"{name}: index {i}: {show(v)} is too large for a float") from None
    if past_exact(v):
        raise _inexact(f"{name}: index {i}", v)
    return number


def finite(name: str, arr: np.ndarray, nonneg: str | None = None) -> np.ndarray:
    """No NaN, no infinity, and (when `nonneg` names what the values are, e.g. tokens) no negative value."""
    if len(arr) == 0:
        return arr
    with np.errstate(over="ignore", invalid="ignore"):  # finite values may sum past float64: looked at below
        total = arr.sum()
    if math.isfinite(total) and (nonneg is None or arr.min() >= 0):  # one or two reductions when all is well
        return arr
    if np.isnan(arr).any():
        raise BatchError(f"{name}: NaN at index {_first(np.isnan(arr))}; expected a number")
    if np.isinf(arr).any():
        raise BatchError(f"{name}: infinite at index {_first(np.isinf(arr))}; expected a finite number")
    if nonneg is not None and (arr < 0).any():
        what = "length" if nonneg in UNITS else "value"
        raise BatchError(f"{name}: negative {what} at index {_first(arr < 0)}; {nonneg} must be >= 0")
    return arr  # finite values whose sum overflowed


def integers(name: str, value: Any) -> np.ndarray:
    """A 1-d int64 array from integers only: floats (even 2.0), bools, strings and huge ints are errors."""
    if type(value) is np.ndarray and value.dtype == _I64 and value.ndim == 1:
        return value.copy()  # the common case, without the checks below
    if isinstance(value, (str, bytes, Mapping)) or value is None:
        raise BatchError(f"{name}: expected a 1-d array of integers, got {type(value).__name__}")
    value = as_array(name, value)
    if isinstance(value, (list, tuple)):  # numpy would turn True into 1 and 2.0 into an int array's 2
        for i, v in enumerate(value):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not -_INT64_MAX <= v <= _INT64_MAX:
                raise BatchError(f"{name}: index {i}: expected an integer, got {show(v)}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise BatchError(f"{name}: expected a 1-d array of integers") from None
    if arr.ndim != 1:
        raise BatchError(f"{name}: expected a 1-d array of integers, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == object or arr.dtype.kind == "u":
        for i, v in enumerate(arr.tolist()):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not -_INT64_MAX <= v <= _INT64_MAX:
                raise BatchError(f"{name}: index {i}: expected an integer, got {show(v)}")
        return np.array(arr.tolist(), dtype=np.int64)
    if arr.dtype.kind != "i":
        raise BatchError(f"{name}: expected integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=True)


def check_offsets(name: str, off: np.ndarray, total: int, what: str = "rewards") -> np.ndarray:
    """Group boundaries: start at 0, never go back, end at the number of values they slice."""
    if len(off) < 1:
        raise BatchError(f"{name}: expected at least one offset (0), got an empty array")
    if off[0] != 0 or off[-1] != total:
        raise BatchError(f"{name}: must start at 0 and end at {total} (the number of {what}), "
                         f"got {off[0]}..{off[-1]}")
    back = off[1:] < off[:-1]
    if back.any():
        i = _first(back) + 1
        raise BatchError(f"{name}: must be non-decreasing; index {i} goes back ({off[i - 1]} -> {off[i]})")
    return off


def group_size_offsets(n: int, group_size: Any, allow_short_last_group: bool = False) -> np.ndarray:
    """Offsets of contiguous groups of `group_size` rows; a short last group only when asked for."""
    if type(group_size) is int and group_size > 0 and n % group_size == 0:  # the common case, checked at once
        return np.arange(0, n + 1, group_size, dtype=np.int64)
    if isinstance(group_size, (bool, np.bool_)) or not isinstance(group_size, (int, np.integer)) or group_size <= 0:
        raise BatchError(f"group_size: expected a positive integer, got {show(group_size)}")
    size = int(group_size)
    if n % size and not allow_short_last_group:
        raise BatchError(f"group_size: {n} rewards do not split into groups of {show(size)} "
                         f"(the last group would have {n % size}); pass allow_short_last_group=True to accept it")
    if size >= n:
        return np.array([0, n] if n else [0], dtype=np.int64)
    return np.append(np.arange(0, n, size, dtype=np.int64), np.int64(n))


def band(where: str, block: Any) -> tuple[float, float, float]:
    """A band {a, b, f} (or an (a, b, f) triple, as params take): finite a < b and 0 <= f <= 1."""
    if isinstance(block, (list, tuple)) and len(block) == 3:
        block = dict(zip("abf", block))
    if not isinstance(block, Mapping):
        raise BatchError(f"{where}: expected a band {{a, b, f}}, got {show(block)}")
    unknown = sorted(str(k) for k in block if k not in ("a", "b", "f"))
    if unknown:
        raise BatchError(f"{where}: unknown band field(s) {unknown}; a band has a, b and f")
    values = []
    for key in "abf":
        if key not in block:
            raise BatchError(f"{where}: band is missing {key!r}; expected {{a, b, f}}")
        v = block[key]
        if not is_finite_number(v):
            raise BatchError(f"{where}.{key}: expected a finite number, got {show(v)}")
        if past_exact(v):
            raise _inexact(f"{where}.{key}", v)
        values.append(float(v))
    return check_band(where, *values)


def check_band(where: str, a: float, b: float, f: float) -> tuple[float, float, float]:
    if not all(math.isfinite(x) for x in (a, b, f)):
        raise BatchError(f"{where}: band fields must be finite numbers, got a={a!r}, b={b!r}, f={f!r}")
    if not b > a:
        raise BatchError(f"{where}: band needs b > a, got a={a:g}, b={b:g}")
    if not 0 <= f <= 1:
        raise BatchError(f"{where}: band needs 0 <= f <= 1, got f={f:g}")
    return a, b, f


def band_table(name: str, value: np.ndarray, G: int) -> np.ndarray:
    """A numeric (G, 3) or (G, 4) band array -> (G, 4) rows (a, b, f, present), every present row checked.

    In the (G, 3) form a row of three NaNs is absent; in the (G, 4) form the fourth column is 0 or 1.
    """
    if value.ndim != 2 or value.shape[0] != G or value.shape[1] not in (3, 4):
        raise BatchError(f"{name}: expected shape ({G}, 3) or ({G}, 4), got {value.shape}")
    value = np.ascontiguousarray(value, dtype=np.float64)
    out = np.empty((G, 4))
    out[:, :3] = value[:, :3]
    if value.shape[1] == 4:
        flags = value[:, 3]
        bad = (flags != 0) & (flags != 1)
        if bad.any():
            raise BatchError(f"{name}: group {_first(bad)}: the present column must be 0 or 1, got {flags[_first(bad)]}")
        out[:, 3] = flags
    else:
        out[:, 3] = (~np.isnan(value).all(axis=1)).astype(np.float64)
    present = out[:, 3] == 1
    a, b, f = out[:, 0], out[:, 1], out[:, 2]
    with np.errstate(invalid="ignore"):  # one pass over the whole table; the first bad row is named
        bad = present & ~(np.isfinite(out[:, :3]).all(axis=1) & (b > a) & (f >= 0) & (f <= 1))
    if bad.any():
        g = _first(bad)
        check_band(f"{name}: group {g}", *out[g, :3].tolist())
    out[out[:, 3] == 0, :3] = math.nan
    return out
