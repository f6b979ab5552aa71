"""Per-prompt metadata of a chunk: each group's value, and for Parquet a columnar form.

The shaper takes metadata either as per-group values (dicts from the rows) or in a columnar form
(per-group arrays, (G, 4) band tables, flat lists with offsets). Rows cost a Python loop over the
groups in the call; the columnar form does not. A column goes to the shaper in columnar form only
when whole-column checks prove that the rows would have been accepted and give the same arrays;
anything else (a null where a band needs a number, a field the spec does not declare, a type the
checks do not know) is passed as rows, so the shaper's own validation words the error as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.nodes import UNITS
from .readers import ArrowBlock


class GroupMeta:
    """One metadata name over a chunk's groups.

    `rows` are the per-group values as the rows carry them (what explain shows). `columns`, when
    the Parquet column was proven valid for the shaper with whole-column checks, is the same data
    in the shaper's columnar form, so the call validates it without a loop over groups; anything
    the checks do not clear goes to the shaper as rows, whose validation words the error."""

    def __init__(self, kind: str, rows, columns=None):
        self.kind = kind
        self._rows = rows  # a list, or a function that builds it (only explain and plot read them)
        self.columns = columns

    @property
    def rows(self) -> list:
        if callable(self._rows):
            self._rows = self._rows()
        return self._rows

    def take(self, groups: np.ndarray | None):
        """The `metadata=` value for these groups (None: all of them)."""
        if self.columns is None:
            return self.rows if groups is None else [self.rows[g] for g in groups]
        if groups is None:
            return self.columns
        if self.kind == "scalar":
            return self.columns[groups]
        if self.kind == "record":
            return {f: v[groups] for f, v in self.columns.items()}
        off = self.columns["offsets"]
        lengths = np.diff(off)[groups]
        new = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum(lengths, out=new[1:])
        items = np.repeat(off[groups] - new[:-1], lengths) + np.arange(new[-1])
        return {"offsets": new, **{f: v[items] for f, v in self.columns.items() if f != "offsets"}}


def struct_fields(v: Any) -> Any:
    """A Parquet struct carries every field, absent ones as null: keep only the present ones,
    as the JSON object the row was would have them."""
    if isinstance(v, dict):
        return {k: struct_fields(x) for k, x in v.items() if x is not None}
    return v


BAND_FIELDS = ("a", "b", "f")


def _pa():
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def _numeric(t, bool_ok: bool) -> bool:
    """Types whose Python values numpy turns into the float64 that Arrow's cast gives."""
    pa, _ = _pa()
    if pa.types.is_boolean(t):
        return bool_ok
    return (pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32())
            or t in (pa.float32(), pa.float64()))


def _floats(arr) -> np.ndarray:
    """float64 values, NaN where null."""
    pa, _ = _pa()
    return arr.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)


def _valid(arr) -> np.ndarray:
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _children(arr, declared) -> dict | None:
    """A struct column's children by name (parent nulls applied), or None when a child the spec
    does not declare holds a value somewhere (the shaper names it) or names repeat."""
    _, pc = _pa()
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    if len(set(names)) != len(names):
        return None
    out = {name: pc.struct_field(arr, name) for name in names}
    if any(name not in declared and out[name].null_count < len(arr) for name in names):
        return None
    return out


def band_rows(arr) -> np.ndarray | None:
    """(G, 4) rows a, b, f, present of a column of bands {a, b, f}; None unless every present band
    has three finite numbers with a < b and 0 <= f <= 1."""
    pa, _ = _pa()
    G = len(arr)
    out = np.full((G, 4), np.nan)
    out[:, 3] = 0.0
    present = _valid(arr)
    if not present.any():
        return out
    if not pa.types.is_struct(arr.type):
        return None
    kids = _children(arr, BAND_FIELDS)
    if kids is None or any(k not in kids or not _numeric(kids[k].type, False) for k in BAND_FIELDS):
        return None
    abf = np.stack([_floats(kids[k]) for k in BAND_FIELDS], axis=1)[present]
    a, b, f = abf[:, 0], abf[:, 1], abf[:, 2]
    with np.errstate(invalid="ignore"):
        if not (np.isfinite(abf).all() and (b > a).all() and (f >= 0).all() and (f <= 1).all()):
            return None
    out[present, :3] = abf
    out[present, 3] = 1.0
    return out


