"""One stage's numba kernel as the call runs it: its compiled variants, its arguments, its outputs.

A kernel is compiled for what its first call's params settle (compiler/specialize.py): the
algorithms they turn off are left out, so `nemo_rl` compiles in seconds instead of a minute. A
later call whose params break one of those facts compiles for the facts it shares with the last
variant, and the third such call for none at all (the general kernel), so a run compiles at most
MAX_VARIANTS times however its params move. Every variant takes the same arguments and gives the
same outputs; compiler/store.py keeps each one on disk under its key.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import itertools
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass

import numpy as np

from ..compiler import store
from ..ir.nodes import ShaperIR
from ..compiler.arguments import Arg, breakdown_always, plan_arguments
from ..compiler.lowering.names import Namer
from ..compiler.specialize import UNKNOWN, Facts, specialize
from . import pycode as py
from .interp import StageOutput

MAX_VARIANTS = 3  # the first call's specialisation, one more general, then the general kernel
NOTICE_AFTER = 1.0  # seconds: a warm load takes milliseconds, a first compile up to a minute
_PARALLEL_LOCK = threading.Lock()


@dataclass
class Kernel:
    """One stage's kernel with the recipe for its arguments, compiled per call's facts."""

    ir: ShaperIR
    parallel: bool = False

    def __post_init__(self):
        ir = self.ir
        if self.parallel:
            fork_safe_threading()
        self.args: tuple[Arg, ...] = tuple(plan_arguments(ir, Namer(), self.parallel).args)
        self.lock = _PARALLEL_LOCK if self.parallel and _serial_calls() else contextlib.nullcontext()
        self.breakdown_always = breakdown_always(ir)  # a metric reads a term or factor: always stored
        self.sizes = (len(ir.terms), len(ir.factors), len(ir.gate_reasons), len(ir.metrics))
        self.inputs = tuple(a for a in self.args if not a.source.startswith("out") and a.source != "breakdown")
        states = self.state_names = tuple(s for s, _ in ir.states)
        self.metric_names = tuple(m for m, _ in ir.metrics)
        self.param_slots = [(i, a.key) for i, a in enumerate(self.inputs) if a.source == "params"]
        self.prompt_state_names = tuple(name for name, _, _ in ir.prompt_states)
        self.arguments = arguments_function(self.inputs, states)
        self.matrix_slot = next((k for k, (i, _) in enumerate(self.param_slots)
                                 if self.inputs[i].numba_type == "nt.float64[:, ::1]"), None)
        # without the breakdown the kernel gets zero-width term and factor arrays that nothing reads or returns
        self._no_breakdown = (np.empty((self.sizes[0], 0)), np.empty((self.sizes[1], 0)))
        self.facts = Facts(ir)
        self.variants: dict[tuple, object] = {}  # fact values -> compiled kernel
        self._compile_lock = threading.Lock()

    def pack(self, columns: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The param arguments, one packed array per slot: (P, G) scalars and (B, G, 4) bands, as
        (P, 1) and (B, 1, 4) when every group holds the same bits (the kernel reads column
        min(g, columns - 1), so uniform params take one cache line instead of a row of G values)."""
        packed = []
        for _, keys in self.param_slots:
            array = np.stack([columns[k] for k in keys], dtype=np.float64)
            if array.shape[1] > 1:
                bits = array.view(np.int64)
                if (bits == bits[:, :1]).all():
                    array = np.ascontiguousarray(array[:, :1])
            packed.append(array)
        return packed

    def for_params(self, packed: list[np.ndarray] | None):
        """The compiled kernel for these packed params (None: the general kernel)."""
        if packed is None:
            return self.kernel_for(self.facts.general)
        matrix = packed[self.matrix_slot] if self.matrix_slot is not None else None
        return self.kernel_for(self.facts.of(matrix))

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
                specialized = specialize(self.ir, self.facts, facts) if facts != self.facts.general else None
                with compile_notice(self.ir):
                    fn = store.kernel(self.ir, self.parallel, facts, specialized)
                self.variants[facts] = fn
        return fn

    def _fitting(self, facts: tuple):
        for key, fn in list(self.variants.items()):
            if all(k is UNKNOWN or k == v for k, v in zip(key, facts)):
                return fn
        return None

    def run(self, fn, batch, packed: list[np.ndarray], state: dict[str, float], training: bool,
            breakdown: bool = True, entering: dict[str, np.ndarray] | None = None) -> StageOutput:
        """Run kernel `fn` (for_params' choice for `packed`) on a validated batch; `entering`: each
        per-prompt state's (G,) values as the call's prompts enter it."""
        ir = self.ir
        n, G = batch.n, batch.groups
        if not training:
            skip = np.full(G, ir.skip_reasons.index("validation"), dtype=np.int64)
            return StageOutput(batch.rewards.copy(), {t: np.zeros(n) for t in ir.terms} if breakdown else {},
                               {f: np.ones(n) for f in ir.factors} if breakdown else {}, skip,
                               {g: np.full(G, -1, dtype=np.int64) for g in ir.gate_reasons}, {}, dict(state),
                               prompt_state=dict(entering or {}))
        prompt_in = np.stack([entering[name] for name in self.prompt_state_names]) if ir.prompt_states else EMPTY2D
        values = self.arguments(batch, packed, state, prompt_in)
        T, F, NG, M = self.sizes
        keep = breakdown or self.breakdown_always
        terms, factors = (np.empty((T, n)), np.empty((F, n))) if keep else self._no_breakdown
        out = np.empty(n)
        skip, gates = np.empty(G, dtype=np.int64), np.empty((NG, G), dtype=np.int64)
        metrics = np.empty(M)
        kept = (np.empty(n, dtype=bool),) if ir.drop is not None else ()
        prompt_out = (prompt_in.copy(),) if ir.prompt_states else ()  # a group the kernel does not update keeps its value
        with self.lock:
            state_out, bad_i, bad_g = fn(*values, keep, out, terms, factors, skip, gates, metrics, *kept, *prompt_out)
        if bad_i >= 0:
            raise FloatingPointError(
                f"shaper {ir.name!r} produced a non-finite reward for rollout {bad_i} (group {bad_g}); "
                "guard the division or reduction that can be undefined")
        return StageOutput(
            out, dict(zip(ir.terms, terms)) if breakdown else {},
            dict(zip(ir.factors, factors)) if breakdown else {}, skip,
            dict(zip(ir.gate_reasons, gates)), dict(zip(self.metric_names, metrics.tolist())),
            dict(zip(self.state_names, state_out.tolist())), kept[0] if kept else None,
            dict(zip(self.prompt_state_names, prompt_out[0])) if prompt_out else {})


