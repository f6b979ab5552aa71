"""Typed IR: what the checker produces and both backends (interpreter, numba) consume.

Every value is a float64 at run time. Booleans are three-valued (1.0 true, 0.0 false,
NaN missing); a *missing* value comes from an empty reduction or absent metadata and
propagates, so whatever depends on it fails closed (a term is not applied, a gate is closed).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from ..syntax.source import Span

# value levels, ordered: a value may be used wherever a higher level is expected. Params sit above
# batch values because a param may differ per group (per-agent overrides run in one call).
CONST, BATCH, PARAM, GROUP, ROLLOUT = 0, 1, 2, 3, 4
LEVEL_NAMES = {CONST: "constant", BATCH: "batch", PARAM: "param", GROUP: "group", ROLLOUT: "rollout"}
UNITS = ("tokens", "chars", "seconds", "calls")
MAX_EXACT_INT = 2 ** 53  # the largest integer a float64 (every value at run time) holds exactly, with all below it


class StrictEnum(enum.Enum):
    """Compared by identity (`node.op is Op.CMP`); comparing a member with a string raises, so a
    misspelt name fails loudly instead of comparing unequal."""

    def __eq__(self, other):
        if isinstance(other, str):
            name = f"{type(self).__name__}.{self.name}"
            raise TypeError(f"compare {name} by identity (`is {name}`), not with the string {other!r}")
        return self is other

    __hash__ = enum.Enum.__hash__


class Op(StrictEnum):
    """What a Node computes (its `args` and `attr` are read by this)."""

    CONST = "const"  # attr: the value
    REF = "ref"  # attr: (namespace, name)
    NEG = "neg"
    NOT = "not"
    BIN = "bin"  # attr: + - * / **
    CMP = "cmp"  # attr: == != < <= > >=
    AND = "and"
    OR = "or"
    COND = "cond"  # c ? a : b
    FALLBACK = "fallback"  # a ?? b
    CALL = "call"  # attr: the builtin's name
    REDUCE = "reduce"  # attr: (reduction, list name or None); args: value, mask, extras
    BREDUCE = "breduce"  # attr: reduction over the batch
    BAND = "band"  # band(x, band)
    BANDLIT = "bandlit"  # {a, b, f}
    BANDFIELD = "bandfield"  # attr: a, b or f of a band
    BANDREF = "bandref"  # attr: (namespace, path) of a band value
    BANDCOND = "bandcond"  # c ? band : band
    BANDFALLBACK = "bandfallback"  # band ?? band
    STR = "str"  # attr: a string literal (enum params compare with it)
    META = "meta"
    SKIPPED = "skipped"  # a value a skipped group never computes
    POISON = "poison"  # the value of an expression that failed to check


class StepKind(StrictEnum):
    """What a Step of a shaper body is; the value is the statement's keyword."""

    LET = "let"
    GATE = "gate"
    GATERULES = "gaterules"  # a gate decided by a list of rules
    SKIP = "skip"
    TERM = "term"
    FACTOR = "factor"
    CLAMP = "clamp"
    STATE = "state"


class TypeKind(StrictEnum):
    """What one element of a value is; the value is the name diagnostics print."""

    NUM = "num"  # a number
    BOOL = "bool"  # three-valued: 1.0 true, 0.0 false, NaN missing
    INDEX = "index"  # a rollout's position in its group, from argmin/argmax
    BAND = "band"  # a band {a, b, f}
    ENUM = "enum"  # an enum param: the index of its member in `members`
    STR = "str"  # a string literal, only ever compared with an enum param
    META = "meta"  # the name of a metadata declaration, before one of its fields is read
    POISON = "poison"  # the type of an expression that failed to check


