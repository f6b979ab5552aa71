"""Struct-of-arrays batch: validated float64 arrays that both backends read, and the binder that
makes them from whatever a caller passes.

A `Binder` is planned once per compiled shaper (the inputs and metadata it reads, with their
types) and turns each call's arguments into a Batch in two steps. First every argument is put in
its array form (a list, a tensor, rows of dicts, another dtype), and a form that cannot be one
is named at once. Then every value is checked, array by array in argument order, by one compiled
pass each (compiler/value_checks.py: finiteness, signs, whole numbers, bands, offsets), so a
small call costs microseconds, not a numpy reduction per property. Only when a pass finds a bad
value do the validators of `validate.py` look again, and raise the error that names the field,
the group or row and what was expected. A bad value anywhere
fails the whole call (nothing is shaped), so it can never change another group's rewards.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from collections.abc import Mapping  # isinstance against typing.Mapping is several times slower
from typing import Any

import numpy as np

from ..compiler import store
from ..ir.nodes import UNITS, MetaSpec, ShaperIR
from .validate import (BatchError, as_array, band, band_table, check_offsets, exact, finite, group_size_offsets,
                       integers, numeric, show)

__all__ = ["Batch", "BatchError", "Binder", "make_batch", "make_offsets", "band"]

NONNEG = (*UNITS, "components")  # the types whose values are >= 0


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
    absent: tuple[str, ...] = ()  # declared metadata the call did not pass (shaper.py refuses what a reward reads)

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
    return _offsets("offsets", integers("offsets", offsets), n)


def _offsets(name: str, off: np.ndarray, total: int, what: str = "rewards") -> np.ndarray:
    """Offsets that slice `total` values, by the compiled check; check_offsets words what is wrong."""
    return off if store.value_checks().clean_offsets(off, total) else check_offsets(name, off, total, what)


def _mapping(name: str, value: Any) -> Mapping:
    if type(value) is dict:  # the common case, before the slower ABC check
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BatchError(f"{name}: expected a mapping of names to values, got {type(value).__name__}")
    return value


def _hint(key: Any, options) -> str:
    close = difflib.get_close_matches(str(key), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def checked(name: str, arr: np.ndarray, typ: str, allow_nan: bool = False) -> np.ndarray:
    """One array's values, on its own: finite (NaN allowed where it means missing), >= 0 for a unit,
    whole for an int, and a bool as 0/1 flags (NaN stays missing). The validator `Checks` falls
    back on to word an error; a BatchError names the array and the first bad index."""
    sign = typ if typ in NONNEG else None
    if allow_nan:
        finite(name, np.where(np.isnan(arr), 0.0, arr), sign)
    else:
        finite(name, arr, sign)
    if typ == "int" and len(arr):
        frac = ~np.isnan(arr) & (arr != np.floor(arr))
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise BatchError(f"{name}: index {i}: expected an integer, got {arr[i]!r}")
    return store.value_checks().as_flags(arr) if typ == "bool" else arr


class Checks:
    """The value checks of one call's arrays (see the module's docstring). `add` queues an array
    and returns its slot; `run` checks them all and returns each as the kernels read it (a bool as
    0/1 flags), in slot order; `add_bands` and `run_bands` do the same for band tables. Each array
    is read once by a compiled check (compiler/value_checks.py), which allocates nothing."""

    def __init__(self):
        self.compiled = store.value_checks()
        self.items: list[tuple[str, np.ndarray, str, bool]] = []
        self.tables: list[tuple[str, np.ndarray]] = []

    def add(self, name: str, arr: np.ndarray, typ: str, allow_nan: bool = False) -> int:
        """A fresh C-contiguous float64 array (validate.numeric makes them)."""
        self.items.append((name, arr, typ, allow_nan))
        return len(self.items) - 1

    def add_bands(self, name: str, table: np.ndarray) -> int:
        """A C-contiguous float64 (G, 3) or (G, 4) band table; `run_bands` returns it as (G, 4)
        rows (a, b, f, present)."""
        self.tables.append((name, table))
        return len(self.tables) - 1

    def run(self) -> list[np.ndarray]:
        """In slot order, so the first bad array raises, naming itself (`checked` words it)."""
        compiled = self.compiled
        values = []
        for name, arr, typ, allow_nan in self.items:
            if not compiled.clean_values(arr, typ in NONNEG, allow_nan, typ == "int"):
                checked(name, arr, typ, allow_nan)
            values.append(compiled.as_flags(arr) if typ == "bool" else arr)
        return values

    def run_bands(self) -> list[np.ndarray]:
        """Every queued band table as (G, 4) rows; band_table words the first bad row."""
        compiled = self.compiled
        rows = []
        for name, table in self.tables:
            out = np.empty((len(table), 4))
            rows.append(out if compiled.band_rows(table, out) else band_table(name, table, len(table)))
        return rows


class Binder:
    """How one shaper's calls become Batches: the inputs and metadata it reads, planned once."""

    def __init__(self, inputs: tuple[tuple[str, str], ...], metas: tuple[MetaSpec, ...]):
        self.inputs = inputs
        self.input_names = [name for name, _ in inputs]
        self.input_labels = [(name, typ, f"channels[{name!r}]") for name, typ in inputs]
        self.metas = metas
        self.meta_names = [m.name for m in metas]
        self.meta_plans = [MetaPlan.of(m) for m in metas]
        self._offsets: dict[tuple[int, int], np.ndarray] = {}  # (n, group size) -> offsets, copied per call

    def bind(self, rewards: Any, *, group_size: int | None = None, offsets: Any = None,
             channels: Mapping[str, Any] | None = None, metadata: Mapping[str, Any] | None = None,
             reward_components: Any = None, allow_short_last_group: bool = False) -> Batch:
        """Validate a call's arrays (see the module's docstring) and make its Batch."""
        checks = Checks()
        r = numeric("rewards", rewards)
        checks.add("rewards", r, "float")
        n = len(r)
        off = self._group_offsets(n, group_size, offsets, allow_short_last_group)
        G = len(off) - 1
        channels = _mapping("channels", channels)
        metadata = _mapping("metadata", metadata)
        for key in metadata:
            if key not in self.meta_names:
                raise BatchError(f"metadata: unknown key {key!r}{_hint(key, self.meta_names)}; "
                                 f"the shaper's metadata: {', '.join(map(repr, self.meta_names)) or 'none'}")
        slots = self._channels(checks, channels, n)
        comps = None
        if reward_components is not None:
            comps = checks.add("reward_components", numeric("reward_components", reward_components, n), "components")
        absent = () if len(metadata) == len(self.meta_names) else tuple(m for m in self.meta_names if m not in metadata)
        batch = Batch(r, off, absent=absent)  # every key of metadata is a declared name (above)
        later = [_load_meta(batch, checks, plan, metadata.get(plan.spec.name), G) for plan in self.meta_plans]
        values = checks.run()
        tables = checks.run_bands()
        batch.inputs = {name: values[slot] for name, slot in slots}
        if comps is not None:
            batch.components = values[comps]
        for fill in later:
            fill(values, tables)
        return batch

    def _group_offsets(self, n: int, group_size: Any, offsets: Any, allow_short_last_group: bool) -> np.ndarray:
        if offsets is None and type(group_size) is int and group_size > 0 and n % group_size == 0:
            template = self._offsets.get((n, group_size))
            if template is None:
                template = self._offsets[n, group_size] = group_size_offsets(n, group_size)
            return template.copy()  # the result hands its offsets to the caller
        return make_offsets(n, group_size, offsets, allow_short_last_group)

    def _channels(self, checks: Checks, channels: Mapping, n: int) -> list[tuple[str, int]]:
        """Each input the shaper reads, from `channels`: n values of its type (a bool as 0/1)."""
        slots = []
        for name, typ, label in self.input_labels:
            if name not in channels:
                extra = [k for k in channels if k not in self.input_names]
                unknown = "".join(f"; got unknown channel {k!r}{_hint(k, self.input_names)}" for k in extra)
                raise BatchError(f"channels: missing input {name!r} ({typ}, one value per rollout){unknown}")
            slots.append((name, checks.add(label, numeric(label, channels[name], n), typ)))
        return slots


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
    """Validate and convert user arrays into a Batch for the given inputs and metadata (a shaper's,
    when `ir` is given): a Binder planned for this one call."""
    binder = Binder(inputs_needed or (ir.inputs if ir else ()), metas_needed or (ir.metas if ir else ()))
    return binder.bind(rewards, group_size=group_size, offsets=offsets, channels=channels, metadata=metadata,
                       reward_components=reward_components, allow_short_last_group=allow_short_last_group)


