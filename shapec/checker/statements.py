"""One shaper body into ShaperIR: `ShaperChecker.run` lists the passes in order, and the walk over the
body has one method per kind of statement; name resolution (scopes.py) and typing (types.py) are mixed in."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from ..syntax import ast as A
from .shared import BAD, Binding, finite_const
from ..ir.nodes import BATCH, GROUP, Node, Op, PARAM, POISON, ParamSpec, ROLLOUT, ShaperIR, Step, Type, StepKind
from ..ir.nodes import TypeKind
from .contracts import ShaperFacts
from .ensure import check_ensure
from .ordering import CONTRACTS, check_order, shaper_contract
from .scopes import ScopesPass
from .types import TypesPass



def in_words(ty: Type) -> str:
    """A type as a user says it: 'one number per rollout', 'one boolean per group'."""
    what = {TypeKind.NUM: "number", TypeKind.BOOL: "boolean"}.get(ty.kind, ty.kind.value)
    if ty.unit not in (None, "lit"):
        what = f"{what} in {ty.unit}"
    if ty.items:
        return f"one {what} per item of {ty.items}"
    where = {ROLLOUT: "per rollout", GROUP: "per group", PARAM: "set by a param"}.get(ty.level, "for the whole batch")
    return f"one {what} {where}"


def batch_hint(ty: Type) -> str:
    """What turns a state update's value into one number per batch."""
    if ty.level == ROLLOUT and not ty.items:
        return "; reduce it over the batch with batch.mean(...), batch.max(...) or batch.sum(...)"
    if ty.level == GROUP or ty.items:
        return "; a state updates before groups are shaped, so it may use batch reductions of inputs, " \
               "channels, the reward and params, not group values"
    return ""


@dataclass
class Body:
    """What the walk over a shaper's statements collects, each list in source order."""

    inputs: list = field(default_factory=list)  # (name, type)
    metas: list = field(default_factory=list)
    channels: list = field(default_factory=list)  # (name, node)
    batch_steps: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    skips: list = field(default_factory=list)
    metrics: list = field(default_factory=list)  # (name, node)
    gate_reasons: dict = field(default_factory=dict)  # gate -> the reasons its codes name
    terms: list = field(default_factory=list)
    factors: list = field(default_factory=list)  # (name, on, span)
    states: list = field(default_factory=list)  # (name, initial value)
    prompt_updates: list = field(default_factory=list)  # (name, initial value, update): checked after the walk
    order: list = field(default_factory=list)  # (kind, span) of terms, clamps, factors and the result (E504)
    pending: list = field(default_factory=list)  # ensure clauses: checked once every name is defined
    result: Node | None = None
    drop: Node | None = None


