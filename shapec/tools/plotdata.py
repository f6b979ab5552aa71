"""The numbers behind `shapec plot`: the swept curves, every input's value, gate states and notes.

One probe rollout is swept over the x range inside a fixed background group (rollouts spread over
20-80% of the range, alternately correct and wrong); each sweep point is its own group of one call,
shaped once with the probe correct and once wrong. Inputs other than the swept one:

- a boolean input follows the curve (true on the correct curve, false on the wrong one; background
  rollouts follow their own correctness), unless the spec only ever uses it negated
  (`not any(low_effort)`, `not masked`): such a flag switches shaping off and is false everywhere;
- another length input of the swept unit is 25% of the x range; of another unit, 25% of that
  unit's default range; any other number is 0.

A channel derived from inputs (NeMo-RL's `total = reasoning + answer`) is swept by splitting x
evenly over the length inputs it adds up; a channel that is not proportional to them is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.nodes import Node, Op, ShaperIR, UNITS, walk, StepKind, TypeKind
from .explain import describe_gate, fmt_number, gate_verdicts
from ..run.spec import ToolError, stage_irs
from .trace import gate_operands, trace

GRID = 241
BACKGROUND = 7
DEFAULT_MAX = {"tokens": 4096.0, "chars": 16384.0, "seconds": 3600.0, "calls": 100.0}
TYPICAL_SHARE = 0.25


@dataclass
class Curves:
    """What the figure draws: x, the probe's reward when correct and wrong, gates, inputs and notes."""

    xs: np.ndarray
    correct: np.ndarray
    wrong: np.ndarray
    gates: dict[str, list[str]]  # per gate, the correct curve's reason at each x
    inputs: dict[str, str]  # every input -> how the probe sets it
    ylabel: str
    notes: list[str] = field(default_factory=list)
    # every term (where not 0) and factor (where not 1) that shapes the correct curve somewhere: its
    # value at each x, as the shaper computed it (a band factor where the band in effect applies)
    effects: dict[str, np.ndarray] = field(default_factory=dict)


def inputs_of(shaper) -> dict[str, str]:
    out: dict[str, str] = {}
    for ir in stage_irs(shaper):
        out.update(dict(ir.inputs))
    return out


def channels_of(shaper) -> dict[str, tuple[ShaperIR, Node]]:
    """Channels derived from inputs, by name, with the stage that defines them."""
    return {name: (ir, node) for ir in stage_irs(shaper) for name, node in ir.channels}


def sweepable(shaper) -> dict[str, str]:
    """Every length the x axis can sweep: length inputs, then length channels; name -> unit."""
    out = {n: t for n, t in inputs_of(shaper).items() if t in UNITS}
    for name, (_, node) in channels_of(shaper).items():
        if node.ty.unit in UNITS and name not in out:
            out[name] = node.ty.unit
    return out


def negated_only(shaper) -> set[str]:
    """Boolean inputs every use of which is under an odd number of `not`s."""
    polarity: dict[str, set[bool]] = {}

    def visit(node: Node, negated: bool) -> None:
        if node.op is Op.REF and node.attr[0] == "input":
            polarity.setdefault(node.attr[1], set()).add(negated)
        for arg in node.args:
            visit(arg, not negated if node.op is Op.NOT else negated)

    for ir in stage_irs(shaper):
        steps = (*ir.batch_steps, *ir.steps, *ir.skips)
        for step in steps:
            for expr in (step.expr, step.on, step.when, *(w for _, _, w in step.rules)):
                if expr is not None:
                    visit(expr, step.kind is StepKind.SKIP and step.mode == "when")
    bools = {n for n, t in inputs_of(shaper).items() if t == "bool"}
    return {n for n in bools if polarity.get(n) == {True}}


def _channel_split(shaper, channel: str, unit: str) -> dict[str, float]:
    """The share of x each input of a derived channel gets: an even split of the inputs it adds up."""
    ir, node = channels_of(shaper)[channel]
    parts = sorted({n.attr[1] for n in walk(node) if n.op is Op.REF and n.attr[0] == "input"
                    and dict(ir.inputs).get(n.attr[1]) == unit})
    if not parts or any(n.op is Op.REF and n.attr[0] == "input" and n.attr[1] not in parts for n in walk(node)):
        raise ToolError(f"--channel {channel!r}: derived from inputs other than {unit} lengths; "
                        f"sweep one of its inputs instead")
    share = {p: 1.0 / len(parts) for p in parts}
    xs = np.array([1.0, 2.0, 100.0])  # the channel must be x itself when its inputs take their shares of x
    got = _eval_channel(ir, node, {n: xs * share.get(n, 0.0) for n, _ in ir.inputs})
    if not np.allclose(got, xs):
        raise ToolError(f"--channel {channel!r}: not a sum of its inputs, so it cannot be swept; "
                        f"sweep one of {', '.join(parts)} instead")
    return share


