"""AST of the .shape language. Spans are excluded from equality so tests compare structure."""

from __future__ import annotations

from dataclasses import dataclass, field

from .source import Span

_SPAN = field(default_factory=Span.none, compare=False, repr=False)


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True, slots=True)
class Number:
    value: float
    text: str
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class String:
    value: str
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Bool:
    value: bool
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Name:
    id: str
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class GetAttr:
    obj: "Expr"
    attr: str
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Arg:
    value: "Expr"
    where: "Expr | None" = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Call:
    func: "Expr"
    args: tuple[Arg, ...]
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Unary:
    operator: str  # "-" or "not"
    operand: "Expr"
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Binary:
    operator: str  # + - * / ** and or ?? == != < <= > >=
    left: "Expr"
    right: "Expr"
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Cond:
    test: "Expr"
    then: "Expr"
    orelse: "Expr"
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class BandLit:
    a: "Expr"
    b: "Expr"
    f: "Expr"
    span: Span = _SPAN


Expr = Number | String | Bool | Name | GetAttr | Call | Unary | Binary | Cond | BandLit


# --------------------------------------------------------------- declarations
@dataclass(frozen=True, slots=True)
class PType:
    name: str  # int float bool band tokens chars seconds calls, or "enum"
    optional: bool = False
    members: tuple[str, ...] = ()
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Constraint:
    operator: str  # >= > <= < or "in"
    lo: Expr
    hi: Expr | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: PType
    constraint: Constraint | None = None
    default: Expr | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class MetaType:
    kind: str  # scalar | list | record
    type: str = ""
    fields: tuple[Field, ...] = ()
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Input:
    name: str
    type: str
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Meta:
    name: str
    type: MetaType
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    expr: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Let:
    name: str
    expr: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Gate:
    name: str
    expr: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class GateRule:
    verdict: str  # open | closed
    reason: str
    when: Expr | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class GateRules:
    name: str
    rules: tuple[GateRule, ...]
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str
    mode: str  # when | unless
    cond: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Term:
    name: str
    expr: Expr
    on: Expr | None = None
    when: Expr | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Factor:
    name: str
    expr: Expr
    on: Expr | None = None
    when: Expr | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Clamp:
    lo: Expr
    on: Expr | None = None
    when: Expr | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class State:
    name: str
    type: str
    init: Expr
    update: Expr
    span: Span = _SPAN
    per_prompt: bool = False  # `state x: float per prompt = ...`: one value per prompt, updated after the body


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    expr: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Result:
    expr: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Drop:
    """`drop when COND`: the rollouts where COND holds leave the batch (Result.kept)."""

    cond: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Ensure:
    """`ensure PROPERTY`: an invariant the shaper promises; `shapec check --prove` decides it."""

    prop: str  # order_kept | all_wrong_unchanged | within | shorter_not_worse
    lo: Expr | None = None  # within [lo, hi]
    hi: Expr | None = None
    x: str | None = None  # shorter_not_worse(x)
    on: Expr | None = None  # the rollouts compared (shorter_not_worse)
    over: str | None = None  # reward domain, narrower than the shaper's `requires`
    when: Expr | None = None  # param condition under which the property is promised
    span: Span = _SPAN


Stmt = (Input | Meta | Channel | Let | Gate | GateRules | Skip | Term | Factor | Clamp | State | Metric | Result
        | Drop | Ensure)


@dataclass(frozen=True, slots=True)
class Contract:
    kind: str  # requires | produces
    value: str  # binary unit nonneg real advantage
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Shaper:
    name: str
    params: tuple[Param, ...]
    contracts: tuple[Contract, ...]
    doc: str | None
    body: tuple[Stmt, ...]
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class FnDef:
    name: str
    params: tuple[str, ...]
    body: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Import:
    target: str
    is_path: bool
    alias: str | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class KwArg:
    name: str
    value: Expr
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Stage:
    ref: str  # dotted name
    args: tuple[KwArg, ...] | None = None
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Pipeline:
    name: str
    stages: tuple[Stage, ...]
    span: Span = _SPAN


Item = Import | FnDef | Shaper | Pipeline


@dataclass(frozen=True, slots=True)
class Comment:
    """A `#` comment: kept for the formatter, invisible to equality and to the checker."""

    text: str
    span: Span = _SPAN


@dataclass(frozen=True, slots=True)
class Module:
    doc: str | None
    items: tuple[Item, ...]
    span: Span = _SPAN
    comments: tuple[Comment, ...] = field(default=(), compare=False, repr=False)
