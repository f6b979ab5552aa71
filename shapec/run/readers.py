"""Reading rollout files in blocks: JSONL lines or Parquet record batches, one row per rollout.

A JSONL line that cannot be a row is kept as a BadLine in its place (lines.py), so row numbers stay
exact. A field is the key of its name, else the dotted path it spells (field_value), in JSONL rows
and Parquet columns alike.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..paths import not_a_file, path_kind, printable
from .spec import ToolError

from .lines import MISSING, BadLine, parse_line


@dataclass(frozen=True)
class RowError:
    row: int  # 1-based row number in the input
    field: str
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {printable(self.field)}: {self.message}"


class DataError(ToolError):
    """A bad row with on_bad_row='stop'."""


def field_value(row: Any, name: str) -> Any:
    """A row's field `name`: the key of that name, else the dotted path it spells (as ArrowBlock.array
    reads a Parquet row); MISSING when there is neither, and for a line that is not an object."""
    if isinstance(row, dict) and name in row:
        return row[name]
    return get_path(row, name) if "." in name else MISSING


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

    def __init__(self, rows: list, from_arrow: bool = False):
        self.rows = rows
        self.from_arrow = from_arrow  # rows of a Parquet file: structs carry absent fields as null

    def __len__(self) -> int:
        return len(self.rows)

    def keys(self, path: str) -> list:
        return self.keys_at(path, range(len(self.rows)))

    def keys_at(self, path: str, indices) -> list:
        return [field_value(r.row if isinstance(r, BadLine) else r, path) for r in (self.rows[int(i)] for i in indices)]

    def has_field(self, path: str) -> bool:
        return any(k is not MISSING for k in self.keys(path))

    def readable(self) -> bool:
        """Whether any line parsed to an object (a file of only bad lines has no fields to look at)."""
        return any(isinstance(r, dict) or (isinstance(r, BadLine) and r.row is not None) for r in self.rows)

    def slice(self, a: int, b: int) -> "RowsBlock":
        return RowsBlock(self.rows[a:b], self.from_arrow)

    def concat(self, other: "RowsBlock") -> "RowsBlock":
        return RowsBlock(self.rows + other.rows, self.from_arrow)

    def column(self, name: str) -> list:
        return [field_value(r, name) for r in self.rows]

    def first_rows(self, starts) -> list:
        return [self.rows[s] for s in starts]

    def field_names(self) -> list[str]:
        """Every top-level field and one level of dotted paths, for did-you-mean hints."""
        names: dict[str, None] = {}
        for r in (r.row if isinstance(r, BadLine) else r for r in self.rows):
            if isinstance(r, dict):
                for k, v in r.items():
                    names[k] = None
                    if isinstance(v, dict):
                        names.update({f"{k}.{k2}": None for k2 in v})
        return list(names)


class ArrowBlock:
    """A pyarrow Table (Parquet input in the flat layout): validated and rewritten column-wise."""

    def __init__(self, table):
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows

    def keys(self, path: str) -> list:
        arr = self.array(path)
        return [MISSING] * len(self) if arr is None else arr.to_pylist()

    def keys_at(self, path: str, indices) -> list:
        """keys(path) of these rows only, without converting the whole column."""
        arr = self.array(path)
        if arr is None:
            return [MISSING] * len(indices)
        import pyarrow as pa

        return arr.take(pa.array(indices, pa.int64())).to_pylist()

    def has_field(self, path: str) -> bool:
        return self.array(path) is not None

    def readable(self) -> bool:
        return len(self) > 0

    def array(self, name: str):
        """One field as a single Arrow array (a chunk may hold several record batches): the column
        of that name, else the struct fields its dots name, as get_path walks a JSON row (a null
        parent gives null), so `--group-by info.id` and `--agent-by agent_ref.name` read a Parquet
        file's nested fields as they read the same JSONL rows; None when there is no such field."""
        if name in self.table.column_names:
            col = self.table.column(name)
            return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        head, *rest = name.split(".")
        if not rest or head not in self.table.column_names:
            return None
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = self.array(head)
        for part in rest:
            if not pa.types.is_struct(arr.type) or arr.type.get_field_index(part) < 0:
                return None  # not a struct, no such field, or a name that repeats
            arr = pc.struct_field(arr, part)
        return arr

    def slice(self, a: int, b: int) -> "ArrowBlock":
        return ArrowBlock(self.table.slice(a, b - a))

    def concat(self, other: "ArrowBlock") -> "ArrowBlock":
        import pyarrow as pa

        return ArrowBlock(pa.concat_tables([self.table, other.table], promote_options="permissive"))

    def field_names(self) -> list[str]:
        return list(self.table.column_names)


