"""Rollout files in, shaped rollout files out, for `shapec run` and `shapec explain`.

Rows are read in blocks (JSONL lines or Parquet record batches) and re-cut into chunks that
hold whole prompt groups only, so memory is bounded by the chunk size and a group is never
shaped in two halves. Each chunk is validated row by row before any shaping: a bad row stops
the run with its row number and field, or (with on_bad_row="skip") sends its whole group to
the rejects file; the other groups of the chunk are shaped without it.

Two layouts:
  flat       one rollout per row: group key, `reward`, one column per input, and per-prompt
             metadata columns named after the spec's `meta` declarations (read from the
             group's first row).
  nemo-gym   NeMo-Gym result rows: reward from `full_result.reward`, reasoning and answer
             lengths from `full_result.response.output` (as the NeMo-RL drop-in counts them),
             `low_effort_applied`, `profile_band`, `profiled_rewards`,
             `profiled_output_lengths` and `agent_ref.name` at the row's top level.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..runtime.batch import BatchError
from ..runtime.params import ParamError
from .spec import ToolError, stage_irs

MISSING = object()
UNITS = ("tokens", "chars", "seconds", "calls")


class BadLine:
    """A JSONL line that is not a JSON object; kept so the row numbering and rejects stay exact."""

    def __init__(self, text: str, error: str):
        self.text = text
        self.error = error


@dataclass(frozen=True)
class RowError:
    row: int  # 1-based row number in the input
    field: str
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.field}: {self.message}"


class DataError(ToolError):
    """A bad row with on_bad_row='stop'."""


def _got(value: Any) -> str:
    if value is MISSING:
        return "nothing (the field is missing)"
    if value is None:
        return "null"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    text = json.dumps(value) if isinstance(value, (str, bool, list, dict)) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def get_path(row: Any, path: str) -> Any:
    """`a.b.c` in nested dicts; MISSING when any step is absent."""
    cur = row
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return MISSING
        cur = cur[part]
    return cur


# ------------------------------------------------------------------------- blocks
class RowsBlock:
    """Rows as dicts (JSONL input, and every NeMo-Gym input)."""

    def __init__(self, rows: list):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def keys(self, path: str) -> list:
        return [get_path(r, path) if isinstance(r, dict) else MISSING for r in self.rows]

    def slice(self, a: int, b: int) -> "RowsBlock":
        return RowsBlock(self.rows[a:b])

    def concat(self, other: "RowsBlock") -> "RowsBlock":
        return RowsBlock(self.rows + other.rows)

    def column(self, name: str) -> list:
        return [r.get(name, MISSING) if isinstance(r, dict) else MISSING for r in self.rows]

    def first_rows(self, starts: np.ndarray) -> list:
        return [self.rows[s] for s in starts]


class ArrowBlock:
    """A pyarrow Table (Parquet input in the flat layout): validated and rewritten column-wise."""

    def __init__(self, table):
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows

    def keys(self, path: str) -> list:
        if path not in self.table.column_names:
            return [MISSING] * len(self)
        return [MISSING if v is None else v for v in self.table.column(path).to_pylist()]

    def slice(self, a: int, b: int) -> "ArrowBlock":
        return ArrowBlock(self.table.slice(a, b - a))

    def concat(self, other: "ArrowBlock") -> "ArrowBlock":
        import pyarrow as pa

        return ArrowBlock(pa.concat_tables([self.table, other.table], promote_options="permissive"))


def _jsonl_blocks(path: Path, size: int, progress) -> Iterator[RowsBlock]:
    rows: list = []
    with open(path, "rb") as fh:
        for raw in fh:
            progress.advance(len(raw))
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as err:
                value = BadLine(text, f"not valid JSON ({err.msg} at column {err.colno})")
            if not isinstance(value, (dict, BadLine)):
                value = BadLine(text, f"expected a JSON object, got {type(value).__name__}")
            rows.append(value)
            if len(rows) >= size:
                yield RowsBlock(rows)
                rows = []
    if rows:
        yield RowsBlock(rows)


def _parquet_blocks(path: Path, size: int, as_rows: bool, progress) -> Iterator[RowsBlock | ArrowBlock]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    for batch in pf.iter_batches(batch_size=size):
        progress.advance(batch.num_rows)
        table = pa.Table.from_batches([batch])
        yield RowsBlock(table.to_pylist()) if as_rows else ArrowBlock(table)


def input_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ToolError(f"{path}: unknown file type {suffix!r}; expected .jsonl or .parquet")


# ------------------------------------------------------------------------- grouping and chunks
@dataclass
class Grouping:
    """Groups are contiguous runs of the same key, or `size` contiguous rows."""

    key: str | None = "prompt_id"
    size: int | None = None

    def starts(self, block, base: int) -> np.ndarray:
        """Local indices where a group starts (always includes 0); `base` is block[0]'s row index."""
        n = len(block)
        if self.size is not None:
            first = (-base) % self.size
            return np.unique(np.concatenate([[0], np.arange(first, n, self.size)])).astype(np.int64)
        starts = [0]
        prev = MISSING
        for i, k in enumerate(block.keys(self.key)):
            if k is MISSING:
                continue  # a row without a key stays in the run it is in (and taints that group)
            if i > 0 and not _same_key(k, prev):
                starts.append(i)
            prev = k
        return np.asarray(starts, dtype=np.int64)


