"""The compiled callable: validates inputs, runs a backend, and packages the result."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..compiler.ir import PipelineIR, ShaperIR
from .batch import Batch, BatchError, _numeric, make_batch
from .interp import Interpreter, StageOutput
from .params import ParamError, param_arrays, params_model

log = logging.getLogger("shapec")
BACKENDS = ("numba", "interpreter")


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


@dataclass
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


@dataclass
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


class CompiledShaper:
    """A shaper or pipeline compiled for one backend; call it on arrays.

    `shaper(rewards, group_size=16, channels={...}, metadata={...}, params={...})`.
    Stateful shapers (with `state`) keep their state across calls; `state_dict()` and
    `load_state_dict()` carry it over a restart.
    """

    def __init__(self, ir: ShaperIR | PipelineIR, backend: str, parallel: bool = False):
        self.ir = ir
        self.backend = backend
        self.parallel = parallel and backend == "numba"
        self.stages: list[tuple[ShaperIR, dict[str, Any]]] = (
            list(ir.stages) if isinstance(ir, PipelineIR) else [(ir, {})]
        )
        self._state = {s.name: {n: v for n, v in s.states} for s, _ in self.stages}
        # the inputs and metadata every call validates, worked out once: a training loop calls this every step
        self._inputs = tuple({n: t for s, _ in self.stages for n, t in s.inputs}.items())
        self._metas = tuple({m.name: m for s, _ in self.stages for m in s.metas}.values())
        self._warned: set[str] = set()
        self._kernels = None
        if backend == "numba":
            from ..compiler.build import load_kernels

            self._kernels = load_kernels(ir, self.parallel)

    @property
    def name(self) -> str:
        return self.ir.name

    @property
    def is_pipeline(self) -> bool:
        return isinstance(self.ir, PipelineIR)

    def __repr__(self) -> str:
        kind = "pipeline" if self.is_pipeline else "shaper"
        return f"<shapec {kind} {self.name!r} ({self.backend}{', parallel' if self.parallel else ''})>"

    def __reduce__(self):
        from ..api import _rebuild

        return (_rebuild, (self.ir.source, self.ir.filename, self.name, self.backend, self.state_dict(),
                           self.parallel))

    # ------------------------------------------------------------ params and state
    @property
    def params_model(self):
        if self.is_pipeline:
            raise AttributeError("a pipeline has one params model per stage: use .stage_params_models")
        return params_model(self.ir)

    @property
    def stage_params_models(self) -> dict[str, Any]:
        return {s.name: params_model(s) for s, _ in self.stages}

    def state_dict(self) -> dict[str, dict[str, float]]:
        return {k: dict(v) for k, v in self._state.items() if v}

    def load_state_dict(self, state: Mapping[str, Mapping[str, float]]) -> None:
        for stage, values in state.items():
            if stage not in self._state:
                raise KeyError(f"no stateful stage {stage!r}")
            unknown = set(values) - set(self._state[stage])
            if unknown:
                raise KeyError(f"stage {stage!r} has no state {sorted(unknown)}")
            self._state[stage].update({k: float(v) for k, v in values.items()})

    def _stage_params(self, params: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        params = dict(params or {})
        if not self.is_pipeline:
            return [{**self.stages[0][1], **params}]
        names = [s.name for s, _ in self.stages]
        for key in params:
            if key not in names:
                import difflib

                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ParamError(f"unknown stage {key!r} in params of pipeline {self.name!r}{hint}")
        return [{**args, **dict(params.get(s.name) or {})} for s, args in self.stages]

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
    ) -> Result:
        """`env_rewards` is what `env_reward` reads (default: `rewards`), for a call whose rewards
        were already shaped elsewhere, such as an advantage stage run on its own."""
        batch = make_batch(
            None, rewards, group_size=group_size, offsets=offsets, channels=channels, metadata=metadata,
            reward_components=reward_components, inputs_needed=self._inputs, metas_needed=self._metas,
        )
        if env_rewards is None:
            env_rewards = batch.rewards.copy()
        else:
            env_rewards = _numeric("env_rewards", env_rewards, batch.n)
            if not np.isfinite(env_rewards).all():
                raise BatchError(f"env_rewards: not finite at index {int(np.flatnonzero(~np.isfinite(env_rewards))[0])}")
        current = batch.rewards
        result = Result(current, batch.offsets)
        stage_params = self._stage_params(params)
        for i, ((ir, _), values) in enumerate(zip(self.stages, stage_params)):
            arrays = param_arrays(ir, values, batch.groups)
            stage_batch = Batch(current, batch.offsets, batch.inputs, batch.metas, batch.bands, batch.lists,
                                batch.components, env_rewards)
            out = self._run(i, ir, stage_batch, arrays, training)
            if training:
                self._state[ir.name] = dict(out.state)
            result.stages.append(StageResult(
                ir.name, current, out.rewards, out.terms, out.factors, out.skip_codes, ir.skip_reasons,
                out.gate_codes, ir.gate_reasons, out.metrics,
            ))
            self._warn_non_binary(ir, out)
            current = out.rewards
        result.rewards = current
        return result

    def _run(self, i: int, ir: ShaperIR, batch: Batch, params, training) -> StageOutput:
        state = self._state[ir.name]
        if self._kernels is not None:
            return self._kernels[i].run(batch, params, state, training)
        return Interpreter(ir, batch, params, state).run(training)

    def _warn_non_binary(self, ir: ShaperIR, out: StageOutput) -> None:
        """Warn once per stage of this shaper, not on every training step."""
        if ir.requires != "binary" or ir.name in self._warned:
            return
        count = int(np.count_nonzero(out.skip_codes == ir.skip_reasons.index("non_binary")))
        if count:
            self._warned.add(ir.name)
            log.warning("shaper %r requires binary rewards: %d group(s) with graded, negative or "
                        "multi-component rewards were passed through unchanged", ir.name, count)
