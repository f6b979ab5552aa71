"""The one partial evaluator: param-level values of a shaper computed before a call, from the call's
param columns (one value per group), by the language's own value rules (values.py).

Two places ask it: the specialiser (compiler/specialize.py), which folds into the IR the conditions
that hold, or fail, in every group at once, and the batch-reach check (runtime/batch_reach.py),
which follows only the branch a known condition takes. A value is known when it is built of
literals, params and lets by negation, `not`, comparisons, `and`, `or` and `c ? a : b`;
`false and x` and `true or x` are known whatever `x` is, as the three-valued rules make them.
Anything else is unknown (None), never guessed.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from .nodes import Node, Op, ShaperIR, post_order, StepKind
from .values import k_and, k_cmp, k_or

Value = np.ndarray | np.float64 | None  # one value per group, one for all groups, or unknown


class ParamValues:
    """Param-level values of one shaper for one call's params. `column(name)` is a param's values,
    one per group (None: not a number param, or not given per group); `of(node)` a node's value."""

    def __init__(self, ir: ShaperIR, column: Callable[[str], np.ndarray | None]):
        self.column = column
        self.lets = {s.name: s.expr for s in ir.steps if s.kind is StepKind.LET}
        self.memo: dict[int, Value] = {}  # by node id: a node shared by several conditions is evaluated once
        self.let_values: dict[str, Value] = {}

    def of(self, root: Node) -> Value:
        for n in post_order(root, lambda x: x.args, self.memo):
            self.memo[id(n)] = self._step(n, [self.memo[id(a)] for a in n.args])
        return self.memo[id(root)]

    def always(self, node: Node | None, value: float) -> bool:
        """Whether the node is known and equal to `value` in every group."""
        v = None if node is None else self.of(node)
        return v is not None and bool(np.all(v == value))

    def _step(self, n: Node, args: list[Value]) -> Value:
        op = n.op
        if op in (Op.AND, Op.OR):  # false and anything is false, true or anything is true
            decisive = 0.0 if op is Op.AND else 1.0
            if any(a is not None and bool(np.all(a == decisive)) for a in args):
                return np.float64(decisive)
            if any(a is None for a in args):
                return None
            return functools.reduce(k_and if op is Op.AND else k_or, args)
        if op is Op.REF and n.attr[0] == "var" and n.attr[1] in self.lets:  # a let is what its expression is
            if n.attr[1] not in self.let_values:
                self.let_values[n.attr[1]] = self.of(self.lets[n.attr[1]])
            return self.let_values[n.attr[1]]
        if any(a is None for a in args):  # a value above param level is known only through known operands
            return None
        if op is Op.CONST:
            return np.float64(n.attr) if isinstance(n.attr, (int, float)) else None
        if op is Op.REF:
            namespace, name = n.attr
            if namespace == "param":
                column = self.column(name)
                return column if column is not None and column.ndim == 1 else None
            return None
        if op is Op.NOT:
            return 1.0 - args[0]
        if op is Op.NEG:
            return -args[0]
        if op is Op.CMP:
            return k_cmp(n.attr, *args)
        if op is Op.COND:
            c, a, b = (np.asarray(x, dtype=np.float64) for x in args)
            return np.where(c == 1, a, np.where(c == 0, b, np.nan))
        return None
