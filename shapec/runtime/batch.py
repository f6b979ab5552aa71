"""Struct-of-arrays batch: validated float64 arrays that both backends read, and what the binder
that makes them (binder.py) shares with the other readers of a call's arrays.

A call's arguments become a Batch in two steps. First every argument is put in its array form
(a list, a tensor, rows of dicts, another dtype), and a form that cannot be one is named at
once. Then every value is checked, array by array in argument order, by compiled passes that
take several arrays a call (compiler/value_checks.py: finiteness, signs, whole numbers, bands,
offsets), so a small call costs microseconds, not a numpy reduction per property. Only when a
pass finds a bad value does `checked` look again with the validators of `validate.py`, and raise
the error that names the field, the group or row and what was expected. A bad value anywhere
fails the whole call (nothing is shaped), so it can never change another group's rewards.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..compiler import store
from ..ir.nodes import UNITS, MetaSpec
from .validate import BatchError, check_offsets, finite, group_size_offsets, integers

__all__ = ["Batch", "BatchError", "MetaPlan", "make_offsets", "checked"]

NONNEG = (*UNITS, "components")  # the types whose values are >= 0


@dataclass(slots=True)
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


def hint(key: Any, options) -> str:
    """` (did you mean 'x'?)` for the closest of `options`, or nothing."""
    close = difflib.get_close_matches(str(key), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def checked(name: str, arr: np.ndarray, typ: str, allow_nan: bool = False) -> np.ndarray:
    """One array's values, on its own: finite (NaN allowed where it means missing), >= 0 for a unit,
    whole for an int, and a bool as 0/1 flags (NaN stays missing). What a failed compiled check
    falls back on to word the error; a BatchError names the array and the first bad index."""
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


def declaration(spec: MetaSpec) -> str:
    """A metadata declaration as the spec writes it (`meta pb: {total: band}`), for messages."""
    fields = ", ".join(f"{f}: {t}" for f, t in spec.fields)
    kind = {"scalar": spec.type, "record": f"{{{fields}}}", "list": f"list({fields})"}[spec.kind]
    return f"meta {spec.name}: {kind}"


# ------------------------------------------------------------------------- metadata
@dataclass(frozen=True)
class MetaPlan:
    """A metadata declaration with the names its messages use, worked out once per binder."""

    spec: MetaSpec
    label: str  # metadata['pb']
    names: list[str]  # its fields
    fields: tuple[tuple[str, str, str, str], ...]  # (field, type, path 'pb.total', label "metadata['pb.total']")
    expected: list[str]  # a flat list's keys: the offsets, then the fields
    offsets_label: str  # a flat list's offsets: metadata['pl'].offsets
    item_labels: tuple[str, ...]  # a flat list's fields: metadata['pl'].reward
    field_keys: frozenset[str]  # what a record's mapping may hold
    expected_keys: frozenset[str]  # what a flat list's mapping must hold

    @classmethod
    def of(cls, spec: MetaSpec) -> "MetaPlan":
        label = f"metadata[{spec.name!r}]"
        fields = tuple((f, t, f"{spec.name}.{f}", f"metadata[{spec.name + '.' + f!r}]") for f, t in spec.fields)
        names = [f for f, _ in spec.fields]
        return cls(spec, label, names, fields, ["offsets", *names], f"{label}.offsets",
                   tuple(f"{label}.{f}" for f in names), frozenset(names), frozenset(["offsets", *names]))


def no_bands(G: int) -> np.ndarray:
    """A band column with no band in any group: rows (NaN, NaN, NaN, 0)."""
    out = np.full((G, 4), math.nan)
    out[:, 3] = 0.0
    return out
