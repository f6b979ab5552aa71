"""Prompt groups, and chunks that hold whole groups only.

Groups are contiguous runs of one group key (a key that comes back after other groups is an
error: the group's rows are not adjacent), or `size` contiguous rows. A row whose key is not
usable (valid_key: missing, null, empty, NaN or infinite), or a line that is not a row at all,
cannot be placed: it stays in the run it is in, is a bad row, and the shaping rejects every group
it may belong to (the one it sits in, and the next one when it sits at the boundary).

Memory is bounded by the chunk size: a chunk is `chunk_rows` rows plus the rest of the group
crossing that boundary, and a group longer than `chunk_rows` is an error rather than a reason to
hold the whole file. The chunker never holds more than 3 * chunk_rows rows (what is left of the
previous chunk, under 2 * chunk_rows, plus one block of at most chunk_rows).
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from ..paths import printable
from .lines import got
from .readers import MISSING, ArrowBlock, BadLine, RowError, RowsBlock
from .spec import ToolError


MAX_KEY_DEPTH = 32  # a key of lists and objects nested deeper names no prompt; it is a bad row


def valid_key(k: Any) -> bool:
    """Whether k can name a group: not missing, null, empty ("", [], {}), NaN or infinite (1e999 and
    2e999 both read as inf, so an infinite key cannot tell two groups apart), nor a list or object
    holding NaN or an infinity, or nested past MAX_KEY_DEPTH."""
    if type(k) in (str, bytes):  # the common case first: every row's key is checked
        return bool(k)
    if type(k) is float:
        return math.isfinite(k)
    if k is MISSING or k is None or (isinstance(k, (list, dict)) and not k):
        return False
    stack = [(k, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if isinstance(v, (list, dict)):
            if depth >= MAX_KEY_DEPTH:
                return False
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return True


def key_identity(k: Any) -> tuple:
    """A usable key as a hashable value that tells its JSON type: `1`, `1.0`, `"1"` and `true` are
    four keys (Python's `1 == 1.0 == True` would merge their groups), at any depth of a list or object."""
    if isinstance(k, (list, dict, tuple)):
        return ("json", json.dumps(k, sort_keys=True, default=repr))
    return (type(k), k + 0.0 if isinstance(k, float) else k)  # + 0.0: -0.0 is the key 0.0


def same_key(a: Any, b: Any) -> bool:
    """Equal keys of one kind (see key_identity)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, dict, tuple)):
        return key_identity(a) == key_identity(b)
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _python_runs(keys: list) -> tuple[np.ndarray, np.ndarray]:
    idx = [i for i, k in enumerate(keys) if valid_key(k)]
    change = [not same_key(keys[b], keys[a]) for a, b in zip(idx, idx[1:])]
    return np.asarray(idx, dtype=np.int64), np.asarray(change, dtype=bool)


def _comparable(t) -> bool:
    """Arrow types whose equality is Python's on the values to_pylist gives (NaN aside)."""
    import pyarrow as pa

    return (pa.types.is_integer(t) or t in (pa.float32(), pa.float64()) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def key_runs(block, path: str) -> tuple[np.ndarray, np.ndarray]:
    """(the rows with a usable key, in order; per row after the first of them, whether its key
    differs from the previous usable one). Whole-column Arrow compute for a Parquet chunk."""
    if not isinstance(block, ArrowBlock) or not block.has_field(path):
        return _python_runs(block.keys(path))
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = block.array(path)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not _comparable(arr.type):
        return _python_runs(block.keys(path))
    usable = arr.is_valid()  # and_kleene: a null is not usable (not null); see valid_key for the rest
    if pa.types.is_floating(arr.type):
        usable = pc.and_kleene(usable, pc.is_finite(arr))
    elif not (pa.types.is_integer(arr.type) or pa.types.is_boolean(arr.type)):
        usable = pc.and_kleene(usable, pc.greater(pc.binary_length(arr), 0))
    if usable.false_count:
        idx = np.flatnonzero(usable.to_numpy(zero_copy_only=False))
        keys = arr.take(pa.array(idx, pa.int64()))
    else:  # the common case: every row has a key
        idx, keys = np.arange(len(arr)), arr
    change = pc.not_equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)
    return idx.astype(np.int64), change.astype(bool)


@dataclass
class Grouping:
    """How rows form groups. `source` names where the grouping came from, for messages."""

    key: str | None = "prompt_id"
    size: int | None = None
    allow_short_last: bool = False  # size mode: the last group may have fewer rows
    check_key: str | None = "prompt_id"  # size mode: a prompt id the rows carry must agree with the groups
    source: str = "--group-by"

    def starts(self, block, base: int) -> tuple[np.ndarray, np.ndarray]:
        """(local indices where a group starts, always including 0; which rows' group cannot be
        known). `base` is block[0]'s row index in the input."""
        n = len(block)
        if self.size is not None:
            first = (-base) % self.size
            starts = np.unique(np.concatenate([[0], np.arange(first, n, self.size)])).astype(np.int64)
            return starts, np.zeros(n, dtype=bool)
        idx, change = key_runs(block, self.key)
        unknown = np.ones(n, dtype=bool)  # such a row stays in the run it is in; shaping rejects its neighbours too
        unknown[idx] = False
        return np.concatenate([[0], idx[1:][change]]).astype(np.int64), unknown


@dataclass
class Chunk:
    block: RowsBlock | ArrowBlock
    base: int  # 0-based index of the chunk's first row in the input
    offsets: np.ndarray  # local group offsets, (G+1,)
    unknown: np.ndarray = None  # per local row: its group cannot be known (bad key or bad line)
    key_errors: dict[int, RowError] = field(default_factory=dict)  # local row -> missing/null key

    def __post_init__(self):
        if self.unknown is None:
            self.unknown = np.zeros(len(self.block), dtype=bool)

    @property
    def groups(self) -> int:
        return len(self.offsets) - 1


def _key_errors(block, grouping: Grouping, unknown: np.ndarray, base: int) -> dict[int, RowError]:
    """A readable row without a usable group key is a bad row (a bad line has its own error)."""
    out = {}
    rows = block.rows if isinstance(block, RowsBlock) else None
    where = np.flatnonzero(unknown)
    for i, key in zip(where.tolist(), block.keys_at(grouping.key, where)):
        if rows is None or isinstance(rows[i], dict):
            out[i] = RowError(base + i + 1, grouping.key, f"expected the group key, got {got(key)}")
    return out


def _check_key_present(block, grouping: Grouping, rows: int) -> bool:
    """`--group-by` naming a field no row of the first readable block has is a typo, not one big
    group. Blocks of lines that are not rows at all say nothing about it (the rows' own errors
    do): False until a readable block was checked. `rows`: the rows up to the end of this block."""
    if grouping.key is None:
        return True
    if not block.readable():
        return False
    if block.has_field(grouping.key):
        return True
    raise absent_field(block, grouping.key, f"group key {grouping.key!r} ({grouping.source})", rows)


def absent_field(block, name: str, what: str, rows: int) -> ToolError:
    """A field no row of a readable block has: a typo or a file of another shape (absent_fields)."""
    return absent_fields(block.field_names(), [(name, what)], f"the first {rows}")


def absent_fields(names: list[str], missing: list[tuple[str, str]], rows: str) -> ToolError:
    """Every field (name, what reads it) that none of `rows` has, one line each (absent_line)."""
    return ToolError("\n".join(absent_line(name, what, rows, names) for name, what in missing))


def absent_line(name: str, what: str, rows: str, names: list[str]) -> str:
    """A field none of `rows` has, named with the closest of the fields they have (`names`), or else
    with the fields they have."""
    return f"{what}: no row of {rows} has this field{_field_hint(name, names)}"


SHOWN_FIELDS = 8  # fields named in a hint; the rest are counted


def closest(name: str, names: list[str], cutoff: float = 0.5) -> str | None:
    """The field of `names` closest to `name`, if one is close."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=cutoff)
    return close[0] if close else None


def _field_hint(name: str, names: list[str]) -> str:
    """'; did you mean X?' for a field the rows have that is close to `name`, else the fields they
    have: the first SHOWN_FIELDS of them and how many more there are."""
    close = closest(name, names)
    if close is not None:
        return f"; did you mean {close!r}?"
    fields = ", ".join(map(printable, names[:SHOWN_FIELDS])) or "no fields"
    more = f", ... and {len(names) - SHOWN_FIELDS} more" if len(names) > SHOWN_FIELDS else ""
    return f"; the rows have {fields}{more}"


def _too_long(grouping: Grouping, block, base: int, start: int, chunk_rows: int) -> ToolError:
    first = block.rows[start] if isinstance(block, RowsBlock) else None
    if isinstance(first, BadLine):  # lines that are not rows: their own error is the news, not the group
        return ToolError(f"row {base + start + 1}: {first.field}: {first.error}; no group can be known for it and "
                         f"the rows after it, more than {chunk_rows} row{'s' if chunk_rows != 1 else ''} "
                         "(--chunk-rows), and a group must fit in one chunk")
    what = "the group"
    if grouping.key:
        what = f"the group of {grouping.key} {got(block.keys_at(grouping.key, [start])[0])}"
    return ToolError(f"row {base + start + 1}: {what} starting here has more than {chunk_rows} "
                     f"row{'s' if chunk_rows != 1 else ''} (--chunk-rows); a group must fit in one chunk: "
                     f"raise --chunk-rows, or check {grouping.source}")


class _SizeCheck:
    """In size mode, rows that carry a prompt id must change id exactly at the group boundaries."""

    def __init__(self, grouping: Grouping):
        self.grouping = grouping
        self.last: tuple[int, Any] | None = None  # (row number, key) of the previous group's last keyed row

    def check(self, chunk: Chunk) -> None:
        g = self.grouping
        idx, change = key_runs(chunk.block, g.check_key)
        if not len(idx):
            return
        group = np.searchsorted(chunk.offsets, idx, side="right") - 1
        same = group[1:] == group[:-1]
        # (group, 0 = two ids inside it, 1 = its first id is the previous group's last, pair) of the
        # first contradiction; a group's own ids are checked before its first against the last group's
        found = [(int(group[j + 1]), 0, int(j)) for j in np.flatnonzero(same & change)[:1]]
        found += [(int(group[j + 1]), 1, int(j)) for j in np.flatnonzero(~same & ~change)[:1]]
        first_key = chunk.block.keys_at(g.check_key, idx[:1])[0]
        if self.last is not None and same_key(self.last[1], first_key):
            found.append((int(group[0]), 1, -1))
        if found:
            raise self._contradiction(chunk, idx, group, *min(found))
        self.last = (chunk.base + int(idx[-1]) + 1, chunk.block.keys_at(g.check_key, idx[-1:])[0])

    def _contradiction(self, chunk: Chunk, idx: np.ndarray, group: np.ndarray, g: int, kind: int, j: int):
        key, where = self.grouping.check_key, f"the group size {self.grouping.size} ({self.grouping.source})"
        fix = (f"; the rows' {key} contradicts the group size (group with --group-by {key}, or fix the "
               "group size)")
        if kind == 0:  # the first of group g's ids and the first one that differs from it
            a, b = int(idx[np.searchsorted(group, g)]), int(idx[j + 1])
            ka, kb = chunk.block.keys_at(key, [a, b])
            return ToolError(f"rows {chunk.base + a + 1} and {chunk.base + b + 1}: {key} {got(ka)} and {got(kb)} "
                             f"fall in one group of {where}{fix}")
        b = int(idx[j + 1])
        last = self.last[0] if j < 0 else chunk.base + int(idx[j]) + 1
        return ToolError(f"rows {last} and {chunk.base + b + 1}: {key} {got(chunk.block.keys_at(key, [b])[0])} "
                         f"spans two groups of {where}{fix}")


class _SeenKeys:
    """With a group key, a key that comes back after other groups is an error: the group's rows are
    not adjacent, and shaping its runs apart would give both runs rewards that no group has. Each
    key is remembered as its 64-bit hash (of key_identity; a string's own, the common case, cached
    by Python, in every chunk alike: a chunk of mixed types hashing its strings otherwise did not
    know a string key that came back) with its first row, so memory grows by about 100 bytes per
    group, however long the keys. Two keys with one hash would stop the run as if one came back,
    never merge groups; at 10^7 groups that happens with a chance of about 3 in a million."""

    def __init__(self, grouping: Grouping):
        self.grouping = grouping
        self.first: dict[int, int] = {}  # hash of the key's identity -> 1-based row where its group began

    def check(self, chunk: Chunk) -> None:
        """Each group's key is that of its first row with a usable key (a group may have none)."""
        key = self.grouping.key
        usable = np.flatnonzero(~chunk.unknown)
        if not len(usable):
            return
        at = np.searchsorted(usable, chunk.offsets[:-1])
        first = usable[np.minimum(at, len(usable) - 1)]
        starts = first[(at < len(usable)) & (first < chunk.offsets[1:])]
        keys = chunk.block.keys_at(key, starts)
        tokens = (list(map(hash, keys)) if set(map(type, keys)) <= {str}
                  else [hash(k) if type(k) is str else hash(key_identity(k)) for k in keys])
        numbers = (starts + (chunk.base + 1)).tolist()
        fresh = dict(zip(tokens, numbers))  # C loops: the whole check is a few dict operations per chunk
        if len(fresh) == len(tokens) and self.first.keys().isdisjoint(fresh):
            self.first.update(fresh)
            return
        for number, k, token in zip(numbers, keys, tokens):
            earlier = self.first.setdefault(token, number)
            if earlier != number:
                raise ToolError(f"rows {earlier} and {number}: {key} {got(k)} comes back after other groups; "
                                "a group's rows must be adjacent (sort the rows by "
                                f"{key}, or group by position with --group-size N)")


def iter_chunks(blocks: Iterator, grouping: Grouping, chunk_rows: int) -> Iterator[Chunk]:
    """Re-cut blocks into chunks that hold whole groups only: each chunk ends at the first group
    start at or past chunk_rows rows (or at the end of the input), so a chunk is chunk_rows rows
    plus the rest of the group that crosses the boundary. A chunk never ends right after a row
    whose group cannot be known, so every group such a row may belong to is in its chunk.
    """
    pending = None
    base = 0
    size_check = _SizeCheck(grouping) if grouping.size is not None and grouping.check_key else None
    seen = _SeenKeys(grouping) if grouping.key is not None else None

    def make(block, starts, unknown, cut: int) -> Chunk:
        chunk = Chunk(block.slice(0, cut) if cut < len(block) else block, base,
                      np.append(starts[starts < cut], cut), unknown[:cut])
        if grouping.key is not None:
            chunk.key_errors = _key_errors(chunk.block, grouping, chunk.unknown, base)
        if size_check is not None:
            size_check.check(chunk)
        if seen is not None:
            seen.check(chunk)
        return chunk

    key_checked = False
    for block in blocks:
        if not key_checked:
            key_checked = _check_key_present(block, grouping, base + len(block) + (len(pending) if pending else 0))
        pending = block if pending is None else pending.concat(block)
        while len(pending) >= chunk_rows:
            starts, unknown = grouping.starts(pending, base)
            lengths = np.diff(np.append(starts, len(pending)))
            if lengths.max() > chunk_rows:
                g = int(np.argmax(lengths > chunk_rows))
                raise _too_long(grouping, pending, base, int(starts[g]), chunk_rows)
            past = starts[starts >= chunk_rows]
            later = past[~unknown[past - 1]]
            if not len(later) and len(pending) > 2 * chunk_rows:
                raise ToolError(f"rows {base + 1}-{base + len(pending)}: no place to end a chunk: every group "
                                "boundary past --chunk-rows is next to a row whose group cannot be known")
            if not len(later):
                break  # the group crossing chunk_rows may go on in the next block
            cut = int(later[0])
            yield make(pending, starts, unknown, cut)
            pending = pending.slice(cut, len(pending))
            base += cut
    if pending is not None and len(pending):
        starts, unknown = grouping.starts(pending, base)
        last = len(pending) - int(starts[-1])
        if grouping.size is not None and last < grouping.size and not grouping.allow_short_last:
            total = base + len(pending)
            raise ToolError(f"{total} rows are not a multiple of the group size {grouping.size} ({grouping.source}): "
                            f"the last group, rows {base + int(starts[-1]) + 1}-{total}, has {last} row"
                            f"{'s' if last != 1 else ''}; pass --allow-short-last-group to shape it as it is")
        yield make(pending, starts, unknown, len(pending))