def channel_arrays(channels: Mapping[str, Any], inputs_needed: tuple[tuple[str, str], ...], n: int
                   ) -> dict[str, np.ndarray]:
    """Each input a shaper reads, from `channels`: n values checked against its type (a bool as 0/1)."""
    checks = Checks()
    slots = Binder(inputs_needed, ())._channels(checks, _mapping("channels", channels), n)
    values = checks.run()
    return {name: values[slot] for name, slot in slots}


def declaration(spec: MetaSpec) -> str:
    """A metadata declaration as the spec writes it (`meta pb: {total: band}`), for messages."""
    fields = ", ".join(f"{f}: {t}" for f, t in spec.fields)
    kind = {"scalar": spec.type, "record": f"{{{fields}}}", "list": f"list({fields})"}[spec.kind]
    return f"meta {spec.name}: {kind}"


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


# ------------------------------------------------------------------------- metadata
@dataclass(frozen=True)
class MetaPlan:
    """A metadata declaration with the names its messages use, worked out once per binder."""

    spec: MetaSpec
    label: str  # metadata['pb']
    names: list[str]  # its fields
    fields: tuple[tuple[str, str, str, str], ...]  # (field, type, path 'pb.total', label "metadata['pb.total']")
    expected: list[str]  # a flat list's keys: the offsets, then the fields

    @classmethod
    def of(cls, spec: MetaSpec) -> "MetaPlan":
        label = f"metadata[{spec.name!r}]"
        fields = tuple((f, t, f"{spec.name}.{f}", f"metadata[{spec.name + '.' + f!r}]") for f, t in spec.fields)
        names = [f for f, _ in spec.fields]
        return cls(spec, label, names, fields, ["offsets", *names])


