"""Struct-of-arrays batch: validated float64 arrays that both backends read.

Everything the user hands over is checked here, once, by the validators of `validate.py`, with
an error that names the field, the group or row and what was expected. A bad value anywhere fails
the whole call (nothing is shaped), so it can never change another group's rewards.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from collections.abc import Mapping  # isinstance against typing.Mapping is several times slower
from typing import Any

import numpy as np

from ..compiler.ir import UNITS, MetaSpec, ShaperIR
from .validate import (BatchError, as_array, band, band_table, check_offsets, finite,
                       group_size_offsets, integers, numeric, show)

__all__ = ["Batch", "BatchError", "make_batch", "make_offsets", "band"]


@dataclass
class Batch:
    rewards: np.ndarray  # (n,)
    offsets: np.ndarray  # (G+1,) int64
    inputs: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (n,)
    metas: dict[str, np.ndarray] = field(default_factory=dict)  # scalar path -> (G,), NaN when missing
    bands: dict[str, np.ndarray] = field(default_factory=dict)  # band path -> (G, 4): a, b, f, present
    lists: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=dict)  # name -> (offsets, fields)
    components: np.ndarray | None = None  # (n,) number of reward components per rollout
    env_rewards: np.ndarray | None = None  # (n,) the reward at pipeline entry

    @property
    def n(self) -> int:
        return len(self.rewards)

    @property
    def groups(self) -> int:
        return len(self.offsets) - 1

    def group_index(self) -> np.ndarray:
        return np.repeat(np.arange(self.groups), np.diff(self.offsets))


def make_offsets(n: int, group_size: Any, offsets: Any, allow_short_last_group: bool = False) -> np.ndarray:
    """Group boundaries from exactly one of `group_size` (must divide n unless a short last group
    is allowed) or `offsets` (integers from 0 to n, non-decreasing)."""
    if (group_size is None) == (offsets is None):
        raise BatchError("give exactly one of group_size= or offsets=")
    if group_size is not None:
        return group_size_offsets(n, group_size, allow_short_last_group)
    return check_offsets("offsets", integers("offsets", offsets), n)


def _mapping(name: str, value: Any) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BatchError(f"{name}: expected a mapping of names to values, got {type(value).__name__}")
    return value


def _hint(key: Any, options) -> str:
    close = difflib.get_close_matches(str(key), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def as_flags(arr: np.ndarray) -> np.ndarray:
    """A bool column as the kernels read it: any non-zero number is true (1), NaN stays missing.
    One rule for inputs, metadata and list items, so 0.5 is true wherever a bool is read."""
    return np.where(np.isnan(arr), math.nan, (arr != 0).astype(np.float64))


def _checked(name: str, arr: np.ndarray, typ: str, allow_nan: bool = False) -> np.ndarray:
    """Finite values (NaN allowed where it means missing), >= 0 for a unit, whole for an int, and a
    bool as 0/1 (as_flags)."""
    if allow_nan:
        finite(name, np.where(np.isnan(arr), 0.0, arr), typ if typ in UNITS else None)
    else:
        finite(name, arr, typ if typ in UNITS else None)
    if typ == "int" and len(arr):
        frac = ~np.isnan(arr) & (arr != np.floor(arr))
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise BatchError(f"{name}: index {i}: expected an integer, got {arr[i]!r}")
    return as_flags(arr) if typ == "bool" else arr


def make_batch(
    ir: ShaperIR | None,
    rewards: Any,
    *,
    group_size: int | None = None,
    offsets: Any = None,
    channels: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    reward_components: Any = None,
    inputs_needed: tuple[tuple[str, str], ...] = (),
    metas_needed: tuple[MetaSpec, ...] = (),
    allow_short_last_group: bool = False,
) -> Batch:
    """Validate and convert user arrays into a Batch for the given inputs and metadata."""
    r = finite("rewards", numeric("rewards", rewards))
    n = len(r)
    off = make_offsets(n, group_size, offsets, allow_short_last_group)
    G = len(off) - 1
    channels = _mapping("channels", channels)
    metadata = _mapping("metadata", metadata)
    inputs_needed = inputs_needed or (ir.inputs if ir else ())
    metas_needed = metas_needed or (ir.metas if ir else ())
    inputs = channel_arrays(channels, inputs_needed, n)
    comps = None
    if reward_components is not None:
        comps = finite("reward_components", numeric("reward_components", reward_components, n), "components")
    batch = Batch(r, off, inputs, components=comps)
    for spec in metas_needed:
        _load_meta(batch, spec, metadata.get(spec.name), G)
    return batch


def channel_arrays(channels: Mapping[str, Any], inputs_needed: tuple[tuple[str, str], ...], n: int
                   ) -> dict[str, np.ndarray]:
    """Each input a shaper reads, from `channels`: n values checked against its type (a bool as 0/1)."""
    inputs: dict[str, np.ndarray] = {}
    for name, typ in inputs_needed:
        if name not in channels:
            names = [k for k, _ in inputs_needed]
            extra = [k for k in channels if k not in names]
            unknown = "".join(f"; got unknown channel {k!r}{_hint(k, names)}" for k in extra)
            raise BatchError(f"channels: missing input {name!r} ({typ}, one value per rollout){unknown}")
        label = f"channels[{name!r}]"
        inputs[name] = _checked(label, numeric(label, channels[name], n), typ)
    return inputs


def _rows(name: str, value: Any, G: int) -> list:
    """Per-group entries: a list, tuple or 1-d array of exactly G of them."""
    if isinstance(value, np.ndarray) and value.ndim == 1 or isinstance(value, (list, tuple)):
        if len(value) != G:
            raise BatchError(f"{name}: expected {G} entries (one per group), got {len(value)}")
        return list(value)
    raise BatchError(f"{name}: expected one entry per group ({G}), got {type(value).__name__}")


def _row_mapping(name: str, g: int, row: Any, fields: list[str]) -> Mapping | None:
    if row is None:
        return None
    if not isinstance(row, Mapping):
        raise BatchError(f"{name}: group {g}: expected a mapping with {fields} or None, got {show(row)}")
    for key in row:
        if key not in fields:
            raise BatchError(f"{name}: group {g}: unknown field {key!r}{_hint(key, fields)}; fields: {fields}")
    return row


def _load_meta(batch: Batch, spec: MetaSpec, value: Any, G: int) -> None:
    name = f"metadata[{spec.name!r}]"
    if spec.kind == "scalar":
        _load_field(batch, spec.name, spec.type, value, G)
    elif spec.kind == "record":
        _load_record(batch, spec, name, value, G)
    else:
        _load_list(batch, spec, name, value, G)


def _load_record(batch: Batch, spec: MetaSpec, name: str, value: Any, G: int) -> None:
    """A record: None, a mapping of field -> per-group column, or per-group rows (None or mappings)."""
    fields = [f for f, _ in spec.fields]
    rows = None
    if isinstance(value, Mapping):
        for key in value:
            if key not in fields:
                raise BatchError(f"{name}: unknown field {key!r}{_hint(key, fields)}; fields: {fields}")
    elif value is not None:
        rows = [_row_mapping(name, g, row, fields) for g, row in enumerate(_rows(name, value, G))]
    for fname, ftype in spec.fields:
        path = f"{spec.name}.{fname}"
        if rows is None:
            col = value.get(fname) if isinstance(value, Mapping) else None
        else:
            col = [row.get(fname) if row is not None else None for row in rows]
            if ftype == "band":  # a key left out is no band; a key set to null is a malformed one
                for g, row in enumerate(rows):
                    if row is not None and fname in row and row[fname] is None:
                        raise BatchError(f"metadata[{path!r}]: group {g}: null; a band key that is present "
                                         f"must hold a band {{a, b, f}} (leave the key out for no band)")
        _load_field(batch, path, ftype, col, G)


def _load_field(batch: Batch, path: str, typ: str, value: Any, G: int) -> None:
    name = f"metadata[{path!r}]"
    value = as_array(name, value)
    if typ == "band":
        batch.bands[path] = _band_column(name, value, G)
        return
    if value is None:
        batch.metas[path] = np.full(G, math.nan)
        return
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        arr = numeric(name, value, G, "group")
    else:
        column = _rows(name, value, G)
        arr = numeric(name, [math.nan if v is None else v for v in column], G, "group")
    batch.metas[path] = _checked(name, arr, typ, allow_nan=True)  # NaN or None: missing for that group


def _band_column(name: str, value: Any, G: int) -> np.ndarray:
    """Per-group bands -> (G, 4) rows (a, b, f, present); None entries are absent, others must be valid."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return band_table(name, value, G)
    out = no_bands(G)
    if value is None:
        return out
    for g, block in enumerate(_rows(name, value, G)):
        if block is not None:
            out[g] = (*band(f"{name}: group {g}", block), 1.0)
    return out


