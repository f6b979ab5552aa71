"""Which batch-level value can reach a shaped reward under given params.

Leaving a bad group out of a call (`shapec run --on-bad-row skip`) changes every batch-level value
the other groups read: a `batch.max(...)`, a state, a batch-level let or gate. If such a value
reaches their rewards, skipping would silently change other groups' rewards. A shaper whose batch
values feed only metrics, or only branches its params turn off (kimi's `scope = "group"` picks
`max(length)` over `batch.max(length)`), is safe; this module tells the two apart.

Param-level conditions are evaluated on the call's param columns (one value per group, so
per-agent overrides count) by the one partial evaluator (ir/partial.py): a `c ? a : b`, an `and`,
an `or` or a statement's `when` whose condition is the same known value in every group follows
only the branch it takes. Anything else is followed on every path, so the answer errs towards
"reachable".
"""

from __future__ import annotations

import numpy as np

from ..ir.nodes import BATCH, Node, Op, ShaperIR
from ..ir.partial import ParamValues


def first_batch_read(ir: ShaperIR, params: dict[str, np.ndarray]) -> Node | None:
    """A batch-level value that reaches a reward, skip or gate code of some group, or None.

    `params` are the call's param columns (`param_arrays`); metrics are not followed (they
    describe the call, they shape nothing)."""
    defs = {s.name: s for s in ir.steps if s.kind in ("let", "gate", "gaterules")}
    seen: dict[str, Node | None] = {}
    values = ParamValues(ir, lambda name: params.get(name))
    always = values.always

    def reach(node: Node | None) -> Node | None:
        if node is None or node.op is Op.CONST:
            return None
        if node.ty.level == BATCH:
            return node
        if node.op is Op.REF and node.attr[0] == "var" and node.attr[1] in defs:
            return step_reach(defs[node.attr[1]])
        args = node.args
        if node.op is Op.COND:
            if always(args[0], 1.0):
                return reach(args[1])
            if always(args[0], 0.0):
                return reach(args[2])
        if node.op in (Op.AND, Op.OR) and values.of(node) is not None:
            return None
        for a in args:
            found = reach(a)
            if found is not None:
                return found
        return None

    def step_reach(step) -> Node | None:
        named = step.kind in ("let", "gate", "gaterules")  # what a ref reaches: each is walked once
        if named and step.name in seen:
            return seen[step.name]
        found = None
        if step.kind == "gaterules":
            for _verdict, _reason, when in step.rules:
                found = found or reach(when)
                if found is not None or always(when, 1.0):
                    break
        elif not (step.kind in ("term", "factor") and always(step.when, 0.0)):
            for part in (step.expr, step.on, step.when):
                found = found or reach(part)
        if named:
            seen[step.name] = found
        return found

    for step in (*ir.skips, *ir.steps):
        if step.kind in ("term", "factor", "clamp", "skip"):
            found = step_reach(step)
            if found is not None:
                return found
    return reach(ir.result)

