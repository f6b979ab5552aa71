"""Row layouts: what the shaper needs from a chunk's rows, checked value by value.

  flat       one rollout per row: group key, `reward`, one column per input, and per-prompt
             metadata columns named after the spec's `meta` declarations (read from the
             group's first row).
  nemo-gym   NeMo-Gym result rows: reward from `full_result.reward`, reasoning and answer
             lengths from `full_result.response.output` (as the NeMo-RL drop-in counts them),
             `low_effort_applied`, `profile_band`, `profiled_rewards`,
             `profiled_output_lengths` and `agent_ref.name` at the row's top level.

A value the shaper cannot use exactly (missing, a wrong type, NaN or infinite, a negative
length, an integer beyond what a float64 holds exactly) is a RowError naming the row and field.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.nodes import MAX_EXACT_INT, UNITS
from .fieldmap import Source
from .groupmeta import GroupMeta, arrow_meta, struct_fields
from .grouping import Chunk, absent_fields, closest
from .lines import got as _got
from .readers import MISSING, ArrowBlock, BadLine, RowError, field_value, get_path, is_list_type
from .spec import ToolError


@dataclass
class Extracted:
    """What the shaper needs from one chunk, and what was wrong with which row."""

    rewards: np.ndarray
    channels: dict[str, np.ndarray]
    metas: dict[str, GroupMeta]
    components: np.ndarray | None
    agents: list | None
    errors: dict[int, RowError] = field(default_factory=dict)  # local row -> first error

    @property
    def metadata(self) -> dict[str, list]:
        """Per metadata name, each group's value as its first row carries it."""
        return {k: m.rows for k, m in self.metas.items()}

    def metadata_for(self, groups: np.ndarray | None) -> dict:
        return {k: m.take(groups) for k, m in self.metas.items()}


def _expected(kind: str) -> str:
    if kind == "bool":
        return "true/false or a number"
    return f"a number >= 0 ({kind})" if kind in UNITS else "a number"


def _value_error(v: Any, kind: str) -> str | None:
    """Why one value cannot be used; kind is 'reward', 'bool' or a length unit."""
    ok = isinstance(v, (int, float)) and (kind == "bool" or not isinstance(v, bool))
    if ok and isinstance(v, int) and abs(v) > MAX_EXACT_INT:
        return (f"expected {_expected(kind)} that a float64 holds exactly (at most 2**53), "
                f"got {_got(v)}")
    if ok and not (math.isnan(v) or math.isinf(v) or (kind in UNITS and v < 0)):
        return None
    return f"expected {_expected(kind)}, got {_got(v)}"


def _numbers(values: list, field_name: str, kind: str, base: int, errors: dict) -> np.ndarray:
    """Check a column value by value; errors[i] gets the first problem of row base + i + 1."""
    out = np.zeros(len(values))
    for i, v in enumerate(values):
        problem = _value_error(v, kind)
        if problem is None:
            out[i] = float(v)
        elif i not in errors:
            errors[i] = RowError(base + i + 1, field_name, problem)
    return out


def _arrow_numbers(block: ArrowBlock, name: str, kind: str, base: int, errors: dict) -> np.ndarray:
    """The same checks as _numbers, vectorised over an Arrow column (or the struct field a dotted
    name reaches)."""
    import pyarrow as pa

    n = len(block)
    table = block.table  # a column as it is (to_numpy joins its chunks once); a dotted name, its struct field
    col = table.column(name) if name in table.column_names else block.array(name)
    if col is None:
        return _numbers([MISSING] * n, name, kind, base, errors)
    numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or (
        kind == "bool" and pa.types.is_boolean(col.type))
    if not numeric:
        return _numbers(col.to_pylist(), name, kind, base, errors)
    arr = col.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    bad = col.is_null().to_numpy(zero_copy_only=False) | np.isnan(arr) | np.isinf(arr)
    if col.type in (pa.int64(), pa.uint64()):  # the only integer types that can pass 2**53
        import pyarrow.compute as pc

        big = pc.greater(col, pa.scalar(MAX_EXACT_INT, col.type))
        if col.type == pa.int64():
            big = pc.or_(big, pc.less(col, pa.scalar(-MAX_EXACT_INT, col.type)))
        bad |= big.to_numpy(zero_copy_only=False).astype(bool) & ~col.is_null().to_numpy(zero_copy_only=False)
    if kind in UNITS:
        with np.errstate(invalid="ignore"):
            bad |= arr < 0
    for i in np.flatnonzero(bad):
        i = int(i)
        if i not in errors:
            errors[i] = RowError(base + i + 1, name, _value_error(col[i].as_py(), kind))
    return np.where(bad, 0.0, arr)


