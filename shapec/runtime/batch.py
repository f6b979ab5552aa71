"""Struct-of-arrays batch: validated float64 arrays that both backends read.

Everything the user hands over is checked here, once, with an error that names the
field and the first bad index, so a kernel never sees a NaN reward or a negative length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..compiler.ir import UNITS, MetaSpec, ShaperIR


class BatchError(ValueError):
    """Bad input data: names the field, the first bad index and what was expected."""


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


_F64 = np.dtype(np.float64)


def _numeric(name: str, value: Any, length: int | None, what: str = "rollout") -> np.ndarray:
    if type(value) is np.ndarray and value.dtype == _F64 and value.ndim == 1 and length in (None, len(value)):
        return value.copy()  # the common case, without the checks below
    arr = np.asarray(value)
    if arr.dtype == object:
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise BatchError(f"{name}: expected numbers, got {arr.dtype} values") from None
    if arr.dtype.kind not in "biuf":
        raise BatchError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise BatchError(f"{name}: expected a 1-d array, got shape {arr.shape}")
    if length is not None and len(arr) != length:
        raise BatchError(f"{name}: expected {length} values (one per {what}), got {len(arr)}")
    return arr.astype(np.float64, copy=True)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def make_offsets(n: int, group_size: int | None, offsets: Any) -> np.ndarray:
    if (group_size is None) == (offsets is None):
        raise BatchError("give exactly one of group_size= or offsets=")
    if group_size is not None:
        if isinstance(group_size, bool) or int(group_size) != group_size or group_size <= 0:
            raise BatchError(f"group_size: expected a positive integer, got {group_size!r}")
        group_size = int(group_size)
        return np.minimum(np.arange(0, n + group_size, group_size, dtype=np.int64)[: -(-n // group_size) + 1], n)
    off = np.asarray(offsets)
    if off.dtype.kind not in "iu" or off.ndim != 1 or len(off) < 1:
        raise BatchError(f"offsets: expected a 1-d integer array, got {off.dtype} with shape {off.shape}")
    off = off.astype(np.int64)
    if off[0] != 0 or off[-1] != n:
        raise BatchError(f"offsets: must start at 0 and end at {n} (the number of rewards), got {off[0]}..{off[-1]}")
    if np.any(np.diff(off) < 0):
        raise BatchError(f"offsets: must be non-decreasing; index {_first_bad(np.diff(off) < 0) + 1} goes back")
    return off


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
) -> Batch:
    """Validate and convert user arrays into a Batch for the given inputs and metadata."""
    r = _numeric("rewards", rewards, None)
    if not math.isfinite(r.sum()) and not np.isfinite(r).all():  # one sum when all is well
        if np.isnan(r).any():
            raise BatchError(f"rewards: NaN at index {_first_bad(np.isnan(r))}; rewards must be numbers")
        raise BatchError(f"rewards: infinite at index {_first_bad(np.isinf(r))}")
    n = len(r)
    off = make_offsets(n, group_size, offsets)
    G = len(off) - 1
    channels = dict(channels or {})
    inputs_needed = inputs_needed or (ir.inputs if ir else ())
    metas_needed = metas_needed or (ir.metas if ir else ())
    inputs: dict[str, np.ndarray] = {}
    for name, typ in inputs_needed:
        if name not in channels:
            raise BatchError(f"channels: missing input {name!r} ({typ}, one value per rollout)")
        arr = _numeric(f"channels[{name!r}]", channels[name], n)
        # one reduction when all is well (a NaN makes both fail); the messages below say which row
        suspect = len(arr) > 0 and not (arr.min() >= 0 if typ in UNITS else math.isfinite(arr.sum()))
        if suspect and np.isnan(arr).any():
            raise BatchError(f"channels[{name!r}]: NaN at index {_first_bad(np.isnan(arr))}")
        if suspect and typ in UNITS:
            raise BatchError(f"channels[{name!r}]: negative length at index {_first_bad(arr < 0)}; "
                             f"{typ} must be >= 0")
        if typ == "bool":
            arr = (arr != 0).astype(np.float64)
        inputs[name] = arr
    comps = None
    if reward_components is not None:
        comps = _numeric("reward_components", reward_components, n)
    batch = Batch(r, off, inputs, components=comps)
    metadata = dict(metadata or {})
    for spec in metas_needed:
        _load_meta(batch, spec, metadata.get(spec.name), G)
    return batch


def _scalar(value: Any) -> float:
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    return math.nan


def band_row(block: Any) -> tuple[float, float, float, float]:
    """A per-prompt band block -> (a, b, f, present). Non-numeric or boolean fields are missing."""
    if not isinstance(block, Mapping):
        return (math.nan, math.nan, math.nan, 0.0 if block is None else 1.0)
    vals = []
    for key in ("a", "b", "f"):
        v = block.get(key)
        vals.append(float(v) if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) else math.nan)
    return (*vals, 1.0)


def _band_array(name: str, value: Any, G: int) -> np.ndarray:
    if value is None:
        out = np.full((G, 4), math.nan)
        out[:, 3] = 0.0
        return out
    arr = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.ndim == 2:
        if value.shape[0] != G or value.shape[1] not in (3, 4):
            raise BatchError(f"metadata[{name!r}]: expected shape ({G}, 3) or ({G}, 4), got {value.shape}")
        value = value.astype(np.float64)
        out = np.empty((G, 4))
        out[:, :3] = value[:, :3]
        out[:, 3] = value[:, 3] if value.shape[1] == 4 else (~np.isnan(value[:, :3]).all(axis=1)).astype(float)
        return out
    if len(arr) != G:
        raise BatchError(f"metadata[{name!r}]: expected {G} entries (one per group), got {len(arr)}")
    return np.array([band_row(v) for v in value], dtype=np.float64).reshape(G, 4)


def _load_meta(batch: Batch, spec: MetaSpec, value: Any, G: int) -> None:
    if spec.kind == "scalar":
        _load_field(batch, spec.name, spec.type, value, G)
        return
    if spec.kind == "record":
        rows = value
        for fname, ftype in spec.fields:
            path = f"{spec.name}.{fname}"
            if rows is None:
                col = None
            elif isinstance(rows, Mapping):
                col = rows.get(fname)
            else:
                if len(rows) != G:
                    raise BatchError(f"metadata[{spec.name!r}]: expected {G} entries (one per group), got {len(rows)}")
                # a band key that is present but null is a malformed band (no fallback), not an absent one
                col = [({} if row[fname] is None and ftype == "band" else row[fname])
                       if isinstance(row, Mapping) and fname in row else None for row in rows]
            _load_field(batch, path, ftype, col, G)
        return
    # list metadata: per group a record of equal-length lists, or {"offsets": ..., field: values}
    names = [f for f, _ in spec.fields]
    if isinstance(value, Mapping) and "offsets" in value:
        off = np.asarray(value["offsets"], dtype=np.int64)
        if len(off) != G + 1:
            raise BatchError(f"metadata[{spec.name!r}].offsets: expected {G + 1} values, got {len(off)}")
        fields = {f: _numeric(f"metadata[{spec.name!r}].{f}", value[f], int(off[-1]), "item") for f in names}
        batch.lists[spec.name] = (off, fields)
        return
    rows = value if value is not None else [None] * G
    if len(rows) != G:
        raise BatchError(f"metadata[{spec.name!r}]: expected {G} entries (one per group), got {len(rows)}")
    lengths, cols = [], {f: [] for f in names}
    for g, row in enumerate(rows):
        lists = [row.get(f) if isinstance(row, Mapping) else None for f in names]
        if any(v is None for v in lists):
            lengths.append(0)  # absent or partial: the group has no items
            continue
        k = min(len(v) for v in lists)  # zip semantics: the shortest list decides
        lengths.append(k)
        for f, v in zip(names, lists):
            for i, x in enumerate(v[:k]):
                fx = _scalar(x)
                if math.isnan(fx):
                    raise BatchError(f"metadata[{spec.name!r}]: group {g}, {f}[{i}]: expected a number, got {x!r}")
                cols[f].append(fx)
    off = np.zeros(G + 1, dtype=np.int64)
    off[1:] = np.cumsum(lengths)
    batch.lists[spec.name] = (off, {f: np.asarray(cols[f], dtype=np.float64) for f in names})


def _load_field(batch: Batch, path: str, typ: str, value: Any, G: int) -> None:
    if typ == "band":
        batch.bands[path] = _band_array(path, value, G)
        return
    if value is None:
        batch.metas[path] = np.full(G, math.nan)
        return
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        arr = _numeric(f"metadata[{path!r}]", value, G, "group")
    else:
        if len(value) != G:
            raise BatchError(f"metadata[{path!r}]: expected {G} values (one per group), got {len(value)}")
        arr = np.array([_scalar(v) for v in value], dtype=np.float64)
    batch.metas[path] = arr
