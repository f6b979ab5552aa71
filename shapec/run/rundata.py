"""Rollout files in, shaped rollout files out, for `shapec run` (and `explain` and `plot`).

Rows are read in blocks (readers.py) and re-cut into chunks that hold whole prompt groups only
(grouping.py), so memory is bounded by the chunk size and a group is never shaped in two halves.
Each chunk is validated row by row before any shaping (layouts.py): a bad row stops the run with
its row number and field, or (with on_bad_row="skip") sends its whole group to the rejects file;
the other groups of the chunk are shaped without it. A row whose group cannot be known (no
usable group key, or a line that is not a row) takes every group it may belong to with it.
Output and rejects are written to temporary files and renamed into place at the end (writers.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..paths import printable
from ..runtime.batch import BatchError
from ..runtime.batch_reach import first_batch_read, where
from ..runtime.params import ParamError, param_arrays
from .absent_meta import MetaFields
from .atomic import check_destination, finishing, refuse_overwriting
from .grouping import Chunk, Grouping, iter_chunks  # noqa: F401  (explain and plot read them from here)
from .layouts import FlatLayout, NemoGymLayout  # noqa: F401  (the CLI reads them from here)
from .readers import DataError, input_format, open_blocks
from .spec import ToolError, stage_irs
from .writers import RejectsWriter, Writer, rejects_path
from ..ir.nodes import Op


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


def _groups_of(chunk: Chunk, i: int, g: int) -> list[int]:
    """The groups row i (whose group cannot be known) may belong to: its own run's group, and the
    next group when only such rows follow it in its run (it sits at the boundary)."""
    nxt = int(chunk.offsets[g + 1])
    if g + 1 < chunk.groups and chunk.unknown[i:nxt].all():
        return [g, g + 1]
    return [g]


def shape_chunk(shaper, plan, layout, chunk: Chunk, on_bad_row: str, training: bool = True,
                breakdown: bool = True) -> ChunkOutcome:
    inputs, metas = _needs(shaper)
    ex = layout.extract(chunk, inputs, metas)
    errors = {**ex.errors, **chunk.key_errors}  # a missing group key is the row's first problem
    G = chunk.groups
    off = chunk.offsets
    sizes = np.diff(off)
    if errors and on_bad_row == "stop":
        raise DataError(str(errors[min(errors)]))
    own: dict[int, str] = {}  # local row -> why it is rejected
    reasons: dict[int, str] = {}  # group -> why its other rows are rejected
    if errors:
        group_of = np.repeat(np.arange(G), sizes)
        for i in sorted(errors):
            err, g = errors[i], int(group_of[i])
            if chunk.unknown[i]:
                own[i] = f"{err}; its group cannot be known, so every group it may belong to is rejected"
                for h in _groups_of(chunk, i, g):
                    reasons.setdefault(h, f"in a group row {err.row} may belong to (its group cannot be known): {err}")
            else:
                own[i] = str(err)
                reasons.setdefault(g, f"in a group with a bad row: {err}")

    # a run sees each prompt once (grouping.py refuses a key that comes back), so every group enters a
    # per-prompt state at its initial value: its first row's number names it
    per_prompt = bool(shaper.prompt_states)

    def run(groups: np.ndarray, validate_only: bool = False):
        """Shape these groups (ascending); validate_only checks them without shaping or state."""
        whole = len(groups) == G
        rows = np.arange(len(chunk.block)) if whole else np.flatnonzero(np.repeat(np.isin(np.arange(G), groups), sizes))
        offsets = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum(sizes[groups], out=offsets[1:])
        pick = (lambda v: v) if whole else (lambda v: v[rows])
        result = shaper(
            pick(ex.rewards), offsets=offsets,
            channels={k: pick(v) for k, v in ex.channels.items()},
            metadata=ex.metadata_for(None if whole else groups),
            params=plan.params(None if ex.agents is None else [ex.agents[g] for g in groups]),
            reward_components=None if ex.components is None else pick(ex.components),
            training=training and not validate_only, breakdown=breakdown,
            prompts=(chunk.base + off[groups]).tolist() if per_prompt else None,
        )
        return rows, result

    good = _without(np.arange(G), reasons)
    if errors:
        _refuse_batch_reads(shaper, plan, ex, good, str(errors[min(errors)]))
    try:
        rows, result = run(good) if len(good) else (np.zeros(0, np.int64), None)
    except UNUSABLE as err:  # raised by validation, before any shaping or state update
        bad = []
        for g, msg in _bad_groups(run, good, chunk, err):
            if on_bad_row == "stop":
                raise DataError(msg) from None
            reasons[g] = f"in a group with a bad row: {msg}"
            bad.append(g)
        if not bad:
            raise ToolError(f"rows {chunk.base + 1}..{chunk.base + len(chunk.block)}: {err}") from None
        good = _without(good, bad)
        _refuse_batch_reads(shaper, plan, ex, good, reasons[bad[0]].removeprefix("in a group with a bad row: "))
        rows, result = run(good) if len(good) else (np.zeros(0, np.int64), None)
    rejected = [(i, own.get(i, reasons[g])) for g in sorted(reasons) for i in range(int(off[g]), int(off[g + 1]))]
    return ChunkOutcome(rows, result, rejected, ex.channels)


def _without(groups: np.ndarray, dropped) -> np.ndarray:
    """The groups (ascending) that are not among `dropped`, still ascending."""
    return groups[~np.isin(groups, np.fromiter(dropped, np.int64, len(dropped)))] if len(dropped) else groups


UNUSABLE = (BatchError, ParamError, OverflowError)  # OverflowError: metadata past a float's range


def _refuse_batch_reads(shaper, plan, ex, good: np.ndarray, first_error: str) -> None:
    """Skipping a bad group is refused when a batch-level value reaches the other groups' rewards
    under this chunk's params: the call without it would give them other rewards, silently."""
    if not len(good):
        return
    params = plan.params(None if ex.agents is None else [ex.agents[g] for g in good])
    for ir in stage_irs(shaper):
        stage_params = params[ir.name] if shaper.is_pipeline else params
        found = first_batch_read(ir, param_arrays(ir, stage_params, len(good)))
        if found is not None:
            raise DataError(
                f"{first_error}; --on-bad-row skip cannot leave its group out: shaper {ir.name!r} reads a "
                f"batch-level value ({where(found)}) that reaches the other groups' rewards, so shaping "
                f"them without this group would change them; fix or remove the row")


