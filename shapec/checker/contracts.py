"""What the checker knows of a shaper's values (ShaperFacts: definitions, intervals through the one
interval analysis of ir/intervals.py, masks that imply a positive reward), and the contract facts
intervals cannot see on their own. Three questions, asked by ordering.py:

- `keeps_binary`: does a shaper that requires binary rewards also produce them? Intervals only say
  "within [0, 1]"; here values are tracked as finite sets, so a factor that is provably 0 or 1, or a
  `result` whose conditional branches are 0, 1 or the binary reward, is seen to keep rewards binary.
- `ratio_bounds`: a non-negative value divided by something provably no smaller, such as its own
  group maximum (over every rollout), lies in [0, 1], which intervals lose because the two operands
  look independent.
- `reorder_advice`: what an E401 should suggest; a swap is offered only when the swapped pipeline
  passes the same ordering checks, so the advice cannot go in a circle.
"""

from __future__ import annotations

import functools
import itertools
import math
from .shared import INF, memoised
from ..ir.intervals import arith, node_interval
from ..ir.nodes import Node, Op, UNITS, StepKind, TypeKind


class ShaperFacts:
    """What is known of the values of the shaper being checked: each name's definition, each
    expression's interval, which masks hold only for a positive reward. The checker's statements,
    its order and contract checks (ordering.py) and the proofs below all ask it.

    `env` and `params` are the checker's own, read as they grow: a statement is asked about only
    names defined before it."""

    def __init__(self, env: dict, params: dict, requires: str):
        self.env = env
        self.params = params
        self.requires = requires
        self.reward_range = (0.0 if requires != "real" else -INF, 1.0 if requires in ("binary", "unit") else INF)
        self.expanded = 0  # expansions of let definitions so far in one proof (bounded by EXPANSION_LIMIT)

    def defn(self, node: Node) -> Node | None:
        if node.op is Op.REF and node.attr[0] == "var":
            b = self.env.get(node.attr[1])
            return b.defn if b else None
        return None

    def implies_positive(self, node: Node) -> bool:
        """True when a mask can only hold for rollouts whose reward is > 0."""
        return memoised(self, "memo_implies_positive", node, lambda: self._implies_positive(node))

    def _implies_positive(self, node: Node) -> bool:
        d = self.defn(node)
        if d is not None:
            return self.implies_positive(d)
        if node.op is Op.AND:
            return any(self.implies_positive(a) for a in node.args)
        if node.op is Op.CMP:
            a, b = node.args
            if a.op is Op.REF and a.attr == ("builtin", "reward") and b.op is Op.CONST:
                return (node.attr in ("==", ">=") and b.attr > 0) or (node.attr == ">" and b.attr >= 0)
        return False

    def unbounded_hint(self, node: Node) -> str:
        """Names the value that makes a factor's interval unbounded: from the factor down through its lets,
        into an unbounded operand built from others while there is one, so `length / target` is named
        rather than a param whose declared range is fine; a param when it declares no range at all or is
        the only unbounded leaf."""
        n = node
        while True:
            d = self.defn(n)
            if d is not None:
                n = d
                continue
            kids = [a for a in n.args if a.ty.kind is not TypeKind.BAND and not all(map(math.isfinite, self.range(a)))]
            inner = [a for a in kids if a.op is not Op.REF or self.defn(a) is not None]
            if not inner:
                break
            n = inner[0]
        lo, hi = self.range(n)
        if math.isfinite(lo) and math.isfinite(hi):
            return ""
        leaves = [n] if n.op is Op.REF else kids
        params = [self.params[a.attr[1]] for a in leaves if a.op is Op.REF and a.attr[0] == "param"]
        rangeless = [sp for sp in params if sp.lo is None and sp.hi is None]
        if rangeless:
            return f"; param {rangeless[0].name!r} declares no range (e.g. `{rangeless[0].name}: float in [0, 1]`)"
        if params and len(params) == len(leaves):
            return f"; param {params[0].name!r} declares no {'upper' if params[0].hi is None else 'lower'} bound"
        text = n.span.source.text[n.span.start:n.span.end] if n.span.source is not None else ""
        return f"; `{text}` may range over [{lo:g}, {hi:g}]" if text else ""

    def range(self, node: Node) -> tuple[float, float]:
        """Interval bounds of a numeric expression (conservative), once per node (shared.memoised)."""
        return memoised(self, "memo_range", node, lambda: self._range(node))

    def _range(self, node: Node) -> tuple[float, float]:
        """The one interval analysis (ir/intervals.py) over this shaper: references are bounded by the
        params' declared ranges, the reward contract, the inputs' units and the lets' definitions,
        and a product or quotient of related values by the contracts' ratio bounds."""
        if node.op is Op.REF:
            ns, name = node.attr
            if node.ty.kind is TypeKind.BOOL:
                return 0.0, 1.0
            if ns == "param":
                sp = self.params[name]
                return sp.interval()
            if ns == "builtin" and name == "reward":
                return self.reward_range
            if ns == "input" and node.ty.unit in UNITS:
                return 0.0, INF  # lengths are validated >= 0 when a batch is read
            d = self.defn(node)
            return self.range(d) if d is not None else (-INF, INF)
        out = node_interval(node, [self.range(a) if a.ty.kind is not TypeKind.BAND else (-INF, INF) for a in node.args])
        if node.ty.kind is TypeKind.BOOL:
            out = (max(out[0], 0.0), min(out[1], 1.0))
        if node.op is Op.BIN:
            related = ratio_bounds(self, node)
            if related is not None:  # both bound the value: keep the tighter of each end
                out = (max(out[0], related[0]), min(out[1], related[1]))
        return out