def _same_key(a: Any, b: Any) -> bool:
    try:
        return b is not MISSING and bool(a == b)
    except (TypeError, ValueError):
        return False


@dataclass
class Chunk:
    block: RowsBlock | ArrowBlock
    base: int  # 0-based index of the chunk's first row in the input
    offsets: np.ndarray  # local group offsets, (G+1,)

    @property
    def groups(self) -> int:
        return len(self.offsets) - 1


def iter_chunks(blocks: Iterator, grouping: Grouping, chunk_rows: int) -> Iterator[Chunk]:
    """Re-cut blocks into chunks that hold whole groups only: each chunk ends at the first group
    start at or past chunk_rows rows (or at the end of the input), so a chunk is chunk_rows rows
    plus the rest of the group that crosses the boundary.
    """
    pending = None
    base = 0
    for block in blocks:
        pending = block if pending is None else pending.concat(block)
        while len(pending) >= chunk_rows:
            starts = grouping.starts(pending, base)
            later = starts[starts >= chunk_rows]
            if not len(later):
                break  # the group crossing chunk_rows may go on in the next block
            cut = int(later[0])
            yield Chunk(pending.slice(0, cut), base, np.append(starts[starts < cut], cut))
            pending = pending.slice(cut, len(pending))
            base += cut
    if pending is not None and len(pending):
        starts = grouping.starts(pending, base)
        yield Chunk(pending, base, np.append(starts, len(pending)))


# ------------------------------------------------------------------------- extraction
@dataclass
class Extracted:
    """What the shaper needs from one chunk, and what was wrong with which row."""

    rewards: np.ndarray
    channels: dict[str, np.ndarray]
    metadata: dict[str, list]
    components: np.ndarray | None
    agents: list | None
    errors: dict[int, RowError] = field(default_factory=dict)  # local row -> first error


def _expected(kind: str) -> str:
    if kind == "bool":
        return "true/false or a number"
    return f"a number >= 0 ({kind})" if kind in UNITS else "a number"


def _value_error(v: Any, kind: str) -> str | None:
    """Why one value cannot be used; kind is 'reward', 'bool' or a length unit."""
    ok = isinstance(v, (int, float)) and (kind == "bool" or not isinstance(v, bool))
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


