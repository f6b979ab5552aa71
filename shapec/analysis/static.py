"""The cheap pass: interval reasoning over the typed IR, the one plain `shapec check` runs (no z3, no
search, no numpy) and the first thing `--prove` tries.

Booleans get intervals too ([0, 0]: false or missing, [1, 1]: true or missing), so a statement whose
guard cannot hold is seen to do nothing, and a guard's comparisons narrow what its expression reads
(`-p when p > 0` is <= 0). Fixing the reward of the rollout in question, 0 or 1, gives the bounds of
what a wrong and a correct rollout can end at: that decides `order_kept` over binary rewards and
`all_wrong_unchanged` by monotonicity (every wrong rollout ends at or below every correct one). The
intervals over-approximate, so a clause they do not prove is left to `--prove`; they refute one only
when no shaped reward at all can keep it (the whole interval is on the wrong side).
"""

from __future__ import annotations

import contextlib
import math

from ..ir.intervals import FULL, hull, node_interval
from ..ir.nodes import Ensure, Node, Op, ROLLOUT, ShaperIR, UNITS, StepKind, TypeKind

INF = math.inf
REWARD = {"binary": (0.0, 1.0), "unit": (0.0, 1.0), "nonneg": (0.0, INF), "real": FULL}
NEVER_MISSING_CALLS = ("min", "max", "clip", "abs", "float", "int", "exp", "sigmoid", "cos")
FLIP = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "==": "!=", "!=": "=="}
MIRROR = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}
MAX_DEPTH = 64


def _defs(ir: ShaperIR) -> dict:
    defs = {name: node for name, node in ir.channels}
    defs.update({st.name: st.expr for st in (*ir.batch_steps, *ir.steps) if st.kind in (StepKind.LET, StepKind.GATE)})
    return defs