# Each loader puts one metadata value in array form now, queues its values on the checks, and
# returns what fills the batch once they have passed: fill(values, band tables).
def _load_meta(batch: Batch, checks: Checks, plan: MetaPlan, value: Any, G: int):
    spec = plan.spec
    if spec.kind == "scalar":
        return _load_field(batch, checks, spec.name, plan.label, spec.type, value, G)
    if spec.kind == "record":
        return _load_record(batch, checks, plan, value, G)
    return _load_list(batch, checks, plan, value, G)


def _load_record(batch: Batch, checks: Checks, plan: MetaPlan, value: Any, G: int):
    """A record: None, a mapping of field -> per-group column, or per-group rows (None or mappings)."""
    name, fields = plan.label, plan.names
    rows = None
    if isinstance(value, Mapping):
        for key in value:
            if key not in fields:
                raise BatchError(f"{name}: unknown field {key!r}{_hint(key, fields)}; fields: {fields}")
    elif value is not None:
        rows = [_row_mapping(name, g, row, fields) for g, row in enumerate(_rows(name, value, G))]
    fills = []
    for fname, ftype, path, label in plan.fields:
        if rows is None:
            col = value.get(fname) if value is not None else None
        else:
            col = [row.get(fname) if row is not None else None for row in rows]
            if ftype == "band":  # a key left out is no band; a key set to null is a malformed one
                for g, row in enumerate(rows):
                    if row is not None and fname in row and row[fname] is None:
                        raise BatchError(f"{label}: group {g}: null; a band key that is present "
                                         f"must hold a band {{a, b, f}} (leave the key out for no band)")
        fills.append(_load_field(batch, checks, path, label, ftype, col, G))

    def fill(values, tables):
        for each in fills:
            each(values, tables)
    return fill