def _arrow_numbers(table, name: str, kind: str, base: int, errors: dict) -> np.ndarray:
    """The same checks as _numbers, vectorised over an Arrow column."""
    import pyarrow as pa

    n = table.num_rows
    if name not in table.column_names:
        return _numbers([MISSING] * n, name, kind, base, errors)
    col = table.column(name)
    numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or (
        kind == "bool" and pa.types.is_boolean(col.type))
    if not numeric:
        return _numbers(col.to_pylist(), name, kind, base, errors)
    arr = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    bad = col.is_null().to_numpy(zero_copy_only=False) | np.isnan(arr) | np.isinf(arr)
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

    def __init__(self, agent_key: str | None = None):
        self.agent_key = agent_key

    def extract(self, chunk: Chunk, inputs, metas) -> Extracted:
        errors: dict[int, RowError] = {}
        block = chunk.block
        starts = chunk.offsets[:-1]
        if isinstance(block, ArrowBlock):
            table = block.table
            rewards = _arrow_numbers(table, "reward", "reward", chunk.base, errors)
            channels = {name: _arrow_numbers(table, name, typ, chunk.base, errors) for name, typ in inputs}
            metadata = {}
            for m in metas:
                if m.name in table.column_names:
                    metadata[m.name] = table.column(m.name).take(starts).to_pylist()
                else:
                    metadata[m.name] = [None] * len(starts)
            comps = None
            if "reward_components" in table.column_names:
                comps = np.array([_component_count(v) for v in table.column("reward_components").to_pylist()])
            agents = block.keys(self.agent_key) if self.agent_key else None
            agents = [agents[s] for s in starts] if agents else None
        else:
            for i, r in enumerate(block.rows):
                if isinstance(r, BadLine):
                    errors[i] = RowError(chunk.base + i + 1, "<line>", r.error)
            rewards = _numbers(block.column("reward"), "reward", "reward", chunk.base, errors)
            channels = {name: _numbers(block.column(name), name, typ, chunk.base, errors) for name, typ in inputs}
            firsts = block.first_rows(starts)
            metadata = {m.name: [_none(r.get(m.name) if isinstance(r, dict) else None) for r in firsts] for m in metas}
            comps = None
            if any(isinstance(r, dict) and "reward_components" in r for r in block.rows):
                comps = np.array([_component_count(r.get("reward_components") if isinstance(r, dict) else None)
                                  for r in block.rows])
            agents = [_none(get_path(r, self.agent_key)) for r in firsts] if self.agent_key else None
        return Extracted(rewards, channels, metadata, comps, agents, errors)


def _none(v: Any) -> Any:
    return None if v is MISSING else v


def _component_count(v: Any) -> float:
    """Reward components make a group non-binary for binary shapers: count them."""
    if v is None or v is MISSING:
        return 0.0
    if isinstance(v, (list, tuple, dict)):
        return float(len(v))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return 1.0 if v else 0.0


class NemoGymLayout:
    """NeMo-Gym result rows, read the way the NeMo-RL drop-ins read them."""

    name = "nemo-gym"

    def __init__(self, length_type: str = "chars", tokenizer=None, agent_key: str | None = "agent_ref.name"):
        from ..compat._time_efficiency import rollout_calls, rollout_seconds
        from ..compat.nemo_rl import length_of, response_texts

        self.agent_key = agent_key
        self._texts = response_texts

        def text_length(which: int):
            return lambda row, texts: length_of(texts()[which], length_type, tokenizer)

        def flag(key: str):
            return lambda row, texts: bool(row.get(key) or row["full_result"].get(key))

        # inputs of the stdlib specs; any other input is read from the row, then from full_result
        self.extractors = {
            "reasoning": text_length(0),
            "answer": text_length(1),
            "low_effort": lambda row, texts: bool(row.get("low_effort_applied")),
            "run_time": lambda row, texts: rollout_seconds(row),
            "calls": lambda row, texts: rollout_calls(row),
            "resolved": flag("resolved"),
            "masked": flag("mask_sample"),
        }

    def _input(self, row: dict, name: str, texts) -> tuple[Any, str]:
        if name in self.extractors:
            try:
                return self.extractors[name](row, texts), name
            except (ValueError, TypeError, AttributeError) as err:
                return f"unreadable ({err})", name
        if name in row:
            return row[name], name
        return row["full_result"].get(name, MISSING), f"full_result.{name}"

    def extract(self, chunk: Chunk, inputs, metas) -> Extracted:
        errors: dict[int, RowError] = {}
        rows = chunk.block.rows
        n = len(rows)
        rewards = np.zeros(n)
        channels = {name: np.zeros(n) for name, _ in inputs}
        comps = np.zeros(n)
        for i, row in enumerate(rows):
            at = chunk.base + i
            if isinstance(row, BadLine):
                errors[i] = RowError(at + 1, "<line>", row.error)
                continue
            fr = row.get("full_result", MISSING)
            if not isinstance(fr, dict):
                errors[i] = RowError(at + 1, "full_result", f"expected an object, got {_got(fr)}")
                continue
            one: dict[int, RowError] = {}
            rewards[i] = _numbers([fr.get("reward", MISSING)], "full_result.reward", "reward", at, one)[0]
            texts = _memo(lambda row=row: self._texts(row))
            for name, typ in inputs:
                value, fname = self._input(row, name, texts)
                channels[name][i] = _numbers([value], fname, typ, at, one)[0]
            if one:
                errors[i] = one[0]
            comps[i] = _component_count(fr.get("reward_components"))
        starts = chunk.offsets[:-1]
        firsts = [rows[s] if isinstance(rows[s], dict) else {} for s in starts]
        metadata = {m.name: [self._meta(r, m.name) for r in firsts] for m in metas}
        agents = [_none(get_path(r, self.agent_key)) for r in firsts] if self.agent_key else None
        return Extracted(rewards, channels, metadata, comps if comps.any() else None, agents, errors)

    @staticmethod
    def _meta(row: dict, name: str) -> Any:
        if name == "profiled":
            rewards, lengths = row.get("profiled_rewards"), row.get("profiled_output_lengths")
            if rewards is None or lengths is None:
                return None
            return {"reward": rewards, "length": lengths}
        return row.get(name)


