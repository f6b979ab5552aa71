"""`shapec explain`: one table per prompt group showing what the shaper did to each rollout.

It replaces NeMo-RL's verbose print: inputs, every term and factor, the group's gate decisions
with their reasons, skip reasons, and the final reward, read from the same Result `run` writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from .rundata import Chunk, ChunkOutcome, Grouping, _needs, iter_chunks, open_blocks, shape_chunk
from .spec import stage_irs


def gate_verdicts(shaper) -> dict[str, dict[str, str]]:
    """Per gate (stage-prefixed in a pipeline), reason -> 'open' or 'closed'."""
    irs = stage_irs(shaper)
    out: dict[str, dict[str, str]] = {}
    for ir in irs:
        rules = {s.name: s.rules for s in (*ir.batch_steps, *ir.steps) if s.kind == "gaterules"}
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


def _fmt(x: float) -> str:
    if np.isnan(x):
        return "missing"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}" if abs(x) >= 1e-4 else f"{x:.2e}"


def render_group(console, shaper, chunk: Chunk, outcome: ChunkOutcome, g: int, label: str, inputs) -> None:
    """Print one group: header, gate and skip lines, and the per-rollout table."""
    from rich.table import Table

    start, end = int(chunk.offsets[g]), int(chunk.offsets[g + 1])
    first_row = chunk.base + start + 1
    console.print(f"[bold]group {label}[/bold]  rows {first_row}-{chunk.base + end}, {end - start} rollouts")
    rejected = [reason for i, reason in outcome.rejected if start <= i < end]
    if rejected:
        console.print(f"  [red]rejected[/red]: {rejected[0]}")
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
    verdicts = gate_verdicts(shaper)
    for gate, reasons in result.gates.items():
        console.print(f"  gate {gate}: {describe_gate(reasons[rk], verdicts.get(gate, {}))}")
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
    env = result.stages[0].reward_in[rows]
    final = result.rewards[rows]
    channels = outcome.channels
    for j, i in enumerate(range(start, end)):
        cells = [str(chunk.base + i + 1)]
        cells += [_fmt(channels[name][i]) for name, _ in inputs]
        cells.append(_fmt(env[j]))
        cells += [_fmt(terms[t][j]) for t in active_terms]
        cells += [_fmt(factors[f][j]) for f in active_factors]
        cells.append(_fmt(final[j]))
        table.add_row(*cells)
    console.print(table)
    idle = [t for t in terms if t not in active_terms] + [f for f in factors if f not in active_factors]
    if idle:
        console.print(f"  [dim]no effect in this group: {', '.join(idle)}[/dim]")
    console.print()


def explain(shaper, plan, layout, data: Path, grouping: Grouping, wanted: list[str], limit: int,
            width: int | None, chunk_rows: int = 65536) -> int:
    """Print the tables; exit status 1 when a --group ID matches no group."""
    from rich.console import Console

    console = Console(width=width or (None if sys.stdout.isatty() else 160), soft_wrap=False)
    inputs, _ = _needs(shaper)
    blocks, bar = open_blocks(data, layout, chunk_rows, progress_enabled=False)
    shown = 0
    found: set[str] = set()
    group_index = 0
    try:
        for chunk in iter_chunks(blocks, grouping, chunk_rows):
            outcome = shape_chunk(shaper, plan, layout, chunk, "skip")
            keys = chunk.block.keys(grouping.key) if grouping.key else None
            for g in range(chunk.groups):
                label = str(group_index) if keys is None else str(keys[int(chunk.offsets[g])])
                group_index += 1
                if wanted and label not in wanted:
                    continue
                found.add(label)
                if shown < limit:
                    render_group(console, shaper, chunk, outcome, g, label, inputs)
                shown += 1
    finally:
        bar.close()
    if shown > limit:
        console.print(f"[dim]{shown - limit} more group(s) not shown; use --limit or --group ID[/dim]")
    missing = [w for w in wanted if w not in found]
    if missing:
        print(f"shapec: error: no group {', '.join(map(repr, missing))} in {data}", file=sys.stderr)
        return 1
    return 0