def no_bands(G: int) -> np.ndarray:
    """A band column with no band in any group: rows (NaN, NaN, NaN, 0)."""
    out = np.full((G, 4), math.nan)
    out[:, 3] = 0.0
    return out


def _load_list(batch: Batch, spec: MetaSpec, name: str, value: Any, G: int) -> None:
    """List metadata: per group a record of equal-length lists, or {"offsets": ..., field: values}."""
    fields = [f for f, _ in spec.fields]
    if isinstance(value, Mapping):
        _load_flat_list(batch, spec, name, value, G)
        return
    rows = [None] * G if value is None else [_row_mapping(name, g, row, fields)
                                             for g, row in enumerate(_rows(name, value, G))]
    lengths, cols = [], {f: [] for f in fields}
    for g, row in enumerate(rows):
        lists = [row.get(f) if row is not None else None for f in fields]
        if any(v is None for v in lists):
            lengths.append(0)  # absent or partial: the group has no items
            continue
        arrays = [_checked(f"{name}: group {g}, {f}", numeric(f"{name}: group {g}, {f}", v, None, "item"), t)
                  for (f, t), v in zip(spec.fields, lists)]
        k = min(len(a) for a in arrays)  # zip semantics: the shortest list decides
        lengths.append(k)
        for f, a in zip(fields, arrays):
            cols[f].append(a[:k])
    off = np.zeros(G + 1, dtype=np.int64)
    off[1:] = np.cumsum(lengths)
    batch.lists[spec.name] = (off, {f: np.concatenate(cols[f]) if cols[f] else np.zeros(0) for f in fields})


