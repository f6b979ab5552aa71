"""Contracts and ordering: term/clamp/factor order, the contract a shaper provably keeps (asked of
what is known of its values, contracts.ShaperFacts), and the order of a pipeline's stages."""

from __future__ import annotations

from ..syntax import ast as A
from . import contracts as C
from ..ir.nodes import StepKind


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


def check_order(order, error) -> None:
    """E504 and E506 over the (kind, span) of a body's terms, clamps, factors and result, in order."""
    rank = {"term": 0, "clamp": 1, "factor": 2}
    seen = -1
    has_result = any(k == "result" for k, _ in order)
    for kind, span in order:
        if has_result and kind in ("clamp", "factor"):
            error("E506", f"a shaper with `result` spells out its own combination; drop this {kind} "
                  "and write it into the result", span)
            continue
        if kind == "result":
            continue
        if rank[kind] < seen:
            after = [k for k, r in rank.items() if r == seen][0]
            error("E504", f"{kind} after {after}: a shaper applies terms, then clamps, then factors", span)
        seen = max(seen, rank[kind])


def shaper_contract(facts: C.ShaperFacts, error, requires, produces, steps, factors, result, s) -> str:
    """The contract a shaper's rewards keep (E501, E502, E402 where it breaks what it declares)."""
    terms = [st for st in steps if st.kind is StepKind.TERM]
    clamps = [st for st in steps if st.kind is StepKind.CLAMP]
    hard_clamp = any(c.on is None and c.when is None and facts.range(c.expr)[0] >= 0 for c in clamps)
    term_lo = min([facts.range(t.expr)[0] for t in terms] + [0.0])
    term_hi = max([facts.range(t.expr)[1] for t in terms] + [0.0])
    base_nonneg = hard_clamp or (requires != "real" and term_lo >= 0)  # a clamp >= 0 holds for any reward
    if requires != "real" and not base_nonneg and produces not in ("real", "advantage"):
        bad = next(t for t in terms if facts.range(t.expr)[0] < 0)
        span = next((st.span for st in s.body if isinstance(st, A.Term) and st.name == bad.name), s.span)
        error("E501", f"term {bad.name!r} may push a {requires} reward below 0; add `clamp >= 0` after "
              "the terms, or declare `produces real`", span)
    for name, on_n, span in factors:
        if base_nonneg or (not terms and on_n is not None and facts.implies_positive(on_n)):
            continue
        error("E502", f"factor {name!r} may scale a negative reward, which would raise the reward of "
              "longer rollouts; clamp at 0 first or apply it `on` rollouts with reward > 0", span)
    if result is not None:
        inferred = "real"
    elif not terms and not clamps and not factors:
        inferred = requires
    elif base_nonneg:
        inferred = "unit" if contract_le(requires, "unit") and term_hi <= 0 else "nonneg"
    else:
        inferred = "real"
    if inferred != "binary" and C.keeps_binary(facts, steps, result):
        inferred = "binary"
    if produces is None:
        return inferred
    if produces != "advantage" and not contract_le(inferred, produces):
        span = next(c.span for c in s.contracts if c.kind == "produces")
        error("E402", f"shaper {s.name!r} declares `produces {produces}` but its rewards are only known "
              f"to be {inferred}", span)
    return produces
