"""`shapec plot`: shaped reward against length for a synthetic group, and length distributions.

The curve's numbers come from `plotdata.sweep` (see there how the probe and its inputs are set);
this module draws them. Length-valued params are drawn as vertical lines, a clamp or floor as a
horizontal line, each group gate as a strip under the curve labelled with its reason, and each term
and factor that shapes the correct curve as a strip where it applies, with its values: so a band is
shown where the band in effect (a group's own, or the global one) changes the curve, on the swept
axis, and every jump of the curve lines up with the edge of a strip. A caption lists every input's
value and why a gate closed or the curve is flat.

With data: the distribution of the swept channel over all rollouts, weighted by the env reward
and by the shaped reward (negative rewards count 0): the lengths a policy-gradient step
reinforces before and after shaping. The curve then uses the first shaped group's metadata
(unless --meta gives it), and says which group that is.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..ir.nodes import StepKind
from ..run.atomic import AtomicFile, OutputError, check_destination, reason_of
from .explain import gate_verdicts
from .plotdata import BACKGROUND, DEFAULT_MAX, Curves, channel_values, sweep, sweepable
from ..runtime.params import ParamError
from ..runtime.shaper import AbsentMetadata
from ..runtime.validate import BatchError
from ..run.spec import ToolError, stage_irs


def _resolved_params(shaper, plan) -> dict[str, dict]:
    from ..runtime.params import validate_params

    params = plan.params(None)
    per_stage = params if shaper.is_pipeline else {shaper.stages[0][0].name: params}
    return {ir.name: validate_params(ir, per_stage.get(ir.name, {})) for ir in stage_irs(shaper)}


def _markers(shaper, values: dict[str, dict], unit: str):
    """Band params (whose ends help size the x axis), length-valued params in the swept unit, and a reward floor."""
    bands, lines, floors = [], [], []
    for ir in stage_irs(shaper):
        for spec in ir.params:
            v = values[ir.name].get(spec.name)
            if v is None:
                continue
            if spec.kind == "band":
                bands.append((spec.name, float(v[0]), float(v[1]), float(v[2])))
            elif spec.unit == unit and spec.kind in ("int", "float") and float(v) > 0:
                lines.append((spec.name, float(v)))
            elif spec.name == "floor" and spec.kind == "float":
                floors.append(float(v))
        if any(s.kind is StepKind.CLAMP for s in ir.steps):
            floors.append(0.0)
    return bands, lines, sorted(set(floors))


def parse_metas(shaper, items: list[str]) -> dict:
    """`--meta NAME=YAML` values, checked against the spec's meta declarations."""
    import difflib

    from .config import yaml_value

    known = [m.name for ir in stage_irs(shaper) for m in ir.metas]
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep:
            raise ToolError(f"--meta {item!r}: expected NAME=VALUE")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (it has {', '.join(known) or 'none'})"
            raise ToolError(f"--meta {name!r}: {shaper.name!r} declares no such metadata{hint}")
        out[name] = yaml_value(text, f"--meta {name}")
    return out


def image_format(out: Path) -> str:
    """The format `out`'s extension names, refused as run refuses its --out before any work: a
    folder, a missing folder, or a name without an image extension (matplotlib would quietly
    write `out.png` beside it, or create the folder)."""
    from matplotlib.backend_bases import FigureCanvasBase

    check_destination(out)
    formats = FigureCanvasBase.get_supported_filetypes()
    fmt = out.suffix[1:].lower()
    if fmt not in formats:
        raise OutputError(out, f"expected an image file name ending in .png, .svg or .pdf "
                               f"(or {', '.join('.' + f for f in sorted(formats) if f not in ('png', 'svg', 'pdf'))})")
    return fmt


def _save(fig, out: Path, fmt: str) -> None:
    """Atomically, as run and fmt write: a failed save leaves the previous image as it was."""
    target = AtomicFile(out)
    tmp = target.open()
    try:
        try:
            fig.savefig(tmp, format=fmt, dpi=110)
        except OSError as err:
            raise OutputError(out, reason_of(err)) from None
        target.commit()
    finally:
        target.discard()


