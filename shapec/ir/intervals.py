"""The one interval analysis: bounds of the values an expression can take, one rule per op.

An interval (lo, hi) holds every value a node can have when it is present (a missing value is no
value). The rules are sound for the language's own value rules (values.py, the interpreter and the
kernels): each endpoint is what the operation gives at a corner of its arguments' box wherever the
operation is monotone there, and the whole line (-inf, inf) anywhere it is not known to be. Booleans
are intervals inside [0, 1]: (1, 1) is "true or missing", (0, 0) "false or missing".

`node_interval(node, args)` is the rule of every op but a reference, whose bounds only the asker
knows (a param's declared range, a let's definition, what a guard implies); the checker's range
analysis (checker/contracts.py, ShaperFacts) and the prover's static pass (analysis/static.py) both walk the IR
with it.
"""

from __future__ import annotations

import functools
import math

from .nodes import Node, Op, TypeKind
from .powers import c_pow

INF = math.inf
FULL = (-INF, INF)
UNIT = (0.0, 1.0)
Interval = tuple[float, float]

# reductions whose value is one of, or between, the values of the selection
SELECTING = frozenset({"min", "max", "mean", "median", "quantile", "nth_largest"})


def hull(*rs: Interval) -> Interval:
    return min(r[0] for r in rs), max(r[1] for r in rs)


def arith(op: str, x: Interval, y: Interval) -> Interval:
    """`x op y` for + - * / **."""
    (x0, x1), (y0, y1) = x, y
    if op == "+":
        return x0 + y0, x1 + y1
    if op == "-":
        return x0 - y1, x1 - y0
    if op == "*":
        if x == (0.0, 0.0) or y == (0.0, 0.0):
            return 0.0, 0.0  # 0 * inf is NaN, missing: every present product is 0
        prods = [p * q for p in x for q in y if not (math.isinf(p) and q == 0 or math.isinf(q) and p == 0)]
        return (min(prods), max(prods)) if prods else FULL
    if op == "/":
        if y0 <= 0 <= y1:
            return FULL  # x / 0 is an infinity, and near 0 anything
        quotients = [0.0 if math.isinf(q) and not math.isinf(p) else p / q if not math.isinf(q)
                     else math.copysign(INF, p * q) for p in x for q in y]
        return min(quotients), max(quotients)
    if op == "**":
        if x0 < 0:
            return FULL  # a negative base: either sign, or NaN
        # x ** y with x >= 0 is monotone in x for a fixed y and in y for a fixed x: the box's corners
        corners = [c_pow(p, q) for p in x for q in y]
        if any(math.isnan(c) for c in corners):
            return FULL
        return min(corners), max(corners)
    return FULL


def compare(op: str, x: Interval, y: Interval) -> Interval:
    """A comparison of values in x and y: (1, 1) when it always holds, (0, 0) when it never does."""
    true = {">": x[0] > y[1], ">=": x[0] >= y[1], "<": x[1] < y[0], "<=": x[1] <= y[0],
            "==": x[0] == x[1] == y[0] == y[1]}
    false = {">": x[1] <= y[0], ">=": x[1] < y[0], "<": x[0] >= y[1], "<=": x[0] > y[1],
             "==": x[1] < y[0] or y[1] < x[0]}
    if op == "!=":
        return (0.0, 0.0) if true["=="] else (1.0, 1.0) if false["=="] else UNIT
    return (1.0, 1.0) if true[op] else (0.0, 0.0) if false[op] else UNIT


def _trunc(v: float) -> float:
    return v if math.isinf(v) else float(math.trunc(v))


def _exp(v: float) -> float:
    return INF if v > 709 else math.exp(v)


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + _exp(-v))


def call(fn: str, rs: list[Interval]) -> Interval:
    """A builtin of its arguments' intervals."""
    if fn == "min":
        return min(r[0] for r in rs), min(r[1] for r in rs)
    if fn == "max":
        return max(r[0] for r in rs), max(r[1] for r in rs)
    if fn == "clip":  # min(max(x, lo), hi): the upper bound wins when lo > hi
        (x0, x1), (l0, l1), (h0, h1) = rs
        return min(max(x0, l0), h0), min(max(x1, l1), h1)
    if fn in ("missing", "present", "band"):
        return UNIT
    (x0, x1) = rs[0]
    if fn == "float":
        return x0, x1
    if fn == "int":  # truncation towards 0 is monotone
        return _trunc(x0), _trunc(x1)
    if fn == "abs":
        return (x0, x1) if x0 >= 0 else (-x1, -x0) if x1 <= 0 else (0.0, max(-x0, x1))
    if fn == "exp":
        return _exp(x0), _exp(x1)
    if fn == "sigmoid":
        return _sigmoid(x0), _sigmoid(x1)
    if fn == "sqrt":  # negative values are missing
        return (math.sqrt(max(x0, 0.0)), math.sqrt(x1)) if x1 >= 0 else FULL
    if fn == "log":  # values <= 0 are missing
        return ((math.log(x0) if x0 > 0 else -INF), math.log(x1)) if x1 > 0 else FULL
    if fn == "cos":
        return -1.0, 1.0
    return FULL


def reduction(what: str, x: Interval, mask: Interval) -> Interval:
    """A group (or batch) reduction of values in x over the rollouts the mask selects, as every
    rollout of the group reads it."""
    if what in SELECTING:
        return x  # present only over a non-empty selection of its values
    if what in ("any", "all"):
        return UNIT
    if what in ("count", "std", "mad", "argmin", "argmax"):
        return 0.0, INF
    if what == "sum":
        return (0.0, INF) if x[0] >= 0 else (-INF, 0.0) if x[1] <= 0 else FULL
    if what == "centered":
        return x[0] - x[1], x[1] - x[0]
    if what == "rank":  # 0 to the selection's size less one
        return 0.0, INF
    if what == "minmax":  # rescales every rollout of the group by the selection's range
        return UNIT if mask == (1.0, 1.0) else FULL
    return FULL


def node_interval(n: Node, args: list[Interval]) -> Interval:
    """The interval of node n from its arguments' (every op but REF: the asker's to bound)."""
    op = n.op
    if op is Op.CONST:
        return float(n.attr), float(n.attr)
    if op is Op.NEG:
        return -args[0][1], -args[0][0]
    if op is Op.NOT:
        return 1.0 - args[0][1], 1.0 - args[0][0]
    if op is Op.AND:
        return min(a[0] for a in args), min(a[1] for a in args)
    if op is Op.OR:
        return max(a[0] for a in args), max(a[1] for a in args)
    if op is Op.CMP:
        if any(a.ty.kind is TypeKind.BAND for a in n.args):
            return UNIT
        return compare(n.attr, args[0], args[1])
    if op is Op.BIN:  # a chain: the left fold, as it is evaluated
        return functools.reduce(lambda x, y: arith(n.attr, x, y), args)
    if op is Op.CALL:
        return call(n.attr, args)
    if op is Op.COND:
        test, yes, no = args
        return yes if test == (1.0, 1.0) else no if test == (0.0, 0.0) else hull(yes, no)
    if op is Op.FALLBACK:
        return hull(args[0], args[1])
    if op is Op.REDUCE:
        return reduction(n.attr[0], args[0], args[1])
    if op is Op.BREDUCE:
        return reduction(n.attr, args[0], args[1] if len(args) > 1 else (1.0, 1.0))
    if op is Op.BAND:
        return UNIT
    return FULL
