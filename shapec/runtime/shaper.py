"""The compiled callable: validates inputs, runs a backend, and packages the result."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from contextlib import nullcontext
from dataclasses import dataclass, field
from collections.abc import Mapping  # isinstance against typing.Mapping is several times slower
from typing import Any

import numpy as np

from ..ir.nodes import PipelineIR, ShaperIR
from .helptext import documented
from .batch import Batch, declaration
from .binder import binder
from .batch_reach import first_meta_read, where
from .interp import Interpreter, StageOutput
from .params import ParamError, Resolved, mapping_of_params, params_key, params_model, resolve
from .states import States, prompt_keys
from .validate import BatchError, numeric

log = logging.getLogger("shapec")
BACKENDS = ("numba", "interpreter")


class AbsentMetadata(BatchError):
    """A call left out metadata, `.name`, that a shaped reward reads with nothing standing in for it
    (`.read` says where, for callers that word the fix their own way)."""

    name = read = ""


def default_parallel() -> bool:
    """SHAPEC_PARALLEL=1 turns on multi-threaded numba kernels process-wide (default off)."""
    value = os.environ.get("SHAPEC_PARALLEL", "0")
    if value not in ("0", "1"):
        raise ValueError(f"SHAPEC_PARALLEL={value!r}; expected 0 or 1")
    return value == "1"


def default_backend() -> str:
    backend = os.environ.get("SHAPEC_BACKEND", "numba")
    if backend not in BACKENDS:
        raise ValueError(f"SHAPEC_BACKEND={backend!r}; expected one of {', '.join(BACKENDS)}")
    return backend


@dataclass(slots=True)
class StageResult:
    """What one shaper did to the batch: its input and output rewards and the breakdown."""

    name: str
    reward_in: np.ndarray
    rewards: np.ndarray
    terms: dict[str, np.ndarray]
    factors: dict[str, np.ndarray]
    skip_codes: np.ndarray
    skip_reasons: tuple[str, ...]
    gate_codes: dict[str, np.ndarray]
    gate_reasons: dict[str, tuple[str, ...]]
    metrics: dict[str, float]
    kept: np.ndarray | None  # (n,) bool: False for a rollout this stage drops; None: it has no `drop when`

    @property
    def skipped(self) -> np.ndarray:
        return self.skip_codes != 0

    def skip_reason(self, g: int) -> str:
        return self.skip_reasons[self.skip_codes[g]]

    @property
    def gates(self) -> dict[str, list[str]]:
        """Per-group gate reasons (for skipped groups: 'skipped')."""
        return {
            name: [self.gate_reasons[name][c] if c >= 0 else "skipped" for c in codes]
            for name, codes in self.gate_codes.items()
        }


@dataclass(slots=True)
class Result:
    """Shaped rewards with the per-term, per-factor, per-gate breakdown of every stage."""

    rewards: np.ndarray
    offsets: np.ndarray
    stages: list[StageResult] = field(default_factory=list)

    @property
    def terms(self) -> dict[str, np.ndarray]:
        return self._merged("terms")

    @property
    def factors(self) -> dict[str, np.ndarray]:
        return self._merged("factors")

    @property
    def metrics(self) -> dict[str, float]:
        return self._merged("metrics")

    @property
    def gates(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for st in self.stages:
            for k, v in st.gates.items():
                out[k if len(self.stages) == 1 else f"{st.name}.{k}"] = v
        return out

    @property
    def kept(self) -> np.ndarray:
        """(n,) bool: the rollouts that stay in the batch, False where any stage drops one."""
        out = np.ones(len(self.rewards), dtype=bool)
        for st in self.stages:
            if st.kept is not None:
                out &= st.kept
        return out

    @property
    def drops(self) -> bool:
        """Whether a stage has a `drop when` (whether or not it dropped a rollout of this batch)."""
        return any(st.kept is not None for st in self.stages)

    @property
    def skipped(self) -> np.ndarray:
        out = np.zeros(len(self.offsets) - 1, dtype=bool)
        for st in self.stages:
            out |= st.skipped
        return out

    @property
    def skip_reasons(self) -> list[str]:
        """Per group, the first stage's skip reason ('' when every stage shaped it)."""
        out = [""] * (len(self.offsets) - 1)
        for st in reversed(self.stages):
            for g in np.flatnonzero(st.skipped):
                out[g] = st.skip_reason(g)
        return out

    def stage(self, name: str) -> StageResult:
        for st in self.stages:
            if st.name == name:
                return st
        raise KeyError(f"no stage {name!r}; stages: {', '.join(s.name for s in self.stages)}")

    def _merged(self, attr: str) -> dict:
        out: dict = {}
        for st in self.stages:
            for k, v in getattr(st, attr).items():
                out[k if len(self.stages) == 1 else f"{st.name}.{k}"] = v
        return out