def plot(shaper, plan, out: Path, channel: str | None = None, max_length: float | None = None,
         data: Path | None = None, layout=None, grouping=None, metas: list[str] = ()) -> Curves:
    """Draw the figure and return the curves it drew."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fmt = image_format(out)
    lengths = sweepable(shaper)
    if channel is None:
        if not lengths:
            raise ToolError(f"{shaper.name!r} has no length input to plot against")
        channel = next(iter(lengths))
    elif channel not in lengths:
        raise ToolError(f"--channel {channel!r}: not a length input or channel of {shaper.name!r} "
                        f"(lengths: {', '.join(lengths) or 'none'})")
    unit = lengths[channel]
    metadata = parse_metas(shaper, list(metas))
    values = _resolved_params(shaper, plan)
    bands, lines, floors = _markers(shaper, values, unit)
    entering = shaper.state_dict()  # the curves are drawn from the declared initial state, not what --data left
    dist = _distribution(shaper, plan, layout, grouping, data, channel) if data else None
    left = shaper.state_dict()
    shaper.load_state_dict(entering)
    source = None
    if dist is not None and dist.metadata:
        source = dist.group
        metadata = {**dist.metadata, **metadata}
    if max_length is None:
        candidates = [b for _, _, b, _ in bands] + [v for _, v in lines]
        if dist is not None and len(dist.lengths):
            max_length = float(np.quantile(dist.lengths, 0.99)) * 1.1
        elif candidates:
            max_length = max(candidates) * 1.5
        else:
            max_length = DEFAULT_MAX[unit]
    if not (math.isfinite(max_length) and max_length > 0):  # --max-length is checked; params or data may not be
        raise ToolError(f"the x-axis end must be a finite number > 0, got {max_length:g}; set it with --max-length")
    try:
        curves = sweep(shaper, plan, channel, unit, max_length, metadata)
    except AbsentMetadata as err:  # the fix here is an option
        raise ToolError(f"cannot shape the plotted group: {err.read}; give it with --meta {err.name}=VALUE") from None
    except (BatchError, ParamError) as err:  # a --meta value (or a param) the shaper refuses: its message names it
        raise ToolError(f"cannot shape the plotted group: {err}") from None

    gates, effects = list(curves.gates), list(curves.effects)
    rows = ([4.5] + [0.35 * len(gates) + 0.2] * bool(gates) + [0.35 * len(effects) + 0.2] * bool(effects)
            + [4.0] * (dist is not None))
    curves.notes += state_notes(entering, left if dist is not None else None)
    given = {(f"{stage}.{k}" if shaper.is_pipeline else k): v for stage, values in plan.base.items()
             for k, v in values.items()}
    declares = any(ir.metas for ir in stage_irs(shaper))
    foot_text = caption(curves, metadata, source, given, declares)
    foot = 0.7 + 0.12 * (foot_text.count("\n") + 1)  # inches: the caption's lines and the last axis's labels
    fig = plt.figure(figsize=(11, sum(rows) + 0.4 + foot))
    grid = fig.add_gridspec(len(rows), 1, height_ratios=rows, left=0.14, right=0.74,
                            top=1 - 0.4 / (sum(rows) + 0.4 + foot), bottom=foot / (sum(rows) + 0.4 + foot),
                            hspace=0.35)
    ax = fig.add_subplot(grid[0])
    ax.plot(curves.xs, curves.correct, color="tab:green", lw=2, label="correct rollout")
    ax.plot(curves.xs, curves.wrong, color="tab:red", lw=2, ls="--", label="wrong rollout")
    for name, v in lines:
        if v <= max_length:
            ax.axvline(v, color="tab:purple", ls=":", lw=1)
            ax.text(v, 0.98, f" {name}={v:g}", rotation=90, va="top", fontsize=7,
                    transform=ax.get_xaxis_transform())
    for fl in floors:
        ax.axhline(fl, color="gray", lw=0.8, ls="-.", label=f"floor {fl:g}")
    ax.set_xlim(0, max_length)
    ax.set_ylabel(curves.ylabel)
    ax.set_title(f"{shaper.name}: {curves.ylabel} against {channel} ({unit}) of a probe rollout "
                 f"in a group of {BACKGROUND + 1}", fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    ax.grid(alpha=0.3)
    if gates:
        _gate_strips(fig.add_subplot(grid[1], sharex=ax), curves, gate_verdicts(shaper))
    if effects:
        _effect_strips(fig.add_subplot(grid[1 + bool(gates)], sharex=ax), curves)
    if dist is not None:
        _plot_distribution(fig.add_subplot(grid[-1]), dist, channel, unit, max_length)
    fig.text(0.01, 0.01, foot_text, fontsize=7, va="bottom", family="monospace")
    try:
        _save(fig, out, fmt)
    finally:
        plt.close(fig)
    return curves


def caption(curves: Curves, metadata: dict, source: str | None, params: dict | None = None,
            declares_metadata: bool = True) -> str:
    """Every input's value, the params a config or --set gave, the metadata used (or how to give it,
    for a shaper that declares some), and the notes, wrapped for the figure's foot."""
    lines = ["inputs: " + "; ".join(f"{k} = {v}" for k, v in curves.inputs.items())]
    if params:
        lines.append("params (from --config and --set; the others at their defaults): "
                     + "; ".join(f"{k} = {v}" for k, v in params.items()))
    if metadata:
        origin = f" (from group {source} of --data)" if source else ""
        lines.append(f"metadata{origin}: " + "; ".join(f"{k} = {v}" for k, v in metadata.items()))
    elif declares_metadata:
        lines.append("metadata: none (give it with --meta NAME=VALUE)")
    lines += curves.notes
    return "\n".join(textwrap.fill(line, 150, subsequent_indent="    ") for line in lines)