# ------------------------------------------------------------------------- JSONL
def jsonl_blocks(path: Path, size: int, progress) -> Iterator[RowsBlock]:
    rows: list = []
    offset = 0
    with open(path, "rb") as fh:
        for raw in fh:
            progress.advance(len(raw))
            value = parse_line(raw, offset)
            offset += len(raw)
            if value is None:
                continue
            rows.append(value)
            if len(rows) >= size:
                yield RowsBlock(rows)
                rows = []
    if rows:
        yield RowsBlock(rows)


def parquet_blocks(path: Path, size: int, as_rows: bool, progress) -> Iterator[RowsBlock | ArrowBlock]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    batches = pq.ParquetFile(path).iter_batches(batch_size=size)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as err:  # a damaged row group
            raise ToolError(f"{printable(path)}: cannot read Parquet ({err})") from None
        progress.advance(batch.num_rows)
        table = pa.Table.from_batches([batch])
        yield RowsBlock(table.to_pylist(), from_arrow=True) if as_rows else ArrowBlock(table)


def input_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ToolError(f"{printable(path)}: unknown file type {suffix!r}; expected .jsonl or .parquet")


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


def open_blocks(data: Path, layout, chunk_rows: int, progress_enabled: bool):
    fmt = input_format(data)
    kind = path_kind(data)
    if kind != "file":
        raise ToolError(f"{printable(data)}: {not_a_file(kind)}")
    block_rows = max(1, min(chunk_rows, 65536))
    if fmt == "jsonl":
        progress = Progress(data.stat().st_size, "bytes", progress_enabled)
        return jsonl_blocks(data, block_rows, progress), progress
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(data)
        rows = file.metadata.num_rows
        schema = file.schema_arrow
    except Exception as err:  # pyarrow raises several types for a file that is not Parquet
        raise ToolError(f"{printable(data)}: cannot read Parquet ({err})") from None
    _refuse_repeated_names(data, schema)
    progress = Progress(rows, "rows", progress_enabled)
    return parquet_blocks(data, block_rows, layout.name != "flat", progress), progress


def _refuse_repeated_names(data: Path, schema) -> None:
    """A column (or struct field) name that repeats has no one value per row: rows read as dicts
    would keep the last and lose the others, and by name neither can be told apart."""
    import pyarrow as pa

    def check(fields, prefix: str) -> None:
        names = [f.name for f in fields]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                raise ToolError(f"{printable(data)}: column {prefix + name!r} appears {names.count(name)} times; "
                                "column names must be unique: rename or drop the copies")
        for f in fields:
            t = f.type
            while is_list_type(t):
                t = t.value_type
            if pa.types.is_struct(t):
                check(list(t), f"{prefix}{f.name}.")

    check(list(schema), "")


def is_list_type(t) -> bool:
    """An Arrow list type of any of its three kinds (list, large list, fixed-size list)."""
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _unfit() -> tuple:
    """What pyarrow raises for values that fit no (one) type."""
    import pyarrow as pa

    return (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)


def rows_schema(rows: list[dict]):
    """The Arrow schema of these rows, with every field any of them has (pyarrow's Table.from_pylist
    takes the fields of the first row only); a value that fits no type (a list of numbers and
    strings) is left out, and where rows disagree on a field's type the first one stays (widen)."""
    import pyarrow as pa

    if not rows:
        return None
    try:
        return pa.schema(list(pa.array(rows).type))
    except _unfit():
        pass
    schema = None
    for r in rows:
        try:
            one = pa.schema(list(pa.array([r]).type))
        except _unfit():
            one = pa.schema([f for f in map(_field_of, r.items()) if f is not None])
        schema = one if schema is None else widen(schema, one)
    return schema


def _field_of(item: tuple[str, Any]):
    """One field's Arrow type from its value, or None when the value fits none."""
    import pyarrow as pa

    try:
        return pa.field(item[0], pa.array([item[1]]).type)
    except _unfit():
        return None


def widen(schema, other):
    """`schema` with `other`'s fields added, or widened where the two unify; where they conflict
    (a rejected row's string in a number column), `schema`'s type stays."""
    import pyarrow as pa

    try:
        return pa.unify_schemas([schema, other], promote_options="permissive")
    except _unfit():
        pass
    for f in other:
        i = schema.get_field_index(f.name)
        if i < 0:
            schema = schema.append(f)
            continue
        try:
            both = pa.unify_schemas([pa.schema([schema.field(i)]), pa.schema([f])], promote_options="permissive")
        except _unfit():
            continue
        schema = schema.set(i, both.field(0))
    return schema