class FlatLayout:
    name = "flat"

    def __init__(self, agent_key: str | None = None, fields: dict[str, Source] | None = None):
        """`fields`: where an input or metadata value is read from when not from the field of its
        own name (run/fieldmap.py)."""
        self.agent_key = agent_key
        self.fields = fields or {}
        self.fields_seen = False

    def source(self, name: str) -> Source:
        return self.fields.get(name) or Source(name)

    def field_of(self, name: str) -> str:
        """The row field input or metadata `name` is read from."""
        return self.source(name).path

    def _what(self, name: str, typ: str) -> str:
        source = self.fields.get(name)
        mapped = f", read as {source.describe()!r} by --map" if source else ""
        return f"input {name!r} (`input {name}: {typ}`{mapped})"

    def check_fields(self, chunk: Chunk, inputs) -> None:
        """The reward and each input of the spec read the field of their own name: one that no row of
        the first readable chunk has is a file of another shape, not a bad row in every group."""
        block = chunk.block
        if self.fields_seen or not block.readable():
            return
        self.fields_seen = True
        missing = [(self.field_of(name), "reward" if name == "reward" else self._what(name, typ))
                   for name, typ in [("reward", "reward"), *inputs] if not block.has_field(self.field_of(name))]
        if not missing:
            return
        names = block.field_names()
        message = str(absent_fields(names, missing, f"the first {chunk.base + len(block)}"))
        unmapped = [(name, typ) for name, typ in inputs if name not in self.fields
                    and any(field == name for field, _ in missing)]
        if unmapped:  # how to read it from the field the rows have, the closest one if there is one
            name, typ = unmapped[0]
            field = closest(name, names) or "FIELD"
            derived = f", or derive a bool: --map {name}='reward > 0'" if typ == "bool" else ""
            message += f"\nto read an input from a field of another name: --map {name}={field}{derived}"
        raise ToolError(message)

    def meta_fields(self, name: str) -> tuple[str, ...]:
        """The row fields metadata `name` is read from."""
        return (self.field_of(name),)

    def _channel(self, values_of, name: str, typ: str, base: int, errors: dict) -> np.ndarray:
        """Input `name` of every row: its field's values checked as its type, or a bool derived by
        comparing a field's numbers (any finite number there)."""
        source = self.source(name)
        return source.derive(values_of(source.path, "reward" if source.op else typ, base, errors))

    def extract(self, chunk: Chunk, inputs, metas) -> Extracted:
        self.check_fields(chunk, inputs)
        errors: dict[int, RowError] = {}
        block = chunk.block
        starts = chunk.offsets[:-1]
        if isinstance(block, ArrowBlock):
            rewards = _arrow_numbers(block, "reward", "reward", chunk.base, errors)
            read = functools.partial(_arrow_numbers, block)
            channels = {name: self._channel(read, name, typ, chunk.base, errors) for name, typ in inputs}
            metadata = {m.name: arrow_meta(block, starts, m, self.field_of(m.name)) for m in metas}
            comps = None
            if "reward_components" in block.table.column_names:
                comps = _arrow_components(block)
            agents = block.keys_at(self.agent_key, starts) if self.agent_key and len(block) else None
            agents = _agent_names(agents, self.agent_key, starts, chunk.base, errors)
        else:
            for i, r in enumerate(block.rows):
                if isinstance(r, BadLine):
                    errors[i] = RowError(chunk.base + i + 1, r.field, r.error)
            rewards = _numbers(block.column("reward"), "reward", "reward", chunk.base, errors)

            def read(path: str, kind: str, base: int, errs: dict) -> np.ndarray:
                return _numbers(block.column(path), path, kind, base, errs)
            channels = {name: self._channel(read, name, typ, chunk.base, errors) for name, typ in inputs}
            firsts = block.first_rows(starts)
            metadata = {m.name: GroupMeta(m.kind, [_none(field_value(r, self.field_of(m.name))) for r in firsts])
                        for m in metas}
            comps = None
            if any(isinstance(r, dict) and "reward_components" in r for r in block.rows):
                comps = np.array([_component_count(r.get("reward_components") if isinstance(r, dict) else None)
                                  for r in block.rows])
            agents = [get_path(r, self.agent_key) for r in firsts] if self.agent_key else None
            agents = _agent_names(agents, self.agent_key, starts, chunk.base, errors)
        return Extracted(rewards, channels, metadata, comps, agents, errors)


