"""Decides every property of every shaper: static intervals, then z3, then randomised search."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..ir.nodes import PARAM, Node, Op, PipelineIR, ShaperIR, Type, walk, StepKind, TypeKind
from ..syntax.source import Span
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
    pipeline: str | None = None  # a stage's verdict: the pipeline that calls it, where, with what
    at: Span | None = None
    arguments: dict = field(default_factory=dict)

    @property
    def who(self) -> str:
        return self.shaper.name if self.pipeline is None else f"pipeline {self.pipeline}, stage {self.shaper.name}"


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
    for st in [s for s in ir.steps if s.kind in (StepKind.TERM, StepKind.CLAMP, StepKind.FACTOR)] + ["result"]:
        if st == "result":
            if ir.result is None:
                break
            trial = replace(ir, result=None)
        else:  # the statement never applies; its name stays defined for the statements reading it
            off = replace(st, when=Node(Op.CONST, (), Type(TypeKind.BOOL), 0.0))
            trial = replace(ir, steps=tuple(off if s is st else s for s in ir.steps))
        try:
            got = evaluate(trial, goal.ensure, found.case)
        except (KeyError, AssertionError):
            continue
        if got is None:
            return st
    return None


def analyse(ir: ShaperIR, trials: int = TRIALS) -> list[Verdict]:
    return [decide(ir, g, trials) for g in goals(ir) + outside_defaults(ir)]


def outside_defaults(ir: ShaperIR) -> list[Goal]:
    """Each declared clause whose `when` the defaults do not meet, as a goal held at the defaults: a
    user who keeps them is promised nothing by it, and report.py warns (W705) where it breaks there.
    A shaper with a required param has no defaults to hold."""
    from ..ir.partial import ParamValues
    from ..runtime.params import ParamError, resolve

    try:
        columns = resolve(ir, {}).columns(1)
    except ParamError:
        return []
    values = ParamValues(ir, columns.get)
    defaults = _arguments_hold(ir, {s.name: s.default for s in ir.params})
    return [Goal(replace(e, when=defaults), False, True, at_defaults=e)
            for e in ir.ensures if e.when is not None and values.always(e.when, 0.0)]


def defaults_read(ir: ShaperIR, when: Node) -> dict:
    """The params a `when` reads, at their defaults (what W705 names)."""
    names = {n.attr[1] for n in walk(when) if n.op is Op.REF and n.attr[0] == "param"}
    return {s.name: s.default for s in ir.params if s.name in names}


def analyse_stages(p: PipelineIR, trials: int = TRIALS, decided: tuple[ShaperIR, ...] = ()) -> list[Verdict]:
    """Every property of every stage as the pipeline calls it: its call arguments join each clause's
    `when`, so the prover and the search hold them at the values the pipeline passes (a band argument
    is not a comparable value; its stage is decided for every band). A stage in `decided` called
    without arguments is left out: its own verdicts say it all."""
    out = []
    for (stage, args), span in zip(p.stages, p.spans or (None,) * len(p.stages)):
        if not args and any(stage is d for d in decided):
            continue
        for g in goals(stage):
            v = decide(stage, called_with(stage, args, g), trials)
            out.append(replace(v, goal=g, pipeline=p.name, at=span, arguments=args))
    return out


def called_with(stage: ShaperIR, args: dict, g: Goal) -> Goal:
    """The goal as a pipeline's call decides it: the arguments join its `when`."""
    fixed = _arguments_hold(stage, args)
    when = fixed if g.ensure.when is None else g.ensure.when if fixed is None else _and(g.ensure.when, fixed)
    return replace(g, ensure=replace(g.ensure, when=when))


def _arguments_hold(stage: ShaperIR, args: dict) -> Node | None:
    """`param == value` for each call argument, joined by `and`; None when there is none."""
    out = None
    for spec in stage.params:
        if spec.name not in args or spec.kind == "band" or args[spec.name] is None:
            continue
        value = args[spec.name]
        number = float(spec.members.index(value)) if spec.kind == "enum" else float(value)
        ref = Node(Op.REF, (), Type(spec.type_kind, PARAM, members=spec.members), ("param", spec.name))
        test = Node(Op.CMP, (ref, Node(Op.CONST, (), Type(TypeKind.NUM), number)), Type(TypeKind.BOOL, PARAM), "==")
        out = test if out is None else _and(out, test)
    return out


def _and(a: Node, b: Node) -> Node:
    return Node(Op.AND, (a, b), Type(TypeKind.BOOL, PARAM))
