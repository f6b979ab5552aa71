"""What every checker pass shares: name bindings, constant folding, suggestions."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from ..syntax import ast as A
from ..ir.nodes import Node

INF = math.inf


@dataclass
class Binding:
    node: Node
    kind: str  # param input channel let gate term factor state meta builtin
    defn: Node | None = None  # the defining expression, for range and implication analysis


def memoised(owner, table: str, node: Node, compute):
    """compute() once per node object (kept in owner's dict `table`). A name (`let`, `channel`) is
    walked through to its definition, so without this a chain of lets that each use the one before
    twice would be walked once per path: 2**30 times for 30 lets."""
    memo = owner.__dict__.setdefault(table, {})
    hit = memo.get(id(node))
    if hit is None or hit[0] is not node:
        hit = memo[id(node)] = (node, compute())
    return hit[1]


class Bad:
    pass


BAD = Bad()


def const_num(e: A.Expr) -> float | None:
    match e:
        case A.Number(value=v):
            return float(v)
        case A.Unary(operator="-", operand=x):
            v = const_num(x)
            return None if v is None else -v
        case A.Binary(operator=op) if op in "+-*/":
            return _const_chain(e)
    return None


def _const_chain(e: A.Binary) -> float | None:
    """Arithmetic on constants, down the left operands without recursion (a chain may be long)."""
    steps = []
    while isinstance(e, A.Binary) and e.operator in ("+", "-", "*", "/"):
        steps.append(e)
        e = e.left
    a = const_num(e)
    for step in reversed(steps):
        op, b = step.operator, const_num(step.right)
        if a is None or b is None or (op == "/" and b == 0):
            a = None
        else:
            a = {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]
    return a


def finite_const(e: A.Expr, error) -> float | None | Bad:
    """const_num where a constant is required (defaults, call params, bounds, bands, state): arithmetic
    past float64 (`1e308 * 10`, inf - inf) is E107 and BAD, never an inf or nan that later checks,
    pydantic and the kernels each read their own way."""
    value = const_num(e)
    if value is not None and not math.isfinite(value):
        error("E107", f"this constant comes to {value}, not a finite number (the largest is about 1.8e308)", e.span)
        return BAD
    return value


def suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
