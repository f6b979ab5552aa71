"""z3 encoding of a shaper for one or two rollouts of a group of any size (needs the `prove` extra).

The rollouts compared are any members of a group: every group-level value (a reduction, metadata)
and every batch-level value (a batch reduction, a state) is a free variable, constrained only by
facts that hold in every group containing them (a min over a mask is <= each member in the mask,
a count is >= the members counted, argmin is a member of its mask no larger than the others). So
"no model" proves the property for every group size. Values are pairs (number, missing) following
the interpreter's three-valued rules; arithmetic is over the reals, and a division by zero or an
operation the encoding does not model is a free value bounded by interval reasoning (static.py).
"""

from __future__ import annotations

import math

import z3

from ..ir.nodes import Ensure, Node, Op, ROLLOUT, ShaperIR, Type, UNITS, StepKind, TypeKind
from .static import Bounds

TIMEOUT_MS = 8000
# fn: (+1 rising or -1 falling, over [lo, hi]); math.pi is below pi, so cos falls on all of [0, math.pi]
MONOTONE = {"exp": (1, None, None), "sigmoid": (1, None, None), "sqrt": (1, 0.0, None), "cos": (-1, 0.0, math.pi)}


class Encoder:
    def __init__(self, ir: ShaperIR, ensure: Ensure, m: int):
        self.ir, self.ensure, self.m = ir, ensure, m
        self.s = z3.Solver()
        self.s.set("timeout", TIMEOUT_MS)
        self.cache: dict = {}
        self.n = 0
        self.seen: dict = {}  # fn -> (argument, value) of every monotone call encoded
        self.defs = {name: node for name, node in ir.channels}
        self.defs.update({st.name: st for st in (*ir.batch_steps, *ir.steps)})
        self.zero_rewards = ensure.prop == "all_wrong_unchanged"
        self.bounds = Bounds(ir, ensure.over, 0.0, everyone=True) if self.zero_rewards else Bounds(ir, ensure.over)

    def fresh(self, node: Node | None = None, missing=None):
        self.n += 1
        v = z3.Real(f"v{self.n}")
        if node is not None:
            lo, hi = self.bounds.of(node)
            if lo > -1e300:
                self.s.add(v >= lo)
            if hi < 1e300:
                self.s.add(v <= hi)
        return v, (z3.Bool(f"m{self.n}") if missing is None else missing)

    # ------------------------------------------------------------------ expressions
    def ev(self, node: Node, i: int):
        key = (node.key(), i if node.ty.level == ROLLOUT or node.ty.items else -1)
        if key not in self.cache:
            self.cache[key] = self._ev(node, i)
        return self.cache[key]

    def _ev(self, node: Node, i: int):
        op, a = node.op, node.args
        if op is Op.CONST:
            return z3.RealVal(float(node.attr)), z3.BoolVal(False)
        if op is Op.REF:
            return self.ref(node, i)
        if op is Op.NEG:
            v, mv = self.ev(a[0], i)
            return -v, mv
        if op is Op.NOT:
            v, mv = self.ev(a[0], i)
            return 1 - v, mv
        if op in (Op.BIN, Op.CMP, Op.CALL) and any(x.ty.kind is TypeKind.BAND for x in a):
            return self.fresh(node)
        if op is Op.BIN and node.attr in ("+", "-", "*"):  # + and * may be chains: the left fold
            folded = self.ev(a[0], i)
            for y, my in (self.ev(arg, i) for arg in a[1:]):
                x, mx = folded
                folded = {"+": x + y, "-": x - y, "*": x * y}[node.attr], z3.Or(mx, my)
            return folded
        if op is Op.BIN:
            (x, mx), (y, my) = self.ev(a[0], i), self.ev(a[1], i)
            miss = z3.Or(mx, my)
            if node.attr == "/":
                q, _ = self.fresh()  # x / 0 is +-inf (free here) and 0 / 0 is NaN, i.e. missing
                self.s.add(z3.Implies(y != 0, q * y == x))
                return q, z3.Or(miss, z3.And(y == 0, x == 0))
            if a[1].op is Op.CONST and float(a[1].attr) in (1.0, 2.0, 3.0):
                out = x
                for _ in range(int(a[1].attr) - 1):
                    out = out * x
                return out, miss
            return self.fresh(node, miss)
        if op is Op.CMP:
            (x, mx), (y, my) = self.ev(a[0], i), self.ev(a[1], i)
            rel = {"==": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[node.attr]
            return z3.If(rel, z3.RealVal(1), z3.RealVal(0)), z3.Or(mx, my)
        if op in (Op.AND, Op.OR):  # chains: the left fold
            target = 0 if op is Op.AND else 1
            folded = self.ev(a[0], i)
            for y, my in (self.ev(arg, i) for arg in a[1:]):
                x, mx = folded
                decided = z3.Or(z3.And(z3.Not(mx), x == target), z3.And(z3.Not(my), y == target))
                folded = (z3.If(decided, z3.RealVal(target), z3.RealVal(1 - target)),
                          z3.And(z3.Not(decided), z3.Or(mx, my)))
            return folded
        if op is Op.COND:
            (c, mc), (x, mx), (y, my) = (self.ev(n, i) for n in a)
            yes, no = z3.And(z3.Not(mc), c == 1), z3.And(z3.Not(mc), c == 0)
            return z3.If(yes, x, y), z3.Or(z3.And(yes, mx), z3.And(no, my), z3.And(z3.Not(yes), z3.Not(no)))
        if op is Op.FALLBACK:
            (x, mx), (y, my) = self.ev(a[0], i), self.ev(a[1], i)
            return z3.If(mx, y, x), z3.And(mx, my)
        if op is Op.CALL:
            return self.call(node, i)
        if op in (Op.REDUCE, Op.BREDUCE):
            return self.reduce(node, i)
        return self.fresh(node)  # band, bandfield, skipped: free, bounded by intervals

    def ref(self, node: Node, i: int):
        ns, name = node.attr
        if ns == "var":
            d = self.defs.get(name)
            if d is None:
                return self.fresh(node)
            if isinstance(d, Node):
                return self.ev(d, i)
            if d.kind in (StepKind.LET, StepKind.GATE):
                return self.ev(d.expr, i)
            if d.kind is StepKind.TERM:
                return self.term(d, i)
            if d.kind is StepKind.GATERULES:
                return self.gate_rules(d, i)
            return self.fresh(node)
        if ns == "builtin" and name == "reward":
            return self.reward(i), z3.BoolVal(False)
        if ns == "builtin" and name == "env_reward":  # a later stage's or a caller's: nothing ties it to reward
            v, _ = self.var(("env_reward", i))
            return v, z3.BoolVal(False)
        if ns == "builtin" and name == "group_size":
            g, _ = self.var(("group_size",))
            self.s.add(g >= self.m, g == z3.ToInt(g))
            return g, z3.BoolVal(False)
        if ns == "builtin" and name == "position":  # the encoded rollouts are any m of the group's
            p, _ = self.var(("position", i))
            g, _ = self.var(("group_size",))
            self.s.add(p >= 0, p < g, p == z3.ToInt(p))
            return p, z3.BoolVal(False)
        if ns == "input":
            v, _ = self.var(("input", name, i))
            typ = dict(self.ir.inputs)[name]
            if typ == "bool":
                self.s.add(z3.Or(v == 0, v == 1))
            elif typ in UNITS:
                self.s.add(v >= 0)
            elif typ == "int":
                self.s.add(v == z3.ToInt(v))
            return v, z3.BoolVal(False)
        if ns == "param":
            return self.param(name)
        if ns == "prompt_state":  # one finite number per group, as the prompt entered the call
            v, _ = self.var(("prompt_state", name))
            return v, z3.BoolVal(False)
        return self.fresh(node) if ns != "meta" else self.var(("meta", name))

    def var(self, key):
        if key not in self.cache:
            self.cache[key] = self.fresh()
        return self.cache[key]

    def reward(self, i: int):
        if self.zero_rewards:
            return z3.RealVal(0)
        v, _ = self.var(("reward", i))
        return v

    def param(self, name: str):
        if ("param", name) in self.cache:
            return self.cache[("param", name)]
        spec = next(p for p in self.ir.params if p.name == name)
        v, miss = self.fresh()
        if not spec.optional:
            self.s.add(z3.Not(miss))
        if spec.kind == "bool":
            self.s.add(z3.Or(v == 0, v == 1))
        elif spec.kind == "enum":
            self.s.add(v == z3.ToInt(v), v >= 0, v < len(spec.members))
        else:
            if spec.kind == "int":
                self.s.add(v == z3.ToInt(v))
            if spec.lo is not None:
                self.s.add(v > spec.lo if spec.lo_strict else v >= spec.lo)
            if spec.hi is not None:
                self.s.add(v < spec.hi if spec.hi_strict else v <= spec.hi)
        self.cache[("param", name)] = (v, miss)
        return v, miss

    def call(self, node: Node, i: int):
        fn = node.attr
        args = [self.ev(x, i) for x in node.args]
        miss = z3.Or(*[m for _, m in args]) if args else z3.BoolVal(False)
        if fn in ("min", "max"):
            out = args[0][0]
            for v, _ in args[1:]:
                out = z3.If(v < out, v, out) if fn == "min" else z3.If(v > out, v, out)
            return out, miss
        if fn == "clip":
            (x, _), (lo, _), (hi, _) = args  # min(max(x, lo), hi), as the kernels: hi wins when lo > hi
            y = z3.If(x >= lo, x, lo)
            return z3.If(y <= hi, y, hi), miss
        if fn == "abs":
            return z3.If(args[0][0] < 0, -args[0][0], args[0][0]), miss
        if fn == "float":
            return args[0]
        if fn in MONOTONE:
            return self.monotone(node, fn, args[0][0], miss)
        if fn in ("missing", "present"):
            m0 = args[0][1]
            return z3.If(m0 if fn == "missing" else z3.Not(m0), z3.RealVal(1), z3.RealVal(0)), z3.BoolVal(False)
        return self.fresh(node, miss)

    def monotone(self, node: Node, fn: str, x, miss):
        """A free value (bounded by intervals) that moves with its argument wherever fn is monotone, so
        comparing two rollouts' exp(...) or cos(...) follows their arguments."""
        v, _ = self.fresh(node)
        sign, lo, hi = MONOTONE[fn]
        for y, w in self.seen.setdefault(fn, []):
            for (a, fa), (b, fb) in (((x, v), (y, w)), ((y, w), (x, v))):
                inside = [a <= b] + ([a >= lo] if lo is not None else []) + ([b <= hi] if hi is not None else [])
                self.s.add(z3.Implies(z3.And(*inside), fa <= fb if sign > 0 else fa >= fb))
        self.seen[fn].append((x, v))
        return v, miss

    def reduce(self, node: Node, i: int):
        """A group- or batch-level value: free, constrained by what the rollouts encoded here imply (a
        batch holds the group, so a batch min is <= each of them as well)."""
        op, over = (node.attr, "") if node.op is Op.BREDUCE else node.attr
        if over or node.ty.items:
            return self.fresh(node)
        v, miss = self.fresh(node)
        members = []
        for j in range(self.m):
            x, mx = self.ev(node.args[0], j)
            mk, mm = self.ev(node.args[1], j)
            members.append((x, mx, z3.And(z3.Not(mm), mk == 1)))
        group = node.op is Op.REDUCE
        if group and self.zero_rewards and all(z3.is_false(z3.simplify(sel)) for _, _, sel in members):
            empty = {"count": 0, "sum": 0, "any": 0, "all": 1}
            return (z3.RealVal(empty[op]), z3.BoolVal(False)) if op in empty else (v, z3.BoolVal(True))
        same = group and self.zero_rewards and self.uniform(node.args[0])
        for x, mx, sel in members:
            if op == "count":
                self.s.add(z3.Not(miss), v >= sum(z3.If(s, 1, 0) for _, _, s in members))
            elif op in ("any", "all"):
                self.s.add(z3.Not(miss), z3.Or(v == 0, v == 1))
                self.s.add(z3.Implies(z3.And(sel, x == 1), v == 1) if op == "any" else
                           z3.Implies(z3.And(sel, x != 1), v == 0))
            elif op in ("min", "max"):
                self.s.add(z3.Implies(z3.And(sel, z3.Not(mx)), z3.And(z3.Not(miss), v <= x if op == "min" else v >= x)))
            if same and op in ("mean", "min", "max", "median", "quantile", "nth_largest"):
                self.s.add(z3.Implies(z3.And(sel, z3.Not(mx), z3.Not(miss)), v == x))
        if same and op in ("std", "mad", "centered"):
            self.s.add(z3.Implies(z3.Not(miss), v == 0))
        return v, miss  # argmin/argmax: an index; only `on argmin(...)` is modelled (see applies)

    def uniform(self, node: Node, depth: int = 0) -> bool:
        """In an all-zero group: node has one value for every rollout (it reads no input)."""
        if node.ty.level < ROLLOUT:
            return True
        if depth > 64:
            return False
        if node.op is Op.REF:
            ns, name = node.attr
            if ns == "var" and name in self.bounds.defs:
                return self.uniform(self.bounds.defs[name], depth + 1)
            return ns == "builtin" and name == "reward"
        return all(self.uniform(a, depth + 1) for a in node.args)

    # ------------------------------------------------------------------ statements
    def true(self, pair):
        v, m = pair
        return z3.And(z3.Not(m), v == 1)

    def applies(self, step, i: int):
        conds = []
        if step.on is not None:
            if step.on.ty.kind is TypeKind.INDEX:
                conds.append(self.is_arg(step.on, i))
            else:
                conds.append(self.true(self.ev(step.on, i)))
        if step.when is not None:
            conds.append(self.true(self.ev(step.when, i)))
        return z3.And(*conds) if conds else z3.BoolVal(True)

    def is_arg(self, node: Node, i: int):
        """Rollout i is the group's argmin/argmax: it is in the mask and no other encoded member beats it."""
        key = ("arg", node.key())
        if key not in self.cache:
            flags = [z3.Bool(f"arg{self.n}_{j}") for j in range(self.m)]
            self.n += 1
            self.cache[key] = flags
            op = node.attr[0] if node.op is Op.REDUCE else None
            if op not in ("argmin", "argmax"):
                return flags[i]
            if self.m > 1:
                self.s.add(z3.Not(z3.And(*flags)))
            for j in range(self.m):
                x, mx = self.ev(node.args[0], j)
                mk, mm = self.ev(node.args[1], j)
                self.s.add(z3.Implies(flags[j], z3.And(z3.Not(mm), mk == 1, z3.Not(mx))))
                for k in range(self.m):
                    y, my = self.ev(node.args[0], k)
                    mk2, mm2 = self.ev(node.args[1], k)
                    beats = y < x if op == "argmin" else y > x
                    self.s.add(z3.Implies(z3.And(flags[j], z3.Not(mm2), mk2 == 1), z3.Not(beats)))
        return self.cache[key][i]

    def term(self, step, i: int):
        key = ("term", step.name, i)
        if key not in self.cache:
            v, mv = self.ev(step.expr, i)
            self.cache[key] = (z3.If(z3.And(self.applies(step, i), z3.Not(mv)), v, z3.RealVal(0)), z3.BoolVal(False))
        return self.cache[key]

    def gate_rules(self, step, i: int):
        out = z3.RealVal(0)
        for verdict, _, when in reversed(step.rules):
            hit = z3.BoolVal(True) if when is None else self.true(self.ev(when, i))
            out = z3.If(hit, z3.RealVal(1.0 if verdict == "open" else 0.0), out)
        return out, z3.BoolVal(False)

    def shaped(self, i: int):
        """The shaper's output for rollout i, and whether its group is skipped."""
        r = self.reward(i)
        total = None
        run = None
        base = None
        for st in self.ir.steps:
            if st.kind is StepKind.TERM:
                t, _ = self.term(st, i)
                total = t if total is None else total + t
            elif st.kind is StepKind.CLAMP:
                run = run if run is not None else (r + total if total is not None else r)
                lo, ml = self.ev(st.expr, i)
                run = z3.If(z3.And(self.applies(st, i), z3.Not(ml), run < lo), lo, run)
            elif st.kind is StepKind.FACTOR:
                run = run if run is not None else (r + total if total is not None else r)
                base = run if base is None else base
                f, mf = self.ev(st.expr, i)
                run = z3.If(z3.And(self.applies(st, i), z3.Not(mf), base > 0), run * f, run)
        if self.ir.result is not None:  # a missing result leaves the reward as it came in
            out, miss = self.ev(self.ir.result, i)
            out = z3.If(miss, r, out)
        else:
            out = run if run is not None else (r + total if total is not None else r)
        skipped = z3.Or(*[self.true(self.ev(k.expr, i)) if k.mode == "when" else z3.Not(self.true(self.ev(k.expr, i)))
                          for k in self.ir.skips]) if self.ir.skips else z3.BoolVal(False)
        return z3.If(skipped, r, out)


DOMAIN = {"binary": lambda r: z3.Or(r == 0, r == 1), "unit": lambda r: z3.And(r >= 0, r <= 1),
          "nonneg": lambda r: r >= 0, "real": lambda r: z3.BoolVal(True)}


def prove(ir: ShaperIR, ensure: Ensure) -> str:
    """'proved', 'open' (a model of the abstraction was found: maybe not a real group) or 'unknown'."""
    m = 2 if ensure.prop in ("order_kept", "shorter_not_worse") else 1
    enc = Encoder(ir, ensure, m)
    try:
        outs = [enc.shaped(i) for i in range(m)]
        rs = [enc.reward(i) for i in range(m)]
        for r in rs:
            enc.s.add(DOMAIN[ensure.over](r))
        if ensure.when is not None:
            enc.s.add(enc.true(enc.ev(ensure.when, 0)))
        if ensure.prop == "order_kept":
            enc.s.add(rs[0] > rs[1], outs[0] < outs[1])
        elif ensure.prop == "all_wrong_unchanged":
            enc.s.add(outs[0] != 0)
        elif ensure.prop == "within":
            enc.s.add(z3.Or(outs[0] < ensure.lo, outs[0] > ensure.hi))
        else:
            for name, _ in ir.inputs:
                a, b = (enc.ev(Node(Op.REF, (), Type(TypeKind.NUM, ROLLOUT), ("input", name)), i)[0] for i in range(2))
                enc.s.add(a < b if name == ensure.x_name else a == b)
            enc.s.add(rs[0] == rs[1], outs[0] < outs[1])
            if ensure.on is not None:
                enc.s.add(enc.true(enc.ev(ensure.on, 0)), enc.true(enc.ev(ensure.on, 1)))
    except (z3.Z3Exception, RecursionError):
        return "unknown"
    got = enc.s.check()
    return "proved" if got == z3.unsat else "open" if got == z3.sat else "unknown"