class ShaperChecker(ScopesPass, TypesPass):
    """Checks one shaper body in source order."""

    def __init__(self, parent, shaper: A.Shaper, source: str, filename: str):
        """`parent`: the module's Checker (module.py), which collects the diagnostics."""
        self.p = parent
        self.s = shaper
        self.source = source
        self.filename = filename
        self.env: dict[str, Binding] = {}
        self.params: dict[str, ParamSpec] = {}
        self.fn_stack: list[str] = []
        self.metric_ctx = False
        self.state_ctx = ""  # the state whose update is being checked

    def error(self, code, message, span) -> Node:
        return self.p.error(code, message, span)

    def run(self) -> ShaperIR | None:
        """The checker's passes over one shaper, in order; None when any of them reported an error."""
        before = len(self.p.diags)
        requires, produces = self.declared_contracts()
        for prm in self.s.params:
            self.param(prm)
        self.builtins()
        self.facts = ShaperFacts(self.env, self.params, requires)
        b = Body()
        for st in self.s.body:  # names resolved (scopes.py) and expressions typed (types.py) as they come
            self.statement(st, b)
        prompt_states = tuple((name, value, self.prompt_update(name, upd)) for name, value, upd in b.prompt_updates)
        ensures = tuple(e for e in (check_ensure(self, st) for st in b.pending) if e is not None)
        check_order(b.order, self.error)
        produces = shaper_contract(self.facts, self.error, requires, produces, b.steps, b.factors, b.result, self.s)
        if len(self.p.diags) > before:
            return None
        config_skips = [k for k in b.skips if k.expr.ty.level <= PARAM]
        data_skips = [k for k in b.skips if k.expr.ty.level > PARAM]
        s = self.s
        return ShaperIR(
            name=s.name, doc=s.doc, params=tuple(self.params.values()), inputs=tuple(b.inputs),
            metas=tuple(b.metas), channels=tuple(b.channels), batch_steps=tuple(b.batch_steps), steps=tuple(b.steps),
            skips=tuple(config_skips + data_skips), requires=requires, produces=produces, result=b.result,
            drop=b.drop, metrics=tuple(b.metrics), gate_reasons=b.gate_reasons, terms=tuple(b.terms),
            factors=tuple(f for f, _, _ in b.factors), states=tuple(b.states), source=self.source,
            filename=self.filename, ensures=ensures, prompt_states=prompt_states,
        )

    def declared_contracts(self) -> tuple[str, str | None]:
        """(requires, produces) as the shaper declares them; unknown ones are E403."""
        requires, produces = "real", None
        for c in self.s.contracts:
            allowed = CONTRACTS + (("advantage",) if c.kind == "produces" else ())
            if c.value not in allowed:
                self.error("E403", f"unknown contract {c.value!r}; expected one of {', '.join(allowed)}", c.span)
            elif c.kind == "requires":
                requires = c.value
            else:
                produces = c.value
        return requires, produces

    @functools.singledispatchmethod
    def statement(self, st: A.Stmt, b: Body) -> None:
        """One statement of the body: its names defined, its expressions typed, its IR added to b."""
        raise TypeError(f"checker: unknown statement {type(st).__name__}")

    @statement.register
    def check_input(self, st: A.Input, b: Body) -> None:
        name = st.name
        typ = st.type
        ty = self.value_type(typ, st.span)
        if ty is POISON:
            self.poisoned(name, st.span)
        elif self.define(name, Node(Op.REF, (), replace(ty, level=ROLLOUT), ("input", name), st.span), "input", st.span):
            b.inputs.append((name, typ))

    @statement.register
    def check_meta(self, st: A.Meta, b: Body) -> None:
        name = st.name
        spec = self.meta(st)
        if spec is not None and name not in self.env:
            b.metas.append(spec)
            self.env[name] = Binding(Node(Op.META, (), Type(TypeKind.META), spec, st.span), "meta")
        elif spec is not None:
            self.error("E202", f"{name!r} is already defined", st.span)
        else:
            self.poisoned(name, st.span)

    @statement.register
    def check_channel(self, st: A.Channel, b: Body) -> None:
        name = st.name
        e = st.expr
        node = self.expr(e)
        if node.ty is not POISON:
            if node.ty.level != ROLLOUT or node.ty.items or self._uses_group(node):
                self.error("E303", f"channel {name!r} must be computed per rollout from inputs "
                           f"(got a {node.ty.describe()})", e.span)
            elif node.ty.kind is not TypeKind.NUM:
                self.error("E302", f"channel {name!r} must be a number", e.span)
        if self.define(name, Node(Op.REF, (), node.ty, ("var", name), st.span), "channel", st.span, node):
            b.channels.append((name, node))

    @statement.register
    def check_let(self, st: A.Let, b: Body) -> None:
        name = st.name
        e = st.expr
        node = self.expr(e)
        if node.ty.kind is TypeKind.BAND:
            self.define(name, node, "let", st.span, node)
            return
        if self.define(name, Node(Op.REF, (), node.ty, ("var", name), st.span), "let", st.span, node):
            step = Step(StepKind.LET, name, node)
            (b.batch_steps if node.ty.level == BATCH else b.steps).append(step)

    @statement.register
    def check_gate(self, st: A.Gate, b: Body) -> None:
        name = st.name
        e = st.expr
        node = self.expr(e)
        self.expect_bool(node, e.span, "a gate")
        ty = replace(node.ty, kind=TypeKind.BOOL) if node.ty is not POISON else node.ty
        if self.define(name, Node(Op.REF, (), ty, ("var", name), st.span), "gate", st.span, node):
            step = Step(StepKind.GATE, name, node)
            if ty.level == BATCH:
                b.batch_steps.append(step)
            else:
                b.steps.append(step)
            if ty is not POISON and ty.level < ROLLOUT:
                b.gate_reasons[name] = ("open", "closed", "missing")

    @statement.register
    def check_gate_rules(self, st: A.GateRules, b: Body) -> None:
        name = st.name
        checked = []
        for r in st.rules:
            when = None
            if r.when is not None:
                when = self.expr(r.when)
                self.expect_bool(when, r.when.span, "a gate rule")
                if when.ty is not POISON and when.ty.level == ROLLOUT:
                    self.error("E303", "gate rules decide per group; this condition is per rollout "
                               "(reduce it with any(), all() or count())", r.when.span)
            checked.append((r.verdict, r.reason, when))
        level = max([GROUP] + [w.ty.level for _, _, w in checked if w is not None and w.ty is not POISON])
        ty = Type(TypeKind.BOOL, min(level, GROUP))
        if self.define(name, Node(Op.REF, (), ty, ("var", name), st.span), "gate", st.span):
            b.steps.append(Step(StepKind.GATERULES, name, rules=tuple(checked)))
            reasons = []
            for _, reason, _ in checked:
                if reason not in reasons:
                    reasons.append(reason)
            b.gate_reasons[name] = tuple(reasons) + (("closed",) if "closed" not in reasons else ())

    @statement.register
    def check_skip(self, st: A.Skip, b: Body) -> None:
        e = st.cond
        node = self.expr(e)
        self.expect_bool(node, e.span, "a skip condition")
        if node.ty is not POISON:
            if node.ty.level == ROLLOUT:
                self.error("E303", "a skip decides per group; reduce this per-rollout condition "
                           "with any(), all() or count()", e.span)
            elif self.skip_free(node) is None:
                self.error("E209", "a skip condition may use only params, inputs, channels and "
                           "metadata, because skips run before the shaper body", e.span)
            else:
                node = self.skip_free(node)
        b.skips.append(Step(StepKind.SKIP, st.reason, node, mode=st.mode))

    @statement.register
    def check_term(self, st: A.Term, b: Body) -> None:
        name = st.name
        e = st.expr
        node, on_n, when_n = self.applied(e, st.on, st.when, "term")
        b.order.append(("term", st.span))
        ref = Node(Op.REF, (), Type(TypeKind.NUM, ROLLOUT), ("var", name), st.span)
        if self.define(name, ref, "term", st.span, node):
            b.terms.append(name)
            b.steps.append(Step(StepKind.TERM, name, node, on_n, when_n))

    @statement.register
    def check_factor(self, st: A.Factor, b: Body) -> None:
        name = st.name
        e = st.expr
        node, on_n, when_n = self.applied(e, st.on, st.when, "factor")
        b.order.append(("factor", st.span))
        if node.ty is not POISON:
            lo, hi = self.facts.range(node)
            if lo < 0 or hi > 1:
                hint = self.facts.unbounded_hint(node)
                self.error("E503", f"factor {name!r} is not provably within [0, 1] "
                           f"(it may range over [{lo:g}, {hi:g}]); use a band, a clip "
                           f"or a power with a non-positive exponent of a value >= 1{hint}", e.span)
        ref = Node(Op.REF, (), Type(TypeKind.NUM, ROLLOUT), ("var", name), st.span)
        if self.define(name, ref, "factor", st.span, node):
            b.factors.append((name, on_n, st.span))
            b.steps.append(Step(StepKind.FACTOR, name, node, on_n, when_n))

    @statement.register
    def check_clamp(self, st: A.Clamp, b: Body) -> None:
        node, on_n, when_n = self.applied(st.lo, st.on, st.when, "clamp")
        b.order.append(("clamp", st.span))
        clamps = sum(1 for s in b.steps if s.kind is StepKind.CLAMP)
        b.steps.append(Step(StepKind.CLAMP, f"clamp{clamps}", node, on_n, when_n))

    @statement.register
    def check_state(self, st: A.State, b: Body) -> None:
        name = st.name
        typ = st.type
        init = st.init
        upd = st.update
        per_prompt = st.per_prompt
        value = finite_const(init, self.error)
        if typ not in ("float", "int"):
            self.error("E305", f"state {name!r} must be float or int", st.span)
        if value is BAD:
            value = 0.0
        elif typ == "int" and value is not None and value != int(value):
            self.error("E604", f"state {name!r} is an int; its initial value {value:g} is not", init.span)
        elif value is None:
            self.error("E308", f"state {name!r} needs a constant initial value", init.span)
            value = 0.0
        if per_prompt:  # its update reads the whole body: checked once every name is defined
            ref = Node(Op.REF, (), Type(TypeKind.NUM, GROUP), ("prompt_state", name), st.span)
            if self.define(name, ref, "state", st.span):
                b.prompt_updates.append((name, value, upd))
            return
        ref = Node(Op.REF, (), Type(TypeKind.NUM, BATCH), ("state", name), st.span)
        if self.define(name, ref, "state", st.span):
            self.state_ctx = name
            node = self.expr(upd)
            self.state_ctx = ""
            if node.ty is not POISON and (node.ty.level > PARAM or node.ty.kind is not TypeKind.NUM):
                self.error("E303", f"state {name!r} keeps one number from batch to batch, so its "
                           f"update must be one number for the whole batch; this is "
                           f"{in_words(node.ty)}{batch_hint(node.ty)}", upd.span)
            b.states.append((name, value))
            b.batch_steps.append(Step(StepKind.STATE, name, node))

    @statement.register
    def check_metric(self, st: A.Metric, b: Body) -> None:
        name = st.name
        e = st.expr
        self.metric_ctx = True
        node = self.expr(e)
        self.metric_ctx = False
        if node.ty is not POISON and node.ty.level > BATCH:
            self.error("E303", "a metric is one number per batch; reduce it with batch.mean(...) "
                       "or another batch reduction", e.span)
        if any(name == known for known, _ in b.metrics):
            self.error("E202", f"metric {name!r} is already defined", st.span)
        b.metrics.append((name, node))

    @statement.register
    def check_result(self, st: A.Result, b: Body) -> None:
        e = st.expr
        node = self.expr(e)
        self.expect_num(node, e.span, "the result")
        b.result = node
        b.order.append(("result", st.span))

    @statement.register
    def check_drop(self, st: A.Drop, b: Body) -> None:
        e = st.cond
        node = self.expr(e)
        self.expect_bool(node, e.span, "a drop condition")
        if node.ty is not POISON and node.ty.items:
            self.error("E306", "a drop condition decides per rollout, not per metadata item", e.span)
        b.drop = node if b.drop is None else Node(Op.OR, (b.drop, node), Type(
            TypeKind.BOOL, ROLLOUT, maybe_missing=b.drop.ty.maybe_missing or node.ty.maybe_missing),
            span=e.span)

    @statement.register
    def check_ensure(self, st: A.Ensure, b: Body) -> None:
        b.pending.append(st)

    def prompt_update(self, name: str, upd: A.Expr) -> Node:
        """A per-prompt state's update: one number per group (it may read every statement of the body)."""
        node = self.expr(upd)
        if node.ty is not POISON and (node.ty.level > GROUP or node.ty.items or node.ty.kind is not TypeKind.NUM):
            self.error("E303", f"state {name!r} keeps one number per prompt, so its update must be one number per "
                       f"group; this is {in_words(node.ty)}", upd.span)
        return node
