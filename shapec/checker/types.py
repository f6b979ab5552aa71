"""Types, units and levels of expressions and calls: every operand's kind, unit and level (rollout,
group, param, batch) is checked and combined here."""

from __future__ import annotations

from ..syntax import ast as A
from ..syntax.depth import CHAIN_OPERATORS
from ..syntax.source import Span
from .shared import BAD, finite_const, suggest
from ..ir.nodes import BATCH, CONST, GROUP, MetaSpec, Node, Op, POISON, ROLLOUT, Type, UNITS, TypeKind

REDUCTIONS = {
    # name: (needs bool arg, result kind, keeps unit, may be missing, extra args, rollout-valued)
    "count": (True, TypeKind.NUM, False, False, 0, False),
    "any": (True, TypeKind.BOOL, False, False, 0, False),
    "all": (True, TypeKind.BOOL, False, False, 0, False),
    "sum": (False, TypeKind.NUM, True, False, 0, False),
    "mean": (False, TypeKind.NUM, True, True, 0, False),
    "median": (False, TypeKind.NUM, True, True, 0, False),
    "std": (False, TypeKind.NUM, True, True, 0, False),
    "mad": (False, TypeKind.NUM, True, True, 0, False),
    "min": (False, TypeKind.NUM, True, True, 0, False),
    "max": (False, TypeKind.NUM, True, True, 0, False),
    "argmin": (False, TypeKind.INDEX, False, True, 0, False),
    "argmax": (False, TypeKind.INDEX, False, True, 0, False),
    "quantile": (False, TypeKind.NUM, True, True, 1, False),
    "nth_largest": (False, TypeKind.NUM, True, True, 1, False),
    "minmax": (False, TypeKind.NUM, False, True, 0, True),
    "centered": (False, TypeKind.NUM, True, True, 0, True),
    "rank": (False, TypeKind.NUM, False, True, 0, True),
}


BATCH_REDUCTIONS = ("count", "sum", "mean", "min", "max", "any", "all")


ELEMENTWISE = {"abs", "exp", "log", "sqrt", "sigmoid", "cos", "clip", "int", "float", "min", "max",
               "missing", "present", "band"}