class Bounds:
    """Intervals of one shaper's expressions for one reward domain.

    `own` fixes the reward of the rollout in question (outside reductions); with `everyone` the other
    rollouts of its group have that reward too (an all-zero group). `assume` holds what a guard
    implies: (namespace, name) -> interval.
    """

    def __init__(self, ir: ShaperIR, over: str | None = None, own: float | None = None, everyone: bool = False):
        self.ir = ir
        domain = REWARD[over or ir.requires]
        self.own = (own, own) if own is not None else domain
        self.member = self.own if everyone else domain
        self.defs = _defs(ir)
        self.terms = {st.name: st for st in ir.steps if st.kind is StepKind.TERM}
        self.params = {p.name: p for p in ir.params}
        self.inputs = dict(ir.inputs)
        self.assume: dict = {}
        self.memo: dict = {}

    @contextlib.contextmanager
    def assuming(self, facts: dict):
        """Within the block, the refs in `facts` are narrowed to their intervals."""
        saved = self.assume, self.memo
        merged = dict(self.assume)
        for key, (lo, hi) in facts.items():
            old = merged.get(key, FULL)
            merged[key] = (max(old[0], lo), min(old[1], hi))
        self.assume, self.memo = merged, {}
        try:
            yield
        finally:
            self.assume, self.memo = saved

    # ------------------------------------------------------------------ expressions
    def of(self, node: Node, inner: bool = False, depth: int = 0) -> tuple[float, float]:
        """Bounds of a value when present; `inner` inside a reduction (the other rollouts of the group)."""
        key = (id(node), inner)
        if key not in self.memo:
            out = self._eval(node, inner, depth) if depth <= MAX_DEPTH else FULL
            if node.ty.kind is TypeKind.BOOL:
                out = (max(out[0], 0.0), min(out[1], 1.0))
            self.memo[key] = out
        return self.memo[key]

    def _eval(self, n: Node, inner: bool, depth: int) -> tuple[float, float]:
        """The one interval analysis's rule for the node (ir/intervals.py); references, conditionals
        (whose branches are bounded under what their test implies) and reductions (whose values are
        read as the other rollouts of the group) are this pass's own."""
        op, a, d = n.op, n.args, depth + 1
        if op is Op.REF:
            return self._ref(n, inner, d)
        if op is Op.COND:
            c = self.of(a[0], inner, d)
            yes = self.narrowed(a[0], inner, d, lambda: self.of(a[1], inner, d)) if c[1] > 0 else None
            no = self.narrowed(a[0], inner, d, lambda: self.of(a[2], inner, d), negate=True) if c[0] < 1 else None
            rs = [r for r in (yes, no) if r is not None]
            return hull(*rs) if rs else FULL
        if op in (Op.REDUCE, Op.BREDUCE):
            return node_interval(n, [self.of(x, True, d) for x in a])
        return node_interval(n, [self.of(x, inner, d) if x.ty.kind is not TypeKind.BAND else FULL for x in a])

    def _ref(self, n: Node, inner: bool, d: int) -> tuple[float, float]:
        ns, name = n.attr
        out = FULL
        if ns == "param":
            sp = self.params[name]
            if sp.kind == "enum":
                out = (0.0, float(len(sp.members) - 1))
            elif sp.kind == "bool":
                out = (0.0, 1.0)
            elif sp.kind != "band":
                out = sp.interval()
        elif ns == "input":
            typ = self.inputs[name]
            out = (0.0, 1.0) if typ == "bool" else (0.0, INF) if typ in UNITS else FULL
        elif ns == "builtin" and name == "reward":  # env_reward: a later stage's or a caller's, unbounded
            out = self.member if inner else self.own
        elif ns == "builtin" and name == "group_size":
            out = (1.0, INF)
        elif ns == "builtin" and name == "position":
            out = (0.0, INF)
        elif ns == "var" and name in self.terms:
            out = self.contribution(self.terms[name], inner, d)
        elif ns == "var" and name in self.defs:
            out = self.of(self.defs[name], inner, d)
        fact = self.assume.get((ns, name))
        if fact is not None and (not inner or n.ty.level < ROLLOUT):
            out = (max(out[0], fact[0]), min(out[1], fact[1]))
        return out

    def conjuncts(self, node: Node, depth: int = 0) -> list[Node]:
        """The parts of a condition that must all hold, through the lets and gates it names."""
        if depth > MAX_DEPTH:
            return [node]
        if node.op is Op.AND:
            return [c for x in node.args for c in self.conjuncts(x, depth + 1)]
        if node.op is Op.REF and node.attr[0] == "var" and node.attr[1] in self.defs:
            d = self.defs[node.attr[1]]
            if d.ty.kind is TypeKind.BOOL:
                return [node, *self.conjuncts(d, depth + 1)]
        return [node]

    def facts(self, guard: Node, inner: bool, depth: int, negate: bool = False) -> dict | None:
        """What `guard` (or its negation, for one comparison) implies of the refs it compares; None
        when it cannot hold."""
        parts = [guard] if negate else self.conjuncts(guard)
        out: dict = {}
        for c in parts:
            truth = self.of(c, inner, depth)
            if truth == ((1.0, 1.0) if negate else (0.0, 0.0)):
                return None
            if c.op is Op.REF and c.ty.kind is TypeKind.BOOL and not negate:
                out[c.attr] = (1.0, 1.0)
            if c.op is not Op.CMP or any(x.ty.kind is TypeKind.BAND for x in c.args):
                continue
            op = FLIP[c.attr] if negate else c.attr
            for ref, other, rel in ((c.args[0], c.args[1], op), (c.args[1], c.args[0], MIRROR[op])):
                if ref.op is Op.REF and (not inner or ref.ty.level < ROLLOUT):
                    lo, hi = self.of(other, inner, depth)
                    bound = {">": (lo, INF), ">=": (lo, INF), "<": (-INF, hi), "<=": (-INF, hi), "==": (lo, hi)}
                    if rel in bound:
                        old = out.get(ref.attr, FULL)
                        new = bound[rel]
                        out[ref.attr] = (max(old[0], new[0]), min(old[1], new[1]))
        return out

    def narrowed(self, guard: Node, inner: bool, depth: int, value, negate: bool = False):
        """`value()` under what the guard implies; None when the guard cannot hold."""
        if negate and guard.op is not Op.CMP:
            return value()
        found = self.facts(guard, inner, depth, negate)
        if found is None:
            return None
        with self.assuming(found):
            return value()

    def guard_facts(self, st, inner: bool = False, depth: int = 0) -> dict | None:
        """What a statement's `on` and `when` imply where it applies; None when it never applies."""
        out: dict = {}
        for g in (st.on, st.when):
            if g is None:
                continue
            if g.ty.kind is TypeKind.INDEX:  # `on argmin(x where M)`: the rollout is in M
                if g.op is not Op.REDUCE:
                    continue
                g = g.args[1]
            found = self.facts(g, inner, depth)
            if found is None:
                return None
            for key, (lo, hi) in found.items():
                old = out.get(key, FULL)
                out[key] = (max(old[0], lo), min(old[1], hi))
        return out

    def contribution(self, st, inner: bool = False, depth: int = 0) -> tuple[float, float]:
        """A term's value: its expression where it applies, 0 where it does not."""
        found = self.guard_facts(st, inner, depth)
        if found is None:
            return 0.0, 0.0
        with self.assuming(found):
            lo, hi = self.of(st.expr, inner, depth + 1)
        if self.always(st, inner, depth):
            return lo, hi
        return min(lo, 0.0), max(hi, 0.0)

    def always(self, st, inner: bool = False, depth: int = 0) -> bool:
        """The statement applies to every rollout: its guards hold and nothing it reads is missing."""
        guards = [g for g in (st.on, st.when) if g is not None]
        return self.never_missing(st.expr) and all(
            g.ty.kind is not TypeKind.INDEX and self.of(g, inner, depth) == (1.0, 1.0) and self.never_missing(g)
            for g in guards)

    def never_missing(self, n: Node, depth: int = 0) -> bool:
        if n.ty.maybe_missing or depth > MAX_DEPTH:
            return False
        if n.op is Op.CONST:
            return True
        if n.op is Op.REF:
            ns, name = n.attr
            if ns == "var" and name in self.defs:
                return self.never_missing(self.defs[name], depth + 1)
            return ns in ("param", "input", "builtin", "state", "prompt_state") or (ns == "var" and name in self.terms)
        safe = n.op in (Op.NEG, Op.NOT, Op.AND, Op.OR, Op.CMP, Op.COND, Op.FALLBACK) or (
            n.op is Op.BIN and n.attr in ("+", "-", "*")) or (n.op is Op.CALL and n.attr in NEVER_MISSING_CALLS)
        return safe and all(self.never_missing(x, depth + 1) for x in n.args)

    # ------------------------------------------------------------------ the shaped reward
    def shaped(self) -> tuple[float, float]:
        """Bounds of the shaped reward of the rollout in question, in a group that is not skipped:
        terms summed, clamps lift the floor, factors in [0, 1] scale only rewards > 0."""
        if self.ir.result is not None:  # a missing result leaves the reward as it came in
            out = self.of(self.ir.result)
            return out if self.never_missing(self.ir.result) else hull(out, self.own)
        lo, hi = self.own
        for st in self.ir.steps:
            if st.kind not in (StepKind.TERM, StepKind.CLAMP, StepKind.FACTOR):
                continue
            if st.kind is StepKind.TERM:
                tlo, thi = self.contribution(st)
                lo, hi = lo + tlo, hi + thi
                continue
            found = self.guard_facts(st)
            if found is None:
                continue
            with self.assuming(found):
                vlo, vhi = self.of(st.expr)
            if st.kind is StepKind.CLAMP:
                lo, hi = (max(lo, vlo) if self.always(st) else lo), max(hi, vhi)
            elif vlo < 0 or vhi > 1:
                return FULL
            else:
                lo = lo * vlo if lo > 0 else lo  # a factor not applied leaves the reward as it is
        return lo, hi