@dataclass(frozen=True, slots=True)
class Type:
    """Element kind, unit, level and whether it may be missing."""

    kind: TypeKind
    level: int = CONST
    unit: str | None = None  # None dimensionless; "lit" a bare literal that adopts a unit
    items: str | None = None  # meta list name when the value ranges over its items
    maybe_missing: bool = False
    members: tuple[str, ...] = ()

    def describe(self) -> str:
        where = f"item of {self.items}" if self.items else LEVEL_NAMES[self.level]
        unit = f" {self.unit}" if self.unit not in (None, "lit") else ""
        return f"{where} {self.kind.value}{unit}"


POISON = Type(TypeKind.POISON)


@dataclass(frozen=True, slots=True)
class Node:
    """One typed IR expression. `op` (an Op) selects the meaning of `args` and `attr`:

    CONST(attr=value) | REF(attr=(namespace, name)) | NEG(x) | NOT(x) | BIN(a, b, ...; attr=operator)
    CMP(a, b; attr=operator) | AND(a, b, ...) | OR(a, b, ...) | COND(c, a, b) | FALLBACK(a, b)

    BIN with + or *, AND and OR are chains of two or more args, the left fold `(a op b) op c ...`
    (float arithmetic is not associative: that order is the value); BIN with - / ** has two.
    CALL(*args; attr=builtin) | REDUCE(arg, mask, *extra; attr=(reduction, over)) | BREDUCE(arg, mask; attr=reduction)
    BAND(x, band) | BANDLIT(a, b, f) | BANDFIELD(band; attr=field) | BANDREF(attr=meta path)
    """

    op: Op
    args: tuple["Node", ...]
    ty: Type
    attr: Any = None
    span: Span = field(default_factory=Span.none, compare=False, repr=False)

    def key(self) -> tuple:
        """Structural identity, used to share equal reductions (CSE)."""
        return (self.op, self.attr, tuple(a.key() for a in self.args))


@dataclass(frozen=True, slots=True)
class ParamSpec:
    name: str
    kind: str  # int float bool band enum
    unit: str | None
    default: Any  # float, bool, str (enum member), tuple (band), or None (optional, missing)
    required: bool
    optional: bool
    lo: float | None = None
    lo_strict: bool = False
    hi: float | None = None
    hi_strict: bool = False
    members: tuple[str, ...] = ()

    @property
    def type_kind(self) -> TypeKind:
        """The element kind the param's value has in an expression (a unit param is a number)."""
        return {"band": TypeKind.BAND, "enum": TypeKind.ENUM, "bool": TypeKind.BOOL}.get(self.kind, TypeKind.NUM)

    def interval(self) -> tuple[float, float]:
        """The declared range as a closed interval: a strict bound moves to the next float inside, so
        `target: tokens > 0` is never 0 to a division."""
        lo = -math.inf if self.lo is None else math.nextafter(self.lo, math.inf) if self.lo_strict else self.lo
        hi = math.inf if self.hi is None else math.nextafter(self.hi, -math.inf) if self.hi_strict else self.hi
        return float(lo), float(hi)


@dataclass(frozen=True, slots=True)
class MetaSpec:
    name: str
    kind: str  # scalar | list | record
    type: str = "float"
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Step:
    """One statement of a shaper body, in evaluation order."""

    kind: StepKind
    name: str
    expr: Node | None = None
    on: Node | None = None
    when: Node | None = None
    rules: tuple[tuple[str, str, Node | None], ...] = ()  # (verdict, reason, when) for gaterules
    mode: str = ""  # skip: when | unless


