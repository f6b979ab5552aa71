"""What a compiled shaper keeps from one call to the next: each stage's states.

A `state x: float = init update expr` is one number per stage, updated once per training call
before the body runs. A `state x: float per prompt = init update expr` is one number per prompt:
the call names each group's prompt (`prompts=`, one key per group), the body reads the value that
prompt entered the call with (`init` for a prompt not seen before), and the update, a number per
group computed after the body, is kept where the group was shaped and the update is finite.

`state_dict()` holds both: `{stage: {x: number, y: {prompt: number, ...}}}`; a checkpoint loads
back whole or not at all, and every error names the stage, the state and the prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..ir.nodes import ShaperIR
from .validate import BatchError, as_array, is_finite_number, show


class StateError(ValueError):
    """A state checkpoint that does not fit the shaper: names the stage and state key."""


def state_number(key: str, value: Any) -> float:
    """A state value from a checkpoint: a finite real number (bool excluded), also as a 0-d numpy
    array or torch tensor (a checkpoint saved through torch holds its numbers so)."""
    if not isinstance(value, float):
        array = as_array(f"state {key}", value)
        if isinstance(array, np.ndarray) and array.ndim == 0:
            value = array.item()
    if not is_finite_number(value):
        raise StateError(f"state {key}: expected a finite number, got {show(value)}")
    return float(value)


def prompt_key(where: str, key: Any) -> str | int:
    """A prompt's key as a state table holds it: a string or an integer (numpy's too; not a bool)."""
    if isinstance(key, (str, np.str_)):
        return str(key)
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return int(key)
    raise BatchError(f"{where}: expected a prompt's key (a string or an integer), got {show(key)}")


def prompt_keys(value: Any, groups: int) -> list[str | int]:
    """`prompts=`: one key per group, each group's prompt once (two groups of one prompt would each
    update it from the same entering value, and one update would be lost)."""
    value = as_array("prompts", value)
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise BatchError(f"prompts: expected one key per group ({groups}), got {type(value).__name__}")
    if len(value) != groups:
        raise BatchError(f"prompts: expected {groups} keys (one per group), got {len(value)}")
    keys = [prompt_key(f"prompts[{g}]", key) for g, key in enumerate(value)]
    first: dict = {}
    for g, key in enumerate(keys):
        if first.setdefault(key, g) != g:
            raise BatchError(f"prompts: {key!r} names groups {first[key]} and {g}; a prompt's rollouts must be "
                             "one group of the call")
    return keys


class States:
    """The states of every stage of one compiled shaper (the caller holds its lock around a call)."""

    def __init__(self, stages: list[ShaperIR]):
        self.batch = {s.name: {n: v for n, v in s.states} for s in stages}
        self.initial = {s.name: {n: v for n, v, _ in s.prompt_states} for s in stages}
        self.tables: dict[str, dict[str, dict]] = {s.name: {n: {} for n, _, _ in s.prompt_states} for s in stages}
        self.per_prompt = tuple(f"{s.name}.{n}" for s in stages for n, _, _ in s.prompt_states)

    def stateful(self) -> bool:
        return any(self.batch.values()) or bool(self.per_prompt)

    def entering(self, stage: str, keys: list | None) -> dict[str, np.ndarray]:
        """Each per-prompt state's (G,) values as the call's prompts enter it."""
        tables = self.tables[stage]
        if not tables:  # most stages keep nothing per prompt: every call of them passes here
            return {}
        return {name: np.array([table.get(k, self.initial[stage][name]) for k in keys], dtype=np.float64)
                for name, table in tables.items()}

    def keep(self, stage: str, state: Mapping[str, float], prompt_state: Mapping[str, np.ndarray],
             keys: list | None) -> None:
        """What a training call left: the stage's batch states, and each group's prompt's next values."""
        if state:
            self.batch[stage] = dict(state)
        for name, values in prompt_state.items():
            self.tables[stage][name].update(zip(keys, values.tolist()))

    def state_dict(self) -> dict[str, dict[str, Any]]:
        out = {}
        for stage, values in self.batch.items():
            merged = {**values, **{name: dict(table) for name, table in self.tables[stage].items()}}
            if merged:
                out[stage] = merged
        return out

    def load(self, owner: str, state: Any) -> None:
        """Load what `state_dict()` returned (every state of every stateful stage); nothing changes
        unless all of it is valid."""
        if not isinstance(state, Mapping):
            raise StateError(f"state of {owner!r}: expected a mapping of stage -> {{state: value}}, "
                             f"got {type(state).__name__}")
        expected = {stage: (*self.batch[stage], *self.tables[stage]) for stage in self.batch}
        expected = {stage: names for stage, names in expected.items() if names}
        batch: dict[str, dict[str, float]] = {}
        tables: dict[str, dict[str, dict]] = {}
        for stage, values in state.items():
            if stage not in expected:
                raise StateError(f"state of {owner!r}: no stateful stage {stage!r}; "
                                 f"stateful stages: {sorted(expected) or 'none'}")
            if not isinstance(values, Mapping):
                raise StateError(f"state {stage!r}: expected a mapping of state -> value, got {type(values).__name__}")
            for key, value in values.items():
                if key not in expected[stage]:
                    raise StateError(f"state {stage}.{key}: no such state; {stage!r} has {sorted(expected[stage])}")
                if key in self.tables[stage]:
                    tables.setdefault(stage, {})[key] = self._table(f"{stage}.{key}", value)
                else:
                    batch.setdefault(stage, {})[key] = state_number(f"{stage}.{key}", value)
        for stage, names in expected.items():
            missing = [key for key in names if key not in batch.get(stage, {}) and key not in tables.get(stage, {})]
            if missing:
                raise StateError(f"state {stage}.{missing[0]}: missing; a checkpoint must carry every state "
                                 f"(as state_dict() returns it)")
        for stage, values in batch.items():
            self.batch[stage].update(values)
        for stage, values in tables.items():
            self.tables[stage].update(values)

    @staticmethod
    def _table(where: str, value: Any) -> dict:
        """A per-prompt state's table: prompt key -> finite number."""
        if not isinstance(value, Mapping):
            raise StateError(f"state {where}: kept per prompt, so expected a mapping of prompt -> value, "
                             f"got {type(value).__name__}")
        table = {}
        for key, number in value.items():
            try:
                key = prompt_key(f"state {where}", key)
            except BatchError as err:
                raise StateError(str(err)) from None
            table[key] = state_number(f"{where}[{key!r}]", number)
        return table
