"""Specialisation: a shaper's IR with what one call's params decide folded in.

`nemo_rl.length_penalty` holds eight algorithms, each switched on by a param (`reasoning_bonus >
0`, a coefficient that is not 0), and a run turns on one or two. Compiling all eight for every
run made the first call wait half a minute for code no group executes. A *fact* is what the
params of a call settle for every group at once:

- a param-level condition (`reasoning_bonus > 0`, `not group_length_penalty_profile_gate`,
  `gate_channel == "total"`) that is 1 in every group, or 0 in every group;
- a number param that is +0.0 in every group (the usual "off").

`specialize` rewrites the IR under a set of facts: a decided condition becomes the constant,
a zero param the literal 0.0, and the rules below fold what that settles, each exactly as both
backends evaluate it (three-valued: a missing operand is never folded away unless the rule holds
for it too):

    and(0, x) = 0    or(1, x) = 1    not(c) = 1 - c    cmp(k1, k2) = its value
    c ? a : b = a (c = 1), b (c = 0), and a when a == b are the same constant and c is a
    gate-rule block (always 0 or 1)          bandcond likewise on a constant condition
    a let whose expression folds to a constant: every read of it is that constant
    gate rules: a rule whose `when` is 0 never fires; one whose `when` is 1 ends the list

The lowering then leaves out what can no longer run: a term or factor whose `when` has a 0
conjunct writes its 0 (1) without computing anything, and a let only such statements read is not
computed (lowering/statements.py, sinking.py). The rewritten IR is still a shaper both backends
run: tests/compiler/test_specialize.py checks that it gives the same outputs, bit for bit, as the
original for every call whose params satisfy its facts.

Which facts a call satisfies is read from its packed param matrix (one row per scalar param,
one column per group), the argument every kernel call already gets.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from ..ir.partial import ParamValues
from ..ir.values import k_and, k_cmp, k_or
from ..ir.nodes import Node, Op, PARAM, ShaperIR, Step, StepKind, TypeKind
from ..ir.nodes import post_order, steps_nodes, walk

UNKNOWN = None  # a fact the params do not settle: the code stays general there


def _const(value: float, like: Node) -> Node:
    """A literal in place of `like`, with its type: a reduction's element stays at the rollout
    level (both backends broadcast a literal to whatever level its type says)."""
    return Node(Op.CONST, (), replace(like.ty, maybe_missing=False), float(value), like.span)


class Facts:
    """The facts a shaper's params can settle, and their values for one param matrix.

    `conditions`: the param-level boolean expressions of the IR, by structural key; `zeros`: the
    number params. `of(matrix)` gives a tuple with one entry per condition (1.0, 0.0 or UNKNOWN)
    then one per number param (True when +0.0 in every group, else UNKNOWN)."""

    def __init__(self, ir: ShaperIR):
        self.ir = ir
        self.rows = {p.name: k for k, p in enumerate(q for q in ir.params if q.kind != "band")}
        found: dict[tuple, Node] = {}
        for root in steps_nodes(ir):
            for n in walk(root):
                if n.ty.kind is TypeKind.BOOL and n.ty.level == PARAM and n.op is not Op.CONST:
                    found.setdefault(n.key(), n)
        self.conditions = tuple(found.items())
        self.zeros = tuple(p.name for p in ir.params if p.kind in ("int", "float"))
        self.general = (UNKNOWN,) * (len(self.conditions) + len(self.zeros))

    def of(self, matrix: np.ndarray | None) -> tuple:
        """The facts of a (P, G) param matrix (None or no groups: none)."""
        if matrix is None or matrix.ndim != 2 or matrix.shape[1] == 0:
            return self.general
        values = ParamValues(self.ir, lambda name: matrix[self.rows[name]] if name in self.rows else None)
        out = [_settled(values.of(node)) for _, node in self.conditions]
        for name in self.zeros:
            row = matrix[self.rows[name]]
            out.append(True if bool(np.all(row == 0.0)) and not np.signbit(row).any() else UNKNOWN)
        return tuple(out)


def _settled(v) -> float | None:
    if v is None:
        return UNKNOWN
    v = np.asarray(v, dtype=np.float64)
    if v.size and bool(np.all(v == 1.0)):
        return 1.0
    if v.size and bool(np.all(v == 0.0)):
        return 0.0
    return UNKNOWN


def specialize(ir: ShaperIR, facts: Facts, values: tuple) -> ShaperIR:
    """The IR with the given fact values folded in (values == facts.general: the IR itself)."""
    if values == facts.general:
        return ir
    k = len(facts.conditions)
    decided = {key: v for (key, _), v in zip(facts.conditions, values[:k]) if v is not UNKNOWN}
    zeros = {name for name, v in zip(facts.zeros, values[k:]) if v is True}
    return _Folder(ir, decided, zeros).run()


class _Folder:
    def __init__(self, ir: ShaperIR, decided: dict[tuple, float], zeros: set[str]):
        self.ir, self.decided, self.zeros = ir, decided, zeros
        self.known: dict[str, Node] = {}  # let or gate-rule block -> the constant it always holds
        self.gaterules = {s.name for s in ir.steps if s.kind is StepKind.GATERULES}

    def run(self) -> ShaperIR:
        ir = self.ir
        channels = tuple((name, self.fold(node)) for name, node in ir.channels)
        skips = tuple(self.step(s) for s in ir.skips)
        steps = tuple(self.step(s) for s in ir.steps)
        result, drop = self.fold(ir.result), self.fold(ir.drop)
        metrics = tuple((name, self.fold(node)) for name, node in ir.metrics)
        prompt_states = tuple((name, init, self.fold(update)) for name, init, update in ir.prompt_states)
        return replace(ir, channels=channels, skips=skips, steps=steps, result=result, drop=drop, metrics=metrics,
                       prompt_states=prompt_states)

    def step(self, s: Step) -> Step:
        expr, on, when = self.fold(s.expr), self.fold(s.on), self.fold(s.when)
        rules = s.rules
        if s.kind is StepKind.GATERULES:
            rules = []
            for verdict, reason, w in s.rules:
                w = self.fold(w)
                if _is(w, 0.0):
                    continue  # never fires
                rules.append((verdict, reason, w))
                if w is None or _is(w, 1.0):
                    break  # decides every group still open: the rules after it never run
            rules = tuple(rules)
            first = rules[0] if rules else None
            if first is not None and (first[2] is None or _is(first[2], 1.0)):
                self.known[s.name] = 1.0 if first[0] == "open" else 0.0
        elif s.kind is StepKind.LET and expr is not None and expr.op is Op.CONST:
            self.known[s.name] = expr.attr
        return replace(s, expr=expr, on=on, when=when, rules=rules)

    def fold(self, root: Node | None) -> Node | None:
        if root is None:
            return None
        memo: dict[int, Node] = {}
        for n in post_order(root, lambda x: () if x.key() in self.decided else x.args, memo):
            memo[id(n)] = self.node(n, memo)
        return memo[id(root)]

    def node(self, n: Node, memo: dict) -> Node:
        if n.op is not Op.CONST and n.key() in self.decided:
            return _const(self.decided[n.key()], n)
        args = tuple(memo[id(a)] for a in n.args)
        op = n.op
        if op is Op.REF:
            ns, name = n.attr
            if ns == "param" and name in self.zeros:
                return _const(0.0, n)
            if ns == "var" and name in self.known:
                return _const(self.known[name], n)
            return n
        consts = [a.attr for a in args if a.op is Op.CONST and isinstance(a.attr, float)]
        whole = len(consts) == len(args) and args
        if op is Op.NOT and whole:
            return _const(1.0 - consts[0], n)
        if op is Op.CMP and whole:
            return _const(float(k_cmp(n.attr, consts[0], consts[1])), n)
        if op in (Op.AND, Op.OR):
            decisive = 0.0 if op is Op.AND else 1.0
            if any(_is(a, decisive) for a in args):
                return _const(decisive, n)
            if whole:
                return _const(float(functools.reduce(k_and if op is Op.AND else k_or, consts)), n)
        if op in (Op.COND, Op.BANDCOND) and _is_const(args[0]) and args[0].attr in (0.0, 1.0):
            return _in_place(args[1] if args[0].attr == 1.0 else args[2], n)  # both: the other is dead
        if op is Op.COND and _same_const(args[1], args[2]) and self._never_missing(args[0]):
            return _const(args[1].attr, n)
        return n if all(a is b for a, b in zip(args, n.args)) else Node(op, args, n.ty, n.attr, n.span)

    def _never_missing(self, c: Node) -> bool:
        """A test that is always 0 or 1: a gate-rule block (it stores 0 or 1)."""
        return c.op is Op.REF and c.attr[0] == "var" and c.attr[1] in self.gaterules


def _in_place(branch: Node, cond: Node) -> Node:
    """The branch a decided `c ? a : b` takes, where it can stand for the whole: a literal takes
    the conditional's type; an expression of the same level does as it is. Otherwise the
    conditional stays (with its constant test): a group-level branch read where a rollout-level
    value is expected would be indexed by rollout."""
    if _is_const(branch):
        return _const(branch.attr, cond)
    if (branch.ty.level, branch.ty.items, branch.ty.kind) == (cond.ty.level, cond.ty.items, cond.ty.kind):
        return branch
    return Node(cond.op, (_const(1.0, cond.args[0]), branch, branch), cond.ty, cond.attr, cond.span)


def _is_const(n: Node | None) -> bool:
    return n is not None and n.op is Op.CONST and isinstance(n.attr, float)


def _is(n: Node | None, value: float) -> bool:
    return _is_const(n) and n.attr == value


def _same_const(a: Node, b: Node) -> bool:
    """The same float bit for bit (0.0 and -0.0 differ; NaN is not folded)."""
    return (_is_const(a) and _is_const(b) and not math.isnan(a.attr)
            and math.copysign(1.0, a.attr) == math.copysign(1.0, b.attr) and a.attr == b.attr)
