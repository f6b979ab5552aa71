"""TRL: a `GRPOTrainer` reward function that shapes whole prompt groups with a compiled spec.

    from shapec.compat.trl import reward_func
    shaped = reward_func("kimi", accuracy, shaper="kimi_length", num_generations=8)
    GRPOTrainer(model, reward_funcs=[shaped], args=GRPOConfig(num_generations=8, ...), ...)

TRL calls a reward function on one process's slice of the generation batch, and with several
processes a prompt's `num_generations` completions can be split across ranks. The function gathers
the whole batch with accelerate's `gather_object`, shapes it (groups are `num_generations`
consecutive completions, as TRL lays them out), and returns this rank's slice. See docs/trainers.md.
"""

from __future__ import annotations

import difflib
import itertools
import math
import numbers
from typing import Any, Callable, Mapping

import numpy as np

from ._groups import require, resolve_shaper, shape_by_group

WHERE = "shapec.compat.trl"
LENGTHS = {"tokens": "tokens", "chars": "chars"}


def reward_func(spec: Any, base: Callable | str, *, shaper: str | None = None, params: Mapping | None = None,
                num_generations: int, length: str = "tokens", name: str | None = None, delta: bool = False,
                backend: str | None = None, prompt_id: str | None = None) -> Callable:
    """A reward function returning the shaped reward (or, with `delta=True`, shaped - base).

    `base` is a TRL reward function giving the binary correctness, or the name of a dataset column
    holding it. Lengths are `len(completion_ids[i])`, or characters of the completion text with
    `length="chars"`; other spec inputs come from dataset columns of the same name. Each shaper metric
    is logged through TRL's `log_metric` as `shapec/<metric>`. A spec with a state kept per prompt
    keys it by the prompt's text, or by the dataset column `prompt_id` names (e.g. "prompt_idx"), as a
    string (TRL saves a checkpoint as JSON).
    """
    compiled = resolve_shaper(spec, shaper, backend)
    if isinstance(num_generations, bool) or not isinstance(num_generations, numbers.Integral) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive integer, got {num_generations!r}")
    if length not in LENGTHS:
        close = difflib.get_close_matches(str(length), list(LENGTHS), n=1)
        raise ValueError(f"length={length!r}; expected one of {', '.join(LENGTHS)}"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))
    if not callable(base) and not isinstance(base, str):
        raise TypeError(f"base: expected a reward function or a column name, got {type(base).__name__}")
    size = int(num_generations)
    steps = StepState(compiled)

    def shapec_reward(prompts, completions, completion_ids=None, **kwargs):
        ops = require("accelerate.utils", "trl")
        state = require("accelerate", "trl").PartialState()
        n = len(completions)
        rows = _local_rows(base, prompts, completions, completion_ids, kwargs, length, n)
        counts = ops.gather_object([n])
        everything = ops.gather_object(rows)
        start = sum(counts[: state.process_index])
        total = len(everything)
        if total % size:
            raise ValueError(f"{WHERE}: the generation batch has {total} completions, not a multiple of "
                             f"num_generations={size}; pass the trainer's num_generations")
        keys = [i // size for i in range(total)]
        _check_groups(everything, size)
        # a column every rank has (one rank may hold a list of another length under the same name)
        names = set.intersection(*(set(row["columns"]) for row in everything)) if everything else set()
        columns = {key: [row["columns"][key] for row in everything] for key in sorted(names)}
        base_all = np.array([row["base"] for row in everything], dtype=np.float64)
        ids = None
        if prompt_id is not None:
            if prompt_id not in columns:
                close = difflib.get_close_matches(prompt_id, list(columns), n=1)
                raise KeyError(f"{WHERE}: prompt_id column {prompt_id!r} is not in the dataset"
                               + (f" (did you mean {close[0]!r}?)" if close else ""))
            ids = [str(v) for v in columns[prompt_id]]  # TRL checkpoints the table as JSON, whose keys are strings
        elif compiled.prompt_states:
            ids = [row["prompt"] for row in everything]
        shaped = steps.run(kwargs.get("trainer_state"), lambda: shape_by_group(
            compiled, base_all, keys, lengths=[row["length"] for row in everything], unit=LENGTHS[length],
            columns=columns, params=params, where=WHERE, prompt_ids=ids))
        log = kwargs.get("log_metric")
        if log is not None:
            for metric, value in shaped.metrics.items():
                log(f"shapec/{metric}", float(value))
        out = shaped.rewards - base_all if delta else shaped.rewards
        return out[start:start + n].tolist()

    shapec_reward.__name__ = name or f"shapec_{compiled.name}{'_delta' if delta else ''}"
    shapec_reward.__qualname__ = shapec_reward.__name__
    shapec_reward.shaper = compiled
    shapec_reward.callback = lambda: state_callback(shapec_reward.__name__, steps)
    return shapec_reward


class StepState:
    """A stateful spec's state advances once per optimizer step, on training data.

    TRL calls a reward function on every generation batch, evaluation included, and passes its
    `trainer_state`. The first training call at a global step reads the state and advances it. Any
    other call leaves the state as it found it: a repeat at that step reads the state the first call
    read (so it gets the rewards that call gave), an evaluation reads the current state. Which
    steps are training steps the trainer says through `callback()` (`on_step_begin`); without it,
    the first call at each step is taken for the training call (TRL evaluates after a step's update,
    at the next global step, so that evaluation would advance the state). Without a trainer_state
    every call advances it, as a plain call does."""

    def __init__(self, shaper):
        self.shaper = shaper
        self.training_step: int | None = None  # the step on_step_begin announced
        self.advanced: int | None = None  # the step whose first training call advanced the state
        self.before: dict = {}  # the state that call read

    def run(self, trainer_state: Any, shape: Callable):
        step = getattr(trainer_state, "global_step", None)
        now = self.shaper.state_dict()
        if step is None or not now:
            return shape()
        if self.training_step in (None, step) and step != self.advanced:
            self.advanced, self.before = step, now
            return shape()
        if step == self.advanced:
            self.shaper.load_state_dict(self.before)
        try:
            return shape()
        finally:
            self.shaper.load_state_dict(now)

    def exported(self) -> dict:
        return {"state": self.shaper.state_dict(), "advanced": self.advanced, "before": self.before}

    def restore(self, saved: Mapping) -> None:
        self.shaper.load_state_dict(saved["state"])
        self.advanced, self.before = saved["advanced"], saved["before"]


def state_callback(name: str, steps: StepState):
    """A transformers TrainerCallback that tells the reward function `name` which steps train, saves
    its shaper's state in every checkpoint (as an ExportableState, in trainer_state.json under
    `stateful_callbacks`) and restores it when training resumes from one."""
    transformers = require("transformers", "trl")
    exportable = require("transformers.trainer_callback", "trl").ExportableState
    key = f"shapec:{name}"

    class ShapecState(transformers.TrainerCallback, exportable):
        def state(self) -> dict:
            return {"args": {}, "attributes": {"shapec": {"reward": key, **steps.exported()}}}

        def on_train_begin(self, args, state, control, **kwargs):
            saved = (state.stateful_callbacks or {}).get(type(self).__name__, [])
            for entry in saved if isinstance(saved, list) else [saved]:
                found = entry.get("attributes", {}).get("shapec", {})
                if found.get("reward") == key:
                    steps.restore(found)

        def on_step_begin(self, args, state, control, **kwargs):
            steps.training_step = state.global_step

    return ShapecState()


def _local_rows(base, prompts, completions, completion_ids, kwargs, length, n) -> list[dict]:
    """This rank's completions as picklable rows: base reward, length, prompt and per-row columns."""
    if callable(base):
        values = base(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
    elif base in kwargs:
        values = kwargs[base]
    else:
        close = difflib.get_close_matches(base, list(kwargs), n=1)
        raise KeyError(f"{WHERE}: base column {base!r} is not in the dataset"
                       + (f" (did you mean {close[0]!r}?)" if close else ""))
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{WHERE}: base gave {len(values)} rewards for {n} completions")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{WHERE}: base reward of completion {i} is {v!r}; expected a finite number")
    columns = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == n}
    if length == "tokens":
        if completion_ids is None:
            raise ValueError(f"{WHERE}: length='tokens' needs completion_ids; pass length='chars' to count characters")
        lengths = [len(ids) for ids in completion_ids]
    else:
        lengths = [_chars(c, i) for i, c in enumerate(completions)]
    return [{"base": float(values[i]), "length": lengths[i], "prompt": _text(prompts[i]),
             "columns": {k: v[i] for k, v in columns.items()}} for i in range(n)]


