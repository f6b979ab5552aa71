"""Names and scopes: builtins, params, inputs and metadata, name lookup, helper inlining, and what a
name means before groups are shaped (skips and batch reductions)."""

from __future__ import annotations

import math
from dataclasses import replace

from ..syntax import ast as A
from ..syntax.source import Span
from .shared import BAD, Binding, finite_const, memoised, suggest
from ..ir.nodes import BATCH, GROUP, MAX_EXACT_INT, MetaSpec, Node, Op, PARAM, POISON, ParamSpec, ROLLOUT, Type, UNITS
from ..ir.nodes import TypeKind

META_TYPES = ("bool", "int", "float", "band") + UNITS
MAX_INLINED_CALLS = 10_000


class TooManyCopies(Exception):
    """Raised inside nested inlining, caught (and reported once) at the call a statement makes."""


class ScopesPass:
    """The declarations and name resolution of ShaperChecker."""

    def builtins(self):
        for name, ty in (
            ("reward", Type(TypeKind.NUM, ROLLOUT)),
            ("env_reward", Type(TypeKind.NUM, ROLLOUT)),
            ("group_size", Type(TypeKind.NUM, GROUP)),
            ("position", Type(TypeKind.NUM, ROLLOUT)),  # 0 for a group's first rollout
        ):
            self.env[name] = Binding(Node(Op.REF, (), ty, ("builtin", name)), "builtin")
        self.env["pi"] = Binding(Node(Op.CONST, (), Type(TypeKind.NUM), math.pi), "builtin")

    def define(self, name: str, node: Node, kind: str, span: Span, defn: Node | None = None) -> bool:
        if name in self.env:
            self.error("E202", f"{name!r} is already defined", span)
            return False
        self.env[name] = Binding(node, kind, defn)
        return True

    def poisoned(self, name: str, span: Span):
        """A declaration whose type is unknown binds its name to poison: its uses report nothing more."""
        self.env.setdefault(name, Binding(Node(Op.POISON, (), POISON, span=span), "poison"))

    def value_type(self, typ: str, span: Span) -> Type:
        if typ == "bool":
            return Type(TypeKind.BOOL)
        if typ in ("int", "float"):
            return Type(TypeKind.NUM)
        if typ in UNITS:
            return Type(TypeKind.NUM, unit=typ)
        self.error("E305", f"unknown type {typ!r}; expected bool, int, float or a unit ({', '.join(UNITS)})"
                   f"{suggest(typ, ('bool', 'int', 'float') + UNITS)}", span)
        return POISON

    def param(self, prm: A.Param):
        t = prm.type
        kinds = ("int", "float", "bool", "band") + UNITS
        if t.name != "enum" and t.name not in kinds:
            self.error("E305", f"unknown param type {t.name!r}; expected {', '.join(kinds)} or enum(...)"
                       f"{suggest(t.name, kinds)}", t.span)
            self.poisoned(prm.name, prm.span)
            return
        kind = t.name if t.name in ("int", "bool", "band", "enum") else "float"
        unit = t.name if t.name in UNITS else None
        for k, member in enumerate(t.members):
            if member in t.members[:k]:
                self.error("E202", f"enum member {member!r} is listed twice", t.span)
                break
        spec = ParamSpec(prm.name, kind, unit, None, prm.default is None and not t.optional, t.optional,
                         *self.bounds(prm.name, kind, prm.constraint), t.members)
        if prm.default is not None:
            value = self.p.const_value(prm.default, spec)
            spec = replace(spec, default=None if value is BAD else value)
        if prm.name in self.params or prm.name in self.env:
            self.error("E202", f"param {prm.name!r} is already defined", prm.span)
            return
        self.params[prm.name] = spec
        if kind == "enum":
            ty = Type(spec.type_kind, PARAM, members=t.members)
        else:
            ty = Type(spec.type_kind, PARAM, unit, maybe_missing=t.optional)
        node = Node(Op.BANDREF if kind == "band" else Op.REF, (), ty, ("param", prm.name), prm.span)
        self.env[prm.name] = Binding(node, "param")

    def bounds(self, name: str, kind: str, c: A.Constraint | None) -> tuple:
        """(lo, lo_strict, hi, hi_strict) of a param: finite constants, on a number param, that some
        value meets (an int's whole and exact in a float64), else a diagnostic and no bound."""
        none = (None, False, None, False)
        if c is None:
            return none
        if kind not in ("int", "float"):
            self.error("E302", f"param {name!r} is {'an' if kind == 'enum' else 'a'} {kind}; only number "
                       "params take a bound", c.span)
            return none
        a = finite_const(c.lo, self.error)
        b = finite_const(c.hi, self.error) if c.hi is not None else None
        if BAD in (a, b):
            return none
        if a is None or (c.hi is not None and b is None):
            self.error("E308", "param bounds must be constant numbers", c.span)
            return none
        if kind == "int" and any(x is not None and (x != int(x) or abs(x) > MAX_EXACT_INT) for x in (a, b)):
            self.error("E302", f"param {name!r} is an int; its bounds are whole numbers within "
                       f"+-{MAX_EXACT_INT} (2**53)", c.span)
            return none
        if c.operator == "in":
            if not a <= b:
                self.error("E602", f"the range [{a:g}, {b:g}] of param {name!r} holds no value", c.span)
                return none
            return a, False, b, False
        if c.operator in (">=", ">"):
            return a, c.operator == ">", None, False
        if c.operator in ("<=", "<"):
            return None, False, a, c.operator == "<"
        self.error("E302", f"a param bound uses >=, >, <=, < or in [lo, hi], not {c.operator!r}", c.span)
        return none

    def meta(self, st: A.Meta) -> MetaSpec | None:
        mt = st.type
        ok = True
        for f in mt.fields:
            if f.type not in META_TYPES:
                self.error("E305", f"unknown field type {f.type!r}{suggest(f.type, META_TYPES)}", f.span)
                ok = False
        if mt.kind == "scalar" and mt.type not in META_TYPES:
            self.error("E305", f"unknown metadata type {mt.type!r}{suggest(mt.type, META_TYPES)}", mt.span)
            ok = False
        if mt.kind == "list" and any(f.type == "band" for f in mt.fields):
            self.error("E305", "list metadata holds numbers, not bands", mt.span)
            ok = False
        if not ok:
            return None
        return MetaSpec(st.name, mt.kind, mt.type, tuple((f.name, f.type) for f in mt.fields))

    def name(self, name: str, span: Span) -> Node:
        if name == "shaped":
            if self.metric_ctx:
                return Node(Op.REF, (), Type(TypeKind.NUM, ROLLOUT), ("builtin", "shaped"), span)
            return self.error("E201", "`shaped` (the shaper's output) is only visible in metrics", span)
        b = self.env.get(name)
        if b is None:
            if name in self.p.fns:
                return self.error("E302", f"helper function {name!r} must be called", span)
            return self.error("E201", f"unknown name {name!r}{suggest(name, list(self.env))}", span)
        if b.kind == "meta":
            spec: MetaSpec = b.node.attr
            if spec.kind == "scalar":
                return self.meta_value(spec.name, spec.type, span)
            return self.error("E302", f"metadata {name!r} is a {spec.kind}; use one of its fields "
                              f"({', '.join(f for f, _ in spec.fields)})", span)
        return replace(b.node, span=span)

    def meta_value(self, path: str, typ: str, span: Span) -> Node:
        if typ == "band":
            return Node(Op.BANDREF, (), Type(TypeKind.BAND, GROUP, maybe_missing=True), ("meta", path), span)
        kind = TypeKind.BOOL if typ == "bool" else TypeKind.NUM
        unit = typ if typ in UNITS else None
        return Node(Op.REF, (), Type(kind, GROUP, unit, maybe_missing=True), ("meta", path), span)

    def inline(self, e: A.Call, fn: A.FnDef) -> Node:
        """The helper's body checked with its arguments bound. Helpers are inlined at every call, so a
        chain of helpers that each call the next twice doubles per level: one call from a statement may
        expand to at most MAX_INLINED_CALLS helper bodies (E213), which bounds the checker's time."""
        if self.fn_stack:
            return self._inline(e, fn)
        self.inlined_calls = 0
        try:
            return self._inline(e, fn)
        except TooManyCopies:
            return self.error("E213", f"{fn.name}() expands to more than {MAX_INLINED_CALLS:,} helper calls once "
                              "inlined (each helper that calls another twice doubles the count); compute the "
                              "repeated call once with a `let` and pass its value", e.span)

    def _inline(self, e: A.Call, fn: A.FnDef) -> Node:
        self.inlined_calls += 1
        if self.inlined_calls > MAX_INLINED_CALLS:
            raise TooManyCopies
        if fn.name in self.fn_stack:
            return self.error("E207", f"helper {fn.name!r} calls itself; helpers are inlined and cannot recurse", e.span)
        if len(e.args) != len(fn.params):
            return self.error("E204", f"{fn.name}() takes {len(fn.params)} arguments, got {len(e.args)}", e.span)
        args = {p: self.expr(a.value) for p, a in zip(fn.params, e.args)}
        if any(a.ty is POISON for a in args.values()):
            return Node(Op.POISON, (), POISON, span=e.span)
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
        return Node(Op.SKIPPED, (), Type(TypeKind.BOOL, ROLLOUT), e.args[0].value.value, e.span)

    def _uses_group(self, node: Node) -> bool:
        return self.group_free(node) is None

    def skip_free(self, node: Node) -> Node | None:
        """A skip condition with rollout-level lets and gates inlined; None if it reads group results."""
        if node.op is Op.REF and node.attr[0] == "var":
            return self.group_free(node)
        if node.op is Op.REDUCE:
            args = [self.group_free(a) for a in node.args]
            return None if any(a is None for a in args) else replace(node, args=tuple(args))
        args = [self.skip_free(a) for a in node.args]
        return None if any(a is None for a in args) else replace(node, args=tuple(args))

    def group_free(self, node: Node) -> Node | None:
        """The node with rollout-level lets and gates inlined, or None if it needs group values.

        Channels, skips and a state's batch reductions are computed before any group is shaped, so
        whatever they read must come from inputs, channels, the reward and params alone.
        """
        if node.op is Op.REDUCE or (node.op is Op.REF and node.ty.level == GROUP):
            return None
        if node.op is Op.REF and node.attr[0] == "var":
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

    def batch_operand(self, node: Node) -> tuple[Node | None, str]:
        """(the operand of a batch reduction with the lets and gates below the batch level inlined, "")
        or (None, why not). The batch step computes it for every rollout of the call, group values
        included, in a pass over the groups before it; what only the group step makes, a term, a
        factor or a gate decided by rules, it cannot read."""
        def compute() -> tuple[Node | None, str]:
            if node.op is Op.REF and node.attr[0] == "var":
                b = self.env.get(node.attr[1])
                if b is None or b.kind == "channel" or node.ty.level == BATCH:
                    return node, ""
                if b.kind in ("let", "gate") and b.defn is not None:
                    return self.batch_operand(b.defn)
                what = f"{b.kind} {node.attr[1]!r}" + (" (decided by rules)" if b.kind == "gate" else "")
                return None, (f"{what} is made in the group step, after every batch value is known, so a batch "
                              "reduction cannot read it")
            args = []
            for a in node.args:
                free, why = self.batch_operand(a)
                if free is None:
                    return None, why
                args.append(free)
            return replace(node, args=tuple(args)), ""

        return memoised(self, "batch_operands", node, compute)
