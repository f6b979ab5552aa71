"""Shaped rows out: the output file and its rejects file, each written whole or not at all.

Both are written to temporary files in the destination folder (run/atomic.py) and renamed
into place only when the whole input has been shaped, so an existing output is never truncated
or left half-written by a bad row, a full disk, Ctrl-C or kill -9.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from ..paths import printable
from .atomic import AtomicFile, OutputError, reason_of
from .grouping import Chunk
from .lines import got
from .readers import MISSING, ArrowBlock, BadLine, get_path, input_format, is_list_type, rows_schema, widen
from .spec import ToolError


def rejects_path(out: Path) -> Path:
    """`<out stem>.rejects.jsonl` next to the output."""
    return out.with_name(out.name[: -len(out.suffix)] + ".rejects.jsonl")


def output_columns(result) -> dict[str, np.ndarray]:
    """The breakdown columns, and `kept` (bool) when the shaper drops rollouts (`drop when`). A
    term of `-coeff * x` on x = 0 is -0.0, which a reader takes for a penalty that applied: written
    as 0 (adding +0.0 changes no other value)."""
    cols = {f"term.{k}": v + 0.0 for k, v in result.terms.items()}
    cols.update({f"factor.{k}": v + 0.0 for k, v in result.factors.items()})
    if result.drops:
        cols["kept"] = result.kept
    return cols


class Writer:
    """Writes shaped rows to .jsonl or .parquet (by extension), one chunk at a time."""

    def __init__(self, path: Path, layout_name: str, data: Path):
        """`data` is the input. Rows of a Parquet input that become dicts (the NeMo-Gym layout) are
        written in the schema of the input file, so a field first seen in a later chunk still fits.
        Rows of a JSONL input written to Parquet are spooled first (see _spool_rows): the output's
        schema is that of the rows written, so a rejected row's value never shapes a column."""
        self.path = path
        self.format = input_format(path)
        self.layout = layout_name
        from_parquet = input_format(data) == "parquet"
        self.input_schema = _parquet_schema(data) if from_parquet and self.format == "parquet" else None
        self.rows = 0
        self._file = AtomicFile(path)
        self._spool = AtomicFile(path) if self.format == "parquet" and not from_parquet else None
        self._fh = None
        self._pq = None
        self._schema = None

    def start(self) -> None:
        """Create the temporary files now, so an unwritable destination fails before any work."""
        self._file.open()
        if self._spool is not None:
            self._spool.open()

    def write(self, chunk: Chunk, outcome) -> None:
        if outcome.result is None or not len(outcome.good_rows):
            return
        import pyarrow as pa

        try:
            self._write(chunk, outcome)
        except OSError as err:
            raise OutputError(self.path, reason_of(err)) from None
        except pa.ArrowNotImplementedError as err:  # a type Parquet has no form for (an empty object)
            raise ToolError(f"{printable(self.path)}: rows {chunk.base + 1}..{chunk.base + len(chunk.block)} cannot be "
                            f"written to Parquet ({err}); write .jsonl instead") from None

    def _write(self, chunk: Chunk, outcome) -> None:
        rewards = outcome.result.rewards
        extra = output_columns(outcome.result)
        numbers = chunk.base + outcome.good_rows + 1  # the rows' numbers in the input
        if isinstance(chunk.block, ArrowBlock) and self.layout == "flat":
            self._refuse_taken(chunk.block.table.column_names, int(numbers[0]), extra)
            table = self._arrow_rows(chunk.block.table, outcome.good_rows, rewards, extra)
            if self.format == "parquet":
                self._write_table(table, {"reward": rewards, **extra})
            else:
                self._write_dicts(table.to_pylist())
        else:
            rows = [chunk.block.rows[i] for i in outcome.good_rows]
            for k, r in enumerate(rows):
                self._refuse_taken(r, int(numbers[k]), extra)
            dicts = [self._dict_row(r, float(rewards[k]), {c: v[k].item() for c, v in extra.items()})
                     for k, r in enumerate(rows)]
            if self._spool is not None:
                self._spool_rows(dicts, numbers)
            elif self.format == "parquet":
                self._write_table(self._rows_table(dicts, numbers), {})
            else:
                self._write_dicts(dicts)
        self.rows += len(outcome.good_rows)

    def _refuse_taken(self, fields, number: int, extra: dict) -> None:
        """A field of the input named like a column run writes would be replaced and lost (the true
        env reward of a file that was shaped before): refused, whatever --on-bad-row says."""
        for name in ("env_reward", *extra):
            if name in fields:
                what = "the reward the input had" if name == "env_reward" else f"the shaper's {name}"
                raise ToolError(f"row {number}: {name}: expected no such field: run writes {what} there, "
                                "so the input's value would be lost (is the input already shaped?); "
                                "rename or drop the field")

    def _spool_rows(self, dicts: list[dict], numbers: np.ndarray) -> None:
        """Keep shaped JSONL rows, with their row numbers, in a temporary JSONL file, and widen the
        output schema by them: only rows that are written ever give a column its type."""
        found = rows_schema(dicts)
        if found is not None:
            self._schema = found if self._schema is None else widen(self._schema, found)
        if self._fh is None:
            self._fh = open(self._spool.tmp, "w", encoding="utf-8")
        self._fh.write("".join(json.dumps([int(n), r]) + "\n" for n, r in zip(numbers, dicts)))

    def _unspool(self) -> None:
        """Write the spooled rows to the Parquet file in the schema of all of them, a block at a time."""
        fh, self._fh = self._fh, None
        if fh is None:
            return
        fh.close()
        import pyarrow as pa

        with open(self._spool.tmp, encoding="utf-8") as spooled:
            while True:
                block = [json.loads(line) for line in itertools.islice(spooled, SPOOL_BLOCK)]
                if not block:
                    break
                numbers = np.array([n for n, _ in block])
                try:
                    self._write_table(self._rows_table([r for _, r in block], numbers), {})
                except pa.ArrowNotImplementedError as err:  # as in write()
                    raise ToolError(f"{printable(self.path)}: rows {numbers[0]}..{numbers[-1]} cannot be written to "
                                    f"Parquet ({err}); write .jsonl instead") from None

    def _rows_table(self, dicts: list[dict], numbers: np.ndarray):
        """The rows as a table of the output's one schema: every field of every row, each value
        converted as it is or refused with its row and field, never dropped or truncated."""
        import pyarrow as pa

        unfit = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError)
        if self._schema is None:
            first = rows_schema(dicts)
            self._schema = self._output_schema(pa.schema([]) if first is None else first)
        target = pa.struct(list(self._schema))
        try:
            safe = not _lossy(pa.array(dicts).type, target)
        except unfit:
            safe = False  # rows that disagree on a type: each is checked below
        if safe:
            try:
                return pa.Table.from_pylist(dicts, schema=self._schema)
            except unfit:
                pass
        for k, row in enumerate(dicts):
            problem = _misfit(row, target, "")
            if problem is not None:
                raise ToolError(f"row {int(numbers[k])}: {problem}; one Parquet column holds one type: make "
                                "the rows agree, or write .jsonl instead")
        try:
            return pa.Table.from_pylist(dicts, schema=self._schema)
        except unfit as err:
            raise ToolError(f"rows {int(numbers[0])}..{int(numbers[-1])} do not fit one Parquet schema ({err}); "
                            "write .jsonl instead") from None

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
        schema = first
        for other in parts[1:]:
            schema = widen(schema, other)
        return schema

    @staticmethod
    def _arrow_rows(table, good: np.ndarray, rewards: np.ndarray, extra: dict):
        import pyarrow as pa

        if len(good) != table.num_rows:
            table = table.take(pa.array(good))
        env = table.column("reward")
        table = table.set_column(table.column_names.index("reward"), "reward", pa.array(rewards, pa.float64()))
        table = table.append_column("env_reward", env)  # _refuse_taken: no input column has these names
        for name, values in extra.items():
            table = table.append_column(name, pa.array(values))  # float64, or bool for `kept`
        return table

    def _write_table(self, table, computed: dict[str, np.ndarray]) -> None:
        """`computed`: the columns shapec wrote into the table, by name (rewards, terms, factors)."""
        import pyarrow.parquet as pq

        if self._pq is None:
            self._schema = table.schema
            self._pq = pq.ParquetWriter(self._file.tmp, table.schema,
                                        use_dictionary=_dictionary_columns(table.schema, computed))
        elif table.schema != self._schema:
            table = table.cast(self._schema)
        self._pq.write_table(table)

    def _write_dicts(self, rows: list[dict]) -> None:
        if self._fh is None:
            self._fh = open(self._file.tmp, "w", encoding="utf-8")
        self._fh.write("".join(json.dumps(r, default=_no_json) + "\n" for r in rows))

    def commit(self) -> None:
        """Finish the file (every row rejected: an empty one) and rename it over the destination."""
        try:
            if self._spool is not None:
                self._unspool()
            if self._pq is None and self.format == "parquet":
                import pyarrow as pa
                import pyarrow.parquet as pq

                schema = self._schema or self.input_schema or pa.schema([])
                pq.write_table(schema.empty_table(), self._file.tmp)
            self._close()
        except OSError as err:
            self.discard()
            raise OutputError(self.path, reason_of(err)) from None
        self._file.commit()
        if self._spool is not None:
            self._spool.discard()

    def _close(self) -> None:
        pq_writer, fh, self._pq, self._fh = self._pq, self._fh, None, None
        if pq_writer is not None:
            pq_writer.close()
        if fh is not None:
            fh.close()

    def discard(self) -> None:
        """Drop the temporary file; the destination keeps what it had."""
        try:
            self._close()
        except OSError:
            pass  # the file is going away anyway
        finally:
            self._file.discard()
            if self._spool is not None:
                self._spool.discard()


