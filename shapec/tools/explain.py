"""`shapec explain`: one table per prompt group showing what the shaper did to each rollout.

It replaces NeMo-RL's verbose print: inputs, every term and factor, the group's gate decisions
with their reasons and the values they compared, every group-level value a decision used, the
group's metadata, skip reasons, and the final reward, read from the same Result `run` writes.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

import numpy as np

from ..ir.nodes import StepKind, TypeKind
from ..paths import printable
from ..run.readers import MISSING
from ..run.rundata import Chunk, ChunkOutcome, Grouping, _needs, iter_chunks, open_blocks, shape_chunk
from ..run.spec import stage_irs
from .trace import Value, gate_operands, trace


def gate_verdicts(shaper) -> dict[str, dict[str, str]]:
    """Per gate (stage-prefixed in a pipeline), reason -> 'open' or 'closed'."""
    irs = stage_irs(shaper)
    out: dict[str, dict[str, str]] = {}
    for ir in irs:
        rules = {s.name: s.rules for s in (*ir.batch_steps, *ir.steps) if s.kind is StepKind.GATERULES}
        for gate, reasons in ir.gate_reasons.items():
            verdicts = {verdict_reason: verdict for verdict, verdict_reason, _ in rules.get(gate, ())}
            key = gate if len(irs) == 1 else f"{ir.name}.{gate}"
            out[key] = {r: verdicts.get(r, "open" if r == "open" else "closed") for r in reasons}
    return out


def describe_gate(reason: str, verdicts: dict[str, str]) -> str:
    """'open', 'closed', or 'closed (mean_le_limit)': the verdict, and the reason when it says more."""
    if reason == "skipped":
        return "not evaluated (group skipped)"
    verdict = verdicts.get(reason, "closed")
    if reason == verdict:
        return verdict
    if reason == "missing":
        return "closed (its value is missing)"
    return f"{verdict} ({reason})"


def fmt_number(x: float, digits: int | None = None) -> str:
    """`digits` significant digits (default 4; tiny values in scientific notation), and never a
    rounding that reads as exact: 1.0000488 prints `1.00005`, not `1`."""
    if np.isnan(x):
        return "missing"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    n = digits or 4
    if abs(x) < 1e-4:
        return f"{x:.{max(n - 2 if digits is None else n - 1, 0)}e}"
    text = f"{x:.{n}g}"
    while n < 17 and text.lstrip("-").isdigit():  # a non-integer must not print as one
        n += 1
        text = f"{x:.{n}g}"
    return text


def _value_text(v: Value, g: int, first_row: int, digits: int | None) -> str:
    ty = v.ty
    if ty.kind is TypeKind.BAND:
        a, b, f, present = v.values[g]
        return "{" + ", ".join(fmt_number(x, digits) for x in (a, b, f)) + "}" if present == 1 else "missing"
    x = float(v.values[g])
    if np.isnan(x):
        return "missing"
    if ty.kind is TypeKind.BOOL:
        return "true" if x == 1 else "false"
    if ty.kind is TypeKind.ENUM:
        return ty.members[int(x)]
    if ty.kind is TypeKind.INDEX:
        return f"row {first_row + int(x)}"
    return fmt_number(x, digits)


def _meta_text(value) -> str:
    return json.dumps(value, separators=(", ", ": "), default=str)


def render_group(console, shaper, chunk: Chunk, outcome: ChunkOutcome, g: int, label: str, inputs,
                 traced=None, digits: int | None = None) -> None:
    """Print one group: header, gate and skip lines, group values, metadata, the per-rollout table.

    `traced` is (per-stage values, the group's metadata) from `trace_chunk`, or None.
    """
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table

    start, end = int(chunk.offsets[g]), int(chunk.offsets[g + 1])
    first_row = chunk.base + start + 1
    console.print(f"[bold]group {escape(label)}[/bold]  rows {first_row}-{chunk.base + end}, {end - start} rollouts")
    rejected = [reason for i, reason in outcome.rejected if start <= i < end]
    if rejected:
        console.print(f"  [red]rejected[/red]: {escape(rejected[0])}")
        console.print()
        return
    result = outcome.result
    # the group's position among the groups that were shaped
    k = int(np.searchsorted(outcome.good_rows, start))
    rk = int(np.searchsorted(result.offsets, k))
    rows = np.arange(k, k + end - start)
    reason = result.skip_reasons[rk]
    if reason:
        console.print(f"  [yellow]passed through unchanged[/yellow]: skipped ({reason})")
    stage_values, metadata = traced if traced is not None else ([], {})
    values = _labelled(shaper, stage_values)
    verdicts = gate_verdicts(shaper)
    for gate, reasons in result.gates.items():
        line = f"  gate {gate}: {describe_gate(reasons[rk], verdicts.get(gate, {}))}"
        compared = [f"{op} = {_value_text(values[op], rk, first_row, digits)}"
                    for op in _gate_operands(shaper, gate, reasons[rk]) if op in values]
        console.print(line + (f": {', '.join(compared)}" if compared and not reason else ""), highlight=False)
    if values and not reason:
        console.print("  group values:")
        grid = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2))
        grid.add_column(overflow="fold")
        grid.add_column(justify="right")
        for name, v in values.items():
            grid.add_row(name, _value_text(v, rk, first_row, digits))
        console.print(Padding(grid, (0, 0, 0, 4), expand=False), highlight=False)
    for name, value in metadata.items():
        console.print(f"  meta {name}: {_meta_text(value)}", highlight=False, markup=False)
    terms = {k2: v[rows] for k2, v in result.terms.items()}
    factors = {k2: v[rows] for k2, v in result.factors.items()}
    active_terms = [t for t, v in terms.items() if np.any(v != 0)]
    active_factors = [f for f, v in factors.items() if np.any(v != 1)]
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("row", justify="right")
    for name, _ in inputs:
        table.add_column(name, justify="right")
    table.add_column("env reward", justify="right")
    for t in active_terms:
        table.add_column(f"term {t}", justify="right", overflow="fold")
    for f in active_factors:
        table.add_column(f"factor {f}", justify="right", overflow="fold")
    table.add_column("reward", justify="right", style="bold")
    if result.drops:
        table.add_column("kept")
    env = result.stages[0].reward_in[rows]
    final = result.rewards[rows]
    kept = result.kept[rows] if result.drops else None  # the rollouts `drop when` leaves in the batch
    channels = outcome.channels
    for j, i in enumerate(range(start, end)):
        cells = [str(chunk.base + i + 1)]
        cells += [fmt_number(channels[name][i], digits) for name, _ in inputs]
        cells.append(fmt_number(env[j], digits))
        cells += [fmt_number(terms[t][j], digits) for t in active_terms]
        cells += [fmt_number(factors[f][j], digits) for f in active_factors]
        cells.append(fmt_number(final[j], digits))
        if kept is not None:
            cells.append("yes" if kept[j] else "dropped")
        table.add_row(*cells)
    console.print(table)
    idle = [t for t in terms if t not in active_terms] + [f for f in factors if f not in active_factors]
    if idle:
        console.print(f"  [dim]no effect in this group: {', '.join(idle)}[/dim]")
    console.print()


def _labelled(shaper, stage_values) -> dict[str, Value]:
    """Every stage's values in one mapping, labels prefixed with the stage in a pipeline."""
    irs = stage_irs(shaper)
    return {(v.label if len(irs) == 1 else f"{ir.name}.{v.label}"): v
            for ir, values in zip(irs, stage_values) for v in values}


def _gate_operands(shaper, gate: str, reason: str) -> list[str]:
    irs = stage_irs(shaper)
    if len(irs) == 1:
        return gate_operands(irs[0], gate, reason)
    stage, _, name = gate.partition(".")
    ir = next(ir for ir in irs if ir.name == stage)
    return [f"{stage}.{op}" for op in gate_operands(ir, name, reason)]


def trace_chunk(shaper, plan, layout, chunk: Chunk, outcome: ChunkOutcome, state):
    """Per shaped group of the chunk: (per-stage group values, its metadata), by local group index."""
    inputs, metas = _needs(shaper)
    ex = layout.extract(chunk, inputs, metas)
    off = chunk.offsets
    starts = set(outcome.good_rows.tolist())
    good = [g for g in range(chunk.groups) if int(off[g]) in starts]
    rows = outcome.good_rows
    stage_values = trace(
        shaper, ex.rewards[rows], outcome.result.offsets, {k: v[rows] for k, v in ex.channels.items()},
        {k: [v[g] for g in good] for k, v in ex.metadata.items()},
        plan.params(None if ex.agents is None else [ex.agents[g] for g in good]),
        None if ex.components is None else ex.components[rows], state)
    return {g: (stage_values, {k: v[g] for k, v in ex.metadata.items()}) for g in good}


def explain(shaper, plan, layout, data: Path, grouping: Grouping, wanted: list[str], limit: int,
            width: int | None, chunk_rows: int = 65536, digits: int | None = None) -> int:
    """Print the tables; exit status 1 when a --group ID matches no group (the closest IDs are named).
    `limit`, `width` and `digits` come checked from the command line (commands.number)."""
    from rich.console import Console

    console = Console(width=width or (None if sys.stdout.isatty() else 160), soft_wrap=False)
    inputs, _ = _needs(shaper)
    blocks, bar = open_blocks(data, layout, chunk_rows, progress_enabled=False)
    named = set().union(*map(_labels_named, wanted))
    shown = 0
    labels: list[str] = []
    try:
        for chunk in iter_chunks(blocks, grouping, chunk_rows):
            state = shaper.state_dict()  # what this chunk's call starts from
            outcome = shape_chunk(shaper, plan, layout, chunk, "skip")
            keys = chunk.block.keys(grouping.key) if grouping.key else None
            traced = None
            for g in range(chunk.groups):
                label = str(len(labels)) if keys is None else group_label(keys[int(chunk.offsets[g])])
                labels.append(label)
                if wanted and label not in named:
                    continue
                if shown < limit:
                    if traced is None and outcome.result is not None:
                        traced = trace_chunk(shaper, plan, layout, chunk, outcome, state)
                    render_group(console, shaper, chunk, outcome, g, label, inputs,
                                 (traced or {}).get(g), digits)
                shown += 1
    finally:
        bar.close()
    if shown > limit:
        console.print(f"[dim]{shown - limit} more group(s) not shown; use --limit or --group ID[/dim]")
    known = set(labels)
    missing = [w for w in wanted if not _labels_named(w) & known]
    for w in missing:
        close = difflib.get_close_matches(w, list(dict.fromkeys(labels)), n=3, cutoff=0.5)
        hint = (f"closest: {', '.join(map(repr, close))}" if close
                else f"its groups: {_some(labels)}")
        print(f"shapec: error: no group {w!r} in {printable(data)}; {hint}", file=sys.stderr)
    return 1 if missing else 0


def group_label(key) -> str:
    """A group's key as its header shows it and --group names it: a printable string as it is,
    anything else as JSON (`true`, `1.0`, `"a\\nb"`), so a key can neither break a line nor pass
    for a key of another type; a first row without a key is `(no key)`. A string that reads as
    JSON (`"1"`, `"true"`) is shown as JSON too: plain, it named the group of 1 or true as well."""
    if key is MISSING:
        return "(no key)"
    if isinstance(key, str) and key.isprintable() and not _reads_as_json(key):
        return key
    try:
        return json.dumps(key, default=str)
    except (ValueError, RecursionError):
        return repr(key)


def _labels_named(wanted: str) -> set[str]:
    """The labels `--group WANTED` names: its own, and for a string key shown quoted (`"123"`,
    since it reads as JSON) the string itself, so numeric prompt ids are named as they are written;
    in a file that also has the number 123, `--group 123` shows both (their headers differ) and
    `--group '"123"'` the string's group alone."""
    return {wanted, json.dumps(wanted)}


def _reads_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a key of brackets nested past Python's limit
        return False
    return True


def _some(labels: list[str], n: int = 5) -> str:
    unique = list(dict.fromkeys(labels))
    more = f", ... ({len(unique)} groups)" if len(unique) > n else ""
    return ", ".join(map(repr, unique[:n])) + more
