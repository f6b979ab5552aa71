"""Checks one `ensure` clause against its shaper (called from the checker once the body is known)."""

from __future__ import annotations

import difflib

from ..ir.nodes import BATCH, Ensure, Op, PARAM, POISON, TypeKind
from ..syntax import ast as A

PROPERTIES = ("order_kept", "all_wrong_unchanged", "within", "shorter_not_worse")
DOMAINS = ("binary", "unit", "nonneg", "real")  # narrowest first


def _const(node) -> float | None:
    if node.op is Op.CONST:
        return float(node.attr)
    if node.op is Op.NEG and node.args[0].op is Op.CONST:
        return -float(node.args[0].attr)
    return None


def title(e: Ensure) -> str:
    """How reports name a clause: `within [0, 1] over binary`, `shorter_not_worse(length) over real`."""
    text = e.prop
    if e.prop == "within":
        text += f" [{e.lo:g}, {e.hi:g}]"
    if e.prop == "shorter_not_worse":
        text += f"({e.x_name})"
    return f"{text} over {e.over}"


def check_ensure(sc, st: A.Ensure) -> Ensure | None:
    """The IR of the clause, or None after reporting E701/E702 on the checker `sc`."""
    bad = len(sc.p.diags)
    if st.prop not in PROPERTIES:
        close = difflib.get_close_matches(st.prop, PROPERTIES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {', '.join(PROPERTIES)}"
        sc.error("E701", f"unknown property {st.prop!r}{hint}", st.span)
        return None
    shapes = {"within": "within [lo, hi]", "shorter_not_worse": "shorter_not_worse(x) [on MASK]"}
    wants_range, wants_x = st.prop == "within", st.prop == "shorter_not_worse"
    if wants_range != (st.lo is not None) or wants_x != (st.x is not None) or (st.on is not None and not wants_x):
        form = shapes.get(st.prop, st.prop)
        sc.error("E702", f"write this clause as `ensure {form}`", st.span)
        return None
    over = st.over or sc.facts.requires
    if over not in DOMAINS:
        close = difflib.get_close_matches(over, DOMAINS, n=1)
        sc.error("E702", f"unknown reward domain {over!r}; expected one of {', '.join(DOMAINS)}"
                 + (f" (did you mean {close[0]!r}?)" if close else ""), st.span)
        return None
    if DOMAINS.index(over) > DOMAINS.index(sc.facts.requires):
        sc.error("E702", f"`over {over}` is wider than the shaper's `requires {sc.facts.requires}`", st.span)
    lo = hi = None
    if wants_range:
        lo, hi = (_const(sc.expr(e)) for e in (st.lo, st.hi))
        if lo is None or hi is None or not lo <= hi:
            sc.error("E702", "`within [lo, hi]` needs two constant bounds with lo <= hi", st.lo.span.cover(st.hi.span))
    x = on = None
    if wants_x:
        x = sc.name(st.x, st.span)
        if x is not POISON and not (x.op is Op.REF and x.attr[0] == "input" and x.ty.kind is TypeKind.NUM):
            sc.error("E702", f"shorter_not_worse compares rollouts by a numeric input; {st.x!r} is not one", st.span)
        on = sc.expr(st.on) if st.on is not None else None  # None: every rollout of the group
        if on is not None and on.ty is not POISON and (on.ty.kind is not TypeKind.BOOL or on.ty.items):
            sc.error("E702", "the `on` mask of shorter_not_worse must be a rollout-level boolean", st.on.span)
    when = None
    if st.when is not None:
        when = sc.expr(st.when)
        if when.ty is not POISON and (when.ty.kind is not TypeKind.BOOL or when.ty.level > PARAM
                                      or when.ty.level == BATCH):
            sc.error("E702", "the `when` condition of an ensure may use only params and constants "
                     f"(got a {when.ty.describe()})", st.when.span)
    if len(sc.p.diags) > bad:
        return None
    return Ensure(st.prop, over, lo, hi, x, on, when, st.x, st.span)
