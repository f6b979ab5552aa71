"""Which batch-level value, or which read of absent metadata, can reach a shaped reward under given params.

Leaving a bad group out of a call (`shapec run --on-bad-row skip`) changes every batch-level value
the other groups read: a `batch.max(...)`, a state, a batch-level let or gate. If such a value
reaches their rewards, skipping would silently change other groups' rewards. A shaper whose batch
values feed only metrics, or only branches its params turn off (kimi's `scope = "group"` picks
`max(length)` over `batch.max(length)`), is safe; this module tells the two apart.

Metadata absent in every group (a call that leaves it out, a file no row of which has it) is
missing wherever it is read, so what it feeds fails closed everywhere, silently. Reads that are
handled are not counted: a `??` fallback, a `missing()`/`present()` test, and a reduction over an
absent list that an empty selection defines (`count` is 0, `any` false: `count(passing) >= 2`
guards what follows as it does at run time). A `mean`, `min` or `max` over it is missing, a read.

Conditions are evaluated on the call's param columns (one value per group, so per-agent overrides
count) by the one partial evaluator (ir/partial.py), with what absent metadata is known to give:
a `c ? a : b`, an `and`, an `or` or a statement's `when` whose condition is the same known value in
every group follows only the branch it takes. Anything else is followed on every path, so the
answer errs towards "reachable".
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..ir.nodes import BATCH, ROLLOUT, Node, Op, ShaperIR, StepKind
from ..ir.partial import ParamValues
from ..ir.values import reduce_values
from ..paths import printable

_NO_ITEMS = np.zeros(0)


def first_batch_read(ir: ShaperIR, params: dict[str, np.ndarray]) -> Node | None:
    """A batch-level value that reaches a reward, skip or gate code of some group, or None.

    `params` are the call's param columns (`param_arrays`); metrics are not followed (they
    describe the call, they shape nothing)."""
    return _first_read(ir, ParamValues(ir, params.get), lambda node: node.ty.level == BATCH)


def first_meta_read(ir: ShaperIR, params: dict[str, np.ndarray], name: str) -> Node | None:
    """A read of metadata `name` (a value, a field, a reduction over its list that is missing on no
    items) that reaches a reward, skip or gate code of some group when `name` is absent in every
    group, with nothing standing in for it; or None."""
    def reads(node: Node) -> bool:
        if node.op is Op.REDUCE:
            return node.attr[1] == name
        return node.op in (Op.REF, Op.BANDREF) and node.attr[0] in ("meta", "item") \
            and node.attr[1].partition(".")[0] == name
    return _first_read(ir, _Absent(ir, params.get, name), reads, past_fallbacks=True)


class _Absent(ParamValues):
    """The partial evaluator, knowing what metadata `name` gives when no group has it: its values
    and fields are missing, a reduction over its list is what it is on no items (count 0, mean
    missing), and `missing()`/`present()` of a known value are known."""

    def __init__(self, ir: ShaperIR, column, name: str):
        super().__init__(ir, column)
        self.name = name

    def _step(self, n: Node, args: list):
        if n.op is Op.REDUCE and n.attr[1] == self.name and n.ty.level != ROLLOUT:
            return np.float64(reduce_values(n.attr[0], _NO_ITEMS, ()))
        if n.op is Op.REF and n.attr[0] == "meta" and n.attr[1].partition(".")[0] == self.name:
            return np.float64(math.nan)
        if n.op is Op.CALL and n.attr in ("missing", "present") and args[0] is not None:
            missing = np.isnan(args[0]).astype(np.float64)
            return missing if n.attr == "missing" else 1.0 - missing
        return super()._step(n, args)


def _first_read(ir: ShaperIR, values: ParamValues, hit: Callable[[Node], bool],
                past_fallbacks: bool = False) -> Node | None:
    """The first node `hit` accepts that reaches a reward, skip or gate code of some group, or None.
    A node whose value `values` knows, and knows is present in every group, reads nothing. With
    `past_fallbacks`, the left side of `a ?? b` and the argument of `missing()`/`present()` are not
    followed: a missing value there is handled."""
    defs = {s.name: s for s in ir.steps if s.kind in (StepKind.LET, StepKind.GATE, StepKind.GATERULES)}
    seen: dict[str, Node | None] = {}
    always = values.always

    def reach(node: Node | None) -> Node | None:
        if node is None or node.op is Op.CONST:
            return None
        known = values.of(node)
        if known is not None and not np.isnan(known).any():
            return None
        if hit(node):
            return node
        if node.op is Op.REF and node.attr[0] == "var" and node.attr[1] in defs:
            return step_reach(defs[node.attr[1]])
        args = node.args
        if past_fallbacks and node.op in (Op.FALLBACK, Op.BANDFALLBACK):
            args = args[1:]
        elif past_fallbacks and node.op is Op.CALL and node.attr in ("missing", "present"):
            return None
        if node.op is Op.COND:
            if always(args[0], 1.0):
                return reach(args[1])
            if always(args[0], 0.0):
                return reach(args[2])
        for a in args:
            found = reach(a)
            if found is not None:
                return found
        return None

    def step_reach(step) -> Node | None:
        named = step.kind in (StepKind.LET, StepKind.GATE, StepKind.GATERULES)  # what a ref reaches: each is walked once
        if named and step.name in seen:
            return seen[step.name]
        found = None
        if step.kind is StepKind.GATERULES:
            for _verdict, _reason, when in step.rules:
                found = found or reach(when)
                if found is not None or always(when, 1.0):
                    break
        elif not (step.kind in (StepKind.TERM, StepKind.FACTOR) and always(step.when, 0.0)):
            for part in (step.expr, step.on, step.when):
                found = found or reach(part)
        if named:
            seen[step.name] = found
        return found

    for step in (*ir.skips, *ir.steps):
        if step.kind in (StepKind.TERM, StepKind.FACTOR, StepKind.CLAMP, StepKind.SKIP):
            found = step_reach(step)
            if found is not None:
                return found
    return reach(ir.result)


def where(node: Node) -> str:
    """A node's source text and position (`acc at short_rl.shape:36:24`), for messages."""
    span = node.span
    if span.source is None:
        return "a value"
    line, col = span.source.position(span.start)
    text = span.source.text[span.start:span.end]
    return f"{printable(text)!s} at {printable(span.source.path)}:{line}:{col}"
