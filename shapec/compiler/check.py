"""AST -> typed IR. Collects every error in one pass; a poison type stops cascades."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..syntax import ast as A
from ..syntax.depth import recursion_guard
from ..syntax.source import Diagnostic, ShapeError, Span
from . import contracts as C
from .ir import (
    BATCH, CONST, GROUP, PARAM, POISON, ROLLOUT, UNITS, LEVEL_NAMES,
    MetaSpec, Node, ParamSpec, PipelineIR, ShaperIR, Step, Type,
)
from .ir_depth import deep_expressions

CONTRACTS = ("binary", "unit", "nonneg", "real")
REDUCTIONS = {
    # name: (needs bool arg, result kind, keeps unit, may be missing, extra args, rollout-valued)
    "count": (True, "num", False, False, 0, False),
    "any": (True, "bool", False, False, 0, False),
    "all": (True, "bool", False, False, 0, False),
    "sum": (False, "num", True, False, 0, False),
    "mean": (False, "num", True, True, 0, False),
    "median": (False, "num", True, True, 0, False),
    "std": (False, "num", True, True, 0, False),
    "mad": (False, "num", True, True, 0, False),
    "min": (False, "num", True, True, 0, False),
    "max": (False, "num", True, True, 0, False),
    "argmin": (False, "index", False, True, 0, False),
    "argmax": (False, "index", False, True, 0, False),
    "quantile": (False, "num", True, True, 1, False),
    "nth_largest": (False, "num", True, True, 1, False),
    "minmax": (False, "num", False, True, 0, True),
    "centered": (False, "num", True, True, 0, True),
}
BATCH_REDUCTIONS = ("count", "sum", "mean", "min", "max", "any", "all")
ELEMENTWISE = {"abs", "exp", "log", "sqrt", "sigmoid", "cos", "clip", "int", "float", "min", "max",
               "missing", "present", "band"}
NUM, BOOL = "num", "bool"
META_TYPES = ("bool", "int", "float", "band") + UNITS
INF = math.inf


def _contract_le(a: str, b: str) -> bool:
    """binary ⊂ unit ⊂ nonneg ⊂ real."""
    return CONTRACTS.index(a) <= CONTRACTS.index(b)


@dataclass
class Binding:
    node: Node
    kind: str  # param input channel let gate term factor state meta builtin
    defn: Node | None = None  # the defining expression, for range and implication analysis


class Checker:
    def __init__(self, loader: Callable[[str, bool, Span], "CheckedModule | None"] | None = None):
        self.diags: list[Diagnostic] = []
        self.loader = loader

    # ------------------------------------------------------------ diagnostics
    def error(self, code: str, message: str, span: Span) -> Node:
        self.diags.append(Diagnostic(code, message, span))
        return Node("poison", (), POISON, span=span)

    # ------------------------------------------------------------ module
    def module(self, mod: A.Module, source: str, filename: str) -> "CheckedModule":
        out = CheckedModule(filename=filename, doc=mod.doc)
        self.fns: dict[str, A.FnDef] = {}
        self.modules: dict[str, CheckedModule] = {}
        names: set[str] = set()
        for it in mod.items:
            if isinstance(it, A.Import):
                loaded = self.loader(it.target, it.is_path, it.span) if self.loader else None
                if loaded is None:
                    self.error("E205", f"cannot import {it.target!r}", it.span)
                    continue
                if isinstance(loaded, Diagnostic):  # refused or not found, with the loader's reason
                    self.diags.append(loaded)
                    continue
                alias = it.alias or Path(it.target).stem.replace("-", "_")
                self.modules[alias] = loaded
                for fname, fn in loaded.fns.items():
                    self.fns.setdefault(fname, fn)
            elif isinstance(it, A.FnDef):
                if it.name in self.fns and it.name not in names:
                    self.fns[it.name] = it
                elif it.name in names:
                    self.error("E202", f"{it.name!r} is already defined", it.span)
                self.fns[it.name] = it
                names.add(it.name)
        out.fns = {k: v for k, v in self.fns.items()}
        for it in mod.items:
            if isinstance(it, (A.Shaper, A.Pipeline)):
                if it.name in names:
                    self.error("E202", f"{it.name!r} is already defined", it.span)
                    continue
                names.add(it.name)
            if isinstance(it, A.Shaper):
                ir = ShaperChecker(self, it, source, filename).run()
                if ir is not None:
                    out.shapers[it.name] = ir
            elif isinstance(it, A.Pipeline):
                ir = self.pipeline(it, out, source, filename)
                if ir is not None:
                    out.pipelines[it.name] = ir
        return out

    def resolve_shaper(self, ref: str, local: "CheckedModule") -> ShaperIR | PipelineIR | None:
        if "." in ref:
            alias, name = ref.split(".", 1)
            mod = self.modules.get(alias)
            if mod is None:
                return None
            return mod.shapers.get(name) or mod.pipelines.get(name)
        found = local.shapers.get(ref) or local.pipelines.get(ref)
        if found is None:
            for mod in self.modules.values():
                found = mod.shapers.get(ref) or mod.pipelines.get(ref)
                if found is not None:
                    break
        return found

    def pipeline(self, p: A.Pipeline, local: "CheckedModule", source: str, filename: str) -> PipelineIR | None:
        stages: list[tuple[ShaperIR, dict, Span]] = []
        ok = True
        for st in p.stages:
            target = self.resolve_shaper(st.ref, local)
            if target is None:
                known = list(local.shapers) + [f"{a}.{n}" for a, m in self.modules.items() for n in m.shapers]
                self.error("E206", f"unknown shaper {st.ref!r}{_suggest(st.ref, known)}", st.span)
                ok = False
                continue
            sub = [(s, dict(a)) for s, a in target.stages] if isinstance(target, PipelineIR) else [(target, {})]
            args = {}
            for kw in st.args or ():
                if len(sub) != 1:
                    self.error("E601", f"cannot pass params to pipeline {st.ref!r}", kw.span)
                    ok = False
                    continue
                shaper = sub[0][0]
                spec = {ps.name: ps for ps in shaper.params}
                if kw.name not in spec:
                    self.error("E601", f"unknown param {kw.name!r} for shaper {shaper.name!r}"
                               f"{_suggest(kw.name, list(spec))}", kw.span)
                    ok = False
                    continue
                value = self.const_value(kw.value, spec[kw.name])
                if value is not _BAD:
                    args[kw.name] = value
            for shaper, inherited in sub:
                stages.append((shaper, {**inherited, **args}, st.span))
        contract = None  # what the pipeline's input is, is the first stage's to require
        for i, (shaper, _, span) in enumerate(stages):
            if shaper.produces == "advantage" and i != len(stages) - 1:
                self.error("E505", f"advantage stage {shaper.name!r} must be the last stage of the pipeline", span)
                ok = False
            if contract in CONTRACTS and not _contract_le(contract, shaper.requires):
                prev = stages[i - 1][0].name
                self.error(
                    "E401",
                    f"shaper {shaper.name!r} requires {shaper.requires} rewards but follows {prev!r}, which "
                    f"produces {contract} rewards; {C.reorder_advice(stages, i)}",
                    span,
                )
                ok = False
            contract = shaper.produces
        if not ok:
            return None
        return PipelineIR(p.name, tuple((s, a) for s, a, _ in stages), source, filename)

    def const_value(self, expr: A.Expr, spec: ParamSpec):
        """Evaluate a constant call argument or default against a param's declared type."""
        if spec.kind == "enum":
            if isinstance(expr, (A.Name, A.String)):
                member = expr.id if isinstance(expr, A.Name) else expr.value
                if member in spec.members:
                    return member
                self.error("E307", f"{member!r} is not one of {', '.join(spec.members)}", expr.span)
                return _BAD
            self.error("E604", f"param {spec.name!r} takes one of {', '.join(spec.members)}", expr.span)
            return _BAD
        if spec.kind == "band":
            if isinstance(expr, A.BandLit):
                vals = [_const_num(x) for x in (expr.a, expr.b, expr.f)]
                if None in vals:
                    self.error("E308", "band values must be constants", expr.span)
                    return _BAD
                if not self.check_band(*vals, expr.span):
                    return _BAD
                return tuple(vals)
            self.error("E604", f"param {spec.name!r} takes a band {{a, b, f}}", expr.span)
            return _BAD
        if spec.kind == "bool":
            if isinstance(expr, A.Bool):
                return expr.value
            self.error("E604", f"param {spec.name!r} takes true or false", expr.span)
            return _BAD
        value = _const_num(expr)
        if value is None:
            self.error("E308", f"param {spec.name!r} needs a constant number", expr.span)
            return _BAD
        if spec.kind == "int" and value != int(value):
            self.error("E604", f"param {spec.name!r} is an int", expr.span)
            return _BAD
        if not _in_range(value, spec):
            self.error("E602", f"{value:g} is outside the range of param {spec.name!r}{_range_text(spec)}", expr.span)
            return _BAD
        return int(value) if spec.kind == "int" else float(value)

    def check_band(self, a: float, b: float, f: float, span: Span) -> bool:
        if not b > a:
            self.error("E603", f"band needs b > a, got a={a:g}, b={b:g}", span)
            return False
        if not 0 <= f <= 1:
            self.error("E603", f"band needs 0 <= f <= 1, got f={f:g}", span)
            return False
        return True


