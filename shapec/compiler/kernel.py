"""A loaded kernel and the recipe for its arguments: what both call paths (runtime/shaper.py's
general one and runtime/fastlane.py's) hand to the compiled function, and how its outputs become
a StageOutput."""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass

import numpy as np

from ..runtime.interp import StageOutput
from .ir import ShaperIR
from .lowering import Arg
from .specialize import UNKNOWN, Facts, specialize

_PARALLEL_LOCK = threading.Lock()


MAX_VARIANTS = 3  # the first call's specialisation, one more general, then the general kernel


def _one_column_if_uniform(packed: np.ndarray) -> np.ndarray:
    """(P, G[, 4]) params -> (P, 1[, 4]) when every group has the same bits: the kernel reads column
    min(g, columns - 1), so uniform params take one cache line instead of a row of G values each."""
    if packed.shape[1] > 1:
        bits = packed.view(np.int64)
        if (bits == bits[:, :1]).all():
            return np.ascontiguousarray(packed[:, :1])
    return packed  # np.stack's own array: C-contiguous


@dataclass
class Kernel:
    """One stage's kernel with the recipe for its arguments, compiled per call's facts.

    `compile(specialized_ir)` builds the kernel of the IR with facts folded in (None: the general
    one). The first call compiles for the facts its params settle (specialize.py); a later call
    whose params break one of them compiles for the facts it shares with the last kernel built,
    and the third such call for none at all, so a run compiles at most MAX_VARIANTS times however
    its params move. Every variant takes the same arguments and gives the same outputs."""

    ir: ShaperIR
    compile: object
    args: tuple[Arg, ...]
    parallel: bool = False
    breakdown_always: bool = False  # a metric reads a term or factor: the kernel always stores them

    def __post_init__(self):
        ir = self.ir
        self.lock = _PARALLEL_LOCK if self.parallel and _serial_calls() else contextlib.nullcontext()
        self.sizes = (len(ir.terms), len(ir.factors), len(ir.gate_reasons), len(ir.metrics))
        self.inputs = tuple(a for a in self.args if not a.source.startswith("out") and a.source != "breakdown")
        states = self.state_names = tuple(s for s, _ in ir.states)
        self.metric_names = tuple(m for m, _ in ir.metrics)
        self._batch_getters = [(i, _getter(a, states)) for i, a in enumerate(self.inputs) if a.source != "params"]
        self._param_slots = [(i, a.key) for i, a in enumerate(self.inputs) if a.source == "params"]
        self._matrix_slot = next((i for i, a in enumerate(self.inputs)
                                  if a.source == "params" and a.numba_type == "nt.float64[:, ::1]"), None)
        self._params_seen: tuple = (None, ())  # the last params dict and its arguments (param_arrays reuses dicts)
        # without the breakdown the kernel gets zero-width term and factor arrays that nothing reads or returns
        self._no_breakdown = (np.empty((self.sizes[0], 0)), np.empty((self.sizes[1], 0)))
        self.facts = Facts(ir)
        self.variants: dict[tuple, object] = {}  # fact values -> compiled kernel
        self._last_fn: tuple = (None, None)  # the last param matrix and the kernel chosen for it
        self._by_matrix: dict[bytes, object] = {}  # param matrix bytes -> the kernel chosen for it
        self._compile_lock = threading.Lock()

    def prepare(self, params: dict[str, np.ndarray] | None = None):
        """The compiled kernel for these param arrays (None: for no facts, the general kernel)."""
        matrix = None if params is None else dict(self.param_values(params)).get(self._matrix_slot)
        return self.kernel_for(self.facts.of(matrix) if params is not None else self.facts.general)

    def _fn(self, values: list):
        """The compiled kernel for a call's arguments (compiled now if none fits its facts)."""
        matrix = values[self._matrix_slot] if self._matrix_slot is not None else None
        seen, fn = self._last_fn
        if seen is matrix and fn is not None:
            return fn
        key = matrix.tobytes() if matrix is not None else b""
        fn = self._by_matrix.get(key)
        if fn is None:
            fn = self.kernel_for(self.facts.of(matrix))
            if len(self._by_matrix) > 256:
                self._by_matrix.clear()
            self._by_matrix[key] = fn
        self._last_fn = (matrix, fn)
        return fn

    def kernel_for(self, facts: tuple):
        """A compiled variant whose facts all hold in `facts`, compiling one when none does."""
        fn = self._fitting(facts)
        if fn is not None:
            return fn
        with self._compile_lock:
            fn = self._fitting(facts)
            if fn is None:
                if self.variants:
                    last = list(self.variants)[-1]
                    shared = tuple(a if a == b else UNKNOWN for a, b in zip(last, facts))
                    facts = shared if len(self.variants) < MAX_VARIANTS - 1 else self.facts.general
                fn = self.compile(specialize(self.ir, self.facts, facts) if facts != self.facts.general else None)
                self.variants[facts] = fn
        return fn

    def _fitting(self, facts: tuple):
        for key, fn in list(self.variants.items()):
            if all(k is UNKNOWN or k == v for k, v in zip(key, facts)):
                return fn
        return None

    def param_values(self, params: dict[str, np.ndarray]) -> list[tuple[int, np.ndarray]]:
        """(argument index, packed array) of the params; a params dict seen on the last call reuses its arrays."""
        seen, prepared = self._params_seen
        if seen is not params:
            prepared = [(i, _one_column_if_uniform(np.stack([params[k] for k in keys], dtype=np.float64)))
                        for i, keys in self._param_slots]
            self._params_seen = (params, prepared)
        return prepared

    def arguments(self, batch, params: dict[str, np.ndarray], state: dict[str, float]) -> list:
        """The kernel's input arguments, in order."""
        values = [None] * len(self.inputs)
        for i, get in self._batch_getters:
            values[i] = get(batch, params, state)
        for i, array in self.param_values(params):
            values[i] = array
        return values

    def run(self, batch, params: dict[str, np.ndarray], state: dict[str, float], training: bool,
            breakdown: bool = True):
        ir = self.ir
        n, G = batch.n, batch.groups
        if not training:
            skip = np.full(G, ir.skip_reasons.index("validation"), dtype=np.int64)
            return StageOutput(batch.rewards.copy(), {t: np.zeros(n) for t in ir.terms} if breakdown else {},
                               {f: np.ones(n) for f in ir.factors} if breakdown else {}, skip,
                               {g: np.full(G, -1, dtype=np.int64) for g in ir.gate_reasons}, {}, dict(state))
        return self.call(self.arguments(batch, params, state), n, G, breakdown)

    def call(self, values: list, n: int, G: int, breakdown: bool):
        """Run the kernel on its input arguments; a non-finite reward is an error, never a result."""
        ir = self.ir
        T, F, NG, M = self.sizes
        keep = breakdown or self.breakdown_always
        terms, factors = (np.empty((T, n)), np.empty((F, n))) if keep else self._no_breakdown
        out = np.empty(n)
        skip, gates = np.empty(G, dtype=np.int64), np.empty((NG, G), dtype=np.int64)
        metrics = np.empty(M)
        with self.lock:
            state_out, bad_i, bad_g = self._fn(values)(*values, keep, out, terms, factors, skip, gates, metrics)
        if bad_i >= 0:
            raise FloatingPointError(
                f"shaper {ir.name!r} produced a non-finite reward for rollout {bad_i} (group {bad_g}); "
                "guard the division or reduction that can be undefined")
        return StageOutput(
            out, dict(zip(ir.terms, terms)) if breakdown else {},
            dict(zip(ir.factors, factors)) if breakdown else {}, skip,
            dict(zip(ir.gate_reasons, gates)), dict(zip(self.metric_names, metrics.tolist())),
            dict(zip(self.state_names, state_out.tolist())))