def scalar_values(arr) -> np.ndarray | None:
    """float64 per group, NaN where null (the shaper then checks them as it checks rows' values)."""
    if not _valid(arr).any():
        return np.full(len(arr), np.nan)
    return _floats(arr) if _numeric(arr.type, True) else None


def _field(arr, typ: str):
    return band_rows(arr) if typ == "band" else scalar_values(arr)


def _usable(values: np.ndarray, typ: str) -> bool:
    """What the shaper requires of list items: finite, >= 0 for a length, whole for an int."""
    ok = np.isfinite(values).all()
    if typ in UNITS:
        ok = ok and (values >= 0).all()
    return bool(ok and (typ != "int" or (values == np.floor(values)).all()))


def list_columns(arr, fields) -> dict | None:
    """{"offsets": (G+1,), field: items} of a struct of lists: per group the first k items of each
    list, k the shortest one (no items when a list is null or its field absent); None unless every
    item of every group that has all its lists is usable."""
    pa, pc = _pa()
    G = len(arr)
    names = [f for f, _ in fields]
    kids = _children(arr, names) if pa.types.is_struct(arr.type) else None
    if kids is None and _valid(arr).any():
        return None
    full = np.zeros(G, dtype=bool)
    if kids is not None and all(f in kids for f in names):
        full = np.logical_and.reduce([_valid(kids[f]) for f in names])
    parts = {}
    for f, typ in fields if full.any() else ():
        col = kids[f]
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) \
                or not _numeric(col.type.value_type, True):
            return None
        lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        values = pc.list_flatten(col)
        items = _floats(values)
        mine = np.repeat(full, lengths)  # the items of the groups that have every list
        if not (_valid(values)[mine].all() and _usable(items[mine], typ)):
            return None
        parts[f] = (lengths, items)
    k = np.zeros(G, dtype=np.int64)
    if parts:
        k[full] = np.min([lengths[full] for lengths, _ in parts.values()], axis=0)
    offsets = np.zeros(G + 1, dtype=np.int64)
    np.cumsum(k, out=offsets[1:])
    out = {"offsets": offsets}
    for f in names:
        if f not in parts:
            out[f] = np.zeros(0)
            continue
        lengths, items = parts[f]
        starts = np.cumsum(lengths) - lengths  # where each group's list starts among the items
        out[f] = items[np.repeat(starts - offsets[:-1], k) + np.arange(offsets[-1])]
    return out


def columns(arr, spec) -> dict | np.ndarray | None:
    """The columnar form of one metadata column over the groups (their first rows), or None."""
    pa, _ = _pa()
    if spec.kind == "scalar":
        return _field(arr, spec.type)
    if spec.kind == "list":
        return list_columns(arr, spec.fields)
    if not pa.types.is_struct(arr.type):
        return None if _valid(arr).any() else {}
    kids = _children(arr, [f for f, _ in spec.fields])
    if kids is None:
        return None
    out = {}
    for f, typ in spec.fields:
        if f in kids:
            out[f] = _field(kids[f], typ)
            if out[f] is None:
                return None
    return out


def arrow_meta(block: ArrowBlock, starts: np.ndarray, spec, field: str) -> GroupMeta:
    """One metadata column of a Parquet chunk, read from `field` of each group's first row."""
    pa, _ = _pa()
    G = len(starts)
    found = block.array(field)
    if found is None:
        return GroupMeta(spec.kind, [None] * G, columns(pa.nulls(G), spec))
    firsts = found.take(pa.array(starts, pa.int64()))
    return GroupMeta(spec.kind, lambda: [struct_fields(v) for v in firsts.to_pylist()], columns(firsts, spec))
