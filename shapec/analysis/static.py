"""Cheap interval reasoning over the typed IR: bounds of expressions and of the shaped reward.

Plain `shapec check` runs only this pass (no z3, no search): a declared `within` whose bounds the
intervals already imply is proved here, for every group size and param value in range.
"""

from __future__ import annotations

import math

from ..compiler.intervals import arith, bounds_call
from ..compiler.ir import Ensure, Node, ShaperIR

INF = math.inf
REWARD = {"binary": (0.0, 1.0), "unit": (0.0, 1.0), "nonneg": (0.0, INF), "real": (-INF, INF)}


def _defs(ir: ShaperIR) -> dict:
    defs = {name: node for name, node in ir.channels}
    defs.update({st.name: st.expr for st in (*ir.batch_steps, *ir.steps) if st.kind in ("let", "gate")})
    return defs


def interval(ir: ShaperIR, node: Node, over: str | None = None, _defs_cache=None) -> tuple[float, float]:
    """Conservative bounds of a numeric expression (booleans: [0, 1])."""
    defs = _defs_cache if _defs_cache is not None else _defs(ir)

    def rng(n: Node, depth: int = 0) -> tuple[float, float]:
        if n.ty.kind == "bool":
            return 0.0, 1.0
        if depth > 64:
            return -INF, INF
        op, a = n.op, n.args
        if op == "const":
            return float(n.attr), float(n.attr)
        if op == "ref":
            ns, name = n.attr
            if ns == "param":
                sp = next(p for p in ir.params if p.name == name)
                if sp.kind == "enum":
                    return 0.0, float(len(sp.members) - 1)
                return (sp.lo if sp.lo is not None else -INF), (sp.hi if sp.hi is not None else INF)
            if ns == "input":
                return (0.0, INF) if dict(ir.inputs)[name] != "float" else (-INF, INF)
            if ns == "builtin" and name in ("reward", "env_reward"):
                return REWARD[over or ir.requires]
            if ns == "builtin" and name == "group_size":
                return 1.0, INF
            if ns == "var" and name in defs:
                return rng(defs[name], depth + 1)
            return -INF, INF
        if op == "neg":
            lo, hi = rng(a[0], depth + 1)
            return -hi, -lo
        if op in ("band",):
            return 0.0, 1.0
        if op == "bin":
            (x0, x1), (y0, y1) = rng(a[0], depth + 1), rng(a[1], depth + 1)
            simple = arith(n.attr, (x0, x1), (y0, y1))
            if simple is not None:
                return simple
            if n.attr == "/" and y0 > 0 and x0 >= 0:
                return 0.0, x1 / y0 if not math.isinf(x1) else INF
            if n.attr == "**" and x0 >= 1 and y1 <= 0:
                return 0.0, 1.0
            return -INF, INF
        if op == "call":
            rs = [rng(x, depth + 1) for x in a]
            fn = n.attr
            known = bounds_call(fn, rs)
            if known is not None:
                return known
            if fn == "float":
                return rs[0]
            if fn in ("sigmoid", "band"):
                return 0.0, 1.0
            if fn in ("exp", "sqrt", "abs"):
                return 0.0, INF
            if fn == "cos":
                return -1.0, 1.0
            return -INF, INF
        if op in ("cond", "fallback"):
            rs = [rng(x, depth + 1) for x in (a[1:] if op == "cond" else a)]
            return min(r[0] for r in rs), max(r[1] for r in rs)
        if op == "reduce" and n.attr[0] in ("min", "max", "mean", "median", "nth_largest", "quantile"):
            return rng(a[0], depth + 1)
        if op == "reduce" and n.attr[0] == "minmax":
            return 0.0, 1.0
        if op == "reduce" and n.attr[0] == "count":
            return 0.0, INF
        return -INF, INF

    return rng(node)


def shaped_interval(ir: ShaperIR, over: str) -> tuple[float, float]:
    """Bounds of the shaped reward: terms summed, clamps lift the floor, factors in [0, 1] scale."""
    defs = _defs(ir)
    lo, hi = REWARD[over]
    if ir.result is not None:
        rlo, rhi = interval(ir, ir.result, over, defs)
    else:
        for st in ir.steps:
            if st.kind == "term":
                tlo, thi = interval(ir, st.expr, over, defs)
                lo, hi = lo + min(tlo, 0.0), hi + max(thi, 0.0)
            elif st.kind == "clamp":
                clo, chi = interval(ir, st.expr, over, defs)
                full = st.on is None and st.when is None
                lo, hi = (max(lo, clo) if full else min(lo, clo)), max(hi, chi)
            elif st.kind == "factor":
                flo, fhi = interval(ir, st.expr, over, defs)
                if flo < 0 or fhi > 1:
                    return -INF, INF
                lo = lo if lo <= 0 else lo * flo  # applied only where the reward entering is > 0
        rlo, rhi = lo, hi
    if ir.skips:  # a skipped group keeps its input rewards
        rlo, rhi = min(rlo, REWARD[over][0]), max(rhi, REWARD[over][1])
    return rlo, rhi


def proves(ir: ShaperIR, ensure: Ensure) -> bool:
    """What intervals alone decide: a `within` the shaped reward's bounds imply."""
    if ensure.prop != "within":
        return False
    lo, hi = shaped_interval(ir, ensure.over)
    return lo >= ensure.lo and hi <= ensure.hi
