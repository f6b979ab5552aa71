"""Prompt groups, and chunks that hold whole groups only.

Groups are contiguous runs of one group key (a key that comes back later starts a new group), or
`size` contiguous rows. A row whose key is missing, null or NaN, or a line that is not a row at
all, cannot be placed: it stays in the run it is in, is a bad row, and the shaping rejects every
group it may belong to (the one it sits in, and the next one when it sits at the boundary).

Memory is bounded by the chunk size: a chunk is `chunk_rows` rows plus the rest of the group
crossing that boundary, and a group longer than `chunk_rows` is an error rather than a reason to
hold the whole file. The chunker never holds more than 3 * chunk_rows rows (what is left of the
previous chunk, under 2 * chunk_rows, plus one block of at most chunk_rows).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from .readers import MISSING, ArrowBlock, RowError, RowsBlock, got
from .spec import ToolError


def valid_key(k: Any) -> bool:
    return k is not MISSING and k is not None and not (isinstance(k, float) and math.isnan(k))


def same_key(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


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
        starts = [0]
        unknown = np.zeros(n, dtype=bool)
        prev = MISSING
        for i, k in enumerate(block.keys(self.key)):
            if not valid_key(k):
                unknown[i] = True  # stays in the run it is in; shaping rejects its neighbours too
                continue
            if i > 0 and prev is not MISSING and not same_key(k, prev):
                starts.append(i)
            prev = k
        return np.asarray(starts, dtype=np.int64), unknown


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
    keys = block.keys(grouping.key)
    for i in np.flatnonzero(unknown):
        i = int(i)
        if rows is None or isinstance(rows[i], dict):
            out[i] = RowError(base + i + 1, grouping.key, f"expected the group key, got {got(keys[i])}")
    return out


def _check_key_present(block, grouping: Grouping) -> None:
    """`--group-by` naming a field no row of the first block has is a typo, not one big group."""
    if grouping.key is None or not len(block) or any(k is not MISSING for k in block.keys(grouping.key)):
        return
    names = block.field_names()
    close = difflib.get_close_matches(grouping.key, names, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else f"; the rows have {', '.join(names[:8]) or 'no fields'}"
    raise ToolError(f"group key {grouping.key!r} ({grouping.source}): no row of the first {len(block)} has "
                    f"this field{hint}")


def _too_long(grouping: Grouping, block, base: int, start: int, chunk_rows: int) -> ToolError:
    what = f"the group of {grouping.key} {got(block.keys(grouping.key)[start])}" if grouping.key else "the group"
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
        keys = chunk.block.keys(g.check_key)
        if all(k is MISSING for k in keys):
            return
        where = f"the group size {g.size} ({g.source})"
        for a, b in zip(chunk.offsets[:-1], chunk.offsets[1:]):
            keyed = [(chunk.base + i + 1, keys[i]) for i in range(a, b) if valid_key(keys[i])]
            if not keyed:
                continue
            for row, k in keyed[1:]:
                if not same_key(k, keyed[0][1]):
                    raise ToolError(f"rows {keyed[0][0]} and {row}: {g.check_key} {got(keyed[0][1])} and "
                                    f"{got(k)} fall in one group of {where}; the rows' {g.check_key} "
                                    f"contradicts the group size (group with --group-by {g.check_key}, or fix "
                                    "the group size)")
            if self.last is not None and same_key(self.last[1], keyed[0][1]):
                raise ToolError(f"rows {self.last[0]} and {keyed[0][0]}: {g.check_key} {got(keyed[0][1])} spans "
                                f"two groups of {where}; the rows' {g.check_key} contradicts the group size "
                                f"(group with --group-by {g.check_key}, or fix the group size)")
            self.last = keyed[-1]


def iter_chunks(blocks: Iterator, grouping: Grouping, chunk_rows: int) -> Iterator[Chunk]:
    """Re-cut blocks into chunks that hold whole groups only: each chunk ends at the first group
    start at or past chunk_rows rows (or at the end of the input), so a chunk is chunk_rows rows
    plus the rest of the group that crosses the boundary. A chunk never ends right after a row
    whose group cannot be known, so every group such a row may belong to is in its chunk.
    """
    pending = None
    base = 0
    size_check = _SizeCheck(grouping) if grouping.size is not None and grouping.check_key else None

    def make(block, starts, unknown, cut: int) -> Chunk:
        chunk = Chunk(block.slice(0, cut) if cut < len(block) else block, base,
                      np.append(starts[starts < cut], cut), unknown[:cut])
        if grouping.key is not None:
            chunk.key_errors = _key_errors(chunk.block, grouping, chunk.unknown, base)
        if size_check is not None:
            size_check.check(chunk)
        return chunk

    for block in blocks:
        if pending is None:
            _check_key_present(block, grouping)
        pending = block if pending is None else pending.concat(block)
        while len(pending) >= chunk_rows:
            starts, unknown = grouping.starts(pending, base)
            lengths = np.diff(np.append(starts, len(pending)))
            if lengths.max() > chunk_rows:
                g = int(np.argmax(lengths > chunk_rows))
                raise _too_long(grouping, pending, base, int(starts[g]), chunk_rows)
            later = [int(s) for s in starts if s >= chunk_rows and not unknown[s - 1]]
            if not later and len(pending) > 2 * chunk_rows:
                raise ToolError(f"rows {base + 1}-{base + len(pending)}: no place to end a chunk: every group "
                                "boundary past --chunk-rows is next to a row whose group cannot be known")
            if not later:
                break  # the group crossing chunk_rows may go on in the next block
            cut = later[0]
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
