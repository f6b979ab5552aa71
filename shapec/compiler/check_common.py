"""What every checker pass shares: element kinds, name bindings, constant folding, suggestions."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from ..syntax import ast as A
from .ir import Node

NUM, BOOL = "num", "bool"
INF = math.inf


@dataclass
class Binding:
    node: Node
    kind: str  # param input channel let gate term factor state meta builtin
    defn: Node | None = None  # the defining expression, for range and implication analysis


class Bad:
    pass


BAD = Bad()


def const_num(e: A.Expr) -> float | None:
    match e:
        case A.Number(value=v):
            return float(v)
        case A.Unary(op="-", operand=x):
            v = const_num(x)
            return None if v is None else -v
        case A.Binary(op=op, left=l, right=r) if op in "+-*/":
            a, b = const_num(l), const_num(r)
            if a is None or b is None or (op == "/" and b == 0):
                return None
            return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[op]
    return None


def suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