class _Bad:
    pass


_BAD = _Bad()


def _const_num(e: A.Expr) -> float | None:
    match e:
        case A.Number(value=v):
            return float(v)
        case A.Unary(op="-", operand=x):
            v = _const_num(x)
            return None if v is None else -v
        case A.Binary(op=op, left=l, right=r) if op in "+-*/":
            a, b = _const_num(l), _const_num(r)
            if a is None or b is None or (op == "/" and b == 0):
                return None
            return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0.0}[op]
    return None


def _in_range(v: float, s: ParamSpec) -> bool:
    if s.lo is not None and (v < s.lo or (s.lo_strict and v == s.lo)):
        return False
    if s.hi is not None and (v > s.hi or (s.hi_strict and v == s.hi)):
        return False
    return True


def _range_text(s: ParamSpec) -> str:
    parts = []
    if s.lo is not None:
        parts.append(f"{'>' if s.lo_strict else '>='} {s.lo:g}")
    if s.hi is not None:
        parts.append(f"{'<' if s.hi_strict else '<='} {s.hi:g}")
    return f" ({' and '.join(parts)})" if parts else ""


def in_words(ty: Type) -> str:
    """A type as a user says it: 'one number per rollout', 'one boolean per group'."""
    what = {NUM: "number", BOOL: "boolean"}.get(ty.kind, ty.kind)
    if ty.unit not in (None, "lit"):
        what = f"{what} in {ty.unit}"
    if ty.items:
        return f"one {what} per item of {ty.items}"
    where = {ROLLOUT: "per rollout", GROUP: "per group", PARAM: "set by a param"}.get(ty.level, "for the whole batch")
    return f"one {what} {where}"


def _batch_hint(ty: Type) -> str:
    """What turns a state update's value into one number per batch."""
    if ty.level == ROLLOUT and not ty.items:
        return "; reduce it over the batch with batch.mean(...), batch.max(...) or batch.sum(...)"
    if ty.level == GROUP or ty.items:
        return "; a state updates before groups are shaped, so it may use batch reductions of inputs, " \
               "channels, the reward and params, not group values"
    return ""


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


@dataclass
class CheckedModule:
    """One checked file: its shapers and pipelines as IR, and its helper functions for importers."""

    filename: str
    doc: str | None
    shapers: dict[str, ShaperIR] = field(default_factory=dict)
    pipelines: dict[str, PipelineIR] = field(default_factory=dict)
    fns: dict[str, A.FnDef] = field(default_factory=dict)


