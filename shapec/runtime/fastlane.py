"""The call on arrays already in kernel form, planned once per compiled shaper.

A training loop calls its shaper every step with the same kinds of arguments: float64 arrays,
a group size, metadata as columns. The general path (batch.py) accepts every form a user may
pass and costs a hundred Python steps on a small batch, more than the kernel. This lane takes
only the kernel's own forms, tests them with attribute checks, lets the compiled one-pass checks
of fastcheck.py judge the values, and hands the kernel the arrays the general path would have
built. Anything else (a list, rows of dicts, an unknown key, a value a check does not pass)
makes it step aside, and the general path runs: it builds the same arrays or raises the error
that names the field and the index. So the lane never words an error and never decides on its
own what is valid; tests/test_fastlane.py holds it to the general path bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from ..compiler.ir import UNITS, ShaperIR
from ..compiler.kernel import EMPTY, state_array
from .batch import no_bands
from .params import param_arrays, remember, seen_key
from .validate import compiled_checks

_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)


class _Aside(Exception):
    """Not a form the lane takes: the general path decides."""


def _plain(value, dtype: np.dtype, ndim: int) -> bool:
    """An array of the very type the general path's copies have: this dtype and rank, C-contiguous,
    aligned and writable (`carray`; an ahead-of-time kernel reads any array as contiguous, and a JIT
    one compiles a new version for a read-only array, which its group function's signature refuses)."""
    return type(value) is np.ndarray and value.dtype == dtype and value.ndim == ndim and value.flags.carray


def _vector(value, length: int, dtype: np.dtype) -> np.ndarray:
    """A plain 1-d array of this length, as it is: kernels never write their inputs."""
    if not _plain(value, dtype, 1) or len(value) != length:
        raise _Aside
    return value


class FastLane:
    """One stage's call on canonical arrays; `__call__` returns None when the general path must run."""

    def __init__(self, shaper, kernel):
        self.shaper, self.kernel = shaper, kernel
        ir: ShaperIR = kernel.ir
        self.ir = ir
        self.checks = compiled_checks()
        slot = {(a.source, a.key): i for i, a in enumerate(kernel.inputs)}  # None: the kernel does not read it
        self.width = len(kernel.inputs)
        self.fixed = [(slot.get((k, None)), k) for k in ("rewards", "env_rewards", "offsets", "components",
                                                          "use_components")]
        self.inputs = [(name, typ in UNITS, typ == "int", typ == "bool", slot.get(("input", name)))
                       for name, typ in ir.inputs]
        self.metas = []
        for m in ir.metas:
            if m.kind == "scalar":
                self.metas.append((m.name, m.kind, _column(slot, m.name, m.type)))
            elif m.kind == "record":
                self.metas.append((m.name, m.kind, (frozenset(f for f, _ in m.fields),
                                                    [(f, *_column(slot, f"{m.name}.{f}", t)) for f, t in m.fields])))
            else:
                self.metas.append((m.name, m.kind, (slot.get(("list_offsets", m.name)),
                                                    [(f, t in UNITS, t == "int", t == "bool",
                                                      slot.get(("list_field", (m.name, f))))
                                                     for f, t in m.fields])))
        self.states = tuple(s for s, _ in ir.states)
        self.state_slot = slot.get(("state", None))
        self.thread_slot = slot.get(("nthreads", None))
        self._offsets: dict[tuple[int, int], np.ndarray] = {}  # (n, group size) -> offsets, copied per call
        self._params: dict[tuple, dict] = {}  # params as passed -> the stage's param arrays (`_param_arrays`)
        self._last_params: tuple = (None,)  # (G, keys, the values, their ids, arrays) of the last remembered call
        # a compiled kernel reads a None argument as an array and crashes the process: the lane serves
        # only a kernel whose every argument it fills, and that has a slot for each value it always
        # writes (a kernel out of step with its IR gets no lane: the general path builds its arguments)
        params = {i for (source, _), i in slot.items() if source == "params"}  # `kernel.param_values` fills them
        always = [i for i, _ in self.fixed] + [plan[-1] for plan in self.inputs]
        self.fills_every_argument = None not in always and self._filled_slots() | params == set(range(self.width))

    def _filled_slots(self) -> set:
        """The argument slots a call fills from the batch (each plan's slot, where the kernel reads one)."""
        slots = {i for i, _ in self.fixed} | {plan[-1] for plan in self.inputs}
        for _, kind, plan in self.metas:
            if kind == "scalar":
                slots.add(plan[-1])
            elif kind == "record":
                slots |= {field[-1] for field in plan[1]}
            else:
                slots |= {plan[0]} | {field[-1] for field in plan[1]}
        return (slots | {self.state_slot, self.thread_slot}) - {None}

    def __call__(self, rewards, group_size, offsets, channels, metadata, params, breakdown: bool):
        values = [None] * self.width
        try:
            r, off, arrays = self._gather(values, rewards, group_size, offsets, channels, metadata, params)
        except _Aside:
            return None
        for i, array in self.kernel.param_values(arrays):
            values[i] = array
        if self.thread_slot is not None:
            import numba

            values[self.thread_slot] = numba.get_num_threads()
        shaper = self.shaper
        with shaper._lock:
            if self.state_slot is not None:
                values[self.state_slot] = state_array(shaper._state[self.ir.name], self.states) if self.states else EMPTY
            out = self.kernel.call(values, len(r), len(off) - 1, breakdown)
            shaper._state[self.ir.name] = dict(out.state)
        return shaper._one_stage_result(self.ir, r, off, out)

    def _gather(self, values: list, rewards, group_size, offsets, channels, metadata, params):
        """Fill the kernel's batch arguments in `values`; (rewards, offsets, param arrays)."""
        if self.checks is None:  # none yet: the first kernel extension a cache folder builds carries them
            self.checks = compiled_checks()
            if self.checks is None:
                raise _Aside
        if type(rewards) is not np.ndarray:
            raise _Aside
        n = len(rewards)
        r = _vector(rewards, n, _F64).copy()  # the result hands it back as the stage's reward_in
        if n == 0 or not self.checks.clean_values(r, False, False, False):
            raise _Aside
        off = self._group_offsets(n, group_size, offsets)
        G = len(off) - 1
        for (i, _), v in zip(self.fixed, (r, r, off, EMPTY, False)):
            values[i] = v
        if channels is None:
            channels = {}
        elif type(channels) is not dict:
            raise _Aside
        for name, nonneg, whole, boolean, i in self.inputs:
            values[i] = self._clean(_vector(channels.get(name), n, _F64), nonneg, False, whole, boolean)
        if metadata is None:
            metadata = {}
        elif type(metadata) is not dict:
            raise _Aside
        for name, kind, plan in self.metas:
            value = metadata.get(name)
            if kind == "scalar":
                self._field(values, *plan, value, G)
            elif kind == "record":
                self._record(values, *plan, value, G)
            else:
                self._list(values, *plan, value, G)
        return r, off, self._param_arrays(params, G)

    def _param_arrays(self, params, G: int) -> dict:
        """The stage's param arrays, remembered by the params as passed (values and types, as
        params.param_arrays remembers them after the merge), so a training loop passing one config
        skips the merge too."""
        if type(params) is dict:  # the very values of the last call (held here, so their ids are theirs)
            last = self._last_params
            if last[0] == G and tuple(params) == last[1] and tuple(map(id, params.values())) == last[3]:
                return last[4]
        key = (G,) if params is None else seen_key(self.ir, params, G)
        found = self._params.get(key) if key is not None else None
        if found is not None:
            self._remember_last(params, G, found)
            return found
        try:  # the shaper's own params merge (stage names, bound arguments); an error is the general path's to word
            arrays = param_arrays(self.ir, self.shaper._stage_params(params)[0], G)
        except Exception:
            raise _Aside from None
        if key is not None:
            remember(self._params, key, arrays)
            self._remember_last(params, G, arrays)
        return arrays

    def _remember_last(self, params, G: int, arrays: dict) -> None:
        """Keep the values of a call whose key was hashable (so none is a list or an array that could
        change in place): the next call with these very objects skips building its key. A value is
        compared by identity, so 1 after 1.0, or -0.0 after 0.0, is a new call."""
        if type(params) is dict:
            values = tuple(params.values())
            self._last_params = (G, tuple(params), values, tuple(map(id, values)), arrays)

    def _group_offsets(self, n: int, group_size, offsets) -> np.ndarray:
        if offsets is None:
            if type(group_size) is not int or group_size <= 0 or n % group_size:
                raise _Aside
            template = self._offsets.get((n, group_size))
            if template is None:
                template = np.arange(0, n + 1, group_size, dtype=np.int64)
                self._offsets[n, group_size] = template
            return template.copy()  # the result hands its offsets to the caller
        if group_size is not None or not _plain(offsets, _I64, 1):
            raise _Aside
        off = offsets.copy()
        if not self.checks.clean_offsets(off, n):
            raise _Aside
        return off

    def _clean(self, arr: np.ndarray, nonneg: bool, allow_nan: bool, whole: bool, boolean: bool) -> np.ndarray:
        """The array as the kernel reads it (a bool one as batch.as_flags' flags) if the compiled
        check passes it, in one pass either way."""
        if boolean:
            flags = np.empty(len(arr))
            if not self.checks.clean_flags(arr, allow_nan, flags):
                raise _Aside
            return flags
        if not self.checks.clean_values(arr, nonneg, allow_nan, whole):
            raise _Aside
        return arr

    def _field(self, values: list, band: bool, nonneg: bool, whole: bool, boolean: bool, i, value, G: int) -> None:
        """A scalar metadata column (NaN: missing for that group) or a band column, as batch._load_field."""
        if band:
            if value is None:
                table = no_bands(G)
            elif _plain(value, _F64, 2) and value.shape[0] == G and value.shape[1] in (3, 4):
                table = np.empty((G, 4))
                if not self.checks.band_rows(value, table):
                    raise _Aside
            else:
                raise _Aside
        elif value is None:
            table = np.full(G, math.nan)
        else:
            table = self._clean(_vector(value, G, _F64), nonneg, True, whole, boolean)
        if i is not None:
            values[i] = table

    def _record(self, values: list, keys: frozenset, fields: list, value, G: int) -> None:
        if value is None:
            value = {}
        elif type(value) is not dict or not keys.issuperset(value):
            raise _Aside
        for fname, *plan in fields:
            self._field(values, *plan, value.get(fname), G)

    def _list(self, values: list, offsets_slot, fields: list, value, G: int) -> None:
        """List metadata in its flat form {"offsets": (G+1,) int64, field: values}, or None (no items)."""
        if value is None:
            if offsets_slot is not None:
                values[offsets_slot] = np.zeros(G + 1, dtype=np.int64)
            for *_, i in fields:
                if i is not None:
                    values[i] = np.zeros(0)
            return
        if type(value) is not dict or len(value) != len(fields) + 1 or "offsets" not in value:
            raise _Aside
        total = None
        for fname, nonneg, whole, boolean, i in fields:
            column = value.get(fname)
            if total is None and type(column) is np.ndarray:
                total = len(column)
            arr = self._clean(_vector(column, total, _F64), nonneg, False, whole, boolean)
            if i is not None:
                values[i] = arr
        off = _vector(value["offsets"], G + 1, _I64)
        if not self.checks.clean_offsets(off, total):
            raise _Aside
        if offsets_slot is not None:
            values[offsets_slot] = off


def _column(slot: dict, path: str, typ: str) -> tuple:
    """(band?, non-negative?, whole?, bool?, kernel slot) of a metadata column."""
    source = "band" if typ == "band" else "meta"
    return (typ == "band", typ in UNITS, typ == "int", typ == "bool", slot.get((source, path)))
