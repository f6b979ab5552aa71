"""The group-level values behind a shaper's decisions, for `shapec explain`.

The Result a call returns holds only per-rollout outputs. To show *why* a gate closed or a term
did not apply, explain re-runs each stage on the reference interpreter over the same groups (same
rewards entering the stage, params, metadata and state) and reads back every group-level value:
named lets and gates, reductions, and the operands of every comparison a decision made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.nodes import GROUP, Node, Op, PARAM, ShaperIR, Type, walk, StepKind, TypeKind
from ..runtime.batch import Batch
from ..runtime.binder import make_batch
from ..runtime.interp import Interpreter
from ..runtime.params import param_arrays

_OPS = {Op.NEG: "-", Op.NOT: "not "}


def node_text(node: Node) -> str:
    """An IR expression back as spec-like text: helper functions appear with their arguments filled in."""
    op, a = node.op, node.args
    if op is Op.CONST:
        v = node.attr
        return f"{v:g}" if isinstance(v, float) else str(v)
    if op is Op.REF:
        return node.attr[1] if isinstance(node.attr, tuple) else str(node.attr)
    if op in _OPS:
        return f"{_OPS[op]}{_atom(a[0])}"
    if op in (Op.BIN, Op.CMP, Op.AND, Op.OR):  # + * and or may be chains of more than two
        return f" {node.attr if op in (Op.BIN, Op.CMP) else op.value} ".join(_atom(x) for x in a)
    if op is Op.COND:
        return f"{_atom(a[0])} ? {_atom(a[1])} : {_atom(a[2])}"
    if op in (Op.FALLBACK, Op.BANDFALLBACK):
        return f"{_atom(a[0])} ?? {_atom(a[1])}"
    if op is Op.CALL:
        return f"{node.attr}({', '.join(node_text(x) for x in a)})"
    if op in (Op.REDUCE, Op.BREDUCE):
        name = node.attr[0] if op is Op.REDUCE else f"batch.{node.attr}"
        mask = a[1]
        where = "" if mask.op is Op.CONST else f" where {node_text(mask)}"
        extra = "".join(f", {node_text(x)}" for x in a[2:])
        return f"{name}({node_text(a[0])}{where}{extra})"
    if op is Op.BANDFIELD:
        return f"{_atom(a[0])}.{node.attr}"
    if op is Op.BANDREF:
        return ".".join(node.attr) if node.attr[0] != "param" else node.attr[1]
    if op is Op.BANDLIT:
        return "{" + ", ".join(node_text(x) for x in a) + "}"
    if op is Op.BAND:
        return f"band({node_text(a[0])}, {node_text(a[1])})"
    return f"{op.value}({', '.join(node_text(x) for x in a)})"


def _atom(node: Node) -> str:
    text = node_text(node)
    return text if node.op in (Op.CONST, Op.REF, Op.CALL, Op.REDUCE, Op.BREDUCE, Op.BANDFIELD) else f"({text})"


@dataclass
class Value:
    """One group-level value: its label, its kind (num, bool, band, enum) and one entry per group."""

    label: str
    ty: Type
    values: np.ndarray  # (G,) or (G, 4) for bands


def _is_group_value(node: Node) -> bool:
    """A value with one entry per group, other than a bare param (the config shows those)."""
    is_param = node.op in (Op.REF, Op.BANDREF) and node.attr[0] == "param"
    return node.ty.level in (PARAM, GROUP) and node.ty.items is None and not is_param


def _compared(node: Node):
    """The group-level operands of every comparison or missing()/present() test inside a decision."""
    for sub in walk(node):
        if sub.op is Op.CMP or (sub.op is Op.CALL and sub.attr in ("missing", "present")):
            for side in sub.args:
                if side.op is not Op.CONST and _is_group_value(side):
                    yield side


def decision_nodes(ir: ShaperIR) -> list[tuple[str, Node]]:
    """(label, node) of every group-level value a decision used, in statement order, each value once.

    A let that names a value already listed is folded into its label (`passing_count = count(passing)`).
    """
    labels: list[str] = []
    nodes: dict[str, Node] = {}

    def add(label: str, node: Node) -> None:
        if label not in nodes:
            labels.append(label)
            nodes[label] = node

    for step in (*ir.skips, *ir.steps):
        exprs = [step.expr, step.on, step.when, *(w for _, _, w in step.rules)]
        for expr in (e for e in exprs if e is not None):
            for sub in walk(expr):
                if sub.op is Op.REDUCE and _is_group_value(sub):
                    add(node_text(sub), sub)
            if step.kind is not StepKind.LET:
                for side in _compared(expr):
                    add(node_text(side), side)
        if step.kind in (StepKind.LET, StepKind.GATE) and step.expr is not None and _is_group_value(step.expr):
            text = node_text(step.expr)
            if text in nodes and step.kind is StepKind.LET:
                labels[labels.index(text)] = label = f"{step.name} = {text}"
                nodes[label] = nodes.pop(text)
                nodes[step.name] = nodes[label]  # later uses of the name find the folded entry
            else:
                add(step.name, step.expr)
    return [(label, nodes[label]) for label in labels]


def gate_operands(ir: ShaperIR, gate: str, reason: str) -> list[str]:
    """Labels of the values the rules of `gate` compared, up to and including the rule that decided."""
    for step in ir.steps:
        if step.kind is StepKind.GATERULES and step.name == gate:
            labels: list[str] = []
            for _, rule_reason, when in step.rules:
                if when is not None:
                    labels += [node_text(n) for n in _compared(when) if node_text(n) not in labels]
                if rule_reason == reason:
                    break
            return labels
    return []


def trace(shaper, rewards, offsets, channels, metadata, params, components, state) -> list[list[Value]]:
    """Per stage, the group-level values of a call (the same arguments the shaper was called with;
    `state` as state_dict() gives it). A state kept per prompt is at its initial value: `shapec run`,
    explain and plot see each prompt once."""
    inputs = tuple({n: t for ir, _ in shaper.stages for n, t in ir.inputs}.items())
    metas = tuple({m.name: m for ir, _ in shaper.stages for m in ir.metas}.values())
    batch = make_batch(None, rewards, offsets=offsets, channels=channels, metadata=metadata,
                       reward_components=components, inputs_needed=inputs, metas_needed=metas)
    current = batch.rewards
    out = []
    for (ir, _), values in zip(shaper.stages, shaper._stage_params(params)):
        stage_batch = Batch(current, batch.offsets, batch.inputs, batch.metas, batch.bands, batch.lists,
                            batch.components, batch.rewards)
        batch_state = {name: state[ir.name][name] for name, _ in ir.states}
        entering = {name: np.full(batch.groups, init) for name, init, _ in ir.prompt_states}
        interp = Interpreter(ir, stage_batch, param_arrays(ir, values, batch.groups), batch_state, prompt_state=entering)
        stage_out = interp.run(True)
        out.append([Value(label, node.ty, _group_array(interp, node)) for label, node in decision_nodes(ir)])
        current = stage_out.rewards
    return out


def _group_array(interp: Interpreter, node: Node) -> np.ndarray:
    if node.ty.kind is TypeKind.BAND:
        return interp.band(node, Type(TypeKind.BAND, GROUP))
    value = interp.at(node, Type(TypeKind.NUM, GROUP))
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (interp.G,))