def _none(v: Any) -> Any:
    return None if v is MISSING else v


def _agent_names(values: list | None, key: str | None, starts, base: int, errors: dict) -> list | None:
    """Each group's agent (its first row's): a name, or None for none. Anything else (a list, a
    number) names no agent override: the first row is bad, and its group with it."""
    if values is None:
        return None
    out = []
    for start, v in zip(starts, values):
        v = _none(v)
        if v is not None and not isinstance(v, str):
            errors.setdefault(int(start), RowError(base + int(start) + 1, key, f"expected the agent's name (a "
                                                   f"string), got {_got(v)}"))
            v = None
        out.append(v)
    return out


def _component_count(v: Any) -> float:
    """Reward components make a group non-binary for binary shapers: count them."""
    if v is None or v is MISSING:
        return 0.0
    if isinstance(v, (list, tuple, dict)):
        return float(len(v))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) if not isinstance(v, int) or abs(v) <= MAX_EXACT_INT else float(MAX_EXACT_INT)
    return 1.0 if v else 0.0


def _arrow_components(block: ArrowBlock) -> np.ndarray:
    """`reward_components` of every row of a Parquet chunk, counted as _component_count counts one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = block.array("reward_components")
    t, is_ = arr.type, pa.types
    if is_list_type(t):
        out = pc.list_value_length(arr).cast(pa.float64())
    elif is_.is_struct(t):  # the fields this row has (a null one is absent, as struct_fields reads it)
        present = [pc.struct_field(arr, i).is_valid().cast(pa.float64()) for i in range(t.num_fields)]
        out = functools.reduce(pc.add, present, pa.repeat(0.0, len(arr)))
    elif is_.is_integer(t):
        big = pc.greater(arr, pa.scalar(MAX_EXACT_INT, t)) if t.bit_width == 64 else pa.repeat(False, len(arr))
        if is_.is_signed_integer(t) and t.bit_width == 64:
            big = pc.or_(big, pc.less(arr, pa.scalar(-MAX_EXACT_INT, t)))
        out = pc.if_else(big, float(MAX_EXACT_INT), arr.cast(pa.float64(), safe=False))
    elif is_.is_floating(t) or is_.is_boolean(t):
        out = arr.cast(pa.float64())
    elif is_.is_string(t) or is_.is_large_string(t) or is_.is_binary(t) or is_.is_large_binary(t):
        out = pc.greater(pc.binary_length(arr), 0).cast(pa.float64())
    else:  # maps, dictionaries, decimals, dates...: value by value
        return np.array([_component_count(v) for v in arr.to_pylist()], dtype=np.float64)
    return pc.fill_null(out, 0.0).to_numpy(zero_copy_only=False).astype(np.float64)


class NemoGymLayout:
    """NeMo-Gym result rows, read the way the NeMo-RL drop-ins read them."""

    name = "nemo-gym"
    text_lengths = ("reasoning", "answer")  # the inputs counted from the response texts, in `unit`

    def __init__(self, length_type: str = "chars", tokenizer=None, agent_key: str | None = "agent_ref.name"):
        from .nemo_gym_rows import rollout_calls, rollout_seconds

        self.agent_key = agent_key
        self.tokenizer = tokenizer
        self.unit = "tokens" if length_type == "tokens" and tokenizer is not None else "chars"

        def flag(key: str):
            return lambda row: bool(row.get(key) or row["full_result"].get(key))

        # inputs of the stdlib specs besides the text lengths; any other input is read from the row,
        # then from full_result
        self.extractors = {
            "low_effort": lambda row: bool(row.get("low_effort_applied")),
            "run_time": rollout_seconds,
            "calls": rollout_calls,
            "resolved": flag("resolved"),
            "masked": flag("mask_sample"),
        }

    def _input(self, row: dict, name: str, lengths) -> tuple[Any, str]:
        """The value of input `name` in `row` and the field it came from; an Exception when the row
        holds none that can be read (the row's error says why)."""
        if name in self.text_lengths:
            return lengths if isinstance(lengths, Exception) else lengths[self.text_lengths.index(name)], name
        if name in self.extractors:
            try:
                return self.extractors[name](row), name
            except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as err:
                return err, name
        if name in row:
            return row[name], name
        return row["full_result"].get(name, MISSING), f"full_result.{name}"

    def _lengths(self, rows: list, inputs) -> list:
        """Every row's text lengths, read once for the chunk as the drop-ins read them
        (nemo_gym_rows.text_lengths: one batched tokenizer call), when the shaper reads them."""
        from .nemo_gym_rows import text_lengths

        if not any(name in self.text_lengths for name, _ in inputs):
            return [None] * len(rows)
        # a row that is not a result (a bad line, no full_result) gets an error here that extract,
        # which reports such a row first, never reads
        return text_lengths(rows, [""] * len(rows), [self.unit == "tokens"] * len(rows), self.tokenizer)

    def extract(self, chunk: Chunk, inputs, metas) -> Extracted:
        errors: dict[int, RowError] = {}
        rows = chunk.block.rows
        n = len(rows)
        rewards = np.zeros(n)
        channels = {name: np.zeros(n) for name, _ in inputs}
        comps = np.zeros(n)
        lengths = self._lengths(rows, inputs)
        for i, row in enumerate(rows):
            at = chunk.base + i
            if isinstance(row, BadLine):
                errors[i] = RowError(at + 1, row.field, row.error)
                continue
            fr = row.get("full_result", MISSING)
            if not isinstance(fr, dict):
                errors[i] = RowError(at + 1, "full_result", f"expected an object, got {_got(fr)}")
                continue
            one: dict[int, RowError] = {}
            rewards[i] = _numbers([fr.get("reward", MISSING)], "full_result.reward", "reward", at, one)[0]
            for name, typ in inputs:
                value, fname = self._input(row, name, lengths[i])
                if isinstance(value, Exception):
                    one.setdefault(0, RowError(at + 1, fname, str(value)))
                    continue
                channels[name][i] = _numbers([value], fname, typ, at, one)[0]
            if one:
                errors[i] = one[0]
            comps[i] = _component_count(struct_fields(fr.get("reward_components")) if chunk.block.from_arrow
                                        else fr.get("reward_components"))
        starts = chunk.offsets[:-1]
        firsts = [rows[s] if isinstance(rows[s], dict) else {} for s in starts]
        metadata = {m.name: [self._meta(r, m.name) for r in firsts] for m in metas}
        if chunk.block.from_arrow:
            metadata = {k: [struct_fields(v) for v in vs] for k, vs in metadata.items()}
        metadata = {m.name: GroupMeta(m.kind, metadata[m.name]) for m in metas}
        agents = [get_path(r, self.agent_key) for r in firsts] if self.agent_key else None
        agents = _agent_names(agents, self.agent_key, starts, chunk.base, errors)
        return Extracted(rewards, channels, metadata, comps if comps.any() else None, agents, errors)

    @staticmethod
    def field_of(name: str) -> str:
        return name

    @staticmethod
    def meta_fields(name: str) -> tuple[str, ...]:
        """The row fields metadata `name` is read from (at the row's top level)."""
        return ("profiled_rewards", "profiled_output_lengths") if name == "profiled" else (name,)

    @staticmethod
    def _meta(row: dict, name: str) -> Any:
        if name == "profiled":
            rewards, lengths = row.get("profiled_rewards"), row.get("profiled_output_lengths")
            if rewards is None or lengths is None:
                return None
            return {"reward": rewards, "length": lengths}
        return row.get(name)