@dataclass(frozen=True, slots=True)
class Ensure:
    """A checked `ensure` clause: a property the shaper promises (decided by `shapec check --prove`).

    `over` is the reward domain the property quantifies over (a contract name); `when` a param-level
    condition (None: every param value in the declared ranges); `x` a rollout number and `on` a
    rollout mask for shorter_not_worse; `lo`/`hi` the bounds of within.
    """

    prop: str
    over: str
    lo: float | None = None
    hi: float | None = None
    x: Node | None = None
    on: Node | None = None
    when: Node | None = None
    x_name: str | None = None
    span: Span = field(default_factory=Span.none, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ShaperIR:
    name: str
    doc: str | None
    params: tuple[ParamSpec, ...]
    inputs: tuple[tuple[str, str], ...]  # (name, type)
    metas: tuple[MetaSpec, ...]
    channels: tuple[tuple[str, Node], ...]
    batch_steps: tuple[Step, ...]  # batch-level lets, states and gates, evaluated once per call
    steps: tuple[Step, ...]  # group and rollout statements, in source order
    skips: tuple[Step, ...]  # config skips (param-only) run before the binary check, data skips after
    requires: str  # binary unit nonneg real
    produces: str  # binary unit nonneg real advantage
    result: Node | None
    metrics: tuple[tuple[str, Node], ...]
    gate_reasons: dict[str, tuple[str, ...]]
    terms: tuple[str, ...]
    factors: tuple[str, ...]
    states: tuple[tuple[str, float], ...]
    source: str = ""
    filename: str = ""
    ensures: tuple[Ensure, ...] = ()
    drop: Node | None = None  # `drop when`: a rollout bool, the rollouts that leave the batch where 1
    # `state x: float per prompt = init update expr`: (name, init, update), one value per prompt (the call's
    # `prompts=` key of each group), read as ("prompt_state", name) at the value the prompt entered the call
    # with; each update is a group value computed after the body, kept where the group is shaped and finite
    prompt_states: tuple[tuple[str, float, Node], ...] = ()
    # index = skip code: "" (shaped), each skip, "non_binary" when binary is required, "validation";
    # derived once here because every call of both backends reads it
    skip_reasons: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self):
        binary = ("non_binary",) if self.requires == "binary" else ()
        object.__setattr__(self, "skip_reasons", ("", *(s.name for s in self.skips), *binary, "validation"))


@dataclass(frozen=True, slots=True)
class PipelineIR:
    name: str
    stages: tuple[tuple[ShaperIR, dict[str, Any]], ...]  # shaper and its call arguments
    source: str = ""
    filename: str = ""
    spans: tuple[Span, ...] = field(default=(), compare=False)  # each stage's place in the pipeline line


# ------------------------------------------------------------------------- walks
def walk(node: Node):
    """Every node under node, parents first; a stack, not recursion, since expressions can be deep."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.args))


def roots(ir: ShaperIR):
    """Every expression a statement, channel, result or metric of the shaper holds."""
    yield from (node for _, node in ir.channels)
    for step in (*ir.batch_steps, *ir.steps, *ir.skips):
        yield from (n for n in (step.expr, step.on, step.when, *(when for _, _, when in step.rules)) if n is not None)
    yield from (n for n in (ir.result, ir.drop) if n is not None)
    yield from (update for _, _, update in ir.prompt_states)
    yield from (node for _, node in ir.metrics)


def every_node(ir: ShaperIR):
    """Every node of the shaper once, though inlined helpers share nodes between expressions."""
    seen: set[int] = set()
    stack = list(roots(ir))
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            yield n
            stack.extend(a for a in n.args if isinstance(a, Node))


def post_order(root, children, seen):
    """Every node under root after its children, each once: a stack, not recursion, since
    expressions can be deep. A node whose id is in `seen` (which the caller fills as each node is
    yielded) is skipped, with what is under it."""
    stack = [(root, False)]
    while stack:
        n, children_done = stack.pop()
        if id(n) in seen:
            continue
        if not children_done:
            stack.append((n, True))
            stack.extend((c, False) for c in children(n) if id(c) not in seen)
            continue
        yield n


def steps_nodes(ir: ShaperIR):
    """Every expression of a shaper, with the statement it belongs to."""
    for _, node in ir.channels:
        yield node
    for step in (*ir.batch_steps, *ir.skips, *ir.steps):
        for n in (step.expr, step.on, step.when):
            if n is not None:
                yield n
        for _, _, w in step.rules:
            if w is not None:
                yield w
    yield from (n for n in (ir.result, ir.drop) if n is not None)
    yield from (update for _, _, update in ir.prompt_states)
    for _, node in ir.metrics:
        yield node