def state_notes(entering: dict, left: dict | None) -> list[str]:
    """Which state the curves are drawn from: each call updates a state before shaping, so say what the
    curves' call starts from and, with --data, that the value the data pass left is not it."""
    out = []
    for stage, values in entering.items():
        for name, value in values.items():
            if isinstance(value, dict):
                out.append(f"state {stage}.{name} is kept per prompt: each point of the curves is a prompt seen "
                           "for the first time, at the state's initial value")
                continue
            after = "" if left is None else f", not the {left[stage][name]:g} the --data pass left"
            out.append(f"state {stage}.{name} = {value:g} entering the curves' call (its initial value{after}); "
                       "the call updates it before shaping, as every call does")
    return out


def _gate_strips(ax, curves: Curves, verdicts: dict[str, dict[str, str]]) -> None:
    """One strip per group gate: green where open, gray where closed, each run labelled with its reason."""
    def draw(name: str):
        reasons = curves.gates[name]
        for start, end in _runs(reasons):
            is_open = verdicts[name].get(reasons[start], "closed") == "open"
            verdict = "open" if is_open else "closed"
            yield (start, end, "tab:green" if is_open else "lightgray", 0.6,
                   verdict if reasons[start] == verdict else f"{verdict}: {reasons[start]}")

    _strips(ax, curves.xs, {f"gate {n}": draw(n) for n in curves.gates},
            "group gates on the correct curve (green open, gray closed, with the reason)")


def _effect_strips(ax, curves: Curves) -> None:
    """One strip per term and factor of the correct curve, shaded where it applies, each run
    labelled with its values there (a term's amount, a factor's multiplier)."""
    def draw(name: str):
        values = curves.effects[name]
        applies = values != (0.0 if name.startswith("term ") else 1.0)
        for start, end in _runs(applies):
            if applies[start]:
                low, high = float(values[start:end].min()), float(values[start:end].max())
                yield start, end, "tab:orange", 0.45, f"{low:.3g}" if low == high else f"{low:.3g} to {high:.3g}"

    _strips(ax, curves.xs, {n: draw(n) for n in curves.effects},
            "where each term and factor changes the correct curve, with its values there")


