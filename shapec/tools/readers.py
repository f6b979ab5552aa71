"""Reading rollout files in blocks: JSONL lines or Parquet record batches, one row per rollout.

A JSONL line that cannot be a row (invalid UTF-8, invalid JSON, an integer longer than Python
reads, nesting deeper than the JSON reader goes, not an object) is kept as a BadLine in its place,
so row numbers stay exact and the line reaches the rejects file as it was.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..paths import not_a_file, path_kind
from .spec import ToolError

MISSING = object()


class BadLine:
    """A JSONL line that is not a usable row; `field` is where the problem is, when known, and
    `row` the object it parsed to when it did (so its group key is still known)."""

    def __init__(self, text: str, error: str, field: str = "<line>", row: dict | None = None):
        self.text = text
        self.error = error
        self.field = field
        self.row = row


@dataclass(frozen=True)
class RowError:
    row: int  # 1-based row number in the input
    field: str
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.field}: {self.message}"


class DataError(ToolError):
    """A bad row with on_bad_row='stop'."""


def got(value: Any) -> str:
    """A value as an error message shows it: short, and never a float conversion that fails."""
    if value is MISSING:
        return "nothing (the field is missing)"
    if value is None:
        return "null"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        return f"an integer of {len(str(abs(value)))} digits"
    try:
        text = json.dumps(value) if isinstance(value, (str, bool, list, dict)) else repr(value)
    except (ValueError, RecursionError):  # a huge int or deep nesting inside a list or object
        text = f"a {type(value).__name__}"
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

    def __init__(self, rows: list, from_arrow: bool = False):
        self.rows = rows
        self.from_arrow = from_arrow  # rows of a Parquet file: structs carry absent fields as null

    def __len__(self) -> int:
        return len(self.rows)

    def keys(self, path: str) -> list:
        return [get_path(r.row if isinstance(r, BadLine) else r, path) for r in self.rows]

    def keys_at(self, path: str, indices) -> list:
        return [get_path(r.row if isinstance(r, BadLine) else r, path) for r in (self.rows[int(i)] for i in indices)]

    def has_field(self, path: str) -> bool:
        return any(k is not MISSING for k in self.keys(path))

    def slice(self, a: int, b: int) -> "RowsBlock":
        return RowsBlock(self.rows[a:b], self.from_arrow)

    def concat(self, other: "RowsBlock") -> "RowsBlock":
        return RowsBlock(self.rows + other.rows, self.from_arrow)

    def column(self, name: str) -> list:
        return [r.get(name, MISSING) if isinstance(r, dict) else MISSING for r in self.rows]

    def first_rows(self, starts) -> list:
        return [self.rows[s] for s in starts]

    def field_names(self) -> list[str]:
        """Every top-level field and one level of dotted paths, for did-you-mean hints."""
        names: dict[str, None] = {}
        for r in self.rows:
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
        if path not in self.table.column_names:
            return [MISSING] * len(self)
        return self.table.column(path).to_pylist()

    def keys_at(self, path: str, indices) -> list:
        """keys(path) of these rows only, without converting the whole column."""
        if path not in self.table.column_names:
            return [MISSING] * len(indices)
        import pyarrow as pa

        return self.table.column(path).take(pa.array(indices, pa.int64())).to_pylist()

    def has_field(self, path: str) -> bool:
        return path in self.table.column_names

    def array(self, name: str):
        """One column as a single Arrow array (a chunk may hold several record batches)."""
        col = self.table.column(name)
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()

    def slice(self, a: int, b: int) -> "ArrowBlock":
        return ArrowBlock(self.table.slice(a, b - a))

    def concat(self, other: "ArrowBlock") -> "ArrowBlock":
        import pyarrow as pa

        return ArrowBlock(pa.concat_tables([self.table, other.table], promote_options="permissive"))

    def field_names(self) -> list[str]:
        return list(self.table.column_names)


# ------------------------------------------------------------------------- JSONL
class _TooLong:
    """An integer literal longer than Python converts (sys.get_int_max_str_digits)."""

    def __init__(self, digits: str):
        self.digits = len(digits.lstrip("-"))


def _int_or_marker(digits: str):
    try:
        return int(digits)
    except ValueError:
        return _TooLong(digits)


def _find(value: Any, cls: type, path: str = "") -> tuple[str, Any] | None:
    """(dotted path, with list items as [i], and the value) of the first instance of cls in value."""
    if isinstance(value, cls):
        return path or "<line>", value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _find(v, cls, f"{path}[{k}]" if isinstance(k, int) else (f"{path}.{k}" if path else k))
        if found is not None:
            return found
    return None


def parse_line(raw: bytes, offset: int) -> dict | BadLine | None:
    """One JSONL line (its first byte at `offset` in the file): a row, a BadLine, or None if blank."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        shown = raw.decode("utf-8", errors="backslashreplace").strip()
        return BadLine(shown, f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at byte offset {offset + err.start} "
                              "of the file)")
    if not text.strip():
        return None
    text = text.rstrip("\r\n")  # the line as it was, for the rejects file
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return BadLine(text, f"not valid JSON ({err.msg} at column {err.colno})")
    except RecursionError:
        return BadLine(text, "not readable: arrays or objects nested deeper than the JSON reader goes "
                             f"(about {sys.getrecursionlimit()} levels)")
    except ValueError:  # an integer literal past sys.get_int_max_str_digits()
        limit = sys.get_int_max_str_digits()
        try:
            value = json.loads(text, parse_int=_int_or_marker)
            where, marker = _find(value, _TooLong)
        except RecursionError:
            return BadLine(text, f"not readable: an integer of more than {limit} digits, nested deeply")
        return BadLine(text, f"expected a number, got an integer of {marker.digits} digits (more than the "
                             f"{limit} Python reads)", where, value if isinstance(value, dict) else None)
    if not isinstance(value, dict):
        return BadLine(text, f"expected a JSON object, got {type(value).__name__}")
    return value


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
            raise ToolError(f"{path}: cannot read Parquet ({err})") from None
        progress.advance(batch.num_rows)
        table = pa.Table.from_batches([batch])
        yield RowsBlock(table.to_pylist(), from_arrow=True) if as_rows else ArrowBlock(table)