def channel_values(shaper, channel: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The swept length of given rollouts: an input as it is, a derived channel evaluated from its inputs."""
    if channel in inputs:
        return inputs[channel]
    ir, node = channels_of(shaper)[channel]
    return np.asarray(_eval_channel(ir, node, inputs), dtype=np.float64)


def _eval_channel(ir: ShaperIR, node: Node, inputs: dict) -> np.ndarray:
    from ..runtime.binder import make_batch
    from ..runtime.interp import Interpreter
    from ..runtime.params import param_arrays, validate_params

    n = len(next(iter(inputs.values())))
    batch = make_batch(None, np.zeros(n), group_size=n, channels={k: inputs[k] for k, _ in ir.inputs},
                       inputs_needed=ir.inputs, metas_needed=())
    value = Interpreter(ir, batch, param_arrays(ir, validate_params(ir, {}), 1), {}).eval(node)
    return np.broadcast_to(value, (n,))


def probe_inputs(shaper, channel: str, unit: str, max_length: float) -> tuple[dict, dict[str, str]]:
    """How each input is set: name -> ('x', share) | ('follow', None) | ('fixed', value), and captions."""
    inputs = inputs_of(shaper)
    off = negated_only(shaper)
    split = {channel: 1.0} if channel in inputs else _channel_split(shaper, channel, unit)
    plan, caption = {}, {}
    for name, kind in inputs.items():
        if name in split:
            plan[name] = ("x", split[name])
            caption[name] = "the x axis" if split[name] == 1 else f"the x axis ({channel}) / {round(1 / split[name])}"
        elif kind == "bool" and name not in off:
            plan[name] = ("follow", None)
            caption[name] = "true on the correct curve, false on the wrong one"
        elif kind == "bool":
            plan[name] = ("fixed", 0.0)
            caption[name] = "false (the spec only uses it negated: true switches shaping off)"
        else:
            v = TYPICAL_SHARE * (max_length if kind == unit else DEFAULT_MAX.get(kind, 0.0) if kind in UNITS else 0.0)
            plan[name] = ("fixed", v)
            caption[name] = fmt_number(v) + (f" {kind}" if kind in UNITS else "")
    return plan, caption


def sweep(shaper, plan, channel: str, unit: str, max_length: float, metadata: dict | None = None) -> Curves:
    """Shape the probe at every x, correct and wrong; note why a gate closed or the curve is flat."""
    xs = np.linspace(0.0, max_length, GRID)
    how, caption = probe_inputs(shaper, channel, unit, max_length)
    background = np.linspace(0.2, 0.8, BACKGROUND) * max_length
    bg_correct = np.array([1.0 if k % 2 == 0 else 0.0 for k in range(BACKGROUND)])
    G = BACKGROUND + 1
    metadata = {k: [v] * GRID for k, v in (metadata or {}).items()}
    params = plan.params(None)
    saved = shaper.state_dict()  # both curves start from the same state (a stateful shaper updates it)
    runs = {}
    for label, probe in (("correct", 1.0), ("wrong", 0.0)):
        shaper.load_state_dict(saved)
        correct = np.tile(np.concatenate([[probe], bg_correct]), GRID)
        lengths = np.column_stack([xs, np.tile(background, (GRID, 1))]).ravel()
        channels = {}
        for name, (kind, value) in how.items():
            channels[name] = lengths * value if kind == "x" else correct.copy() if kind == "follow" \
                else np.full(GRID * G, value)
        offsets = np.arange(GRID + 1) * G
        prompts = list(range(GRID)) if shaper.prompt_states else None  # each x a new prompt
        result = shaper(correct, offsets=offsets, channels=channels, metadata=metadata, params=params, prompts=prompts)
        runs[label] = (result, correct, channels)
    result, correct, channels = runs["correct"]
    last = stage_irs(shaper)[-1]
    ylabel = "advantage" if last.produces == "advantage" else "shaped reward"
    curves = Curves(xs, result.rewards[::G], runs["wrong"][0].rewards[::G], result.gates, caption, ylabel)
    curves.effects = {**{f"term {k}": v[::G] for k, v in result.terms.items() if np.any(v[::G] != 0)},
                      **{f"factor {k}": v[::G] for k, v in result.factors.items() if np.any(v[::G] != 1)}}
    state = {ir.name: dict(saved.get(ir.name, {})) for ir in stage_irs(shaper)}
    traced = trace(shaper, correct, offsets, channels, metadata, params, None, state)
    shaper.load_state_dict(saved)
    curves.notes += _gate_notes(shaper, curves.gates, traced, metadata)
    if _flat(runs):
        curves.notes.append(_flat_note(shaper, plan))
    return curves


def _flat(runs) -> bool:
    """No term and no factor changed any reward, on either curve."""
    for result, _, _ in runs.values():
        if any(np.any(v != 0) for v in result.terms.values()) or any(np.any(v != 1) for v in result.factors.values()):
            return False
    return True


def _flat_note(shaper, plan) -> str:
    from ..runtime.params import validate_params

    params = plan.params(None)
    zero = []
    for ir in stage_irs(shaper):
        values = validate_params(ir, params if not shaper.is_pipeline else params.get(ir.name, {}))
        zero += [s.name for s in ir.params if s.kind in ("int", "float") and values.get(s.name) == 0]
    hint = f" (zero here: {', '.join(zero[:4])}{', ...' if len(zero) > 4 else ''})" if zero else ""
    return f"flat: no term or factor applies at these params{hint}; turn one on with --set KEY=VALUE"


def _deps(ir: ShaperIR, node: Node, seen: set[str] | None = None) -> tuple[set[str], set[str]]:
    """The metadata and params a value reads, through the lets it uses."""
    seen = set() if seen is None else seen
    metas, params = set(), set()
    lets = {s.name: s.expr for s in (*ir.batch_steps, *ir.steps) if s.kind in (StepKind.LET, StepKind.GATE) and s.expr is not None}
    for sub in walk(node):
        if sub.op in (Op.REF, Op.BANDREF) and isinstance(sub.attr, tuple):
            ns, name = sub.attr
            if ns == "meta":
                metas.add(name.split(".")[0])
            elif ns == "param":
                params.add(name)
            elif ns == "var" and name in lets and name not in seen:
                seen.add(name)
                m, p = _deps(ir, lets[name], seen)
                metas |= m
                params |= p
    return metas, params


def _gate_notes(shaper, gates: dict[str, list[str]], traced, metadata: dict) -> list[str]:
    """For each group gate closed somewhere on the correct curve: its reason, the values it compared,
    and the metadata and params those values come from (the `--meta` / `--set` that would open it)."""
    notes = []
    verdicts = gate_verdicts(shaper)
    irs = stage_irs(shaper)
    for gate, reasons in gates.items():
        closed = [r for r in dict.fromkeys(reasons) if verdicts[gate].get(r, "closed") != "open"]
        if not closed:
            continue
        stage, name = (irs[0], gate) if len(irs) == 1 else next(
            (ir, gate.partition(".")[2]) for ir in irs if ir.name == gate.partition(".")[0])
        reason = closed[0]
        where = "everywhere" if len(closed) == len(set(reasons)) else "in part of the range"
        g = reasons.index(reason)
        values = {v.label: v for v in traced[irs.index(stage)]}
        ops = [op for op in gate_operands(stage, name, reason) if op in values]
        shown = ", ".join(f"{op} = {_value(values[op], g)}" for op in ops)
        metas, params = set(), set()
        specs = {spec.name: spec for spec in stage.params}
        for op in ops:
            m, p = _deps(stage, _node_of(stage, values[op]))
            metas |= m
            # a missing value: the unset optional params it reads; otherwise the numbers it reads
            params |= {q for q in p if specs[q].kind not in ("bool", "enum")
                       and (not _value(values[op], g) == "missing" or specs[q].optional)}
        fixes = [f"--meta {m}=..." + ("" if m not in metadata else " (given)") for m in sorted(metas)]
        fixes += [f"--set {p}=..." for p in sorted(params)]
        notes.append(f"gate {gate}: {describe_gate(reason, verdicts[gate])} {where}"
                     + (f" ({shown})" if shown else "")
                     + (f"; it depends on {', '.join(fixes)}" if fixes else ""))
    return notes


def _node_of(ir: ShaperIR, value) -> Node:
    from .trace import decision_nodes

    return dict(decision_nodes(ir))[value.label]


def _value(v, g: int) -> str:
    if v.ty.kind is TypeKind.BAND:
        a, b, f, present = v.values[g]
        return f"{{{a:g}, {b:g}, {f:g}}}" if present == 1 else "missing"
    x = float(v.values[g])
    return "missing" if np.isnan(x) else fmt_number(x)
