"""Group by prompt, shape, write back: the one mechanism every trainer adapter uses.

A trainer hands over flat per-rollout values and a group key per rollout (a uid, a prompt index,
a group number). `shape_by_group` orders the rollouts group by group (stable, groups in order of
first appearance), fills the spec's inputs, calls the compiled shaper once on whole groups and
returns the shaped rewards in the trainer's own order.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from ..api import CompiledModule, compile_file, load
from ..runtime.binder import channel_arrays
from ..runtime.shaper import CompiledShaper, Result
from ..runtime.validate import finite, numeric, show


def require(module: str, extra: str, install: str | None = None):
    """Import a trainer module inside an adapter, or say which extra brings it (or, for a trainer
    not on the package index, how it is installed)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        how = install or f"pip install 'shapec[{extra}]'"
        raise ImportError(f"this adapter needs {module!r}, which is not installed ({err}); "
                          f"install it with: {how}") from err


def resolve_shaper(spec: Any, shaper: str | None = None, backend: str | None = None) -> CompiledShaper:
    """A compiled shaper from a CompiledShaper, a CompiledModule, a .shape path or a stdlib name.

    `shaper` names the shaper or pipeline in the module; it may be left out when there is one.
    """
    if isinstance(spec, CompiledShaper):
        if shaper is not None and shaper != spec.name:
            raise ValueError(f"shaper={shaper!r} given with the compiled shaper {spec.name!r}")
        return spec
    if isinstance(spec, CompiledModule):
        module = spec
    elif isinstance(spec, (str, Path)):
        path = Path(spec)
        module = compile_file(path, backend) if path.suffix == ".shape" or path.is_file() else load(str(spec), backend)
    else:
        raise TypeError(f"spec: expected a .shape path, a stdlib module name, a CompiledModule or a "
                        f"CompiledShaper, got {type(spec).__name__}")
    if shaper is None:
        names = module.names()
        if len(names) != 1:
            raise ValueError(f"{module.filename} defines {', '.join(names)}: pass shaper= to choose one")
        shaper = names[0]
    return module[shaper]


def spec_inputs(shaper: CompiledShaper) -> dict[str, str]:
    """Every per-rollout input of the shaper's stages: name -> type."""
    return {name: typ for stage, _ in shaper.stages for name, typ in stage.inputs}


def spec_metas(shaper: CompiledShaper) -> list[str]:
    return list(dict.fromkeys(meta.name for stage, _ in shaper.stages for meta in stage.metas))


def _group_identity(key: Any, i: int) -> Hashable:
    """A key as the group it names: numpy and torch scalars as their Python value, a bool apart from
    the numbers (Python's True == 1 would merge two groups), a NaN refused (it equals nothing, so each
    NaN would be a group of its own)."""
    if isinstance(key, np.generic) or (hasattr(key, "item") and getattr(key, "shape", None) == ()):
        key = key.item()  # a 0-d array or tensor hashes by identity: each would be a group of its own
    if isinstance(key, float) and key != key:
        raise ValueError(f"group key of rollout {i} is NaN; a group key names one prompt group")
    return ("bool", key) if isinstance(key, bool) else key


def group_order(keys: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
    """The permutation that puts each group's rollouts together (stable), and the group offsets."""
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        try:
            members.setdefault(_group_identity(key, i), []).append(i)
        except TypeError:
            raise ValueError(f"group key of rollout {i} is {show(key)}; a group key is a hashable value "
                             f"(a uid string, a prompt number)") from None
    order = np.fromiter((i for rows in members.values() for i in rows), dtype=np.int64, count=len(keys))
    offsets = np.zeros(len(members) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(rows) for rows in members.values()])
    return order, offsets


LENGTH_UNITS = ("tokens", "chars")


def _length_input(inputs: Mapping[str, str], columns: Mapping, unit: str, where: str) -> str | None:
    """The input the trainer's lengths fill: the one length input (tokens or chars) without a column,
    or among several, the one in the trainer's unit."""
    open_ = [name for name, typ in inputs.items() if typ in LENGTH_UNITS and name not in columns]
    same = [name for name in open_ if inputs[name] == unit]
    if len(open_) <= 1:
        return open_[0] if open_ else None
    if len(same) == 1:
        return same[0]
    raise ValueError(f"{where}: the spec has several length inputs without a column ({', '.join(open_)}); "
                     f"the trainer's {unit} lengths fill only one: give the others as columns of the same name")


def fill_inputs(shaper: CompiledShaper, columns: Mapping[str, Sequence], lengths: Sequence[float], unit: str,
                rewards: np.ndarray, where: str) -> dict[str, np.ndarray]:
    """Each spec input from, in turn: a column of the same name; the trainer's lengths (see
    `_length_input`); base correctness (reward == 1) for `correct: bool`."""
    inputs = spec_inputs(shaper)
    length_name = _length_input(inputs, columns, unit, where)
    out: dict[str, np.ndarray] = {}
    for name, typ in inputs.items():
        if name in columns:
            out[name] = columns[name]  # checked by `shape_by_group`, in the trainer's order
        elif name == length_name:
            out[name] = lengths
        elif name == "correct" and typ == "bool":
            out[name] = (rewards == 1).astype(np.float64)
        else:
            close = difflib.get_close_matches(name, list(columns), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(columns)) or "none"
            raise ValueError(f"{where}: the spec's input {name!r} ({typ}) has no source: give a column named "
                             f"{name!r}{hint}; columns: {known}")
    return out


