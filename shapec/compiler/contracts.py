"""Contract facts the checker's interval analysis cannot see on its own.

Three questions, each asked by a hook in ordering.py:

- `keeps_binary`: does a shaper that requires binary rewards also produce them? Intervals only say
  "within [0, 1]"; here values are tracked as finite sets, so a factor that is provably 0 or 1, or a
  `result` whose conditional branches are 0, 1 or the binary reward, is seen to keep rewards binary.
- `group_ratio`: a non-negative value divided by its own group maximum (over every rollout) lies in
  [0, 1], which intervals lose because the two operands look independent.
- `reorder_advice`: what an E401 should suggest; a swap is offered only when the swapped pipeline
  passes the same ordering checks, so the advice cannot go in a circle.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from .ir import UNITS, Node

BOOL = "bool"  # the checker's element kind of booleans (check_common.BOOL)

if TYPE_CHECKING:
    from .statements import ShaperChecker

BINARY = frozenset({0.0, 1.0})
MAX_VALUES = 16  # past this a value set is treated as unknown; binary questions need only a few


def _contract_le(a: str, b: str) -> bool:
    order = ("binary", "unit", "nonneg", "real")
    return a in order and b in order and order.index(a) <= order.index(b)


def values(ck: "ShaperChecker", node: Node) -> frozenset[float] | None:
    """The finite set of values node can take when present, or None when that set is not known."""
    if node.ty.kind == BOOL:
        return BINARY
    op = node.op
    if op == "const":
        return frozenset({float(node.attr)})
    if op == "ref":
        if node.attr == ("builtin", "reward"):
            return BINARY if ck.requires == "binary" else None
        d = ck.defn(node)
        return values(ck, d) if d is not None else None
    if op == "neg":
        inner = values(ck, node.args[0])
        return None if inner is None else frozenset(-v for v in inner)
    if op in ("cond", "fallback"):
        branches = node.args[1:] if op == "cond" else node.args
        return _combine([values(ck, b) for b in branches], lambda *vs: vs, union=True)
    if op == "bin" and node.attr in ("*", "+", "-"):
        fn = {"*": lambda a, b: a * b, "+": lambda a, b: a + b, "-": lambda a, b: a - b}[node.attr]
        return _combine([values(ck, a) for a in node.args], fn)
    if op == "call" and node.attr in ("min", "max", "clip"):
        fn = {"min": min, "max": max, "clip": lambda x, lo, hi: min(max(x, lo), hi)}[node.attr]
        return _combine([values(ck, a) for a in node.args], fn)
    return None


def _combine(sets, fn, union: bool = False) -> frozenset[float] | None:
    if any(s is None for s in sets):
        return None
    if union:
        out = frozenset().union(*sets)
    else:
        out = frozenset(float(fn(*combo)) for combo in itertools.product(*sets))
    return out if len(out) <= MAX_VALUES else None


def keeps_binary(ck: "ShaperChecker", steps, result: Node | None) -> bool:
    """True when every reward this shaper outputs is 0 or 1, given binary input rewards.

    Skipped groups pass through untouched (still binary); a factor that is not applied leaves the
    reward as it is; a factor in {0, 1} maps a binary reward into {0, 1}.
    """
    if ck.requires != "binary":
        return False
    if result is not None:
        out = values(ck, result)
        return out is not None and out <= BINARY
    if any(st.kind in ("term", "clamp") for st in steps):
        return False
    factors = [st for st in steps if st.kind == "factor"]
    return bool(factors) and all((v := values(ck, st.expr)) is not None and v <= BINARY for st in factors)


def _strip_float(node: Node) -> Node:
    return node.args[0] if node.op == "call" and node.attr == "float" else node


def _nonneg(ck: "ShaperChecker", node: Node) -> bool:
    """Inputs with a unit are validated >= 0 at run time; anything else must have a range >= 0."""
    d = ck.defn(node)
    if d is not None:
        return _nonneg(ck, d)
    if node.op == "ref" and node.attr[0] == "input" and node.ty.unit in UNITS:
        return True
    if node.op == "bin" and node.attr in ("+", "*", "/"):
        return all(_nonneg(ck, a) for a in node.args)
    if node.op == "call" and node.attr in ("float", "int", "min", "max"):
        return all(_nonneg(ck, a) for a in node.args)
    return ck.range(node)[0] >= 0


def group_ratio(ck: "ShaperChecker", node: Node) -> tuple[float, float] | None:
    """[0, 1] for `x / max(x)` with x >= 0 and the max over every rollout of the group; else None.

    `float(...)` on either side changes no value. An empty or all-zero group makes the ratio missing
    or 0/0 (missing), which fails closed; a masked max is not covered, because rollouts outside the
    mask may exceed it.
    """
    if node.op != "bin" or node.attr != "/":
        return None
    num, den = _strip_float(node.args[0]), _strip_float(node.args[1])
    if den.op != "reduce" or den.attr[0] != "max" or den.attr[1]:
        return None
    arg, mask = den.args[0], den.args[1]
    if not (mask.op == "const" and mask.attr == 1.0):
        return None
    if _strip_float(arg).key() != num.key() or not _nonneg(ck, num):
        return None
    return 0.0, 1.0


def reorder_advice(stages, i: int) -> str:
    """The fix an E401 at stage i suggests: swap it with the stage before, if that order passes."""
    prev, cur = stages[i - 1][0], stages[i][0]
    before = stages[i - 2][0].produces if i >= 2 else None
    after = stages[i + 1][0].requires if i + 1 < len(stages) else None
    swapped_ok = (
        (before is None or _contract_le(before, cur.requires))
        and _contract_le(cur.produces, prev.requires)
        and (after is None or _contract_le(prev.produces, after))
        and cur.produces != "advantage"
    )
    if swapped_ok:
        return f"move {prev.name!r} after {cur.name!r}"
    return (f"no order of the two works ({prev.name!r} requires {prev.requires} and produces {prev.produces}; "
            f"{cur.name!r} requires {cur.requires} and produces {cur.produces}): make {prev.name!r} keep rewards "
            f"{cur.requires} (a {{0, 1}} factor or a conditional that keeps the reward), or run "
            f"{cur.name!r} on its own")