def _getter(a: Arg, states: tuple[str, ...]):
    """A function (batch, params, state) -> this argument's array, contiguous and of its dtype."""
    key = a.key
    return {
        "rewards": lambda b, p, s: _f64(b.rewards),
        "env_rewards": lambda b, p, s: _f64(b.env_rewards if b.env_rewards is not None else b.rewards),
        "offsets": lambda b, p, s: _i64(b.offsets),
        "components": lambda b, p, s: _f64(b.components) if b.components is not None else EMPTY,
        "use_components": lambda b, p, s: b.components is not None,
        "nthreads": lambda b, p, s: sys.modules["numba"].get_num_threads(),  # parallel kernels are JIT: loaded
        "input": lambda b, p, s: _f64(b.inputs[key]),
        "meta": lambda b, p, s: _f64(b.metas[key]),
        "band": lambda b, p, s: _f64(b.bands[key]),
        "list_offsets": lambda b, p, s: _i64(b.lists[key][0]),
        "list_field": lambda b, p, s: _f64(b.lists[key[0]][1][key[1]]),
        "state": lambda b, p, s: state_array(s, states),
    }[a.source]


def state_array(state: dict[str, float], names: tuple[str, ...]) -> np.ndarray:
    return np.array([float(state[name]) for name in names], dtype=np.float64)


EMPTY = np.zeros(0)  # every call without reward components (kernels never write their inputs)


def _f64(x) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == _F64 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.float64)


def _i64(x) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == _I64 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.int64)


_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)


def _serial_calls() -> bool:
    """workqueue aborts the process when two threads launch parallel kernels at once: serialise them."""
    import numba

    return numba.config.THREADING_LAYER == "workqueue"