def _parquet_schema(data: Path):
    import pyarrow.parquet as pq

    return pq.ParquetFile(data).schema_arrow


SPOOL_BLOCK = 65536  # spooled rows converted to Parquet at a time


def _dictionary_columns(schema, computed: dict[str, np.ndarray]) -> list[str] | bool:
    """Parquet leaf columns to dictionary-encode: all (pyarrow's default) but the computed ones with
    many distinct values in the first chunk (a shaped reward, a dense term), for which building a
    dictionary takes time and makes the file bigger."""
    dense = {name for name, v in computed.items() if np.unique(v).size > max(16, len(v) // 64)}
    if not dense:
        return True
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf)
    leaves = pq.ParquetFile(buf).schema
    paths = [leaves.column(i).path for i in range(len(leaves))]
    return [p for p in paths if p not in dense]


def _lossy(inferred, target) -> bool:
    """Whether converting values of type `inferred` (the rows' own) to `target` could lose some:
    a field `target` lacks (Table.from_pylist drops it without a word), or a float where `target`
    has an integer (pyarrow truncates it), at any depth."""
    import pyarrow as pa

    if pa.types.is_struct(inferred) and pa.types.is_struct(target):
        return any(target.get_field_index(f.name) < 0 or _lossy(f.type, target.field(f.name).type)
                   for f in inferred)
    if is_list_type(inferred) and is_list_type(target):
        return _lossy(inferred.value_type, target.value_type)
    return pa.types.is_floating(inferred) and pa.types.is_integer(target)


def _misfit(value, typ, path: str) -> str | None:
    """`FIELD: expected ..., got ...` for the first part of one row's value that does not convert
    to `typ` exactly, or that `typ` has no field for; None when all of it does."""
    import pyarrow as pa

    if isinstance(value, dict) and pa.types.is_struct(typ):
        for k, v in value.items():
            at = f"{path}.{k}" if path else k
            if typ.get_field_index(k) < 0:
                return f"{printable(at)}: expected values of one Arrow type, got {got(v)} (no row gives this field one)"
            found = _misfit(v, typ.field(k).type, at)
            if found is not None:
                return found
        return None
    shown = path or "<row>"
    if isinstance(value, list) and is_list_type(typ):
        for j, v in enumerate(value):
            found = _misfit(v, typ.value_type, f"{shown}[{j}]")
            if found is not None:
                return found
        return None
    lossy = isinstance(value, float) and pa.types.is_integer(typ)  # pyarrow would truncate it
    try:
        pa.array([value], type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        lossy = True
    if not lossy:
        return None
    return f"{printable(shown)}: expected a value of type {typ} (as other rows have it), got {got(value)}"


class RejectsWriter:
    """`<out stem>.rejects.jsonl`: every rejected row with its row number and reason."""

    def __init__(self, path: Path):
        self.path = path
        self.rows = 0
        self._file = AtomicFile(path)
        self._fh = None

    def start(self) -> None:
        self._file.open()

    def write(self, chunk: Chunk, rejected: list[tuple[int, str]], key_path: str | None) -> None:
        if not rejected:
            return
        try:
            self._write(chunk, rejected, key_path)
        except OSError as err:
            raise OutputError(self.path, reason_of(err)) from None

    def _write(self, chunk: Chunk, rejected: list[tuple[int, str]], key_path: str | None) -> None:
        if self._fh is None:
            self._fh = open(self._file.tmp, "w", encoding="utf-8")
        block = chunk.block
        table_rows = block.table.take([i for i, _ in rejected]).to_pylist() if isinstance(block, ArrowBlock) else None
        for k, (i, reason) in enumerate(rejected):
            row = table_rows[k] if table_rows is not None else block.rows[i]
            record = row.text if isinstance(row, BadLine) else row
            keyed = row.row if isinstance(row, BadLine) else row
            group = get_path(keyed, key_path) if key_path and isinstance(keyed, dict) else None
            group = None if group is MISSING else group
            entry = {"row": chunk.base + i + 1, "group": group, "reason": reason, "record": record}
            try:
                line = json.dumps(entry, default=str)
            except (ValueError, RecursionError):  # a record json cannot write back: keep it as text
                line = json.dumps({**entry, "group": str(group), "record": str(record)[:10000]})
            self._fh.write(line + "\n")
        self.rows += len(rejected)

    def commit(self) -> None:
        """Rename the rejects into place; with none, write nothing. A rejects file already there is
        another run's (an earlier one, or one writing the same output now) and is never removed: the
        run's report says it is not this run's."""
        try:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
            if not self.rows:
                self._file.discard()
                return
        except OSError as err:
            self.discard()
            raise OutputError(self.path, reason_of(err)) from None
        self._file.commit()

    def discard(self) -> None:
        try:
            if self._fh is not None:
                self._fh.close()
        except OSError:
            pass
        finally:
            self._fh = None
            self._file.discard()


def _no_json(value):
    """A value JSON has no form for (a Parquet binary column): refused, never written as something else."""
    kind = "binary" if isinstance(value, (bytes, bytearray)) else type(value).__name__
    raise ToolError(f"a {kind} value cannot be written to JSONL (JSON has no {kind} type); "
                    "write Parquet instead (--out FILE.parquet)")