def group_values(column: Sequence, order: np.ndarray, offsets: np.ndarray, where: str) -> list:
    """A per-rollout column as one value per group: a group whose rollouts disagree is an error
    (a per-rollout value read as a prompt's metadata would silently become its first rollout's)."""
    out = []
    for g in range(len(offsets) - 1):
        rows = order[offsets[g]:offsets[g + 1]].tolist()
        first = column[rows[0]] if rows else None
        for i in rows[1:]:
            if not _same(column[i], first):
                raise ValueError(f"{where} is metadata, one value per prompt group, but group {g} holds "
                                 f"{show(first)} (rollout {rows[0]}) and {show(column[i])} (rollout {i})")
        out.append(first)
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal values (two NaNs too: both mean missing); values that cannot be compared are not."""
    if a is b:
        return True
    try:
        equal = a == b
        return bool(np.all(equal)) if isinstance(equal, np.ndarray) else bool(equal) or (a != a and b != b)
    except Exception:  # e.g. tensors of different shapes
        return False


def no_prompt_key(shaper: CompiledShaper, where: str, how: str) -> ValueError:
    """The one wording of "this spec needs prompt keys and the trainer gave none": `how` says which
    field was looked for and what to pass."""
    return ValueError(f"{where}: {shaper.name!r} keeps {', '.join(shaper.prompt_states)} per prompt, so every "
                      f"rollout needs a key naming its prompt, the same at every step; {how}")


def _one_group_per_prompt(prompts: list, order: np.ndarray, offsets: np.ndarray, where: str) -> None:
    """Two groups of one prompt in a call would each update its state from the value it entered with,
    and one update would be lost; name the rollouts, in the trainer's order."""
    first: dict = {}
    for g, key in enumerate(prompts):
        try:
            h = first.setdefault(_group_identity(key, g), g)
        except TypeError:
            return  # not a key at all: the shaper says so
        if h != g:
            raise ValueError(f"{where}: the prompt id {show(key)} names two groups (rollouts {int(order[offsets[h]])} "
                             f"and {int(order[offsets[g]])}); a prompt's rollouts must be one group of the call, so "
                             f"either the batch holds this prompt twice or the id names no single prompt")


@dataclass
class Shaped:
    """Shaped rewards in the trainer's order, and the shaper's result in group order."""

    rewards: np.ndarray
    result: Result
    order: np.ndarray
    offsets: np.ndarray

    @property
    def metrics(self) -> dict[str, float]:
        return self.result.metrics

    @property
    def kept(self) -> np.ndarray:
        """(n,) bool in the trainer's order: False for a rollout the shaper drops (`drop when`)."""
        out = np.empty(len(self.rewards), dtype=bool)
        out[self.order] = self.result.kept
        return out


def shape_by_group(shaper: CompiledShaper, rewards: Sequence[float], keys: Sequence[Hashable], *,
                   lengths: Sequence[float], unit: str = "tokens", columns: Mapping[str, Sequence] | None = None,
                   params: Mapping[str, Any] | None = None, where: str = "shapec",
                   prompt_ids: Sequence | None = None) -> Shaped:
    """Shape whole groups: rollouts with equal keys form one group, wherever they sit in the batch.

    Metadata the spec declares comes from a column of the same name, which must hold one value per
    group (every rollout of a group the same). `prompt_ids`, one per rollout (the same within a
    group), name the prompts a shaper with a state kept per prompt keeps it for.
    """
    rewards = finite("rewards", numeric("rewards", rewards))  # errors name rows in the trainer's order
    n = len(rewards)
    columns = dict(columns or {})
    for name, values in columns.items():
        if len(values) != n:
            raise ValueError(f"{where}: column {name!r} has {len(values)} values for {n} rollouts")
    if len(keys) != n or len(lengths) != n or (prompt_ids is not None and len(prompt_ids) != n):
        given = "" if prompt_ids is None else f" and {len(prompt_ids)} prompt ids"
        raise ValueError(f"{where}: {len(keys)} group keys, {len(lengths)} lengths{given} for {n} rewards")
    order, offsets = group_order(keys)
    channels = channel_arrays(fill_inputs(shaper, columns, lengths, unit, rewards, where),
                              tuple(spec_inputs(shaper).items()), n)
    metadata = {name: group_values(columns[name], order, offsets, f"{where}: column {name!r}")
                for name in spec_metas(shaper) if name in columns}
    prompts = None
    if shaper.prompt_states:
        if prompt_ids is None:
            raise no_prompt_key(shaper, where, "give each rollout's prompt id")
        prompts = group_values(prompt_ids, order, offsets, f"{where}: the prompt id")
        _one_group_per_prompt(prompts, order, offsets, where)
    result = shaper(rewards[order], offsets=offsets, channels={k: v[order] for k, v in channels.items()},
                    metadata=metadata, params=params, breakdown=False,  # trainers read rewards and metrics
                    prompts=prompts)
    out = np.empty(n, dtype=np.float64)
    out[order] = result.rewards
    return Shaped(out, result, order, offsets)