def _load_flat_list(batch: Batch, spec: MetaSpec, name: str, value: Mapping, G: int) -> None:
    """{"offsets": (G+1,) integers, field: values, ...}: every field as long as the offsets say."""
    fields = [f for f, _ in spec.fields]
    expected = ["offsets", *fields]
    for key in expected:
        if key not in value:
            raise BatchError(f"{name}: missing {key!r}; expected {{'offsets': ..., "
                             f"{', '.join(repr(f) + ': ...' for f in fields)}}}")
    for key in value:
        if key not in expected:
            raise BatchError(f"{name}: unknown key {key!r}{_hint(key, expected)}; expected {expected}")
    off = integers(f"{name}.offsets", value["offsets"])
    if len(off) != G + 1:
        raise BatchError(f"{name}.offsets: expected {G + 1} values (groups + 1), got {len(off)}")
    columns = {}
    for f, t in spec.fields:
        label = f"{name}.{f}"
        columns[f] = _checked(label, numeric(label, value[f], None, "item"), t)
    total = len(columns[fields[0]])
    for f in fields[1:]:
        if len(columns[f]) != total:
            raise BatchError(f"{name}.{f}: expected {total} items (as many as {fields[0]!r}), got {len(columns[f])}")
    batch.lists[spec.name] = (check_offsets(f"{name}.offsets", off, total, f"{fields[0]!r} items"), columns)
