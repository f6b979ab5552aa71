"""OpenRLHF: a drop-in for `apply_length_penalties(experiences, args)` that shapes whole prompt groups.

    import ray
    from shapec.compat.openrlhf import ray_setup_hook
    ray.init(runtime_env={"worker_process_setup_hook": ray_setup_hook("kimi", shaper="kimi_length")})
    # then openrlhf.cli.train_ppo_ray's train(args), in this driver

OpenRLHF calls `reward_func` with one sample at a time, so it cannot shape by group. Its experience
maker calls `apply_length_penalties` on the whole rollout batch just before it reshapes the rewards
into `n_samples_per_prompt` groups; this hook runs there. Each sample's prompt number is
`index // n_samples_per_prompt` (the grouping OpenRLHF's normalisation then uses), its length is
`response_length` and its correctness its reward; an input named `truncated` comes from the
experience's own `truncated` flags (vLLM's `finish_reason == "length"`), other spec inputs from
`experience.info`. The stdlib's `openrlhf.overlong` is OpenRLHF's own pair of penalties. A spec that
keeps state per prompt (`hapo.hapo_tracked`) keys it by each sample's prompt text, which OpenRLHF's
samples generator records in `Experience.prompts`: the `index` numbers samples in the batch, not
prompts, so it names a different prompt at every step.
"""

from __future__ import annotations

import itertools
import numbers
from typing import Any, Callable, Mapping

from ._groups import no_prompt_key, require, resolve_shaper, shape_by_group

WHERE = "shapec.compat.openrlhf"
# pip cannot say it: openrlhf requires flash-attn and deepspeed, which build only with CUDA
INSTALL = "pip install 'shapec[openrlhf]' && pip install --no-deps openrlhf==0.11.2 (docs/trainers.md, OpenRLHF)"
BUILTIN = ("overlong_buffer_len", "stop_properly_penalty_coef")


