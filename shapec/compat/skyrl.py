"""SkyRL: an advantage estimator that shapes each uid group's outcome rewards, then normalises.

    from skyrl_train.trainer import RayPPOTrainer
    from shapec.compat.skyrl import register_advantage_estimator, with_batch
    register_advantage_estimator("shapec_kimi", "kimi", shaper="kimi_length")
    RayPPOTrainer.compute_advantages_and_returns = with_batch(RayPPOTrainer.compute_advantages_and_returns)
    # config: trainer.algorithm.advantage_estimator=shapec_kimi

SkyRL's custom estimators take verl's arguments (token-level rewards, a response mask, the uid of
each response) through `ppo_utils.compute_advantages_and_returns`. The estimator reads each
response's outcome reward (the sum of its token-level rewards), shapes every uid group, moves the
change onto the response's last trained token and hands the result to SkyRL's own base estimator
(GRPO, or RLOO) from its `AdvantageEstimatorRegistry`.

Two things the estimator's arguments do not say, so the estimator reads them from the batch and
the trainer that `with_batch` makes visible, and refuses to run without them:

- the length of a response is the sum of its **loss mask**: in a multi-turn run the response mask
  the estimator is handed also covers the environment's observation tokens;
- in **step-wise** training (`generator.step_wise_trajectories`) the estimator is handed each
  trajectory's last step alone, with a mask of ones (SkyRL 0.4) or that step's own mask (0.3): no
  length it could read is the trajectory's, so the estimator refuses that mode.

A response whose loss mask is all zeros trains on nothing (a padding row, whose uid is `pad<i>`; a
group the zero-variance filter masked; a truncated response the overlong filter masked): it stays
out of the shaping and of its group's statistics, and gets advantage 0. A rollout the shaper drops
(`drop when`) joins them: its loss mask, which SkyRL's policy loss reads, is set to zeros.

SkyRL's uid is the dataset row (`str(row)` in its `PromptDataset`), the same at every step, so it is
also the key of a spec that keeps a state per prompt.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
from typing import Any, Callable, Mapping

import numpy as np

from ._groups import require, resolve_shaper, shape_by_group

WHERE = "shapec.compat.skyrl"
BASES = ("grpo", "rloo")
PPO_UTILS = "skyrl_train.utils.ppo_utils"
# pip cannot say it: skyrl-train declares Python 3.12 only and requires flash-attn, which builds only with CUDA
INSTALL = ("pip install 'shapec[skyrl]' && pip install --no-deps --ignore-requires-python skyrl-train==0.3.1 "
           "(docs/trainers.md, SkyRL)")
# (trainer, batch) of the compute_advantages_and_returns that with_batch is running
_BATCH: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("shapec_skyrl_batch", default=None)


def with_batch(compute_advantages_and_returns: Callable) -> Callable:
    """The trainer's `compute_advantages_and_returns(self, data)` (`RayPPOTrainer`'s method), with the
    trainer and its batch visible to shapec's estimators: their loss mask, padding and config. Assign
    the result to the trainer class (see docs/trainers.md)."""
    @functools.wraps(compute_advantages_and_returns)
    def compute_advantages_and_returns_with_batch(trainer, data, *args, **kwargs):
        token = _BATCH.set((trainer, data))
        try:
            return compute_advantages_and_returns(trainer, data, *args, **kwargs)
        finally:
            _BATCH.reset(token)

    return compute_advantages_and_returns_with_batch


class ShapedEstimator:
    """The registered estimator: a class at module level, so that SkyRL's registry can pickle it into
    its Ray actor (it does so for every estimator registered once Ray runs)."""

    def __init__(self, name: str, shaper, params: Mapping | None, base: str):
        self.name, self.shaper, self.params, self.base = name, shaper, params, base
        self.where = f"{WHERE} ({name})"
        self.last_metrics: dict[str, float] = {}

    def __call__(self, token_level_rewards, response_mask, index, config=None, **kwargs):
        import torch

        trainer, data = self._batch(token_level_rewards)
        loss_mask = data["loss_mask"]
        lengths = loss_mask.sum(dim=-1).double().cpu().numpy()
        scores = token_level_rewards.sum(dim=-1).detach().double().cpu().numpy()
        rows = np.flatnonzero(lengths > 0)  # the responses that train
        keys = [index[i] for i in rows]
        shaped = shape_by_group(self.shaper, scores[rows], keys, lengths=lengths[rows], params=self.params,
                                where=self.where, prompt_ids=keys if self.shaper.prompt_states else None)
        change = np.zeros(len(scores))
        change[rows] = shaped.rewards - scores[rows]
        kept = np.zeros(len(scores), dtype=bool)
        kept[rows] = shaped.kept
        last = loss_mask.shape[-1] - 1 - (loss_mask > 0).flip(-1).int().argmax(dim=-1)  # last trained token
        moved = token_level_rewards.clone()
        moved[torch.arange(len(scores), device=moved.device), last] += torch.as_tensor(change).to(moved)
        out = torch.as_tensor(~kept, device=loss_mask.device)
        loss_mask[out] = 0  # a dropped rollout leaves the policy loss, which reads the batch's loss mask
        index = [uid if keep else ("shapec: trains on nothing", i) for i, (uid, keep) in enumerate(zip(index, kept))]
        base = _ppo_utils().AdvantageEstimatorRegistry.get(self.base)
        advantages, returns = base(token_level_rewards=moved, response_mask=response_mask, index=index,
                                   config=config, **kwargs)
        advantages[out.to(advantages.device)] = 0
        returns[out.to(returns.device)] = 0
        self.last_metrics = dict(shaped.metrics)
        if isinstance(getattr(trainer, "all_metrics", None), dict):  # what the trainer logs at each step
            trainer.all_metrics.update({f"shapec/{key}": value for key, value in shaped.metrics.items()})
        return advantages, returns

    def _batch(self, token_level_rewards):
        seen = _BATCH.get()
        if seen is None:
            raise ValueError(f"{self.where}: SkyRL hands an estimator the response mask, which in a multi-turn "
                             f"run also covers the environment's observation tokens, so lengths come from the "
                             f"batch's loss mask: wrap the trainer's method, RayPPOTrainer.compute_advantages_and_"
                             f"returns = with_batch(RayPPOTrainer.compute_advantages_and_returns) (docs/trainers.md)")
        trainer, data = seen
        generator = getattr(getattr(trainer, "cfg", None), "generator", None)
        if getattr(generator, "step_wise_trajectories", False):
            raise ValueError(f"{self.where}: step-wise training (generator.step_wise_trajectories=true) hands the "
                             f"estimator each trajectory's last step alone, with a mask of ones, so no length it "
                             f"reads is the trajectory's; shapec's estimators refuse it: train without step-wise "
                             f"trajectories")
        shape = tuple(data["loss_mask"].shape)
        if shape != tuple(token_level_rewards.shape):
            raise ValueError(f"{self.where}: the estimator was handed rewards of shape "
                             f"{tuple(token_level_rewards.shape)}, but the batch's loss mask is {shape}: it "
                             f"reads lengths only for the whole batch of compute_advantages_and_returns")
        return trainer, data


def _ppo_utils():
    return require(PPO_UTILS, "skyrl", INSTALL)


def register_advantage_estimator(name: str, spec: Any, *, shaper: str | None = None, params: Mapping | None = None,
                                 base: str = "grpo", backend: str | None = None) -> ShapedEstimator:
    """Register `name` in SkyRL's `AdvantageEstimatorRegistry` and return the estimator.

    The trainer's `compute_advantages_and_returns` must be wrapped with `with_batch`. The estimator
    keeps the shaper's metrics of its last call in `.last_metrics` and adds them, as `shapec/<name>`,
    to the trainer's `all_metrics`, which SkyRL logs at each step.
    """
    if base not in BASES:
        close = difflib.get_close_matches(str(base), BASES, n=1)
        raise ValueError(f"base={base!r}; expected one of {', '.join(BASES)}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    compiled = resolve_shaper(spec, shaper, backend)
    estimator = ShapedEstimator(name, compiled, params, base)
    _ppo_utils().AdvantageEstimatorRegistry.register(name, estimator)
    return estimator