def _memo(fn):
    """Call fn at most once (the response texts are needed by two inputs, or by none)."""
    box: list = []

    def get():
        if not box:
            box.append(fn())
        return box[0]

    return get


# ------------------------------------------------------------------------- shaping a chunk
@dataclass
class ChunkOutcome:
    good_rows: np.ndarray  # local row indices that were shaped, in order
    result: Any  # Result over the good groups (None when no group was good)
    rejected: list[tuple[int, str]]  # (local row index, reason), every row of every rejected group
    channels: dict[str, np.ndarray] = field(default_factory=dict)  # inputs of every row of the chunk


def _needs(shaper):
    inputs: dict[str, str] = {}
    metas = {}
    for ir in stage_irs(shaper):
        inputs.update(dict(ir.inputs))
        metas.update({m.name: m for m in ir.metas})
    return tuple(inputs.items()), tuple(metas.values())


def shape_chunk(shaper, plan, layout, chunk: Chunk, on_bad_row: str, training: bool = True) -> ChunkOutcome:
    inputs, metas = _needs(shaper)
    ex = layout.extract(chunk, inputs, metas)
    G = chunk.groups
    off = chunk.offsets
    group_of = np.repeat(np.arange(G), np.diff(off))
    reasons: dict[int, str] = {}
    for i in sorted(ex.errors):
        err = ex.errors[i]
        if on_bad_row == "stop":
            raise DataError(f"{err}")
        reasons.setdefault(int(group_of[i]), str(err))

    def run(groups: list[int], validate_only: bool = False):
        rows = np.concatenate([np.arange(off[g], off[g + 1]) for g in groups]) if groups else np.zeros(0, np.int64)
        sizes = np.diff(off)[groups]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        result = shaper(
            ex.rewards[rows], offsets=offsets,
            channels={k: v[rows] for k, v in ex.channels.items()},
            metadata={k: [v[g] for g in groups] for k, v in ex.metadata.items()},
            params=plan.params(None if ex.agents is None else [ex.agents[g] for g in groups]),
            reward_components=None if ex.components is None else ex.components[rows],
            training=training and not validate_only,
        )
        return rows, result

    good = [g for g in range(G) if g not in reasons]
    if good:
        try:
            run(good, validate_only=True)
        except (BatchError, ParamError) as err:
            # isolate the groups whose metadata or params are bad: each alone, validation only
            for g in good:
                try:
                    run([g], validate_only=True)
                except (BatchError, ParamError) as one:
                    msg = f"row {chunk.base + off[g] + 1} (first row of its group): {one}"
                    if on_bad_row == "stop":
                        raise DataError(msg) from None
                    reasons[g] = msg
            if not any(g in reasons for g in good):
                raise ToolError(f"rows {chunk.base + 1}..{chunk.base + len(chunk.block)}: {err}") from None
            good = [g for g in good if g not in reasons]
    rows, result = run(good) if good else (np.zeros(0, np.int64), None)
    rejected = []
    for g in sorted(reasons):
        first = reasons[g]
        for i in range(off[g], off[g + 1]):
            own = ex.errors.get(i)
            rejected.append((int(i), str(own) if own else f"in a group with a bad row: {first}"))
    return ChunkOutcome(rows, result, rejected, ex.channels)


