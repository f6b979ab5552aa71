"""Decides every property of every shaper: static intervals, then z3, then randomised search."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..ir.nodes import Node, Op, PipelineIR, ShaperIR, Type
from . import static
from .properties import Goal, goals
from .search import Found, SearchStats, breaking_values, evaluate, search

ARGUMENT = ("symbolic, every group size: the rollouts compared are any members of a group, and every "
            "group- and batch-level value is a free variable constrained only by what holds in any group "
            "containing them, so no group of any size can differ")
TRIALS = 400


class MissingExtra(RuntimeError):
    """z3 is not installed: `--prove` needs the optional extra."""

    def __init__(self):
        super().__init__("shapec check --prove needs z3: pip install 'shapec[prove]' (the `prove` extra, "
                         "z3-solver>=4.12)")


@dataclass
class Verdict:
    shaper: ShaperIR
    goal: Goal
    status: str  # proved | refuted | unknown
    how: str
    found: Found | None = None
    stats: SearchStats | None = None
    breaks: dict = field(default_factory=dict)
    blame: object = None  # the Step (or "result") whose removal keeps the property in the counterexample


def decide(ir: ShaperIR, goal: Goal, trials: int = TRIALS) -> Verdict:
    from .symbolic import prove

    cheap = static.decide(ir, goal.ensure)
    if cheap is not None and cheap[0] == "proved":
        return Verdict(ir, goal, "proved", cheap[1])
    symbolic = prove(ir, goal.ensure)
    if symbolic == "proved":
        return Verdict(ir, goal, "proved", ARGUMENT)
    found, stats = search(ir, goal.ensure, trials)
    if found is None:
        why = ("z3 found a model of the abstraction (group values left free), which may not be a real group"
               if symbolic == "open" else "z3 gave up")
        return Verdict(ir, goal, "unknown", f"{why}; random search found no counterexample", stats=stats)
    return Verdict(ir, goal, "refuted", "randomised search on the reference interpreter, minimised", found, stats,
                   breaking_values(ir, goal.ensure, found), blame(ir, goal, found))


def blame(ir: ShaperIR, goal: Goal, found: Found):
    """The first term, clamp, factor or result without which the counterexample keeps the property."""
    for st in [s for s in ir.steps if s.kind in ("term", "clamp", "factor")] + ["result"]:
        if st == "result":
            if ir.result is None:
                break
            trial = replace(ir, result=None)
        else:  # the statement never applies; its name stays defined for the statements reading it
            off = replace(st, when=Node(Op.CONST, (), Type("bool"), 0.0))
            trial = replace(ir, steps=tuple(off if s is st else s for s in ir.steps))
        try:
            got = evaluate(trial, goal.ensure, found.case)
        except (KeyError, AssertionError):
            continue
        if got is None:
            return st
    return None


def analyse(ir: ShaperIR | PipelineIR, trials: int = TRIALS) -> list[Verdict]:
    stages = [s for s, _ in ir.stages] if isinstance(ir, PipelineIR) else [ir]
    return [decide(s, g, trials) for s in stages for g in goals(s)]