BOUND_PARAMS = 64  # the params a shaper keeps resolved: a run passes one or a few sets, a schedule a new one per step


class Bound:
    """A call's params, resolved once for every stage (params.resolve) and, on the numba backend,
    packed into the kernel's arguments with the compiled variant that fits them (kernel.py)."""

    def __init__(self, resolved: list[Resolved]):
        self.resolved = resolved
        self._kernel_args: list[tuple | None] = [None] * len(resolved)
        self.absent_ok: set[tuple] = set()  # (metadata left out, groups) these params shape without (_refuse_absent)

    def kernel_args(self, i: int, kernel, G: int) -> tuple:
        """(compiled kernel, packed params) of stage i for a call on G groups (which its per-group
        params are for: the caller checks)."""
        resolved = self.resolved[i]
        found = self._kernel_args[i]
        if found is None:
            packed = kernel.pack(resolved.columns(G if resolved.per_group else 1))
            found = self._kernel_args[i] = (kernel.for_params(packed), packed)
        return found


class CompiledShaper:
    """A shaper or pipeline compiled for one backend; call it on arrays.

    `shaper(rewards, group_size=16, channels={...}, metadata={...}, params={...})`.
    Stateful shapers (with `state`) keep their state across calls; `state_dict()` and
    `load_state_dict()` carry it over a restart. A call reads, computes and writes the state
    under a lock, so calls from several threads never lose an update.
    """

    def __init__(self, ir: ShaperIR | PipelineIR, backend: str, parallel: bool = False, imports=None):
        self.ir = ir
        self._imports = imports or {}  # the specs it imports, as its loader read them (for its pickle)
        self.backend = backend
        self.parallel = parallel and backend == "numba"
        self.stages: list[tuple[ShaperIR, dict[str, Any]]] = (
            list(ir.stages) if isinstance(ir, PipelineIR) else [(ir, {})]
        )
        self._states = States([s for s, _ in self.stages])
        # stateless shapers stay lock-free: only a read-compute-write of state needs one
        self._lock = threading.Lock() if self._states.stateful() else nullcontext()
        # the inputs and metadata every call validates, planned once: a training loop calls this every step
        self._binder = binder(tuple({n: t for s, _ in self.stages for n, t in s.inputs}.items()),
                              tuple({m.name: m for s, _ in self.stages for m in s.metas}.values()))
        self._warned: set[str] = set()
        self._bound: dict[tuple, Bound] = {}  # params_key -> Bound, the oldest dropped past BOUND_PARAMS
        self._bound_lock = threading.Lock()
        self._kernels = None
        if backend == "numba":
            from .kernel import Kernel

            self._kernels = [Kernel(s, self.parallel) for s, _ in self.stages]

    @property
    def name(self) -> str:
        return self.ir.name

    @property
    def is_pipeline(self) -> bool:
        return isinstance(self.ir, PipelineIR)

    @property
    def prompt_states(self) -> tuple[str, ...]:
        """Each `state ... per prompt` as `stage.name`: when there is one, every call passes `prompts=`."""
        return self._states.per_prompt

    def __repr__(self) -> str:
        kind = "pipeline" if self.is_pipeline else "shaper"
        return f"<shapec {kind} {self.name!r} ({self.backend}{', parallel' if self.parallel else ''})>"

    def __reduce__(self):
        return (_rebuilt, (self.ir.source, self.ir.filename, self.name, self.backend, self.state_dict(),
                           self.parallel, _pickled_imports(self._imports)))

    # ------------------------------------------------------------ params and state
    @property
    def params_model(self):
        if self.is_pipeline:
            raise AttributeError("a pipeline has one params model per stage: use .stage_params_models")
        return params_model(self.ir)

    @property
    def stage_params_models(self) -> dict[str, Any]:
        return {s.name: params_model(s) for s, _ in self.stages}

    def state_dict(self) -> dict[str, dict]:
        """Every state of every stateful stage: `{stage: {x: number, y: {prompt: number}}}` (runtime/states.py)."""
        with self._lock:
            return self._states.state_dict()

    def load_state_dict(self, state: Mapping[str, Mapping[str, Any]]) -> None:
        """Load what `state_dict()` returned: every stateful stage, every state, a finite number each
        (a table of them per prompt for a state kept per prompt). Nothing is changed unless all of it
        is valid; the error names the stage and state key."""
        with self._lock:
            self._states.load(self.name, state)

    def _stage_params(self, params: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        params = mapping_of_params(params, f"params of {self.name!r}")
        if not self.is_pipeline:
            return [{**self.stages[0][1], **params}]
        names = [s.name for s, _ in self.stages]
        for key in params:
            if key not in names:
                import difflib

                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ParamError(f"unknown stage {key!r} in params of pipeline {self.name!r}{hint}")
        return [{**args, **mapping_of_params(params.get(s.name), f"params[{s.name!r}]")} for s, args in self.stages]

    def _bind(self, params: Mapping[str, Any] | None) -> Bound:
        """The call's params resolved for every stage: from the shaper's cache when a call with the
        same values came before (params_key), else resolved now and kept."""
        key = params_key(params)
        bound = self._bound.get(key) if key is not None else None
        if bound is None:
            bound = Bound([resolve(ir, values) for (ir, _), values in zip(self.stages, self._stage_params(params))])
            if key is not None:
                with self._bound_lock:
                    self._bound[key] = bound
                    if len(self._bound) > BOUND_PARAMS:
                        del self._bound[next(iter(self._bound))]
        return bound

    def prepare(self, params: Mapping[str, Any] | None = None, groups: int | None = None) -> "BoundShaper":
        """This shaper with `params` bound: validated once, and on the numba backend the kernels
        compiled for them now, so that the first training step does not wait for numba. `params`
        as a call takes them; per-group values are for `groups` groups (default: as many as given).
        The handle is called like the shaper, without `params=`: a training loop that keeps one
        config calls it every step.

        Each kernel is compiled for what its params turn off (specialize.py); a call whose params
        turn on more compiles again, at most twice."""
        bound = self._bind(params)
        if self._kernels is not None:
            for i, kernel in enumerate(self._kernels):
                per_group = bound.resolved[i].per_group
                G = groups if groups is not None else len(next(iter(per_group.values()))) if per_group else 1
                bound.resolved[i].check_groups(G)
                bound.kernel_args(i, kernel, G)
        return BoundShaper(self, bound)

    # ------------------------------------------------------------ call
    def __call__(
        self,
        rewards: Any,
        *,
        group_size: int | None = None,
        offsets: Any = None,
        channels: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        reward_components: Any = None,
        env_rewards: Any = None,
        training: bool = True,
        allow_short_last_group: bool = False,
        breakdown: bool = True,
        prompts: Any = None,
    ) -> Result:
        """Shape one batch. Bad data fails the whole call with a BatchError (nothing is shaped).

        `metadata` maps declared names to one entry per group (None where a group has none); an
        unknown name is an error naming the closest declared one. A declared name left out is
        absent in every group, which is refused (AbsentMetadata) where a reward reads it with
        nothing standing in for it: give it as None to say that no group has it.
        `group_size` must divide the number of rewards unless `allow_short_last_group=True`, which
        makes the last group hold the remainder. `env_rewards` is what `env_reward` reads (default:
        `rewards`), for a call whose rewards were already shaped elsewhere, such as an advantage
        stage run on its own. `breakdown=False` leaves every stage's `terms` and `factors` empty:
        the kernel then never stores them, which a trainer that only reads the rewards saves.
        `prompts` names each group's prompt (a string or an integer per group, each prompt once),
        which a shaper with a `state ... per prompt` needs: its state is kept per prompt."""
        batch = self._batch(rewards, group_size, offsets, channels, metadata, reward_components, env_rewards,
                            allow_short_last_group)
        return self._shape(batch, self._bind(params), training, breakdown, prompts)

    def _batch(self, rewards, group_size, offsets, channels, metadata, reward_components, env_rewards,
               allow_short_last_group) -> Batch:
        batch = self._binder(rewards, group_size, offsets, channels, metadata, reward_components,
                             allow_short_last_group)
        if env_rewards is None:
            batch.env_rewards = batch.rewards  # no stage writes it: each returns new rewards
        else:
            batch.env_rewards = numeric("env_rewards", env_rewards, batch.n)
            if not np.isfinite(batch.env_rewards).all():
                bad = int(np.flatnonzero(~np.isfinite(batch.env_rewards))[0])
                raise BatchError(f"env_rewards: not finite at index {bad}")
        return batch

    def _shape(self, batch: Batch, bound: Bound, training: bool, breakdown: bool, prompts: Any) -> Result:
        if batch.absent and batch.groups:
            self._refuse_absent(batch, bound)
        keys = prompt_keys(prompts, batch.groups) if prompts is not None else None
        if keys is None and self._states.per_prompt:
            raise BatchError(f"prompts: {self.name!r} keeps {', '.join(self.prompt_states)} per prompt; pass "
                             f"prompts=, one key per group (the id of the group's prompt)")
        with self._lock:
            current = batch.rewards
            result = Result(current, batch.offsets)
            for i, (ir, _) in enumerate(self.stages):
                stage_batch = batch if i == 0 else Batch(current, batch.offsets, batch.inputs, batch.metas, batch.bands,
                                                         batch.lists, batch.components, batch.env_rewards)
                entering = self._states.entering(ir.name, keys)
                out = self._run(i, ir, stage_batch, bound, training, breakdown, entering)
                if training:
                    self._states.keep(ir.name, out.state, out.prompt_state, keys)
                result.stages.append(self._stage_result(ir, current, out))
                current = out.rewards
            result.rewards = current
            return result

    def _refuse_absent(self, batch: Batch, bound: Bound) -> None:
        """Metadata a call leaves out is absent in every group. Where a read of it reaches the rewards
        with nothing standing in for it (batch_reach.first_meta_read), the call would shape nothing
        through it, silently, as a misspelt or forgotten key does: refused. Metadata only `??`
        fallbacks, `missing()` tests, reductions defined on no items (`count`) or branches the params
        turn off read may be left out; a key given as None says "in no group" and is never refused."""
        key = (batch.absent, batch.groups)
        if key in bound.absent_ok:
            return
        for i, (ir, _) in enumerate(self.stages):
            columns = bound.resolved[i].columns(batch.groups)
            for spec in ir.metas:
                found = first_meta_read(ir, columns, spec.name) if spec.name in batch.absent else None
                if found is not None:
                    read = f"shaper {ir.name!r} reads it ({where(found)}) with nothing standing in for it"
                    err = AbsentMetadata(f"metadata: missing {spec.name!r} (`{declaration(spec)}`): {read}, so left "
                                         f"out it would shape no group through it; give it, one entry per group "
                                         f"(None where a group has none), or give None to say no group has it")
                    err.name, err.read = spec.name, f"metadata {spec.name!r} (`{declaration(spec)}`): {read}"
                    raise err
        bound.absent_ok.add(key)

    def _run(self, i: int, ir: ShaperIR, batch: Batch, bound: Bound, training, breakdown: bool,
             entering: dict[str, np.ndarray]) -> StageOutput:
        state = self._states.batch[ir.name]
        resolved = bound.resolved[i]
        if self._kernels is not None:
            resolved.check_groups(batch.groups)  # the interpreter's columns() checks them itself
            kernel = self._kernels[i]
            fn, packed = bound.kernel_args(i, kernel, batch.groups) if training else (None, [])
            return kernel.run(fn, batch, packed, state, training, breakdown, entering)
        out = Interpreter(ir, batch, resolved.columns(batch.groups), state, resolved.uniform, entering).run(training)
        if not breakdown:
            out.terms, out.factors = {}, {}
        return out

    def _stage_result(self, ir: ShaperIR, reward_in: np.ndarray, out: StageOutput) -> StageResult:
        self._warn_non_binary(ir, out)
        if out.kept is None and ir.drop is not None:  # not training: nothing is dropped
            out.kept = np.ones(len(out.rewards), dtype=bool)
        return StageResult(ir.name, reward_in, out.rewards, out.terms, out.factors, out.skip_codes, ir.skip_reasons,
                           out.gate_codes, ir.gate_reasons, out.metrics, out.kept)

    def _warn_non_binary(self, ir: ShaperIR, out: StageOutput) -> None:
        """Warn once per stage of this shaper, not on every training step."""
        if ir.requires != "binary" or ir.name in self._warned or not np.count_nonzero(out.skip_codes):
            return  # many calls skip no group: one count (ndarray.any costs four times as much on one group)
        count = int(np.count_nonzero(out.skip_codes == ir.skip_reasons.index("non_binary")))
        if count:
            self._warned.add(ir.name)
            log.warning("shaper %r requires binary rewards: %d group(s) with graded, negative or "
                        "multi-component rewards were passed through unchanged", ir.name, count)


class BoundShaper:
    """A shaper with its params bound (what `shaper.prepare(params)` returns): called like the
    shaper, without `params=`; every other attribute is the shaper's (state, stages, ...)."""

    def __init__(self, shaper: CompiledShaper, bound: Bound):
        self.shaper = shaper
        self._bound = bound

    def __call__(self, rewards: Any, *, group_size: int | None = None, offsets: Any = None,
                 channels: Mapping[str, Any] | None = None, metadata: Mapping[str, Any] | None = None,
                 reward_components: Any = None, env_rewards: Any = None, training: bool = True,
                 allow_short_last_group: bool = False, breakdown: bool = True, prompts: Any = None) -> Result:
        shaper = self.shaper
        batch = shaper._batch(rewards, group_size, offsets, channels, metadata, reward_components, env_rewards,
                              allow_short_last_group)
        return shaper._shape(batch, self._bound, training, breakdown, prompts)

    def __getattr__(self, name: str):
        return getattr(self.shaper, name)

    def __repr__(self) -> str:
        return f"<bound {self.shaper!r}>"


def compiled_shaper(ir: ShaperIR | PipelineIR, backend: str, parallel: bool = False, imports=None) -> CompiledShaper:
    """A compiled shaper whose `help()` shows the spec's docstring, params, inputs and metrics."""
    return documented(CompiledShaper, ir)(ir, backend, parallel, imports)


def _pickled_imports(imports: Mapping) -> tuple:
    """A shaper's imports as plain values (key, shown, real, root, text), for its pickle."""
    return tuple((key, str(t.shown), str(t.real), str(t.root), t.text) for key, t in imports.items())


def _rebuilt(source: str, filename: str, name: str, backend: str, state: dict, parallel: bool = False,
             imports: tuple = ()) -> CompiledShaper:
    """Unpickle a compiled shaper: check it again from the pickled text of its spec and of every spec
    it imports, never from the files (the spec and kernel stores make this cheap)."""
    from ..checker.imports import Target
    from ..compiler.spec_store import checked_source

    pickled = {key: Target(Path(shown), Path(real), Path(root), text) for key, shown, real, root, text in imports}
    checked = checked_source(source, filename, Path(filename).parent, pickled)
    shaper = compiled_shaper({**checked.shapers, **checked.pipelines}[name], backend, parallel, checked.imports)
    shaper.load_state_dict(state)
    return shaper