def length_penalty_hook(spec: Any, *, shaper: str | None = None, params: Mapping | None = None,
                        backend: str | None = None, prompt_key: str | None = None) -> Callable:
    """`apply_length_penalties(experiences, args)`: shapes the rewards in place, syncs
    `info["reward"]` and writes each shaper metric to `info["shapec/<metric>"]` (OpenRLHF logs the
    mean of every info entry). A state kept per prompt follows each sample's prompt text, or the
    info entry `prompt_key` names (a prompt number a `reward_func` returns in `extra_logs`)."""
    compiled = resolve_shaper(spec, shaper, backend)

    def apply_length_penalties(experiences: list, args) -> None:
        torch = require("torch", "openrlhf", INSTALL)
        for key in BUILTIN:
            if getattr(args.reward, key, None) is not None:
                raise ValueError(f"{WHERE}: reward.{key} is set, but this hook replaces OpenRLHF's built-in length "
                                 f"penalties: unset it and write the penalty in the spec (stdlib openrlhf.overlong "
                                 f"is OpenRLHF's own)")
        if not experiences:
            return
        per_prompt = args.rollout.n_samples_per_prompt
        index = list(itertools.chain.from_iterable(exp.index for exp in experiences))
        _check_index(index, per_prompt)
        rewards = torch.cat([exp.rewards for exp in experiences]).double().cpu().numpy()
        lengths = torch.cat([exp.response_length for exp in experiences]).double().cpu().numpy()
        columns = _info_columns(experiences, torch)
        ids = _prompt_ids(compiled, experiences, prompt_key) if compiled.prompt_states else None
        shaped = shape_by_group(compiled, rewards, [i // per_prompt for i in index], lengths=lengths,
                                columns=columns, params=params, where=WHERE, prompt_ids=ids)
        start = 0
        for exp in experiences:
            size = len(exp.rewards)
            part = shaped.rewards[start:start + size]
            exp.rewards = torch.as_tensor(part, dtype=exp.rewards.dtype, device=exp.rewards.device)
            if "reward" in exp.info:
                exp.info["reward"] = exp.rewards.clone()
            for metric, value in shaped.metrics.items():
                exp.info[f"shapec/{metric}"] = torch.full((size,), float(value))
            start += size

    return apply_length_penalties


def ray_setup_hook(spec: Any, *, shaper: str | None = None, params: Mapping | None = None,
                   backend: str | None = None, prompt_key: str | None = None) -> Callable[[], None]:
    """A Ray `worker_process_setup_hook` that puts the hook in place of OpenRLHF's `apply_length_penalties`
    in every worker process of the job, before any actor starts there.

    The experience maker runs in a Ray actor (`PPOTrainer`, or with `--train.async_enable` the
    `TrainingActor` that `PPOTrainerAsync` starts from its own actor) and takes the function from
    `openrlhf.trainer.ppo_utils.length_penalty` when it is imported: replacing it there, in every
    worker, reaches whichever trainer runs. The spec is compiled here, so a bad one fails in the driver.
    """
    compiled = resolve_shaper(spec, shaper, backend)  # pickled to the workers as its source

    def install_shapec_length_penalties() -> None:
        length_penalty = require("openrlhf.trainer.ppo_utils.length_penalty", "openrlhf", INSTALL)
        length_penalty.apply_length_penalties = length_penalty_hook(compiled, params=params, prompt_key=prompt_key)

    return install_shapec_length_penalties


def _check_index(index: list, per_prompt: Any) -> None:
    """OpenRLHF puts sample `i` at row `i` of a (prompts, n_samples_per_prompt) table: the indices must
    be 0..N-1, each once, and N a multiple of n_samples_per_prompt; otherwise its groups are not
    `i // n_samples_per_prompt` (and its reshape fails after this hook has shaped the wrong groups)."""
    if isinstance(per_prompt, bool) or not isinstance(per_prompt, numbers.Integral) or per_prompt < 1:
        raise ValueError(f"{WHERE}: rollout.n_samples_per_prompt must be a positive integer, got {per_prompt!r}")
    n = len(index)
    if n % per_prompt:
        raise ValueError(f"{WHERE}: the rollout batch has {n} samples, not a multiple of "
                         f"rollout.n_samples_per_prompt={per_prompt}: its last prompt group is incomplete")
    seen = [False] * n
    for i in index:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < n or seen[i]:
            what = "appears twice" if isinstance(i, numbers.Integral) and 0 <= i < n else f"is not in 0..{n - 1}"
            raise ValueError(f"{WHERE}: sample index {i!r} {what}; the experiences' indices must number the "
                             f"{n} samples 0..{n - 1}, each once, as OpenRLHF's grouping reads them")
        seen[i] = True


def _prompt_ids(compiled, experiences: list, key: str | None) -> list:
    """Each sample's prompt key, in batch order: its prompt text, or its info entry `key` (an
    integral number as an int, as a prompt number is)."""
    if key is None:
        for k, exp in enumerate(experiences):
            if len(exp.prompts) != len(exp.rewards):
                raise no_prompt_key(compiled, WHERE, f"experience {k} holds {len(exp.prompts)} prompts for "
                                                     f"{len(exp.rewards)} samples (OpenRLHF's samples generator "
                                                     f"records each sample's prompt text in Experience.prompts): "
                                                     f"fill it, or pass prompt_key= an info entry naming the prompt")
        return [p if isinstance(p, str) else repr(p) for exp in experiences for p in exp.prompts]
    lacking = next((k for k, exp in enumerate(experiences) if key not in exp.info), None)
    if lacking is not None:
        known = ", ".join(sorted(experiences[lacking].info)) or "none"
        raise no_prompt_key(compiled, WHERE, f"experience {lacking} has no info entry prompt_key={key!r} (entries: "
                                             f"{known}); a reward_func adds one by returning it in extra_logs")
    values = [v for exp in experiences for v in _as_list(exp.info[key])]
    return [v if isinstance(v, str) else int(v) if float(v).is_integer() else repr(float(v)) for v in values]


def _as_list(values: Any) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _info_columns(experiences: list, torch) -> dict[str, list]:
    """Per-sample `info` entries present in every experience, concatenated in batch order, and the
    `truncated` flags when every experience has them."""
    keys = set.intersection(*(set(exp.info) for exp in experiences))
    columns = {}
    if all(getattr(exp, "truncated", None) is not None for exp in experiences):
        columns["truncated"] = torch.cat([exp.truncated for exp in experiences]).double().cpu().tolist()
    for key in sorted(keys):
        parts = [exp.info[key] for exp in experiences]
        if all(isinstance(p, torch.Tensor) and p.dim() == 1 and len(p) == len(e.rewards)
               for p, e in zip(parts, experiences)):
            columns[key] = torch.cat(parts).double().cpu().tolist()
    return columns