def _when_facts(b: Bounds, ensure: Ensure) -> dict | None:
    return {} if ensure.when is None else b.facts(ensure.when, False, 0)


def _bounds(ir: ShaperIR, ensure: Ensure, own: float | None = None, everyone: bool = False):
    """The shaped interval under the clause's `when`, or None when the `when` cannot hold."""
    b = Bounds(ir, ensure.over, own, everyone)
    found = _when_facts(b, ensure)
    if found is None:
        return None
    with b.assuming(found):
        return b.shaped()


def decide(ir: ShaperIR, ensure: Ensure) -> tuple[str, str] | None:
    """('proved' | 'refuted', how) when intervals decide the clause, else None (left to --prove).

    A refutation needs every group to break the clause, so it is claimed only without a `when`, a
    skip or a `result` that may be missing.
    """
    if ensure.prop == "shorter_not_worse":
        return None
    total = ensure.when is None and not ir.skips and (ir.result is None or Bounds(ir).never_missing(ir.result))
    if ensure.prop == "within":
        got = _bounds(ir, ensure)
        if got is None:
            return None
        lo, hi = got
        if ir.skips:  # a skipped group keeps its input rewards
            lo, hi = hull((lo, hi), REWARD[ensure.over])
        if lo >= ensure.lo and hi <= ensure.hi:
            return "proved", f"static: every shaped reward lies in [{lo:g}, {hi:g}]"
        if total and (lo > ensure.hi or hi < ensure.lo):
            return "refuted", (f"static: every shaped reward lies in [{lo:g}, {hi:g}], "
                               f"outside [{ensure.lo:g}, {ensure.hi:g}]")
        return None
    if ensure.prop == "order_kept":
        if ensure.over != "binary":
            return None
        wrong, right = _bounds(ir, ensure, 0.0), _bounds(ir, ensure, 1.0)
        if wrong is None or right is None:
            return None
        text = f"a wrong rollout ends in [{wrong[0]:g}, {wrong[1]:g}] and a correct one in [{right[0]:g}, {right[1]:g}]"
        if right[0] >= wrong[1]:
            return "proved", f"static, every group size: {text}"
        if total and right[1] < wrong[0]:
            return "refuted", f"static: {text}"
        return None
    got = _bounds(ir, ensure, 0.0, everyone=True)
    if got == (0.0, 0.0):
        return "proved", "static, every group size: a rollout of an all-zero group ends at exactly 0"
    if got is not None and total and (got[0] > 0 or got[1] < 0):
        return "refuted", f"static: a rollout of an all-zero group ends in [{got[0]:g}, {got[1]:g}]"
    return None