BINARY = frozenset({0.0, 1.0})
MAX_VALUES = 16  # past this a value set is treated as unknown; binary questions need only a few


def _contract_le(a: str, b: str) -> bool:
    order = ("binary", "unit", "nonneg", "real")
    return a in order and b in order and order.index(a) <= order.index(b)


def values(ck: ShaperFacts, node: Node) -> frozenset[float] | None:
    """The finite set of values node can take when present, or None when that set is not known."""
    return memoised(ck, "memo_values", node, lambda: _values(ck, node))


def _values(ck: ShaperFacts, node: Node) -> frozenset[float] | None:
    if node.ty.kind is TypeKind.BOOL:
        return BINARY
    op = node.op
    if op is Op.CONST:
        return frozenset({float(node.attr)})
    if op is Op.REF:
        if node.attr == ("builtin", "reward"):
            return BINARY if ck.requires == "binary" else None
        d = ck.defn(node)
        return values(ck, d) if d is not None else None
    if op is Op.NEG:
        inner = values(ck, node.args[0])
        return None if inner is None else frozenset(-v for v in inner)
    if op in (Op.COND, Op.FALLBACK):
        branches = node.args[1:] if op is Op.COND else node.args
        return _combine([values(ck, b) for b in branches], lambda *vs: vs, union=True)
    if op is Op.BIN and node.attr in ("*", "+", "-"):  # a chain pair by pair, as it is evaluated
        fn = {"*": lambda a, b: a * b, "+": lambda a, b: a + b, "-": lambda a, b: a - b}[node.attr]
        return functools.reduce(lambda x, y: _combine([x, y], fn), [values(ck, a) for a in node.args])
    if op is Op.CALL and node.attr in ("min", "max", "clip"):
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


def keeps_binary(ck: ShaperFacts, steps, result: Node | None) -> bool:
    """True when every reward this shaper outputs is 0 or 1, given binary input rewards.

    Skipped groups pass through untouched (still binary); a factor that is not applied leaves the
    reward as it is; a factor in {0, 1} maps a binary reward into {0, 1}.
    """
    if ck.requires != "binary":
        return False
    if result is not None:
        out = values(ck, result)
        return out is not None and out <= BINARY
    if any(st.kind in (StepKind.TERM, StepKind.CLAMP) for st in steps):
        return False
    factors = [st for st in steps if st.kind is StepKind.FACTOR]
    return bool(factors) and all((v := values(ck, st.expr)) is not None and v <= BINARY for st in factors)


