"""Contracts and ordering: term/clamp/factor order, the contracts a shaper provably keeps (interval
analysis of its values), and the order of a pipeline's stages."""

from __future__ import annotations

import math


from ..syntax import ast as A
from . import contracts as C
from .shared import INF, memoised
from ..ir.intervals import node_interval
from ..ir.nodes import Node, Op, UNITS, StepKind, TypeKind


CONTRACTS = ("binary", "unit", "nonneg", "real")


def contract_le(a: str, b: str) -> bool:
    """binary ⊂ unit ⊂ nonneg ⊂ real."""
    return CONTRACTS.index(a) <= CONTRACTS.index(b)


def stage_order(checker, stages: list) -> bool:
    """E505 and E401 over a pipeline's (shaper, args, span) stages; False when either is reported."""
    ok = True
    contract = None  # what the pipeline's input is, is the first stage's to require
    for i, (shaper, _, span) in enumerate(stages):
        if shaper.produces == "advantage" and i != len(stages) - 1:
            checker.error("E505", f"advantage stage {shaper.name!r} must be the last stage of the pipeline", span)
            ok = False
        if contract in CONTRACTS and not contract_le(contract, shaper.requires):
            prev = stages[i - 1][0].name
            checker.error(
                "E401",
                f"shaper {shaper.name!r} requires {shaper.requires} rewards but follows {prev!r}, which "
                f"produces {contract} rewards; {C.reorder_advice(stages, i)}",
                span,
            )
            ok = False
        contract = shaper.produces
    return ok


class OrderingPass:
    """The contract and ordering checks of ShaperChecker."""

    def check_order(self, order):
        rank = {"term": 0, "clamp": 1, "factor": 2}
        seen = -1
        has_result = any(k == "result" for k, _ in order)
        for kind, span in order:
            if has_result and kind in ("clamp", "factor"):
                self.error("E506", f"a shaper with `result` spells out its own combination; drop this {kind} "
                           "and write it into the result", span)
                continue
            if kind == "result":
                continue
            if rank[kind] < seen:
                after = [k for k, r in rank.items() if r == seen][0]
                self.error("E504", f"{kind} after {after}: a shaper applies terms, then clamps, then factors", span)
            seen = max(seen, rank[kind])

    def contracts(self, requires, produces, steps, factors, result, s) -> str:
        terms = [st for st in steps if st.kind is StepKind.TERM]
        clamps = [st for st in steps if st.kind is StepKind.CLAMP]
        hard_clamp = any(c.on is None and c.when is None and self.range(c.expr)[0] >= 0 for c in clamps)
        term_lo = min([self.range(t.expr)[0] for t in terms] + [0.0])
        term_hi = max([self.range(t.expr)[1] for t in terms] + [0.0])
        base_nonneg = hard_clamp or (requires != "real" and term_lo >= 0)  # a clamp >= 0 holds for any reward
        if requires != "real" and not base_nonneg and produces not in ("real", "advantage"):
            bad = next(t for t in terms if self.range(t.expr)[0] < 0)
            span = next((st.span for st in s.body if isinstance(st, A.Term) and st.name == bad.name), s.span)
            self.error("E501", f"term {bad.name!r} may push a {requires} reward below 0; add `clamp >= 0` after "
                       "the terms, or declare `produces real`", span)
        for name, on_n, span in factors:
            if base_nonneg or (not terms and on_n is not None and self.implies_positive(on_n)):
                continue
            self.error("E502", f"factor {name!r} may scale a negative reward, which would raise the reward of "
                       "longer rollouts; clamp at 0 first or apply it `on` rollouts with reward > 0", span)
        if result is not None:
            inferred = "real"
        elif not terms and not clamps and not factors:
            inferred = requires
        elif base_nonneg:
            inferred = "unit" if contract_le(requires, "unit") and term_hi <= 0 else "nonneg"
        else:
            inferred = "real"
        if inferred != "binary" and C.keeps_binary(self, steps, result):
            inferred = "binary"
        if produces is None:
            return inferred
        if produces != "advantage" and not contract_le(inferred, produces):
            span = next(c.span for c in s.contracts if c.kind == "produces")
            self.error("E402", f"shaper {s.name!r} declares `produces {produces}` but its rewards are only known "
                       f"to be {inferred}", span)
        return produces

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
            related = C.ratio_bounds(self, node)
            if related is not None:  # both bound the value: keep the tighter of each end
                out = (max(out[0], related[0]), min(out[1], related[1]))
        return out