def _bad_groups(run, groups: np.ndarray, chunk: Chunk, err: Exception):
    """(group, message) of every group of `groups` (which failed validation with `err`) that fails
    on its own, in order: halves are validated apart, as a set of groups fails when one of them does."""
    if len(groups) == 1:
        g = int(groups[0])
        yield g, f"row {chunk.base + int(chunk.offsets[g]) + 1} (first row of its group): {err}"
        return
    half = len(groups) // 2
    for part in (groups[:half], groups[half:]):
        try:
            run(part, validate_only=True)
        except UNUSABLE as one:
            yield from _bad_groups(run, part, chunk, one)


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
                op = node.attr if node.op is Op.BREDUCE else "approx"
                if op == "mean" and not (node.args[1].op is Op.CONST and node.args[1].attr == 1.0):
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
    others_rejects: Path | None = None  # a rejects file beside the output that this run did not write


def skip_counts(result) -> dict[str, int]:
    """Groups passed through, by the reason of the first stage that passed each one through."""
    counts: dict[str, int] = {}
    taken = np.zeros(len(result.offsets) - 1, dtype=bool)
    for st in result.stages:
        mine = st.skipped & ~taken
        taken |= mine
        for code, count in enumerate(np.bincount(st.skip_codes[mine], minlength=len(st.skip_reasons)).tolist()):
            reason = st.skip_reasons[code]
            if reason and count:
                counts[reason] = counts.get(reason, 0) + count
    return counts