def _runs(keys) -> list[tuple[int, int]]:
    """(start, end) of each run of equal keys along the x axis."""
    out, start = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            out.append((start, i))
            start = i
    return out


def _strips(ax, xs: np.ndarray, rows: dict, xlabel: str) -> None:
    """A strip per row, top to bottom: each (start, end, color, alpha, text) a bar over xs[start:end]
    with its text in the middle."""
    for k, (name, bars) in enumerate(rows.items()):
        y = len(rows) - 1 - k
        for start, end, color, alpha, text in bars:
            lo, hi = xs[start], xs[end - 1]
            ax.barh(y, max(hi - lo, xs[1] - xs[0]), left=lo, height=0.8, color=color, alpha=alpha)
            ax.text((lo + hi) / 2, y, text, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), list(reversed(rows)), fontsize=7)
    ax.set_ylim(-0.5, len(rows) - 0.5)
    ax.tick_params(axis="x", labelbottom=True, labelsize=7)
    ax.set_xlabel(xlabel, fontsize=8)


@dataclass
class Distribution:
    """Every shaped rollout's swept length, env and shaped reward; the first shaped group's metadata."""

    lengths: np.ndarray
    env: np.ndarray
    shaped: np.ndarray
    group: str
    metadata: dict


def _distribution(shaper, plan, layout, grouping, data: Path, channel: str) -> Distribution:
    from ..run.rundata import _needs, iter_chunks, open_blocks, shape_chunk

    blocks, bar = open_blocks(data, layout, 65536, progress_enabled=False)
    xs, env, shaped = [], [], []
    first = None
    try:
        for chunk in iter_chunks(blocks, grouping, 65536):
            outcome = shape_chunk(shaper, plan, layout, chunk, "skip")
            if outcome.result is None:
                continue
            rows = outcome.good_rows
            xs.append(channel_values(shaper, channel, {k: v[rows] for k, v in outcome.channels.items()}))
            env.append(outcome.result.stages[0].reward_in)
            shaped.append(outcome.result.rewards)
            if first is None:
                g = int(np.searchsorted(chunk.offsets, rows[0]))
                start, end = chunk.base + int(chunk.offsets[g]) + 1, chunk.base + int(chunk.offsets[g + 1])
                key = chunk.block.keys(grouping.key)[int(chunk.offsets[g])] if grouping.key else chunk.base + g
                ex = layout.extract(chunk, *_needs(shaper))
                first = (f"{key} (rows {start}-{end})",
                         {k: v[g] for k, v in ex.metadata.items() if v[g] is not None})
    finally:
        bar.close()
    if not xs:
        raise ToolError(f"{data}: no group could be shaped (every group was rejected)")
    return Distribution(np.concatenate(xs), np.concatenate(env), np.concatenate(shaped), *first)


def _plot_distribution(ax, dist: Distribution, channel: str, unit: str, max_length: float) -> None:
    lengths = dist.lengths
    bins = np.linspace(0, max(max_length, float(lengths.max()) if len(lengths) else 1.0), 41)
    ax.hist(lengths, bins=bins, color="lightgray", label=f"all rollouts (n={len(lengths)})")
    for weights, label, color in ((np.maximum(dist.env, 0), "weighted by env reward", "tab:blue"),
                                  (np.maximum(dist.shaped, 0), "weighted by shaped reward", "tab:orange")):
        if weights.sum() > 0:
            ax.hist(lengths, bins=bins, weights=weights, histtype="step", lw=2, color=color, label=label)
            mean = float(np.average(lengths, weights=weights))
            ax.axvline(mean, color=color, ls=":", lw=1)
    ax.set_xlabel(f"{channel} ({unit})")
    ax.set_ylabel("rollouts (weighted)")
    uses = f"; the curve above uses the metadata of group {dist.group}" if dist.metadata else ""
    ax.set_title(f"--data: length distribution before and after shaping (dotted: weighted means){uses}", fontsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    ax.grid(alpha=0.3)