def _load_field(batch: Batch, checks: Checks, path: str, name: str, typ: str, value: Any, G: int):
    value = as_array(name, value)
    if typ == "band":
        return _band_column(batch, checks, path, name, value, G)
    if value is None:
        batch.metas[path] = np.full(G, math.nan)
        return _nothing
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        arr = numeric(name, value, G, "group")
    else:
        column = _rows(name, value, G)
        arr = numeric(name, [math.nan if v is None else v for v in column], G, "group")
    slot = checks.add(name, arr, typ, allow_nan=True)  # NaN or None: missing for that group

    def fill(values, tables):
        batch.metas[path] = values[slot]
    return fill


def _band_column(batch: Batch, checks: Checks, path: str, name: str, value: Any, G: int):
    """Per-group bands -> (G, 4) rows (a, b, f, present); None entries are absent, others must be valid."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        if value.ndim != 2 or value.shape[0] != G or value.shape[1] not in (3, 4):
            raise BatchError(f"{name}: expected shape ({G}, 3) or ({G}, 4), got {value.shape}")
        if value.dtype.kind in "iu":
            exact(name, value)
        slot = checks.add_bands(name, np.ascontiguousarray(value, dtype=np.float64))

        def fill(values, tables):
            batch.bands[path] = tables[slot]
        return fill
    out = no_bands(G)
    if value is not None:
        for g, block in enumerate(_rows(name, value, G)):
            if block is not None:
                out[g] = (*band(f"{name}: group {g}", block), 1.0)
    batch.bands[path] = out
    return _nothing


def no_bands(G: int) -> np.ndarray:
    """A band column with no band in any group: rows (NaN, NaN, NaN, 0)."""
    out = np.full((G, 4), math.nan)
    out[:, 3] = 0.0
    return out


def _load_list(batch: Batch, checks: Checks, plan: MetaPlan, value: Any, G: int):
    """List metadata: per group a record of equal-length lists, or {"offsets": ..., field: values}."""
    spec, name, fields = plan.spec, plan.label, plan.names
    if isinstance(value, Mapping):
        return _load_flat_list(batch, checks, plan, value, G)
    rows = [None] * G if value is None else [_row_mapping(name, g, row, fields)
                                             for g, row in enumerate(_rows(name, value, G))]
    lengths, cols = [], {f: [] for f in fields}
    for g, row in enumerate(rows):
        lists = [row.get(f) if row is not None else None for f in fields]
        if any(v is None for v in lists):
            lengths.append(0)  # absent or partial: the group has no items
            continue
        arrays = [checked(f"{name}: group {g}, {f}", numeric(f"{name}: group {g}, {f}", v, None, "item"), t)
                  for (f, t), v in zip(spec.fields, lists)]
        k = min(len(a) for a in arrays)  # zip semantics: the shortest list decides
        lengths.append(k)
        for f, a in zip(fields, arrays):
            cols[f].append(a[:k])
    off = np.zeros(G + 1, dtype=np.int64)
    off[1:] = np.cumsum(lengths)
    batch.lists[spec.name] = (off, {f: np.concatenate(cols[f]) if cols[f] else np.zeros(0) for f in fields})
    return _nothing


def _load_flat_list(batch: Batch, checks: Checks, plan: MetaPlan, value: Mapping, G: int):
    """{"offsets": (G+1,) integers, field: values, ...}: every field as long as the offsets say."""
    spec, name, fields, expected = plan.spec, plan.label, plan.names, plan.expected
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
    for f, _ in spec.fields:
        label = f"{name}.{f}"
        columns[f] = numeric(label, value[f], None, "item")
    total = len(columns[fields[0]])
    for f in fields[1:]:
        if len(columns[f]) != total:
            raise BatchError(f"{name}.{f}: expected {total} items (as many as {fields[0]!r}), got {len(columns[f])}")
    off = _offsets(f"{name}.offsets", off, total, f"{fields[0]!r} items")
    slots = {f: checks.add(f"{name}.{f}", columns[f], t) for f, t in spec.fields}

    def fill(values, tables):
        batch.lists[spec.name] = (off, {f: values[slot] for f, slot in slots.items()})
    return fill


def _nothing(values, tables) -> None:
    """The fill of metadata that needed no check (absent, or checked as it was read)."""