def run_file(shaper, plan, layout, data: Path, out: Path, grouping: Grouping, chunk_rows: int,
             on_bad_row: str, progress: bool = True, engine=None, breakdown: bool = True,
             reads: tuple[tuple[Path, str], ...] = ()) -> RunReport:
    """Shape every group of `data` into `out`; reject bad groups into `<out stem>.rejects.jsonl`.

    `engine(shaper, plan, layout, chunks, on_bad_row, breakdown)` yields (chunk, outcome) in order in place of
    the local loop (ray_engine.shape_chunks). `reads`: other files the run reads, (path, what they
    are), which neither output may be either.

    Both files appear only when the whole input has been shaped; on any error or interruption the
    temporary files are removed and whatever `out` and the rejects file held before stays.
    """
    input_format(out)
    rejected_to = rejects_path(out)
    refuse_overwriting([(out, "--out"), (rejected_to, "the rejects file")], [(data, "the input file"), *reads])
    check_destination(out)
    check_destination(rejected_to)
    blocks, bar = open_blocks(data, layout, chunk_rows, progress)
    writer = rejects = None
    totals = MetricTotals(shaper)
    fields = MetaFields(shaper, plan, layout, grouping.key)
    report = RunReport(out=out)
    try:
        writer = Writer(out, layout.name, data)
        rejects = RejectsWriter(rejected_to)
        writer.start()
        rejects.start()
        chunks = iter_chunks(blocks, grouping, chunk_rows)
        shaped = ((c, shape_chunk(shaper, plan, layout, c, on_bad_row, breakdown=breakdown)) for c in chunks) \
            if engine is None else engine(shaper, plan, layout, chunks, on_bad_row, breakdown)
        for chunk, outcome in shaped:
            fields.see(chunk)
            writer.write(chunk, outcome)
            rejects.write(chunk, outcome.rejected, grouping.key)
            report.rows_in += len(chunk.block)
            report.groups += chunk.groups
            report.chunks += 1
            if outcome.rejected:
                at = np.fromiter((i for i, _ in outcome.rejected), np.int64, len(outcome.rejected))
                report.groups_rejected += len(np.unique(np.searchsorted(chunk.offsets, at, side="right")))
            if outcome.result is not None:
                totals.add(outcome.result.metrics, len(outcome.good_rows))
                for reason, count in skip_counts(outcome.result).items():
                    report.skipped[reason] = report.skipped.get(reason, 0) + count
        fields.check(report.rows_in)
        finishing()  # from here a signal no longer stops the run: both files are renamed into place
        rejects.commit()
        writer.commit()  # last: a complete output means the rejects beside it are complete too
    except BaseException:
        for w in (writer, rejects):
            if w is not None:
                w.discard()
        raise
    finally:
        bar.close()
    report.rows_out = writer.rows
    report.rows_rejected = rejects.rows
    report.rejects = rejects.path if rejects.rows else None
    report.others_rejects = rejects.path if not rejects.rows and rejects.path.exists() else None
    report.metrics = totals.final()
    return report


def format_report(report: RunReport, spec: str, shaper_name: str, data: Path) -> str:
    lines = [f"shapec run: {shaper_name} from {printable(spec)} on {printable(data)}"]
    lines.append(f"rows: {report.rows_in} in = {report.rows_out} out + {report.rows_rejected} rejected")
    shaped = report.groups - report.groups_rejected - sum(report.skipped.values())
    lines.append(f"groups: {report.groups} in, {shaped} shaped, "
                 f"{sum(report.skipped.values())} passed through, {report.groups_rejected} rejected "
                 f"({report.chunks} chunk{'s' if report.chunks != 1 else ''})")
    for reason, count in sorted(report.skipped.items()):
        lines.append(f"  passed through ({reason}): {count} group{'s' if count != 1 else ''}")
    lines.append(f"wrote {printable(report.out)}")
    if report.rejects is not None:
        lines.append(f"rejects: {printable(report.rejects)}")
    if report.others_rejects is not None:
        lines.append(f"rejects: none; {printable(report.others_rejects)} is not from this run and was left as it was")
    if report.metrics:
        lines.append("metrics:")
        width = max(len(k) for k in report.metrics)
        for key, (value, approx) in report.metrics.items():
            note = "  (approximate: combined over chunks)" if approx and report.chunks > 1 else ""
            lines.append(f"  {key:<{width}}  {value:.6g}{note}")
    return "\n".join(lines)