def _text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else repr(prompt)


def _chars(completion: Any, i: int) -> int:
    """Characters of a completion: plain text, or the contents of conversational messages."""
    if isinstance(completion, str):
        return len(completion)
    if isinstance(completion, list) and all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                            for m in completion):
        return sum(len(m["content"]) for m in completion)
    raise ValueError(f"{WHERE}: completion {i} is neither text nor a list of messages with text content")


def _check_groups(rows: list[dict], size: int) -> None:
    """Consecutive `size` completions must share their prompt, or the grouping is not TRL's. A trainer
    making a multiple of `size` completions per prompt passes that check, but then every prompt fills
    several consecutive groups; TRL draws distinct dataset rows into a batch, so only duplicate rows put
    one prompt text in two neighbouring groups, and not every prompt of a batch unless all are duplicates."""
    for start in range(0, len(rows), size):
        prompts = {row["prompt"] for row in rows[start:start + size]}
        if len(prompts) > 1:
            raise ValueError(f"{WHERE}: completions {start}-{start + size - 1} (group {start // size}) come from "
                             f"{len(prompts)} different prompts; num_generations={size} does not match the trainer's")
    runs = [len(list(blocks)) for _, blocks in itertools.groupby(row["prompt"] for row in rows[::size])]
    if runs and min(runs) > 1:
        per_prompt = size * math.gcd(*runs)
        seen = ", ".join(str(size * run) for run in sorted(set(runs)))
        raise ValueError(f"{WHERE}: every prompt spans consecutive groups of num_generations={size}: runs of {seen} "
                         f"completions share one prompt (the first is completions 0-{runs[0] * size - 1}), so the "
                         f"trainer makes {per_prompt} per prompt and each of its groups would be shaped in parts; set "
                         f"num_generations={per_prompt}, the trainer's GRPOConfig.num_generations (a batch whose every "
                         f"prompt is a duplicate dataset row drawn next to its twin is refused the same way: make "
                         f"duplicate prompts' text differ)")