def _strip_float(node: Node) -> Node:
    return node.args[0] if node.op is Op.CALL and node.attr == "float" else node


class _TooLarge(Exception):
    """A ratio whose names expand past EXPANSION_LIMIT nodes: not worth proving (it stays E503)."""


EXPANSION_LIMIT = 4096  # nodes the ratio prover may visit per product; real factors use a few dozen


def _canon(ck: ShaperFacts, node: Node) -> Node:
    """node with `let`/`channel` names replaced by their definitions and `float(...)` dropped.

    The prover's walks expand names, so each visit is counted (see ratio_bounds)."""
    ck.expanded += 1
    if ck.expanded > EXPANSION_LIMIT:
        raise _TooLarge
    while True:
        node = _strip_float(node)
        d = ck.defn(node)
        if d is None:
            return node
        node = d


def _nonneg(ck: ShaperFacts, node: Node) -> bool:
    """Inputs with a unit are validated >= 0 at run time; anything else must have a range >= 0."""
    return memoised(ck, "memo_nonneg", node, lambda: _is_nonneg(ck, node))


def _is_nonneg(ck: ShaperFacts, node: Node) -> bool:
    d = ck.defn(node)
    if d is not None:
        return _nonneg(ck, d)
    if node.op is Op.REF and node.attr[0] == "input" and node.ty.unit in UNITS:
        return True
    if node.op is Op.BIN and node.attr in ("+", "*", "/"):
        return all(_nonneg(ck, a) for a in node.args)
    if node.op is Op.CALL and node.attr in ("float", "int", "min", "max"):
        return all(_nonneg(ck, a) for a in node.args)
    return ck.range(node)[0] >= 0


def _extreme(ck: ShaperFacts, node: Node) -> tuple[str, tuple] | None:
    """("max" | "min", key of x) for max(x) / min(x) over every rollout of the group, else None.

    Only an unmasked group reduction bounds every rollout's x; a masked one bounds the rollouts in
    its mask only, and a metadata list's bounds its items, not the rollouts.
    """
    if node.op is not Op.REDUCE or node.attr[0] not in ("max", "min") or node.attr[1]:
        return None
    mask = node.args[1]
    if not (mask.op is Op.CONST and mask.attr == 1.0):
        return None
    return node.attr[0], _canon(ck, node.args[0]).key()


def _reduced(ck: ShaperFacts, node: Node, keys: set) -> set:
    """The keys of every x that node takes an unmasked group max(x) or min(x) of."""
    node = _canon(ck, node)
    if (e := _extreme(ck, node)) is not None:
        keys.add(e[1])
    for a in node.args:
        _reduced(ck, a, keys)
    return keys


def _linear(ck: ShaperFacts, node: Node, scale: float, form: dict, atoms: dict, whole: set) -> None:
    """Adds scale * node to form ({atom key: coefficient}, the constant under ()), atoms by key.

    A node in whole stays one atom, so `length + answer` still meets its own max(length + answer).
    """
    node = _canon(ck, node)
    if node.key() in whole or not _split(ck, node, scale, form, atoms, whole):
        key = node.key()
        atoms[key] = node
        form[key] = form.get(key, 0.0) + scale


def _split(ck: ShaperFacts, node: Node, scale: float, form: dict, atoms: dict, whole: set) -> bool:
    """Adds a constant, a negation, a sum or a constant multiple part by part; False for an atom."""
    args = [_canon(ck, x) for x in node.args]
    if node.op is Op.CONST:
        form[()] = form.get((), 0.0) + scale * float(node.attr)
    elif node.op is Op.NEG:
        _linear(ck, args[0], -scale, form, atoms, whole)
    elif node.op is Op.BIN and node.attr in ("+", "-"):
        _linear(ck, args[0], scale, form, atoms, whole)
        for x in args[1:]:
            _linear(ck, x, scale if node.attr == "+" else -scale, form, atoms, whole)
    elif node.op is Op.BIN and node.attr == "*" and sum(a.op is not Op.CONST for a in args) <= 1:
        *consts, other = sorted(args, key=lambda a: a.op is not Op.CONST)  # the one factor that is not constant
        _linear(ck, other, scale * math.prod(float(c.attr) for c in consts), form, atoms, whole)
    else:
        return False
    return True


