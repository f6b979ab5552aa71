"""Interval arithmetic (operators and min/max/clip) shared by the checker's range analysis and the property analysis' static pass."""

from __future__ import annotations

import math


def arith(op: str, x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float] | None:
    """The interval of `x op y` for +, - and * (inf * 0 never counts); None for any other operator."""
    (x0, x1), (y0, y1) = x, y
    if op == "+":
        return x0 + y0, x1 + y1
    if op == "-":
        return x0 - y1, x1 - y0
    if op == "*":
        prods = [p * q for p in (x0, x1) for q in (y0, y1) if not (math.isinf(p) and q == 0 or math.isinf(q) and p == 0)]
        return (min(prods), max(prods)) if prods else (-math.inf, math.inf)
    return None


def bounds_call(fn: str, rs: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The interval of max(...), min(...) and clip(x, lo, hi) from their arguments'; None otherwise."""
    if fn == "max":
        return max(r[0] for r in rs), max(r[1] for r in rs)
    if fn == "min":
        return min(r[0] for r in rs), min(r[1] for r in rs)
    if fn == "clip":
        return max(rs[0][0], rs[1][0]), min(rs[0][1], rs[2][1])
    return None