class TypesPass:
    """The expression typing of ShaperChecker."""

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
            if on_n.ty is not POISON and on_n.ty.kind not in (TypeKind.BOOL, TypeKind.INDEX):
                self.error("E302", f"`on` takes a rollout mask or argmin/argmax, not a {on_n.ty.kind.value}", on.span)
            elif on_n.ty is not POISON and on_n.ty.kind is TypeKind.BOOL and on_n.ty.level != ROLLOUT:
                text = " ".join(on.span.source.text[on.span.start:on.span.end].split()) if on.span.source else "..."
                self.error("E303", f"`on` selects rollouts; this is a {on_n.ty.describe()}: to apply the "
                           f"statement to whole groups where it holds, write `when {text}`", on.span)
        when_n = None
        if when is not None:
            when_n = self.expr(when)
            self.expect_bool(when_n, when.span, "`when`")
        return node, on_n, when_n

    def expect_bool(self, node: Node, span: Span, what: str):
        if node.ty is not POISON and node.ty.kind is not TypeKind.BOOL:
            self.error("E302", f"{what} must be a boolean, not a {node.ty.kind.value}", span)

    def expect_num(self, node: Node, span: Span, what: str):
        if node.ty is not POISON and node.ty.kind is not TypeKind.NUM:
            self.error("E302", f"{what} must be a number, not a {node.ty.kind.value}", span)

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
                return Node(Op.CONST, (), Type(TypeKind.NUM, CONST, "lit"), float(v), e.span)
            case A.Bool(value=v):
                return Node(Op.CONST, (), Type(TypeKind.BOOL, CONST), 1.0 if v else 0.0, e.span)
            case A.String(value=v):
                return Node(Op.STR, (), Type(TypeKind.STR), v, e.span)
            case A.Name(id=name):
                return self.name(name, e.span)
            case A.GetAttr():
                return self.getattr(e)
            case A.Unary(operator="-", operand=x):
                n = self.expr(x)
                if n.ty is POISON:
                    return n
                self.expect_num(n, x.span, "the operand of '-'")
                return Node(Op.NEG, (n,), n.ty, span=e.span)
            case A.Unary(operator="not", operand=x):
                n = self.expr(x)
                if n.ty is POISON:
                    return n
                self.expect_bool(n, x.span, "the operand of 'not'")
                return Node(Op.NOT, (n,), n.ty, span=e.span)
            case A.Binary():
                return self.binary(e)
            case A.Cond(test=t, then=a, orelse=b):
                return self.cond(e, t, a, b)
            case A.Call():
                return self.call(e)
            case A.BandLit(a=a, b=b, f=f):
                parts = [self.expr(x) for x in (a, b, f)]
                if any(p.ty is POISON for p in parts):
                    return Node(Op.POISON, (), POISON, span=e.span)
                consts = [finite_const(x, self.error) for x in (a, b, f)]
                if BAD in consts or (None not in consts and not self.p.check_band(*consts, e.span)):
                    return Node(Op.POISON, (), POISON, span=e.span)
                lv = self.combine(*(p.ty for p in parts), span=e.span)
                if lv is None:
                    return Node(Op.POISON, (), POISON, span=e.span)
                if lv[0] > GROUP:
                    return self.error("E303", "a band is per group; its a, b and f cannot be per rollout", e.span)
                return Node(Op.BANDLIT, tuple(parts), Type(TypeKind.BAND, lv[0], maybe_missing=lv[2]), span=e.span)
        raise TypeError(f"checker: unknown expression {type(e).__name__}")

    def getattr(self, e: A.GetAttr) -> Node:
        if isinstance(e.obj, A.Name) and e.obj.id in self.env and self.env[e.obj.id].kind == "meta":
            spec: MetaSpec = self.env[e.obj.id].node.attr
            fields = dict(spec.fields)
            if spec.kind == "scalar" and spec.type == "band":
                return self.band_field(self.meta_value(spec.name, "band", e.obj.span), e)
            if spec.kind == "scalar" or e.attr not in fields:
                return self.error("E208", f"{spec.name!r} has no field {e.attr!r}{suggest(e.attr, fields)}", e.span)
            path = f"{spec.name}.{e.attr}"
            typ = fields[e.attr]
            if spec.kind == "record":
                return self.meta_value(path, typ, e.span)
            kind = TypeKind.BOOL if typ == "bool" else TypeKind.NUM
            return Node(Op.REF, (), Type(kind, ROLLOUT, typ if typ in UNITS else None, items=spec.name),
                        ("item", path), e.span)
        if isinstance(e.obj, A.Name) and e.obj.id == "batch":
            return self.error("E302", "batch reductions are called: batch.mean(x), batch.count(mask), ...", e.span)
        obj = self.expr(e.obj)
        if obj.ty is POISON:
            return obj
        if obj.ty.kind is TypeKind.BAND:
            return self.band_field(obj, e)
        return self.error("E208", f"a {obj.ty.kind.value} has no field {e.attr!r}", e.span)

    def band_field(self, band: Node, e: A.GetAttr) -> Node:
        if e.attr not in ("a", "b", "f"):
            return self.error("E208", f"a band has fields a, b and f, not {e.attr!r}", e.span)
        ty = Type(TypeKind.NUM, band.ty.level, "lit", maybe_missing=band.ty.maybe_missing)
        return Node(Op.BANDFIELD, (band,), ty, e.attr, e.span)

    def binary(self, e: A.Binary) -> Node:
        """A binary operator; a run of one associative operator (`a + b + c`, left-leaning in
        the AST) becomes one n-ary node, walked without recursion, each step typed as the
        binary operator it folds (the same diagnostics at the same places)."""
        steps = [e]
        while e.operator in CHAIN_OPERATORS and isinstance(e.left, A.Binary) and e.left.operator == e.operator:
            e = e.left
            steps.append(e)
        value = self.expr(e.left)
        operands = [value]
        for step in reversed(steps):
            right = self.expr(step.right)
            operands.append(right)
            value = self.pair(step, value, right)
        if value.ty is POISON or len(operands) == 2:
            return value
        return Node(value.op, tuple(operands), value.ty, value.attr, value.span)

    def pair(self, e: A.Binary, a: Node, b: Node) -> Node:
        op = e.operator
        if a.ty is POISON or b.ty is POISON:
            return Node(Op.POISON, (), POISON, span=e.span)
        if op in ("and", "or"):
            self.expect_bool(a, e.left.span, f"the left side of '{op}'")
            self.expect_bool(b, e.right.span, f"the right side of '{op}'")
            lv = self.combine(a.ty, b.ty, span=e.span)
            if lv is None:
                return Node(Op.POISON, (), POISON, span=e.span)
            return Node(Op(op), (a, b), Type(TypeKind.BOOL, lv[0], items=lv[1], maybe_missing=lv[2]), span=e.span)
        if op == "??":
            if a.ty.kind is not b.ty.kind:
                return self.error("E302", "both sides of '??' must have the same type "
                                  f"({a.ty.kind.value} vs {b.ty.kind.value})", e.span)
            lv = self.combine(a.ty, b.ty, span=e.span)
            if lv is None:
                return Node(Op.POISON, (), POISON, span=e.span)
            if a.ty.kind is TypeKind.BAND:
                ty = Type(TypeKind.BAND, lv[0], maybe_missing=b.ty.maybe_missing)
                return Node(Op.BANDFALLBACK, (a, b), ty, span=e.span)
            unit = self.unify_units(a.ty, b.ty, e.span, "fall back between")
            if isinstance(unit, Node):
                return unit
            return Node(Op.FALLBACK, (a, b), Type(a.ty.kind, lv[0], unit, lv[1], b.ty.maybe_missing), span=e.span)
        if op in ("==", "!=", "<", "<=", ">", ">="):
            return self.compare(e, op, a, b)
        # arithmetic
        for n, side in ((a, e.left), (b, e.right)):
            if n.ty.kind is not TypeKind.NUM:
                return self.error("E302", f"'{op}' needs numbers; this is a {n.ty.kind.value}"
                                  f"{self.number_hint(n, side)}", side.span)
        lv = self.combine(a.ty, b.ty, span=e.span)
        if lv is None:
            return Node(Op.POISON, (), POISON, span=e.span)
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
        return Node(Op.BIN, (a, b), Type(TypeKind.NUM, lv[0], unit, lv[1], lv[2]), op, e.span)

    def number_hint(self, n: Node, e: A.Expr) -> str:
        """How to turn a boolean into a number: count it over the group, or 1/0 per rollout."""
        if n.ty.kind is not TypeKind.BOOL:
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
            return Node(Op.POISON, (), POISON, span=e.span)
        ty = Type(TypeKind.BOOL, lv[0], items=lv[1], maybe_missing=lv[2])
        if a.ty.kind is TypeKind.ENUM or b.ty.kind is TypeKind.ENUM:
            enum_n, other = (a, b) if a.ty.kind is TypeKind.ENUM else (b, a)
            if op not in ("==", "!="):
                return self.error("E302", "enums compare with == and != only", e.span)
            if other.op is Op.STR:
                if other.attr not in enum_n.ty.members:
                    return self.error("E307", f"{other.attr!r} is not one of {', '.join(enum_n.ty.members)}", other.span)
                other = Node(Op.CONST, (), Type(TypeKind.NUM), float(enum_n.ty.members.index(other.attr)), other.span)
            elif other.ty.kind is not TypeKind.ENUM or other.ty.members != enum_n.ty.members:
                return self.error("E302", "an enum compares with one of its members, written as a string", e.span)
            return Node(Op.CMP, (enum_n, other), ty, op, e.span)
        if a.op is Op.STR or b.op is Op.STR:
            return self.error("E302", "strings only compare with enum params", e.span)
        if a.ty.kind is TypeKind.BOOL and b.ty.kind is TypeKind.BOOL and op in ("==", "!="):
            return Node(Op.CMP, (a, b), ty, op, e.span)
        for n in (a, b):
            if n.ty.kind is not TypeKind.NUM:
                return self.error("E302", f"cannot compare a {n.ty.kind.value} with '{op}'", n.span)
        unit = self.unify_units(a.ty, b.ty, e.span, "compare")
        if isinstance(unit, Node):
            return unit
        return Node(Op.CMP, (a, b), ty, op, e.span)

    def cond(self, e, t, a, b) -> Node:
        tn, an, bn = self.expr(t), self.expr(a), self.expr(b)
        if POISON in (tn.ty, an.ty, bn.ty):
            return Node(Op.POISON, (), POISON, span=e.span)
        self.expect_bool(tn, t.span, "the condition of '?'")
        if an.ty.kind is not bn.ty.kind:
            return self.error("E302", "both branches of '?' must have the same type "
                              f"({an.ty.kind.value} vs {bn.ty.kind.value})", e.span)
        lv = self.combine(tn.ty, an.ty, bn.ty, span=e.span)
        if lv is None:
            return Node(Op.POISON, (), POISON, span=e.span)
        if an.ty.kind is TypeKind.BAND:
            return Node(Op.BANDCOND, (tn, an, bn), Type(TypeKind.BAND, lv[0], maybe_missing=lv[2]), span=e.span)
        unit = self.unify_units(an.ty, bn.ty, e.span, "choose between") if an.ty.kind is TypeKind.NUM else None
        if isinstance(unit, Node):
            return unit
        return Node(Op.COND, (tn, an, bn), Type(an.ty.kind, lv[0], unit, lv[1], lv[2], an.ty.members), span=e.span)

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
        if name not in ELEMENTWISE and name not in self.p.fns:  # unknown first: `meidan(x where m)` is a typo
            known = sorted(set(REDUCTIONS) | ELEMENTWISE | set(self.p.fns))
            return self.error("E203", f"unknown function {name!r}{suggest(name, known)}", f.span)
        if has_where:
            return self.error("E302", f"`where` only goes inside a reduction, not in {name}()", e.span)
        return self.elementwise(e, name)

    def reduce(self, e: A.Call, name: str) -> Node:
        needs_bool, kind, keeps_unit, missing, extra, rollout_valued = REDUCTIONS[name]
        if len(e.args) != 1 + extra:
            return self.error("E204", f"{name}() takes {1 + extra} argument{'s' if extra else ''}, got {len(e.args)}", e.span)
        first = e.args[0]
        arg = self.expr(first.value)
        mask = self.expr(first.where) if first.where is not None else None
        extras = [self.expr(a.value) for a in e.args[1:]]
        if arg.ty is POISON or (mask is not None and mask.ty is POISON) or any(x.ty is POISON for x in extras):
            return Node(Op.POISON, (), POISON, span=e.span)
        if needs_bool:
            self.expect_bool(arg, first.value.span, f"the argument of {name}()")
        elif arg.ty.kind is not TypeKind.NUM:
            return self.error("E302", f"{name}() reduces numbers, not a {arg.ty.kind.value}", first.value.span)
        if arg.ty.level != ROLLOUT:
            return self.error("E303", f"{name}() reduces a group's rollouts, but this is a "
                              f"{arg.ty.describe()}; a value that is already one per group needs no reduction",
                              first.value.span)
        if mask is not None:
            if mask.ty.kind is not TypeKind.BOOL or mask.ty.level != ROLLOUT or mask.ty.items != arg.ty.items:
                return self.error("E304", f"`where` needs a rollout-level boolean over the same rollouts; "
                                  f"this is a {mask.ty.describe()}", first.where.span)
        for x, a in zip(extras, e.args[1:]):
            if x.ty.kind is not TypeKind.NUM or x.ty.level > GROUP:
                return self.error("E303", f"the extra argument of {name}() must be a number per group or less",
                                  a.value.span)
        if mask is None:
            mask = Node(Op.CONST, (), Type(TypeKind.BOOL, ROLLOUT, items=arg.ty.items), 1.0, first.span)
        unit = arg.ty.unit if keeps_unit else None
        if rollout_valued:
            ty = Type(kind, ROLLOUT, unit, arg.ty.items, True)
        else:
            level = max([GROUP] + [x.ty.level for x in extras])
            ty = Type(kind, level, unit, None, missing or arg.ty.maybe_missing)
        return Node(Op.REDUCE, (arg, mask, *extras), ty, (name, arg.ty.items or ""), e.span)

    def batch_reduce(self, e: A.Call, name: str) -> Node:
        if name not in BATCH_REDUCTIONS:
            return self.error("E203", f"unknown batch reduction {name!r}{suggest(name, BATCH_REDUCTIONS)}", e.func.span)
        if len(e.args) != 1:
            return self.error("E204", f"batch.{name}() takes 1 argument", e.span)
        first = e.args[0]
        arg = self.expr(first.value)
        mask = self.expr(first.where) if first.where is not None else None
        if arg.ty is POISON or (mask is not None and mask.ty is POISON):
            return Node(Op.POISON, (), POISON, span=e.span)
        for n, span in ((arg, first.value.span), (mask, first.where.span if first.where else None)):
            if n is not None and n.ty.items:
                return self.error("E306", "batch reductions range over rollouts, not metadata items", span)
        if self.state_ctx:  # a state updates before any group is shaped, and the groups read it
            free_arg = self.group_free(arg)
            free_mask = self.group_free(mask) if mask is not None else None
            if free_arg is None or (mask is not None and free_mask is None):
                span = first.value.span if free_arg is None else first.where.span
                return self.error("E303", f"state {self.state_ctx!r} updates before any group is shaped, so its "
                                  "batch reductions may use inputs, channels, the reward and params, not group "
                                  "values", span)
            arg, mask = free_arg, free_mask
        elif not self.metric_ctx:
            (free_arg, why), (free_mask, why_mask) = self.batch_operand(arg), (
                self.batch_operand(mask) if mask is not None else (None, ""))
            if free_arg is None or (mask is not None and free_mask is None):
                span = first.value.span if free_arg is None else first.where.span
                return self.error("E303", why or why_mask, span)
            arg, mask = free_arg, free_mask
        if name in ("count", "any", "all"):
            self.expect_bool(arg, first.value.span, f"the argument of batch.{name}()")
        elif arg.ty.kind not in (TypeKind.NUM, TypeKind.BOOL):
            return self.error("E302", f"batch.{name}() reduces numbers", first.value.span)
        if mask is not None and mask.ty.kind is not TypeKind.BOOL:
            return self.error("E304", "`where` needs a boolean", first.where.span)
        if mask is None:
            mask = Node(Op.CONST, (), Type(TypeKind.BOOL, ROLLOUT), 1.0, first.span)
        kind = TypeKind.BOOL if name in ("any", "all") else TypeKind.NUM
        unit = arg.ty.unit if name in ("sum", "min", "max", "mean") else None
        return Node(Op.BREDUCE, (arg, mask), Type(kind, BATCH, unit, maybe_missing=name in ("mean", "min", "max")),
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
            return Node(Op.POISON, (), POISON, span=e.span)
        lv = self.combine(*(a.ty for a in args), span=e.span)
        if lv is None:
            return Node(Op.POISON, (), POISON, span=e.span)
        level, items, missing = lv
        if name in ("missing", "present"):
            return Node(Op.CALL, tuple(args), Type(TypeKind.BOOL, level, items=items), name, e.span)
        if name == "band":
            x, b = args
            if x.ty.kind is not TypeKind.NUM:
                return self.error("E302", "band() takes a length first", e.args[0].span)
            if b.ty.kind is not TypeKind.BAND:
                return self.error("E302", f"band() takes a band {{a, b, f}} second, not a {b.ty.kind.value}",
                                  e.args[1].span)
            return Node(Op.BAND, (x, b), Type(TypeKind.NUM, level, None, items, missing), span=e.span)
        for a, src in zip(args, e.args):
            if a.ty.kind is not TypeKind.NUM:
                return self.error("E302", f"{name}() takes numbers, not a {a.ty.kind.value}", src.span)
        unit: str | None | Node = None
        if name in ("min", "max", "clip"):
            unit = args[0].ty.unit
            for a in args[1:]:
                unit = self.unify_units(Type(TypeKind.NUM, unit=unit), a.ty, e.span, f"take the {name} of")
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
        return Node(Op.CALL, tuple(args), Type(TypeKind.NUM, level, unit, items, missing), name, e.span)