def _proves_le(ck: ShaperFacts, small: Node | None, big: Node) -> bool:
    """True when small (None: 0) <= big for every rollout of a group, using min(x) <= x <= max(x).

    big - small is written as a linear form; a rollout value x beside its group's max(x) (or min(x))
    is bounded by it, a max(x) beside min(x) by min(x) <= max(x); what is left is bounded by intervals.
    """
    form: dict = {}
    atoms: dict = {}
    whole = _reduced(ck, big, set()) | (_reduced(ck, small, set()) if small is not None else set())
    _linear(ck, big, 1.0, form, atoms, whole)
    if small is not None:
        _linear(ck, small, -1.0, form, atoms, whole)
    extremes = {k: e for k, n in atoms.items() if (e := _extreme(ck, n)) is not None}
    by_extreme = {e: k for k, e in extremes.items()}
    for key in [k for k in form if k != () and k not in extremes]:
        c = form[key]
        bound = by_extreme.get(("max" if c < 0 else "min", key))
        if c and bound is not None:  # c * x >= c * max(x) for c < 0, >= c * min(x) for c > 0
            form[bound] += c
            del form[key]
    for (kind, x), hi in list(by_extreme.items()):
        lo = by_extreme.get(("min", x))
        if kind != "max" or lo is None or form.get(hi, 0.0) < 0 or form.get(lo, 0.0) >= 0:
            continue
        a, b = form.pop(hi), form.pop(lo)  # a * max + b * min with a >= 0 > b
        form[lo if a + b >= 0 else hi] = a + b
    total = form.pop((), 0.0)
    for key, c in form.items():
        if c == 0:
            continue
        lo, hi = ck.range(atoms[key])
        edge = lo if c > 0 else hi
        if math.isinf(edge):
            return False
        total += c * edge
    return total >= 0


def _product(ck: ShaperFacts, node: Node, num: list, den: list) -> None:
    """Splits a chain of * and / into its numerator factors and its divisors."""
    node = _canon(ck, node)
    if node.op is Op.BIN and node.attr == "*":
        for x in node.args:
            _product(ck, x, num, den)
    elif node.op is Op.BIN and node.attr == "/":
        _product(ck, node.args[0], num, den)
        den.append(_canon(ck, node.args[1]))  # whole: the prover compares the factor with all of it
    else:
        num.append(node)


def ratio_bounds(ck: ShaperFacts, node: Node) -> tuple[float, float] | None:
    """Bounds of a product with one divisor D and a factor f with 0 <= f <= D (so f / D is in [0, 1]).

    `alpha * length / max(length)`, `(x - min(x)) / (max(x) - min(x) + eps)` and `min(x) / x` over
    non-negative x are such products. A D of 0 forces f = 0, and 0 / 0 is missing, which fails
    closed. The bounds are f / D's [0, 1] times the other factors' intervals; None when no factor fits.
    """
    if node.op is not Op.BIN or node.attr not in ("*", "/"):
        return None
    ck.expanded = 0
    try:
        num: list = []
        den: list = []
        _product(ck, node, num, den)
        if len(den) != 1:
            return None
        for i, f in enumerate(num):
            if (_nonneg(ck, f) or _proves_le(ck, None, f)) and _proves_le(ck, f, den[0]):
                out = (0.0, 1.0)
                for other in num[:i] + num[i + 1:]:
                    out = arith("*", out, ck.range(other))
                return out
    except _TooLarge:
        pass
    return None


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
