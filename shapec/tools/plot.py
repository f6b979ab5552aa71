"""`shapec plot`: shaped reward against length for a synthetic group, and length distributions.

The curve: one probe rollout is swept over lengths inside a fixed background group (rollouts
spread over 20-80% of the x range, alternately correct and wrong); for each length the whole
group is shaped and the probe's shaped reward is plotted, once with the probe correct and once
wrong. One call shapes every sweep point as its own group. Band params are shaded, length-valued
params drawn as vertical lines, a clamp or floor as a horizontal line, and each group gate as a
strip showing where it is open or closed as the probe's length changes.

With data: the distribution of the swept channel over all rollouts, weighted by the env reward
and by the shaped reward (negative rewards count 0): the lengths a policy-gradient step
reinforces before and after shaping.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..compiler.ir import UNITS
from .explain import gate_verdicts
from .spec import ToolError, stage_irs

GRID = 241
BACKGROUND = 7
_DEFAULT_MAX = {"tokens": 4096.0, "chars": 16384.0, "seconds": 3600.0, "calls": 100.0}


def _length_inputs(shaper) -> list[tuple[str, str]]:
    inputs: dict[str, str] = {}
    for ir in stage_irs(shaper):
        inputs.update(dict(ir.inputs))
    return list(inputs.items())


def _resolved_params(shaper, plan) -> dict[str, dict]:
    from ..runtime.params import validate_params

    params = plan.params(None)
    per_stage = params if shaper.is_pipeline else {shaper.stages[0][0].name: params}
    return {ir.name: validate_params(ir, per_stage.get(ir.name, {})) for ir in stage_irs(shaper)}


def _markers(shaper, values: dict[str, dict], unit: str):
    """Bands (a, b) and length-valued params in the swept unit, and a reward floor."""
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
        if any(s.kind == "clamp" for s in ir.steps):
            floors.append(0.0)
    return bands, lines, sorted(set(floors))


def sweep(shaper, plan, channel: str, unit: str, max_length: float):
    """Shaped reward of the probe (correct and wrong) and the group gates at each grid length."""
    xs = np.linspace(0.0, max_length, GRID)
    inputs = _length_inputs(shaper)
    background = np.linspace(0.2, 0.8, BACKGROUND) * max_length
    bg_reward = np.array([1.0 if k % 2 == 0 else 0.0 for k in range(BACKGROUND)])
    G = BACKGROUND + 1
    out = {}
    gates = {}
    for label, probe_reward in (("correct", 1.0), ("wrong", 0.0)):
        rewards = np.tile(np.concatenate([[probe_reward], bg_reward]), GRID)
        channels = {}
        for name, _ in inputs:
            if name == channel:
                channels[name] = np.column_stack([xs, np.tile(background, (GRID, 1))]).ravel()
            elif name == "resolved":
                channels[name] = rewards.copy()  # a correct rollout is a resolved one
            else:
                channels[name] = np.zeros(GRID * G)
        result = shaper(rewards, group_size=G, channels=channels, params=plan.params(None))
        out[label] = result.rewards[::G]
        if label == "correct":
            gates = result.gates
    return xs, out, gates


def plot(shaper, plan, out: Path, channel: str | None = None, max_length: float | None = None,
         data: Path | None = None, layout=None, grouping=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inputs = dict(_length_inputs(shaper))
    lengths = [n for n, t in inputs.items() if t in UNITS]
    if channel is None:
        if not lengths:
            raise ToolError(f"{shaper.name!r} has no length input to plot against")
        channel = lengths[0]
    elif channel not in lengths:
        raise ToolError(f"--channel {channel!r}: not a length input of {shaper.name!r} "
                        f"(length inputs: {', '.join(lengths) or 'none'})")
    unit = inputs[channel]
    values = _resolved_params(shaper, plan)
    bands, lines, floors = _markers(shaper, values, unit)
    dist = _distribution(shaper, plan, layout, grouping, data, channel) if data else None
    if max_length is None:
        candidates = [b for _, _, b, _ in bands] + [v for _, v in lines]
        if dist is not None and len(dist[0]):
            max_length = float(np.quantile(dist[0], 0.99)) * 1.1
        elif candidates:
            max_length = max(candidates) * 1.5
        else:
            max_length = _DEFAULT_MAX[unit]
    if not max_length > 0:
        raise ToolError(f"--max-length must be > 0, got {max_length:g}")
    xs, curves, gates = sweep(shaper, plan, channel, unit, max_length)

    rows = 2 if dist is not None else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8, 4.5 * rows), squeeze=False)
    ax = axes[0][0]
    ax.plot(xs, curves["correct"], color="tab:green", lw=2, label="correct rollout")
    ax.plot(xs, curves["wrong"], color="tab:red", lw=2, ls="--", label="wrong rollout")
    for name, a, b, f in bands:
        if b > a:
            ax.axvspan(a, b, color="tab:blue", alpha=0.12)
            ax.text((a + b) / 2, 0.97, f"{name}\n{{{a:g}, {b:g}, {f:g}}}", ha="center", va="top",
                    fontsize=7, transform=ax.get_xaxis_transform())
    for name, v in lines:
        if v <= max_length:
            ax.axvline(v, color="tab:purple", ls=":", lw=1)
            ax.text(v, 0.98, f" {name}={v:g}", rotation=90, va="top", fontsize=7,
                    transform=ax.get_xaxis_transform())
    for fl in floors:
        ax.axhline(fl, color="gray", lw=0.8, ls="-.")
    _gate_strips(ax, xs, gates, gate_verdicts(shaper))
    ax.set_xlabel(f"{channel} ({unit}) of the probe rollout")
    ax.set_ylabel("shaped reward")
    ax.set_title(f"{shaper.name}: shaped reward against {channel} "
                 f"(probe in a group of {BACKGROUND + 1}; background at 20-80% of the range)", fontsize=9)
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    if dist is not None:
        _plot_distribution(axes[1][0], dist, channel, unit, max_length)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _gate_strips(ax, xs, gates: dict[str, list[str]], verdicts: dict[str, dict[str, str]]) -> None:
    """A thin strip per group gate under the curve: green where open, gray where closed."""
    if not gates:
        return
    ymin, ymax = ax.get_ylim()
    height = (ymax - ymin) * 0.04
    base = ymin - height * (len(gates) + 0.5)
    for k, (name, reasons) in enumerate(gates.items()):
        y = base + k * height
        is_open = np.array([verdicts[name].get(r, "closed") == "open" for r in reasons])
        ax.fill_between(xs, y, y + height * 0.8, where=is_open, color="tab:green", alpha=0.5, step="mid", lw=0)
        ax.fill_between(xs, y, y + height * 0.8, where=~is_open, color="gray", alpha=0.3, step="mid", lw=0)
        ax.text(xs[-1], y + height * 0.4, f"gate {name} ", fontsize=6, va="center", ha="right")
    ax.set_ylim(base - height * 0.2, ymax)


def _distribution(shaper, plan, layout, grouping, data: Path, channel: str):
    """(lengths, env rewards, shaped rewards) of every shaped rollout in the data."""
    from .rundata import iter_chunks, open_blocks, shape_chunk

    blocks, bar = open_blocks(data, layout, 65536, progress_enabled=False)
    xs, env, shaped = [], [], []
    try:
        for chunk in iter_chunks(blocks, grouping, 65536):
            outcome = shape_chunk(shaper, plan, layout, chunk, "skip")
            if outcome.result is None:
                continue
            xs.append(outcome.channels[channel][outcome.good_rows])
            env.append(outcome.result.stages[0].reward_in)
            shaped.append(outcome.result.rewards)
    finally:
        bar.close()
    if not xs:
        raise ToolError(f"{data}: no group could be shaped (every group was rejected)")
    return np.concatenate(xs), np.concatenate(env), np.concatenate(shaped)


def _plot_distribution(ax, dist, channel: str, unit: str, max_length: float) -> None:
    lengths, env, shaped = dist
    bins = np.linspace(0, max(max_length, float(lengths.max()) if len(lengths) else 1.0), 41)
    ax.hist(lengths, bins=bins, color="lightgray", label=f"all rollouts (n={len(lengths)})")
    for weights, label, color in ((np.maximum(env, 0), "weighted by env reward", "tab:blue"),
                                  (np.maximum(shaped, 0), "weighted by shaped reward", "tab:orange")):
        if weights.sum() > 0:
            ax.hist(lengths, bins=bins, weights=weights, histtype="step", lw=2, color=color, label=label)
            mean = float(np.average(lengths, weights=weights))
            ax.axvline(mean, color=color, ls=":", lw=1)
    ax.set_xlabel(f"{channel} ({unit})")
    ax.set_ylabel("rollouts (weighted)")
    ax.set_title("length distribution before and after shaping (dotted: weighted means)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