def input_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ToolError(f"{path}: unknown file type {suffix!r}; expected .jsonl or .parquet")


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
        raise ToolError(f"{data}: {not_a_file(kind)}")
    block_rows = max(1, min(chunk_rows, 65536))
    if fmt == "jsonl":
        progress = Progress(data.stat().st_size, "bytes", progress_enabled)
        return jsonl_blocks(data, block_rows, progress), progress
    import pyarrow.parquet as pq

    try:
        rows = pq.ParquetFile(data).metadata.num_rows
    except Exception as err:  # pyarrow raises several types for a file that is not Parquet
        raise ToolError(f"{data}: cannot read Parquet ({err})") from None
    progress = Progress(rows, "rows", progress_enabled)
    return parquet_blocks(data, block_rows, layout.name != "flat", progress), progress


def scan_schema(data: Path):
    """The Arrow schema of all rows of an input: a Parquet file's own, or unified over a JSONL file
    (one extra streaming pass; rows that fit no schema are left to the validation to reject)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if input_format(data) == "parquet":
        return pq.ParquetFile(data).schema_arrow
    schema = None
    unfit = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError)

    def merge(rows):
        nonlocal schema
        try:
            found = [pa.Table.from_pylist(rows).schema]
        except unfit:
            found = []
            for r in rows:
                try:
                    found.append(pa.Table.from_pylist([r]).schema)
                except unfit:
                    continue
        for s in found:
            try:
                schema = s if schema is None else pa.unify_schemas([schema, s], promote_options="permissive")
            except unfit:
                continue

    for block in jsonl_blocks(data, 65536, Progress(0, "", False)):
        merge([r for r in block.rows if isinstance(r, dict)])
    return schema