# ------------------------------------------------------------------------- writing
def output_columns(result) -> dict[str, np.ndarray]:
    cols = {f"term.{k}": v for k, v in result.terms.items()}
    cols.update({f"factor.{k}": v for k, v in result.factors.items()})
    return cols


class Writer:
    """Writes shaped rows to .jsonl or .parquet (by extension), one chunk at a time."""

    def __init__(self, path: Path, layout_name: str, input_schema=None):
        """`input_schema`: the Arrow schema of every input row (a Parquet file's own, or one scanned
        from JSONL), so that a field first seen in a later chunk still fits the Parquet output."""
        self.path = path
        self.format = input_format(path)
        self.layout = layout_name
        self.input_schema = input_schema
        self.rows = 0
        self._fh = None
        self._pq = None
        self._schema = None

    def write(self, chunk: Chunk, outcome: ChunkOutcome) -> None:
        if outcome.result is None or not len(outcome.good_rows):
            return
        rewards = outcome.result.rewards
        extra = output_columns(outcome.result)
        if isinstance(chunk.block, ArrowBlock) and self.layout == "flat":
            table = self._arrow_rows(chunk.block.table, outcome.good_rows, rewards, extra)
            if self.format == "parquet":
                self._write_table(table)
            else:
                self._write_dicts(table.to_pylist())
        else:
            rows = [chunk.block.rows[i] for i in outcome.good_rows]
            dicts = [self._dict_row(r, float(rewards[k]), {c: float(v[k]) for c, v in extra.items()})
                     for k, r in enumerate(rows)]
            if self.format == "parquet":
                import pyarrow as pa

                if self._schema is None:
                    self._schema = self._output_schema(pa.Table.from_pylist(dicts).schema)
                try:
                    table = pa.Table.from_pylist(dicts, schema=self._schema)
                except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
                    raise ToolError(f"{self.path}: rows {chunk.base + 1}..{chunk.base + len(chunk.block)} do not "
                                    f"fit one Parquet schema ({err}); write .jsonl instead") from None
                self._write_table(table)
            else:
                self._write_dicts(dicts)
        self.rows += len(outcome.good_rows)

    def _dict_row(self, row: dict, reward: float, extra: dict) -> dict:
        out = dict(row)
        if self.layout == "nemo-gym":
            fr = dict(out["full_result"])
            env = fr.get("reward")
            fr["reward"] = reward
            out["full_result"] = fr
            if "reward" in out:
                out["reward"] = reward
        else:
            env = out.get("reward")
            out["reward"] = reward
        out["env_reward"] = env
        out.update(extra)
        return out

    def _output_schema(self, first):
        """The first chunk's schema widened by every input row's (struct fields merged, ints to floats)."""
        import pyarrow as pa

        if self.input_schema is None:
            return first
        parts = [first, self.input_schema]
        try:
            if self.layout == "nemo-gym":
                reward_type = self.input_schema.field("full_result").type.field("reward").type
            else:
                reward_type = self.input_schema.field("reward").type
            parts.append(pa.schema([("env_reward", reward_type)]))
        except KeyError:
            pass
        return pa.unify_schemas(parts, promote_options="permissive")

    @staticmethod
    def _arrow_rows(table, good: np.ndarray, rewards: np.ndarray, extra: dict):
        import pyarrow as pa

        if len(good) != table.num_rows:
            table = table.take(pa.array(good))
        env = table.column("reward")
        table = table.set_column(table.column_names.index("reward"), "reward", pa.array(rewards, pa.float64()))
        if "env_reward" in table.column_names:
            table = table.drop_columns(["env_reward"])
        table = table.append_column("env_reward", env)
        for name, values in extra.items():
            if name in table.column_names:
                table = table.drop_columns([name])
            table = table.append_column(name, pa.array(values, pa.float64()))
        return table

    def _write_table(self, table) -> None:
        import pyarrow.parquet as pq

        if self._pq is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._schema = table.schema
            self._pq = pq.ParquetWriter(self.path, table.schema)
        elif table.schema != self._schema:
            table = table.cast(self._schema)
        self._pq.write_table(table)

    def _write_dicts(self, rows: list[dict]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w")
        self._fh.write("".join(json.dumps(r) + "\n" for r in rows))

    def close(self) -> None:
        if self._pq is not None:
            self._pq.close()
        elif self._fh is not None:
            self._fh.close()
        elif self.format == "jsonl":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")  # every row rejected: still leave an (empty) output


class RejectsWriter:
    """`<out stem>.rejects.jsonl`: every rejected row with its row number and reason."""

    def __init__(self, out: Path):
        self.path = out.with_name(out.name[: -len(out.suffix)] + ".rejects.jsonl")
        self.rows = 0
        self._fh = None

    def write(self, chunk: Chunk, rejected: list[tuple[int, str]], key_path: str | None) -> None:
        if not rejected:
            return
        if self._fh is None:
            self._fh = open(self.path, "w")
        block = chunk.block
        table_rows = block.table.take([i for i, _ in rejected]).to_pylist() if isinstance(block, ArrowBlock) else None
        for k, (i, reason) in enumerate(rejected):
            row = table_rows[k] if table_rows is not None else block.rows[i]
            record = row.text if isinstance(row, BadLine) else row
            group = _none(get_path(row, key_path)) if key_path and isinstance(row, dict) else None
            self._fh.write(json.dumps({"row": chunk.base + i + 1, "group": group, "reason": reason,
                                       "record": record}, default=str) + "\n")
        self.rows += len(rejected)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        elif self.path.exists():
            self.path.unlink()  # a stale rejects file from an earlier run would mislead


# ------------------------------------------------------------------------- metrics over chunks
class MetricTotals:
    """Combines per-chunk metrics into whole-input values.

    A metric that is `batch.mean(x)` over every rollout is combined exactly (row-weighted),
    as are batch sums, counts, min, max, any and all. Anything else (a masked mean, a ratio of
    reductions) is a row-weighted mean of the per-chunk values and is flagged approximate.
    """

    def __init__(self, shaper):
        self.ops: dict[str, str] = {}
        irs = stage_irs(shaper)
        for ir in irs:
            for name, node in ir.metrics:
                key = name if len(irs) == 1 else f"{ir.name}.{name}"
                op = node.attr if node.op == "breduce" else "approx"
                if op == "mean" and not (node.args[1].op == "const" and node.args[1].attr == 1.0):
                    op = "approx"
                self.ops[key] = op
        self.values: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, metrics: dict[str, float], rows: int) -> None:
        for key, value in metrics.items():
            op = self.ops.get(key, "approx")
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            if key not in self.values:
                self.values[key], self.weights[key] = (value * rows if op in ("mean", "approx") else value), rows
                continue
            old = self.values[key]
            if op in ("mean", "approx"):
                self.values[key] = old + value * rows
            elif op in ("sum", "count"):
                self.values[key] = old + value
            elif op in ("min", "all"):
                self.values[key] = min(old, value)
            elif op in ("max", "any"):
                self.values[key] = max(old, value)
            self.weights[key] += rows

    def final(self) -> dict[str, tuple[float, bool]]:
        out = {}
        for key in self.ops:
            if key not in self.values:
                out[key] = (math.nan, False)
                continue
            op = self.ops[key]
            value = self.values[key] / self.weights[key] if op in ("mean", "approx") else self.values[key]
            out[key] = (value, op == "approx")
        return out