class ShaperChecker:
    """Checks one shaper body in source order."""

    def __init__(self, parent: Checker, shaper: A.Shaper, source: str, filename: str):
        self.p = parent
        self.s = shaper
        self.source = source
        self.filename = filename
        self.env: dict[str, Binding] = {}
        self.params: dict[str, ParamSpec] = {}
        self.fn_stack: list[str] = []
        self.metric_ctx = False

    def error(self, code, message, span) -> Node:
        return self.p.error(code, message, span)

    # ------------------------------------------------------------ header
    def run(self) -> ShaperIR | None:
        before = len(self.p.diags)
        s = self.s
        requires, produces = "real", None
        for c in s.contracts:
            allowed = CONTRACTS + (("advantage",) if c.kind == "produces" else ())
            if c.value not in allowed:
                self.error("E403", f"unknown contract {c.value!r}; expected one of {', '.join(allowed)}", c.span)
            elif c.kind == "requires":
                requires = c.value
            else:
                produces = c.value
        self.requires = requires
        for prm in s.params:
            self.param(prm)
        self.builtins(requires)
        inputs, metas, channels, batch_steps, steps, skips, metrics = [], [], [], [], [], [], []
        gate_reasons: dict[str, tuple[str, ...]] = {}
        terms, factors, states = [], [], []
        result = None
        order = []  # (kind, span) of terms/clamps/factors for E504
        pending = []  # ensure clauses, checked once every name of the body is defined
        for st in s.body:
            match st:
                case A.Input(name=name, type=typ):
                    ty = self.value_type(typ, st.span)
                    if ty is POISON:
                        self.poisoned(name, st.span)
                    elif self.define(name, Node("ref", (), replace(ty, level=ROLLOUT), ("input", name), st.span), "input", st.span):
                        inputs.append((name, typ))
                case A.Meta(name=name):
                    spec = self.meta(st)
                    if spec is not None and name not in self.env:
                        metas.append(spec)
                        self.env[name] = Binding(Node("meta", (), Type("meta"), spec, st.span), "meta")
                    elif spec is not None:
                        self.error("E202", f"{name!r} is already defined", st.span)
                    else:
                        self.poisoned(name, st.span)
                case A.Channel(name=name, expr=e):
                    node = self.expr(e)
                    if node.ty is not POISON:
                        if node.ty.level != ROLLOUT or node.ty.items or self._uses_group(node):
                            self.error("E303", f"channel {name!r} must be computed per rollout from inputs "
                                       f"(got a {node.ty.describe()})", e.span)
                        elif node.ty.kind != NUM:
                            self.error("E302", f"channel {name!r} must be a number", e.span)
                    if self.define(name, Node("ref", (), node.ty, ("var", name), st.span), "channel", st.span, node):
                        channels.append((name, node))
                case A.Let(name=name, expr=e):
                    node = self.expr(e)
                    if node.ty.kind == "band":
                        self.define(name, node, "let", st.span, node)
                        continue
                    if self.define(name, Node("ref", (), node.ty, ("var", name), st.span), "let", st.span, node):
                        step = Step("let", name, node)
                        (batch_steps if node.ty.level == BATCH else steps).append(step)
                case A.Gate(name=name, expr=e):
                    node = self.expr(e)
                    self.expect_bool(node, e.span, "a gate")
                    ty = replace(node.ty, kind=BOOL) if node.ty is not POISON else node.ty
                    if self.define(name, Node("ref", (), ty, ("var", name), st.span), "gate", st.span, node):
                        step = Step("gate", name, node)
                        if ty.level == BATCH:
                            batch_steps.append(step)
                        else:
                            steps.append(step)
                        if ty is not POISON and ty.level < ROLLOUT:
                            gate_reasons[name] = ("open", "closed", "missing")
                case A.GateRules(name=name, rules=rules):
                    checked = []
                    for r in rules:
                        when = None
                        if r.when is not None:
                            when = self.expr(r.when)
                            self.expect_bool(when, r.when.span, "a gate rule")
                            if when.ty is not POISON and when.ty.level == ROLLOUT:
                                self.error("E303", "gate rules decide per group; this condition is per rollout "
                                           "(reduce it with any(), all() or count())", r.when.span)
                        checked.append((r.verdict, r.reason, when))
                    level = max([GROUP] + [w.ty.level for _, _, w in checked if w is not None and w.ty is not POISON])
                    ty = Type(BOOL, min(level, GROUP))
                    if self.define(name, Node("ref", (), ty, ("var", name), st.span), "gate", st.span):
                        steps.append(Step("gaterules", name, rules=tuple(checked)))
                        reasons = []
                        for _, reason, _ in checked:
                            if reason not in reasons:
                                reasons.append(reason)
                        gate_reasons[name] = tuple(reasons) + (("closed",) if "closed" not in reasons else ())
                case A.Skip(reason=reason, mode=mode, cond=e):
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
                    skips.append(Step("skip", reason, node, mode=mode))
                case A.Term(name=name, expr=e, on=on, when=when):
                    node, on_n, when_n = self.applied(e, on, when, "term")
                    order.append(("term", st.span))
                    if self.define(name, Node("ref", (), Type(NUM, ROLLOUT), ("var", name), st.span), "term", st.span, node):
                        terms.append(name)
                        steps.append(Step("term", name, node, on_n, when_n))
                case A.Factor(name=name, expr=e, on=on, when=when):
                    node, on_n, when_n = self.applied(e, on, when, "factor")
                    order.append(("factor", st.span))
                    if node.ty is not POISON:
                        lo, hi = self.range(node)
                        if lo < 0 or hi > 1:
                            self.error("E503", f"factor {name!r} is not provably within [0, 1] "
                                       f"(it may range over [{lo:g}, {hi:g}]); use a band, a clip "
                                       f"or a power with a non-positive exponent of a value >= 1", e.span)
                    if self.define(name, Node("ref", (), Type(NUM, ROLLOUT), ("var", name), st.span), "factor", st.span, node):
                        factors.append((name, on_n, st.span))
                        steps.append(Step("factor", name, node, on_n, when_n))
                case A.Clamp(lo=lo_e, on=on, when=when):
                    node, on_n, when_n = self.applied(lo_e, on, when, "clamp")
                    order.append(("clamp", st.span))
                    steps.append(Step("clamp", f"clamp{sum(1 for s_ in steps if s_.kind == 'clamp')}",
                                      node, on_n, when_n))
                case A.State(name=name, type=typ, init=init, update=upd):
                    value = _const_num(init)
                    if typ not in ("float", "int"):
                        self.error("E305", f"state {name!r} must be float or int", st.span)
                    if value is None:
                        self.error("E308", f"state {name!r} needs a constant initial value", init.span)
                        value = 0.0
                    ref = Node("ref", (), Type(NUM, BATCH), ("state", name), st.span)
                    if self.define(name, ref, "state", st.span):
                        node = self.expr(upd)
                        if node.ty is not POISON and (node.ty.level > BATCH or node.ty.kind != NUM):
                            self.error("E303", f"state {name!r} keeps one number from batch to batch, so its "
                                       f"update must be one number for the whole batch; this is "
                                       f"{in_words(node.ty)}{_batch_hint(node.ty)}", upd.span)
                        states.append((name, value))
                        batch_steps.append(Step("state", name, node))
                case A.Metric(name=name, expr=e):
                    self.metric_ctx = True
                    node = self.expr(e)
                    self.metric_ctx = False
                    if node.ty is not POISON and node.ty.level > BATCH:
                        self.error("E303", "a metric is one number per batch; reduce it with batch.mean(...) "
                                   "or another batch reduction", e.span)
                    if any(name == known for known, _ in metrics):
                        self.error("E202", f"metric {name!r} is already defined", st.span)
                    metrics.append((name, node))
                case A.Result(expr=e):
                    node = self.expr(e)
                    self.expect_num(node, e.span, "the result")
                    result = node
                    order.append(("result", st.span))
                case A.Ensure():
                    pending.append(st)
                case _:
                    raise TypeError(f"checker: unknown statement {type(st).__name__}")
        from ..analysis.clause import check_ensure

        ensures = tuple(e for e in (check_ensure(self, st) for st in pending) if e is not None)
        self.check_order(order)
        produces = self.contracts(requires, produces, steps, factors, result, s)
        if len(self.p.diags) > before:
            return None
        config_skips = [k for k in skips if k.expr.ty.level <= PARAM]
        data_skips = [k for k in skips if k.expr.ty.level > PARAM]
        return ShaperIR(
            name=s.name, doc=s.doc, params=tuple(self.params.values()), inputs=tuple(inputs),
            metas=tuple(metas), channels=tuple(channels), batch_steps=tuple(batch_steps), steps=tuple(steps),
            skips=tuple(config_skips + data_skips), requires=requires, produces=produces, result=result,
            metrics=tuple(metrics), gate_reasons=gate_reasons, terms=tuple(terms),
            factors=tuple(f for f, _, _ in factors), states=tuple(states), source=self.source,
            filename=self.filename, ensures=ensures,
        )

    def builtins(self, requires: str):
        lo = 0.0 if requires != "real" else -INF
        hi = 1.0 if requires in ("binary", "unit") else INF
        self.reward_range = (lo, hi)
        for name, ty in (
            ("reward", Type(NUM, ROLLOUT)),
            ("env_reward", Type(NUM, ROLLOUT)),
            ("group_size", Type(NUM, GROUP)),
        ):
            self.env[name] = Binding(Node("ref", (), ty, ("builtin", name)), "builtin")
        self.env["pi"] = Binding(Node("const", (), Type(NUM), math.pi), "builtin")

    def define(self, name: str, node: Node, kind: str, span: Span, defn: Node | None = None) -> bool:
        if name in self.env:
            self.error("E202", f"{name!r} is already defined", span)
            return False
        self.env[name] = Binding(node, kind, defn)
        return True

    def poisoned(self, name: str, span: Span):
        """A declaration whose type is unknown binds its name to poison: its uses report nothing more."""
        self.env.setdefault(name, Binding(Node("poison", (), POISON, span=span), "poison"))

    def value_type(self, typ: str, span: Span) -> Type:
        if typ == "bool":
            return Type(BOOL)
        if typ in ("int", "float"):
            return Type(NUM)
        if typ in UNITS:
            return Type(NUM, unit=typ)
        self.error("E305", f"unknown type {typ!r}; expected bool, int, float or a unit ({', '.join(UNITS)})"
                   f"{_suggest(typ, ('bool', 'int', 'float') + UNITS)}", span)
        return POISON

    def param(self, prm: A.Param):
        t = prm.type
        kinds = ("int", "float", "bool", "band") + UNITS
        if t.name != "enum" and t.name not in kinds:
            self.error("E305", f"unknown param type {t.name!r}; expected {', '.join(kinds)} or enum(...)"
                       f"{_suggest(t.name, kinds)}", t.span)
            self.poisoned(prm.name, prm.span)
            return
        kind = t.name if t.name in ("int", "bool", "band", "enum") else "float"
        unit = t.name if t.name in UNITS else None
        lo = hi = None
        lo_strict = hi_strict = False
        c = prm.constraint
        if c is not None:
            a = _const_num(c.lo)
            b = _const_num(c.hi) if c.hi is not None else None
            if a is None or (c.hi is not None and b is None):
                self.error("E308", "param bounds must be constant numbers", c.span)
            elif c.op == "in":
                lo, hi = a, b
            elif c.op in (">=", ">"):
                lo, lo_strict = a, c.op == ">"
            elif c.op in ("<=", "<"):
                hi, hi_strict = a, c.op == "<"
            else:
                self.error("E302", f"a param bound uses >=, >, <=, < or in [lo, hi], not {c.op!r}", c.span)
        spec = ParamSpec(prm.name, kind, unit, None, prm.default is None and not t.optional, t.optional,
                         lo, lo_strict, hi, hi_strict, t.members)
        if prm.default is not None:
            value = self.p.const_value(prm.default, spec)
            spec = replace(spec, default=None if value is _BAD else value)
        if prm.name in self.params or prm.name in self.env:
            self.error("E202", f"param {prm.name!r} is already defined", prm.span)
            return
        self.params[prm.name] = spec
        if kind == "band":
            ty = Type("band", PARAM, maybe_missing=t.optional)
            node = Node("bandref", (), ty, ("param", prm.name), prm.span)
        elif kind == "enum":
            node = Node("ref", (), Type("enum", PARAM, members=t.members), ("param", prm.name), prm.span)
        else:
            node = Node("ref", (), Type(BOOL if kind == "bool" else NUM, PARAM, unit, maybe_missing=t.optional),
                        ("param", prm.name), prm.span)
        self.env[prm.name] = Binding(node, "param")

    def meta(self, st: A.Meta) -> MetaSpec | None:
        mt = st.type
        ok = True
        for f in mt.fields:
            if f.type not in META_TYPES:
                self.error("E305", f"unknown field type {f.type!r}{_suggest(f.type, META_TYPES)}", f.span)
                ok = False
        if mt.kind == "scalar" and mt.type not in META_TYPES:
            self.error("E305", f"unknown metadata type {mt.type!r}{_suggest(mt.type, META_TYPES)}", mt.span)
            ok = False
        if mt.kind == "list" and any(f.type == "band" for f in mt.fields):
            self.error("E305", "list metadata holds numbers, not bands", mt.span)
            ok = False
        if not ok:
            return None
        return MetaSpec(st.name, mt.kind, mt.type, tuple((f.name, f.type) for f in mt.fields))

    # ------------------------------------------------------------ statements
    def applied(self, e, on, when, what):
        node = self.expr(e)
        self.expect_num(node, e.span, f"a {what}")
        if node.ty is not POISON and node.ty.unit not in (None, "lit"):
            self.error("E301", f"a {what} changes the reward, which has no unit; this value is in {node.ty.unit} "
                       f"(divide by a length in {node.ty.unit} or use float(...))", e.span)
        if node.ty is not POISON and node.ty.items:
            self.error("E306", f"a {what} is per rollout; reduce the metadata list first", e.span)
        on_n = None
        if on is not None:
            on_n = self.expr(on)
            if on_n.ty is not POISON and on_n.ty.kind not in (BOOL, "index"):
                self.error("E302", f"`on` takes a rollout mask or argmin/argmax, not a {on_n.ty.kind}", on.span)
            elif on_n.ty is not POISON and on_n.ty.kind == BOOL and on_n.ty.level != ROLLOUT:
                self.error("E303", f"`on` selects rollouts; this is a {on_n.ty.describe()}", on.span)
        when_n = None
        if when is not None:
            when_n = self.expr(when)
            self.expect_bool(when_n, when.span, "`when`")
        return node, on_n, when_n

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
        terms = [st for st in steps if st.kind == "term"]
        clamps = [st for st in steps if st.kind == "clamp"]
        hard_clamp = any(c.on is None and c.when is None and self.range(c.expr)[0] >= 0 for c in clamps)
        term_lo = min([self.range(t.expr)[0] for t in terms] + [0.0])
        term_hi = max([self.range(t.expr)[1] for t in terms] + [0.0])
        base_nonneg = requires != "real" and (term_lo >= 0 or hard_clamp)
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
            inferred = "unit" if _contract_le(requires, "unit") and term_hi <= 0 else "nonneg"
        else:
            inferred = "real"
        if inferred != "binary" and C.keeps_binary(self, steps, result):
            inferred = "binary"
        if produces is None:
            return inferred
        if produces != "advantage" and not _contract_le(inferred, produces):
            span = next(c.span for c in s.contracts if c.kind == "produces")
            self.error("E402", f"shaper {s.name!r} declares `produces {produces}` but its rewards are only known "
                       f"to be {inferred}", span)
        return produces

    # ------------------------------------------------------------ analyses
    def defn(self, node: Node) -> Node | None:
        if node.op == "ref" and node.attr[0] == "var":
            b = self.env.get(node.attr[1])
            return b.defn if b else None
        return None

    def implies_positive(self, node: Node) -> bool:
        """True when a mask can only hold for rollouts whose reward is > 0."""
        d = self.defn(node)
        if d is not None:
            return self.implies_positive(d)
        if node.op == "and":
            return any(self.implies_positive(a) for a in node.args)
        if node.op == "cmp":
            a, b = node.args
            if a.op == "ref" and a.attr == ("builtin", "reward") and b.op == "const":
                return (node.attr in ("==", ">=") and b.attr > 0) or (node.attr == ">" and b.attr >= 0)
        return False

    def range(self, node: Node) -> tuple[float, float]:
        """Interval bounds of a numeric expression (conservative)."""
        op = node.op
        if node.ty.kind == BOOL:
            return 0.0, 1.0
        if op == "const":
            return float(node.attr), float(node.attr)
        if op == "ref":
            ns, name = node.attr
            if ns == "param":
                sp = self.params[name]
                return (sp.lo if sp.lo is not None else -INF), (sp.hi if sp.hi is not None else INF)
            if ns == "builtin" and name == "reward":
                return self.reward_range
            d = self.defn(node)
            return self.range(d) if d is not None else (-INF, INF)
        if op == "neg":
            lo, hi = self.range(node.args[0])
            return -hi, -lo
        if op == "bin":
            (a, b), (c, d) = self.range(node.args[0]), self.range(node.args[1])
            if node.attr == "+":
                return a + c, b + d
            if node.attr == "-":
                return a - d, b - c
            if node.attr == "*":
                prods = [x * y for x in (a, b) for y in (c, d) if not (math.isinf(x) and y == 0 or math.isinf(y) and x == 0)]
                return (min(prods), max(prods)) if prods else (-INF, INF)
            if C.group_ratio(self, node) is not None:
                return 0.0, 1.0
            if node.attr == "/" and c > 0 and a >= 0:
                return 0.0, (b / c if not math.isinf(b) else INF)
            if node.attr == "**" and a >= 1 and d <= 0:
                return 0.0, 1.0
            if node.attr == "**" and a >= 0 and b <= 1 and c >= 0:
                return 0.0, 1.0
            return -INF, INF
        if op == "call":
            fn = node.attr
            rs = [self.range(x) for x in node.args]
            if fn == "max":
                return max(r[0] for r in rs), max(r[1] for r in rs)
            if fn == "min":
                return min(r[0] for r in rs), min(r[1] for r in rs)
            if fn == "clip":
                return max(rs[0][0], rs[1][0]), min(rs[0][1], rs[2][1])
            if fn in ("sigmoid",):
                return 0.0, 1.0
            if fn in ("exp", "sqrt", "abs"):
                lo = 0.0
                if fn == "exp":
                    hi = math.exp(rs[0][1]) if rs[0][1] < 700 else INF
                    return lo, hi
                return lo, INF
            if fn == "cos":
                return -1.0, 1.0
            if fn == "band":
                return 0.0, 1.0
            return -INF, INF
        if op == "band":
            return 0.0, 1.0
        if op in ("cond", "fallback"):
            branches = node.args[1:] if op == "cond" else node.args
            rs = [self.range(x) for x in branches]
            return min(r[0] for r in rs), max(r[1] for r in rs)
        return -INF, INF

    def _uses_group(self, node: Node) -> bool:
        return self.group_free(node) is None

    def skip_free(self, node: Node) -> Node | None:
        """A skip condition with rollout-level lets and gates inlined; None if it reads group results."""
        if node.op == "ref" and node.attr[0] == "var":
            return self.group_free(node)
        if node.op == "reduce":
            args = [self.group_free(a) for a in node.args]
            return None if any(a is None for a in args) else replace(node, args=tuple(args))
        args = [self.skip_free(a) for a in node.args]
        return None if any(a is None for a in args) else replace(node, args=tuple(args))

    def group_free(self, node: Node) -> Node | None:
        """The node with rollout-level lets and gates inlined, or None if it needs group values.

        Batch reductions and skips run before the group loop, so whatever they read must be
        computable from inputs, channels, the reward and params alone.
        """
        if node.op == "reduce" or (node.op == "ref" and node.ty.level == GROUP):
            return None
        if node.op == "ref" and node.attr[0] == "var":
            b = self.env.get(node.attr[1])
            if b is None or b.kind == "channel":
                return node
            if b.kind in ("let", "gate") and b.defn is not None and b.defn.ty.level == ROLLOUT:
                return self.group_free(b.defn)
            return None
        args = []
        for a in node.args:
            free = self.group_free(a)
            if free is None:
                return None
            args.append(free)
        return replace(node, args=tuple(args))

    # ------------------------------------------------------------ expressions
    def expect_bool(self, node: Node, span: Span, what: str):
        if node.ty is not POISON and node.ty.kind != BOOL:
            self.error("E302", f"{what} must be a boolean, not a {node.ty.kind}", span)

    def expect_num(self, node: Node, span: Span, what: str):
        if node.ty is not POISON and node.ty.kind != NUM:
            self.error("E302", f"{what} must be a number, not a {node.ty.kind}", span)

    def combine(self, *types: Type, span: Span) -> tuple[int, str | None, bool] | None:
        """Level, items tag and missingness of an expression over these operands."""
        level = max(t.level for t in types)
        items = {t.items for t in types if t.items}
        rollout_plain = any(t.level == ROLLOUT and not t.items for t in types)
        if len(items) > 1 or (items and rollout_plain):
            self.error("E306", "cannot combine per-rollout values with metadata list items "
                       "(reduce the list first)", span)
            return None
        return level, (items.pop() if items else None), any(t.maybe_missing for t in types)

    def unify_units(self, a: Type, b: Type, span: Span, verb: str) -> str | None | Node:
        ua, ub = a.unit, b.unit
        if ua == "lit":
            return ub
        if ub == "lit" or ua == ub:
            return ua
        name = lambda u: "a plain number" if u is None else u  # noqa: E731
        return self.error("E301", f"cannot {verb} {name(ua)} and {name(ub)}", span)

    def expr(self, e: A.Expr) -> Node:
        match e:
            case A.Number(value=v):
                return Node("const", (), Type(NUM, CONST, "lit"), float(v), e.span)
            case A.Bool(value=v):
                return Node("const", (), Type(BOOL, CONST), 1.0 if v else 0.0, e.span)
            case A.String(value=v):
                return Node("str", (), Type("str"), v, e.span)
            case A.Name(id=name):
                return self.name(name, e.span)
            case A.GetAttr():
                return self.getattr(e)
            case A.Unary(op="-", operand=x):
                n = self.expr(x)
                if n.ty is POISON:
                    return n
                self.expect_num(n, x.span, "the operand of '-'")
                return Node("neg", (n,), n.ty, span=e.span)
            case A.Unary(op="not", operand=x):
                n = self.expr(x)
                if n.ty is POISON:
                    return n
                self.expect_bool(n, x.span, "the operand of 'not'")
                return Node("not", (n,), n.ty, span=e.span)
            case A.Binary():
                return self.binary(e)
            case A.Cond(test=t, then=a, orelse=b):
                return self.cond(e, t, a, b)
            case A.Call():
                return self.call(e)
            case A.BandLit(a=a, b=b, f=f):
                parts = [self.expr(x) for x in (a, b, f)]
                if any(p.ty is POISON for p in parts):
                    return Node("poison", (), POISON, span=e.span)
                consts = [_const_num(x) for x in (a, b, f)]
                if None not in consts and not self.p.check_band(*consts, e.span):
                    return Node("poison", (), POISON, span=e.span)
                lv = self.combine(*(p.ty for p in parts), span=e.span)
                if lv is None:
                    return Node("poison", (), POISON, span=e.span)
                if lv[0] > GROUP:
                    return self.error("E303", "a band is per group; its a, b and f cannot be per rollout", e.span)
                return Node("bandlit", tuple(parts), Type("band", lv[0], maybe_missing=lv[2]), span=e.span)
        raise TypeError(f"checker: unknown expression {type(e).__name__}")

    def name(self, name: str, span: Span) -> Node:
        if name == "shaped":
            if self.metric_ctx:
                return Node("ref", (), Type(NUM, ROLLOUT), ("builtin", "shaped"), span)
            return self.error("E201", "`shaped` (the shaper's output) is only visible in metrics", span)
        b = self.env.get(name)
        if b is None:
            if name in self.p.fns:
                return self.error("E302", f"helper function {name!r} must be called", span)
            return self.error("E201", f"unknown name {name!r}{_suggest(name, list(self.env))}", span)
        if b.kind == "meta":
            spec: MetaSpec = b.node.attr
            if spec.kind == "scalar":
                return self.meta_value(spec.name, spec.type, span)
            return self.error("E302", f"metadata {name!r} is a {spec.kind}; use one of its fields "
                              f"({', '.join(f for f, _ in spec.fields)})", span)
        return replace(b.node, span=span)

    def meta_value(self, path: str, typ: str, span: Span) -> Node:
        if typ == "band":
            return Node("bandref", (), Type("band", GROUP, maybe_missing=True), ("meta", path), span)
        kind = BOOL if typ == "bool" else NUM
        unit = typ if typ in UNITS else None
        return Node("ref", (), Type(kind, GROUP, unit, maybe_missing=True), ("meta", path), span)

    def getattr(self, e: A.GetAttr) -> Node:
        if isinstance(e.obj, A.Name) and e.obj.id in self.env and self.env[e.obj.id].kind == "meta":
            spec: MetaSpec = self.env[e.obj.id].node.attr
            fields = dict(spec.fields)
            if spec.kind == "scalar" and spec.type == "band":
                return self.band_field(self.meta_value(spec.name, "band", e.obj.span), e)
            if spec.kind == "scalar" or e.attr not in fields:
                return self.error("E208", f"{spec.name!r} has no field {e.attr!r}{_suggest(e.attr, fields)}", e.span)
            path = f"{spec.name}.{e.attr}"
            typ = fields[e.attr]
            if spec.kind == "record":
                return self.meta_value(path, typ, e.span)
            kind = BOOL if typ == "bool" else NUM
            return Node("ref", (), Type(kind, ROLLOUT, typ if typ in UNITS else None, items=spec.name),
                        ("item", path), e.span)
        if isinstance(e.obj, A.Name) and e.obj.id == "batch":
            return self.error("E302", "batch reductions are called: batch.mean(x), batch.count(mask), ...", e.span)
        obj = self.expr(e.obj)
        if obj.ty is POISON:
            return obj
        if obj.ty.kind == "band":
            return self.band_field(obj, e)
        return self.error("E208", f"a {obj.ty.kind} has no field {e.attr!r}", e.span)

    def band_field(self, band: Node, e: A.GetAttr) -> Node:
        if e.attr not in ("a", "b", "f"):
            return self.error("E208", f"a band has fields a, b and f, not {e.attr!r}", e.span)
        return Node("bandfield", (band,), Type(NUM, band.ty.level, "lit", maybe_missing=band.ty.maybe_missing),
                    e.attr, e.span)

    def binary(self, e: A.Binary) -> Node:
        op = e.op
        a, b = self.expr(e.left), self.expr(e.right)
        if a.ty is POISON or b.ty is POISON:
            return Node("poison", (), POISON, span=e.span)
        if op in ("and", "or"):
            self.expect_bool(a, e.left.span, f"the left side of '{op}'")
            self.expect_bool(b, e.right.span, f"the right side of '{op}'")
            lv = self.combine(a.ty, b.ty, span=e.span)
            if lv is None:
                return Node("poison", (), POISON, span=e.span)
            return Node(op, (a, b), Type(BOOL, lv[0], items=lv[1], maybe_missing=lv[2]), span=e.span)
        if op == "??":
            if a.ty.kind != b.ty.kind and not {a.ty.kind, b.ty.kind} <= {NUM}:
                return self.error("E302", f"both sides of '??' must have the same type ({a.ty.kind} vs {b.ty.kind})", e.span)
            lv = self.combine(a.ty, b.ty, span=e.span)
            if lv is None:
                return Node("poison", (), POISON, span=e.span)
            if a.ty.kind == "band":
                return Node("bandfallback", (a, b), Type("band", lv[0], maybe_missing=b.ty.maybe_missing), span=e.span)
            unit = self.unify_units(a.ty, b.ty, e.span, "fall back between")
            if isinstance(unit, Node):
                return unit
            return Node("fallback", (a, b), Type(a.ty.kind, lv[0], unit, lv[1], b.ty.maybe_missing), span=e.span)
        if op in ("==", "!=", "<", "<=", ">", ">="):
            return self.compare(e, op, a, b)
        # arithmetic
        for n, side in ((a, e.left), (b, e.right)):
            if n.ty.kind != NUM:
                return self.error("E302", f"'{op}' needs numbers; this is a {n.ty.kind}"
                                  f"{self.number_hint(n, side)}", side.span)
        lv = self.combine(a.ty, b.ty, span=e.span)
        if lv is None:
            return Node("poison", (), POISON, span=e.span)
        ua, ub = a.ty.unit, b.ty.unit
        if op in "+-":
            unit = self.unify_units(a.ty, b.ty, e.span, "add" if op == "+" else "subtract")
        elif op == "*":
            if ua not in (None, "lit") and ub not in (None, "lit"):
                unit = self.error("E301", f"cannot multiply {ua} by {ub}", e.span)
            else:
                unit = ua if ua not in (None, "lit") else ub if ub not in (None, "lit") else (
                    "lit" if ua == ub == "lit" else None)
        elif op == "/":
            if ua not in (None, "lit") and ub not in (None, "lit"):
                unit = None if ua == ub else self.error("E301", f"cannot divide {ua} by {ub}", e.span)
            elif ub not in (None, "lit"):
                unit = self.error("E301", f"cannot divide a plain number by {ub}", e.span)
            else:
                unit = ua if ua not in (None, "lit") else ("lit" if ua == ub == "lit" else None)
        else:  # **
            for n, side in ((a, e.left), (b, e.right)):
                if n.ty.unit not in (None, "lit"):
                    return self.error("E301", f"'**' needs plain numbers; this is in {n.ty.unit}", side.span)
            unit = "lit" if ua == ub == "lit" else None
        if isinstance(unit, Node):
            return unit
        return Node("bin", (a, b), Type(NUM, lv[0], unit, lv[1], lv[2]), op, e.span)

    def number_hint(self, n: Node, e: A.Expr) -> str:
        """How to turn a boolean into a number: count it over the group, or 1/0 per rollout."""
        if n.ty.kind != BOOL:
            return ""
        text = e.span.source.text[e.span.start:e.span.end] if e.span.source is not None else ""
        text = text if text and len(text) <= 40 and "\n" not in text else "x"
        test = f"({text})" if isinstance(e, A.Cond) else text
        per_rollout = f"({test} ? 1 : 0) is 1 where it holds and 0 elsewhere"
        if n.ty.level == ROLLOUT and not n.ty.items:
            return f"; count({text}) is the number of rollouts where it holds, {per_rollout}"
        return f"; {per_rollout}"

    def compare(self, e, op, a, b) -> Node:
        lv = self.combine(a.ty, b.ty, span=e.span)
        if lv is None:
            return Node("poison", (), POISON, span=e.span)
        ty = Type(BOOL, lv[0], items=lv[1], maybe_missing=lv[2])
        if a.ty.kind == "enum" or b.ty.kind == "enum":
            enum_n, other = (a, b) if a.ty.kind == "enum" else (b, a)
            if op not in ("==", "!="):
                return self.error("E302", "enums compare with == and != only", e.span)
            if other.op == "str":
                if other.attr not in enum_n.ty.members:
                    return self.error("E307", f"{other.attr!r} is not one of {', '.join(enum_n.ty.members)}", other.span)
                other = Node("const", (), Type(NUM), float(enum_n.ty.members.index(other.attr)), other.span)
            elif other.ty.kind != "enum" or other.ty.members != enum_n.ty.members:
                return self.error("E302", "an enum compares with one of its members, written as a string", e.span)
            return Node("cmp", (enum_n, other), ty, op, e.span)
        if a.op == "str" or b.op == "str":
            return self.error("E302", "strings only compare with enum params", e.span)
        if a.ty.kind == BOOL and b.ty.kind == BOOL and op in ("==", "!="):
            return Node("cmp", (a, b), ty, op, e.span)
        for n in (a, b):
            if n.ty.kind != NUM:
                return self.error("E302", f"cannot compare a {n.ty.kind} with '{op}'", n.span)
        unit = self.unify_units(a.ty, b.ty, e.span, "compare")
        if isinstance(unit, Node):
            return unit
        return Node("cmp", (a, b), ty, op, e.span)

    def cond(self, e, t, a, b) -> Node:
        tn, an, bn = self.expr(t), self.expr(a), self.expr(b)
        if POISON in (tn.ty, an.ty, bn.ty):
            return Node("poison", (), POISON, span=e.span)
        self.expect_bool(tn, t.span, "the condition of '?'")
        if an.ty.kind != bn.ty.kind:
            return self.error("E302", f"both branches of '?' must have the same type ({an.ty.kind} vs {bn.ty.kind})", e.span)
        lv = self.combine(tn.ty, an.ty, bn.ty, span=e.span)
        if lv is None:
            return Node("poison", (), POISON, span=e.span)
        if an.ty.kind == "band":
            return Node("bandcond", (tn, an, bn), Type("band", lv[0], maybe_missing=lv[2]), span=e.span)
        unit = self.unify_units(an.ty, bn.ty, e.span, "choose between") if an.ty.kind == NUM else None
        if isinstance(unit, Node):
            return unit
        return Node("cond", (tn, an, bn), Type(an.ty.kind, lv[0], unit, lv[1], lv[2], an.ty.members), span=e.span)

    # ------------------------------------------------------------ calls
    def call(self, e: A.Call) -> Node:
        f = e.func
        if isinstance(f, A.GetAttr) and isinstance(f.obj, A.Name) and f.obj.id == "batch":
            return self.batch_reduce(e, f.attr)
        if not isinstance(f, A.Name):
            return self.error("E203", "only named functions can be called", f.span)
        name = f.id
        has_where = any(a.where is not None for a in e.args)
        if name in self.p.fns and name not in REDUCTIONS and name not in ELEMENTWISE:
            return self.inline(e, self.p.fns[name])
        if name == "skipped":
            return self.skipped(e)
        if name in REDUCTIONS and (name not in ("min", "max") or len(e.args) == 1 or has_where):
            return self.reduce(e, name)
        if has_where:
            return self.error("E302", f"`where` only goes inside a reduction, not in {name}()", e.span)
        if name in ELEMENTWISE:
            return self.elementwise(e, name)
        known = sorted(set(REDUCTIONS) | ELEMENTWISE | set(self.p.fns))
        return self.error("E203", f"unknown function {name!r}{_suggest(name, known)}", f.span)

    def inline(self, e: A.Call, fn: A.FnDef) -> Node:
        if fn.name in self.fn_stack:
            return self.error("E207", f"helper {fn.name!r} calls itself; helpers are inlined and cannot recurse", e.span)
        if len(e.args) != len(fn.params):
            return self.error("E204", f"{fn.name}() takes {len(fn.params)} arguments, got {len(e.args)}", e.span)
        args = {p: self.expr(a.value) for p, a in zip(fn.params, e.args)}
        if any(a.ty is POISON for a in args.values()):
            return Node("poison", (), POISON, span=e.span)
        saved = {p: self.env.get(p) for p in fn.params}
        self.fn_stack.append(fn.name)
        try:
            for p, node in args.items():
                self.env[p] = Binding(node, "arg")
            return replace(self.expr(fn.body), span=e.span)
        finally:
            self.fn_stack.pop()
            for p, b in saved.items():
                if b is None:
                    self.env.pop(p, None)
                else:
                    self.env[p] = b

    def skipped(self, e: A.Call) -> Node:
        if not self.metric_ctx:
            return self.error("E201", "skipped(...) is only visible in metrics", e.span)
        if len(e.args) != 1 or not isinstance(e.args[0].value, A.String):
            return self.error("E204", 'skipped() takes one reason, as a string: skipped("non_binary")', e.span)
        return Node("skipped", (), Type(BOOL, ROLLOUT), e.args[0].value.value, e.span)

    def reduce(self, e: A.Call, name: str) -> Node:
        needs_bool, kind, keeps_unit, missing, extra, rollout_valued = REDUCTIONS[name]
        if len(e.args) != 1 + extra:
            return self.error("E204", f"{name}() takes {1 + extra} argument{'s' if extra else ''}, got {len(e.args)}", e.span)
        first = e.args[0]
        arg = self.expr(first.value)
        mask = self.expr(first.where) if first.where is not None else None
        extras = [self.expr(a.value) for a in e.args[1:]]
        if arg.ty is POISON or (mask is not None and mask.ty is POISON) or any(x.ty is POISON for x in extras):
            return Node("poison", (), POISON, span=e.span)
        if needs_bool:
            self.expect_bool(arg, first.value.span, f"the argument of {name}()")
        elif arg.ty.kind != NUM:
            return self.error("E302", f"{name}() reduces numbers, not a {arg.ty.kind}", first.value.span)
        if arg.ty.level != ROLLOUT:
            return self.error("E303", f"{name}() reduces a group's rollouts, but this is a "
                              f"{arg.ty.describe()}; a value that is already one per group needs no reduction",
                              first.value.span)
        if mask is not None:
            if mask.ty.kind != BOOL or mask.ty.level != ROLLOUT or mask.ty.items != arg.ty.items:
                return self.error("E304", f"`where` needs a rollout-level boolean over the same rollouts; "
                                  f"this is a {mask.ty.describe()}", first.where.span)
        for x, a in zip(extras, e.args[1:]):
            if x.ty.kind != NUM or x.ty.level > GROUP:
                return self.error("E303", f"the extra argument of {name}() must be a number per group or less",
                                  a.value.span)
        if mask is None:
            mask = Node("const", (), Type(BOOL, ROLLOUT, items=arg.ty.items), 1.0, first.span)
        unit = arg.ty.unit if keeps_unit else None
        if rollout_valued:
            ty = Type(kind, ROLLOUT, unit, arg.ty.items, True)
        else:
            level = max([GROUP] + [x.ty.level for x in extras])
            ty = Type(kind, level, unit, None, missing or arg.ty.maybe_missing)
        return Node("reduce", (arg, mask, *extras), ty, (name, arg.ty.items or ""), e.span)

    def batch_reduce(self, e: A.Call, name: str) -> Node:
        if name not in BATCH_REDUCTIONS:
            return self.error("E203", f"unknown batch reduction {name!r}{_suggest(name, BATCH_REDUCTIONS)}", e.func.span)
        if len(e.args) != 1:
            return self.error("E204", f"batch.{name}() takes 1 argument", e.span)
        first = e.args[0]
        arg = self.expr(first.value)
        mask = self.expr(first.where) if first.where is not None else None
        if arg.ty is POISON or (mask is not None and mask.ty is POISON):
            return Node("poison", (), POISON, span=e.span)
        for n, span in ((arg, first.value.span), (mask, first.where.span if first.where else None)):
            if n is not None and n.ty.items:
                return self.error("E306", "batch reductions range over rollouts, not metadata items", span)
        if not self.metric_ctx:
            free_arg = self.group_free(arg)
            free_mask = self.group_free(mask) if mask is not None else None
            if free_arg is None or (mask is not None and free_mask is None):
                span = first.value.span if free_arg is None else first.where.span
                return self.error("E303", "a batch reduction runs before groups are shaped; it may use inputs, "
                                  "channels, the reward and params, not group values", span)
            arg, mask = free_arg, free_mask
        if name in ("count", "any", "all"):
            self.expect_bool(arg, first.value.span, f"the argument of batch.{name}()")
        elif arg.ty.kind not in (NUM, BOOL):
            return self.error("E302", f"batch.{name}() reduces numbers", first.value.span)
        if mask is not None and mask.ty.kind != BOOL:
            return self.error("E304", "`where` needs a boolean", first.where.span)
        if mask is None:
            mask = Node("const", (), Type(BOOL, ROLLOUT), 1.0, first.span)
        kind = BOOL if name in ("any", "all") else NUM
        unit = arg.ty.unit if name in ("sum", "min", "max", "mean") else None
        return Node("breduce", (arg, mask), Type(kind, BATCH, unit, maybe_missing=name in ("mean", "min", "max")),
                    name, e.span)

    def elementwise(self, e: A.Call, name: str) -> Node:
        arity = {"abs": 1, "exp": 1, "log": 1, "sqrt": 1, "sigmoid": 1, "cos": 1, "int": 1, "float": 1,
                 "missing": 1, "present": 1, "clip": 3, "band": 2}
        n = arity.get(name)
        if (n is not None and len(e.args) != n) or (n is None and len(e.args) < 2):
            want = f"{n}" if n is not None else "at least 2"
            return self.error("E204", f"{name}() takes {want} arguments, got {len(e.args)}", e.span)
        args = [self.expr(a.value) for a in e.args]
        if any(a.ty is POISON for a in args):
            return Node("poison", (), POISON, span=e.span)
        lv = self.combine(*(a.ty for a in args), span=e.span)
        if lv is None:
            return Node("poison", (), POISON, span=e.span)
        level, items, missing = lv
        if name in ("missing", "present"):
            return Node("call", tuple(args), Type(BOOL, level, items=items), name, e.span)
        if name == "band":
            x, b = args
            if x.ty.kind != NUM:
                return self.error("E302", "band() takes a length first", e.args[0].span)
            if b.ty.kind != "band":
                return self.error("E302", f"band() takes a band {{a, b, f}} second, not a {b.ty.kind}", e.args[1].span)
            return Node("band", (x, b), Type(NUM, level, None, items, missing), span=e.span)
        for a, src in zip(args, e.args):
            if a.ty.kind != NUM:
                return self.error("E302", f"{name}() takes numbers, not a {a.ty.kind}", src.span)
        unit: str | None | Node = None
        if name in ("min", "max", "clip"):
            unit = args[0].ty.unit
            for a in args[1:]:
                unit = self.unify_units(Type(NUM, unit=unit), a.ty, e.span, f"take the {name} of")
                if isinstance(unit, Node):
                    return unit
        elif name in ("abs", "int"):
            unit = args[0].ty.unit
        elif name == "float":
            unit = None
        else:
            if args[0].ty.unit not in (None, "lit"):
                return self.error("E301", f"{name}() needs a plain number; this is in {args[0].ty.unit} "
                                  "(divide by a reference length first)", e.args[0].span)
        return Node("call", tuple(args), Type(NUM, level, unit, items, missing), name, e.span)


def check_module(mod: A.Module, source: str, filename: str, loader=None) -> CheckedModule:
    """Check a parsed module; raise ShapeError with every diagnostic found."""
    checker = Checker(loader)
    with recursion_guard(mod.span):
        out = checker.module(mod, source, filename)
    diags = checker.diags + [d for ir in out.shapers.values() for d in deep_expressions(ir)]
    if diags:
        raise ShapeError(sorted(diags, key=lambda d: (d.path, d.span.start)))
    return out


__all__ = ["check_module", "CheckedModule", "Checker", "REDUCTIONS", "LEVEL_NAMES"]
