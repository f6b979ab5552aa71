"""Drop-in for Short-RL's lazy length reward (`LengthRScorer` with its module-level `MaxACC`).

    from shapec.compat.short_rl import ShortRL

    shaper = ShortRL(tau_l=200, tau_acc=0.05, alpha=1.0)
    shaped = shaper(task_rewards, correct, lengths, group_size=8)   # once per training step
    checkpoint["short_rl"] = shaper.state_dict()                    # unlike the official code,
    shaper.load_state_dict(checkpoint["short_rl"])                  # a resumed run keeps acc_max

The rule lives in `shapec/stdlib/short_rl.shape::short_rl`; this class holds the compiled shaper,
whose `acc_max` state persists across calls. Validation batches should not go through it (the
official code scores them without the length term and without touching the running best).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..api import load
from ..runtime.params import validate_params
from ..runtime.shaper import default_backend
from ..runtime.states import StateError, state_number


class ShortRL:
    """Short-RL's three gates with a running best accuracy that survives checkpoints."""

    def __init__(self, tau_l: float = 200, tau_acc: float = 0.05, alpha: float = 1.0):
        self._shaper = load("short_rl", backend=default_backend())["short_rl"]
        self._params = validate_params(self._shaper.ir, {"tau_l": tau_l, "tau_acc": tau_acc, "alpha": alpha})
        self._switch_on = False
        self._metrics: dict[str, float] = {}

    @property
    def acc_max(self) -> float:
        """The best batch accuracy seen so far (0 before the first step)."""
        return self._shaper.state_dict()["short_rl"]["acc_max"]

    @property
    def metrics(self) -> dict[str, float]:
        """The last step's `acc`, `acc_max` and `length_reward_mean`, for logging ({} before the first)."""
        return dict(self._metrics)

    @property
    def switch_on(self) -> bool:
        """Whether StableSwitch let the length term through at the last step."""
        return self._switch_on

    def __call__(
        self,
        rewards: Sequence[float],
        correct: Sequence[Any],
        lengths: Sequence[float],
        *,
        group_size: int | None = None,
        offsets: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Shaped rewards for one training step; `lengths` are response tokens, groups are prompts."""
        out = self._shaper(
            rewards, group_size=group_size, offsets=offsets,
            channels={"correct": correct, "length": lengths}, params=self._params, breakdown=False,
        )
        self._switch_on = "open" in out.gates["stable_switch"]
        self._metrics = {k: float(v) for k, v in out.metrics.items()}
        return out.rewards

    def state_dict(self) -> dict[str, float]:
        return {"acc_max": self.acc_max}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Restore `{"acc_max": best}`: a finite accuracy in [0, 1], or a StateError naming the key."""
        if not isinstance(state, Mapping):
            raise StateError(f"Short-RL state: expected a mapping {{'acc_max': float}}, got {type(state).__name__}")
        unknown = sorted(str(k) for k in state if k != "acc_max")
        if unknown:
            raise StateError(f"unknown Short-RL state {unknown}; expected 'acc_max'")
        if "acc_max" not in state:
            raise StateError("Short-RL state: missing 'acc_max' (the best batch accuracy so far)")
        value = state_number("acc_max", state["acc_max"])
        if not 0 <= value <= 1:
            raise StateError(f"state acc_max: expected an accuracy in [0, 1], got {state['acc_max']!r}")
        self._shaper.load_state_dict({"short_rl": {"acc_max": value}})