# ------------------------------------------------------------------------- the whole run
class Progress:
    """A rich progress bar on a terminal; nothing when stderr is not a TTY."""

    def __init__(self, total: int, unit: str, enabled: bool):
        self._bar = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self._bar = Bar(TextColumn("shaping"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                            TimeRemainingColumn(), transient=True)
            self._task = self._bar.add_task(unit, total=total)
            self._bar.start()

    def advance(self, amount: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, amount)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


@dataclass
class RunReport:
    rows_in: int = 0
    rows_out: int = 0
    rows_rejected: int = 0
    groups: int = 0
    groups_rejected: int = 0
    chunks: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # skip reason -> groups
    metrics: dict[str, tuple[float, bool]] = field(default_factory=dict)
    out: Path | None = None
    rejects: Path | None = None


def open_blocks(data: Path, layout, chunk_rows: int, progress_enabled: bool):
    fmt = input_format(data)
    if not data.is_file():
        raise ToolError(f"{data}: no such file")
    block_rows = max(1, min(chunk_rows, 65536))
    if fmt == "jsonl":
        progress = Progress(data.stat().st_size, "bytes", progress_enabled)
        return _jsonl_blocks(data, block_rows, progress), progress
    import pyarrow.parquet as pq

    try:
        rows = pq.ParquetFile(data).metadata.num_rows
    except Exception as err:  # pyarrow raises several types for a file that is not Parquet
        raise ToolError(f"{data}: cannot read Parquet ({err})") from None
    progress = Progress(rows, "rows", progress_enabled)
    return _parquet_blocks(data, block_rows, layout.name != "flat", progress), progress


def scan_schema(data: Path):
    """The Arrow schema of all rows of an input: a Parquet file's own, or unified over a JSONL file
    (one extra streaming pass; rows that fit no schema are left to the validation to reject)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if input_format(data) == "parquet":
        return pq.ParquetFile(data).schema_arrow
    schema = None

    def merge(rows):
        nonlocal schema
        try:
            found = [pa.Table.from_pylist(rows).schema]
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            found = []
            for r in rows:
                try:
                    found.append(pa.Table.from_pylist([r]).schema)
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    continue
        for s in found:
            try:
                schema = s if schema is None else pa.unify_schemas([schema, s], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                continue

    for block in _jsonl_blocks(data, 65536, Progress(0, "", False)):
        merge([r for r in block.rows if isinstance(r, dict)])
    return schema


def run_file(shaper, plan, layout, data: Path, out: Path, grouping: Grouping, chunk_rows: int,
             on_bad_row: str, progress: bool = True) -> RunReport:
    """Shape every group of `data` into `out`; reject bad groups into `<out stem>.rejects.jsonl`."""
    if input_format(out) and out.resolve() == data.resolve():
        raise ToolError(f"{out}: the output would overwrite the input")
    blocks, bar = open_blocks(data, layout, chunk_rows, progress)
    from_rows = input_format(data) == "jsonl" or layout.name != "flat"
    schema = scan_schema(data) if input_format(out) == "parquet" and from_rows else None
    writer = Writer(out, layout.name, schema)
    rejects = RejectsWriter(out)
    totals = MetricTotals(shaper)
    report = RunReport(out=out)
    try:
        for chunk in iter_chunks(blocks, grouping, chunk_rows):
            outcome = shape_chunk(shaper, plan, layout, chunk, on_bad_row)
            writer.write(chunk, outcome)
            rejects.write(chunk, outcome.rejected, grouping.key)
            report.rows_in += len(chunk.block)
            report.groups += chunk.groups
            report.chunks += 1
            group_of = np.repeat(np.arange(chunk.groups), np.diff(chunk.offsets))
            report.groups_rejected += len({int(group_of[i]) for i, _ in outcome.rejected})
            if outcome.result is not None:
                totals.add(outcome.result.metrics, len(outcome.good_rows))
                for reason in outcome.result.skip_reasons:
                    if reason:
                        report.skipped[reason] = report.skipped.get(reason, 0) + 1
    finally:
        bar.close()
        writer.close()
        rejects.close()
    report.rows_out = writer.rows
    report.rows_rejected = rejects.rows
    report.rejects = rejects.path if rejects.rows else None
    report.metrics = totals.final()
    return report


def format_report(report: RunReport, spec: str, shaper_name: str, data: Path) -> str:
    lines = [f"shapec run: {shaper_name} from {spec} on {data}"]
    lines.append(f"rows: {report.rows_in} in = {report.rows_out} out + {report.rows_rejected} rejected")
    shaped = report.groups - report.groups_rejected - sum(report.skipped.values())
    lines.append(f"groups: {report.groups} in, {shaped} shaped, "
                 f"{sum(report.skipped.values())} passed through, {report.groups_rejected} rejected "
                 f"({report.chunks} chunk{'s' if report.chunks != 1 else ''})")
    for reason, count in sorted(report.skipped.items()):
        lines.append(f"  passed through ({reason}): {count} group{'s' if count != 1 else ''}")
    lines.append(f"wrote {report.out}")
    if report.rejects is not None:
        lines.append(f"rejects: {report.rejects}")
    if report.metrics:
        lines.append("metrics:")
        width = max(len(k) for k in report.metrics)
        for key, (value, approx) in report.metrics.items():
            note = "  (approximate: combined over chunks)" if approx else ""
            lines.append(f"  {key:<{width}}  {value:.6g}{note}")
    return "\n".join(lines)