def arguments_function(inputs: tuple[Arg, ...], states: tuple[str, ...]):
    """The kernel's input arguments as one generated function (pycode.py), (batch, packed, state,
    prompt_state) -> tuple in order: the batch's arrays (batch.py makes them contiguous and of their
    dtype), the packed params, the state as an array, the per-prompt states as an (S, G) array. A
    call on one group costs mostly such Python, so it is straight-line."""
    slots = itertools.count()  # the packed params, in the order of their arguments
    values = [_argument(a, next(slots) if a.source == "params" else None, states) for a in inputs]
    body = [ast.Return(ast.Tuple(values, ast.Load()))]
    return py.function("arguments", ("batch", "packed", "state", "prompt_state"),
                       body, {"EMPTY": EMPTY, "nthreads": _nthreads, "state_array": _state_array, "states": states})


def _argument(a: Arg, slot: int | None, states: tuple[str, ...]) -> ast.expr:
    """The expression of one argument (`slot`: its index in the packed params, for a param; a
    stateless kernel's state is the empty array)."""
    batch = functools.partial(py.attr, "batch")
    return {
        "rewards": lambda: batch("rewards"),
        "env_rewards": lambda: ast.IfExp(py.is_not_none(batch("env_rewards")), batch("env_rewards"), batch("rewards")),
        "offsets": lambda: batch("offsets"),
        "components": lambda: ast.IfExp(py.is_not_none(batch("components")), batch("components"), py.name("EMPTY")),
        "use_components": lambda: py.is_not_none(batch("components")),
        "nthreads": lambda: py.call("nthreads"),
        "input": lambda: py.item(batch("inputs"), a.key),
        "meta": lambda: py.item(batch("metas"), a.key),
        "band": lambda: py.item(batch("bands"), a.key),
        "list_offsets": lambda: py.item(py.item(batch("lists"), a.key), 0),
        "list_field": lambda: py.item(py.item(py.item(batch("lists"), a.key[0]), 1), a.key[1]),
        "params": lambda: py.item(py.name("packed"), slot),
        "state": lambda: py.call("state_array", py.name("state"), py.name("states")) if states else py.name("EMPTY"),
        "prompt_state": lambda: py.name("prompt_state"),
    }[a.source]()


def _nthreads() -> int:
    return sys.modules["numba"].get_num_threads()


def _state_array(state: dict[str, float], names: tuple[str, ...]) -> np.ndarray:
    return np.array([float(state[name]) for name in names], dtype=np.float64)


EMPTY = np.zeros(0)  # the components of a call without them, the state of a stateless kernel (never written)
EMPTY2D = np.zeros((0, 0))  # the per-prompt states of a kernel without them (not an argument of it)


@contextlib.contextmanager
def compile_notice(ir: ShaperIR):
    """One stderr line when loading a kernel takes over NOTICE_AFTER seconds (a compile), printed
    while it runs, so a first use that takes a minute does not look like a hang."""
    where = f"{ir.filename or '<string>'}:{ir.name}"
    timer = threading.Timer(NOTICE_AFTER, lambda: print(
        f"compiling {where} (first use; cached in {store.files.cache_root()})", file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def fork_safe_threading() -> None:
    """Parallel kernels run on a threading layer that survives fork(): tbb when installed, else
    numba's workqueue (GNU OpenMP kills a child forked after it ran). NUMBA_THREADING_LAYER, when
    set, is the user's choice and is kept. See docs/lowering.md, "Threads and fork"."""
    import numba

    if os.environ.get("NUMBA_THREADING_LAYER") or numba.config.THREADING_LAYER not in ("default", ""):
        return
    numba.config.THREADING_LAYER = "tbb" if importlib.util.find_spec("tbb") else "workqueue"


def _serial_calls() -> bool:
    """workqueue aborts the process when two threads launch parallel kernels at once: serialise them."""
    import numba

    return numba.config.THREADING_LAYER == "workqueue"
