"""Definedness: which values can never be missing, so they need no three-valued code.

A missing value is a NaN, and the helpers `k_cmp`, `k_and`, `k_or`, `k_cond` and `k_fallback`
exist to carry one through. A value that cannot be NaN needs none of that: its comparison is a
plain comparison, its logic plain `and`/`or`, `missing(x)` is 0. This pass gives every IR
expression one of three levels, from what the runtime guarantees about the leaves:

    FINITE   rewards, rollout inputs and list items (the batch layer rejects NaN and infinity),
             the shaped reward a metric reads (a non-finite one fails the call first), state
             (its initial value is finite, an update that is not is dropped: k_state),
             params that are not optional (pydantic rejects NaN and infinity), group_size,
             number literals, gate-rule blocks, count/any/all (they only count ones), any
             comparison or logic of NUMBER operands (0 or 1)
    NUMBER   never NaN but maybe infinite: a sum or difference of NUMBERs one of which is
             FINITE, a product of FINITE values (it can overflow), a NUMBER over a nonzero
             literal, exp and sigmoid of a NUMBER, `x ?? y` with y a NUMBER, a term (0 where it
             does not apply) or a factor (1 there)
    MAYBE    everything else: metadata, optional params, a quotient (0/0), a power,
             log, sqrt, cos, bands, reductions that are missing on an empty selection, and
             whatever reads a MAYBE value

so the levels are exact consequences of the validation, never a guess: an expression is below
MAYBE only if no input the runtime accepts can make it NaN. Lets, gates and channels take the
level of their expression (they are ordered, so one pass in source order sees every one).
`conditions.TWO_VALUED = False` turns this off with the rest of the two-valued code.
"""

from __future__ import annotations

import functools

from ...ir.nodes import Node, Op, ShaperIR, StepKind, TypeKind
from . import conditions
from ...ir.nodes import post_order

FINITE, NUMBER, MAYBE = 2, 1, 0
LOGIC_OPS = (Op.CMP, Op.AND, Op.OR)
KEEPS_LEVEL = {Op.NEG: FINITE, Op.NOT: FINITE}  # op -> the best level it keeps (its operand's)
CALLS_KEEPING = {"abs": FINITE, "int": FINITE, "float": FINITE, "min": FINITE, "max": FINITE, "clip": FINITE,
                 "exp": NUMBER, "sigmoid": NUMBER}  # a call -> the best level it keeps (its operands' least)
ALWAYS_FINITE_CALLS = ("missing", "present")
COUNTING = ("count", "any", "all")


def _sum_level(a: int, b: int) -> int:
    """a + b needs two infinities to be NaN: one finite operand rules it out."""
    return NUMBER if min(a, b) >= NUMBER and max(a, b) == FINITE else MAYBE


def _product_level(a: int, b: int) -> int:
    """a * b is NaN for 0 * inf: two finite operands rule it out."""
    return NUMBER if min(a, b) == FINITE else MAYBE


class Definedness:
    """Which values of one shaper's IR cannot be missing, and which are clean booleans; the
    lowering (stage.py) asks one instance, built from the IR it lowers."""

    def __init__(self, ir: ShaperIR | None):
        self.ir = ir
        self.levels: dict[int, tuple[int, Node]] = {}  # id(node) -> (level, node): the node kept, so ids stay unique
        self.var_levels_memo: dict[str, int] | None = None
        self.clean_vars: dict[str, bool] = {}

    def defined(self, node: Node) -> bool:
        """True when the value can never be NaN."""
        return conditions.TWO_VALUED and self.level(node) >= NUMBER

    def level(self, node: Node) -> int:
        memo = self.levels
        if id(node) in memo:
            return memo[id(node)][0]
        for n in post_order(node, lambda x: x.args, memo):
            memo[id(n)] = (self._level_of(n, [memo[id(c)][0] for c in n.args]), n)
        return memo[id(node)][0]

    def _level_of(self, n: Node, args: list[int]) -> int:
        op = n.op
        least = min(args, default=FINITE)
        if op is Op.CONST:
            return FINITE if isinstance(n.attr, (int, float)) and abs(n.attr) != float("inf") and n.attr == n.attr \
                else MAYBE
        if op is Op.REF:
            return self._ref_level(n)
        if op in KEEPS_LEVEL:
            return least
        if op in LOGIC_OPS:
            return FINITE if least >= NUMBER else MAYBE
        if op is Op.COND:  # k_cond gives NaN for a condition other than 0 or 1
            return min(args[1:]) if args[0] >= NUMBER and self.clean(n.args[0]) else MAYBE
        if op is Op.FALLBACK:  # b where a is missing, else a (which may be infinite)
            return (FINITE if least == FINITE else NUMBER) if args[1] >= NUMBER else MAYBE
        if op is Op.BIN:
            return self._arithmetic_level(n, args)
        if op is Op.SKIPPED:
            return FINITE
        if op is Op.CALL:
            if n.attr in ALWAYS_FINITE_CALLS:
                return FINITE
            return min(least, CALLS_KEEPING.get(n.attr, MAYBE))
        if op is Op.REDUCE:
            return FINITE if n.attr[0] in COUNTING else MAYBE
        if op is Op.BREDUCE:
            return FINITE if n.attr in COUNTING else MAYBE
        return MAYBE

    @staticmethod
    def _arithmetic_level(n: Node, args: list[int]) -> int:
        """NaN comes only from inf - inf, 0 * inf, 0 / 0 or inf / inf, and a power. A chain of +
        or * is judged step by step, as it is evaluated (its partial sums may overflow)."""
        if n.attr in ("+", "-"):
            return functools.reduce(_sum_level, args)
        if n.attr == "*":
            return functools.reduce(_product_level, args)
        divisor = n.args[1]
        if n.attr == "/" and divisor.op is Op.CONST and args[1] == FINITE and divisor.attr != 0:
            return NUMBER if args[0] >= NUMBER else MAYBE
        return MAYBE

    def _ref_level(self, n: Node) -> int:
        ns, name = n.attr
        if ns in ("input", "item"):
            return FINITE
        if ns == "param":
            return MAYBE if n.ty.maybe_missing else FINITE
        if ns == "var":
            return self.var_levels().get(name, MAYBE)
        if ns in ("state", "prompt_state"):  # an update that is not a finite number keeps the previous value
            return FINITE
        if ns == "meta":
            return MAYBE
        # `shaped` (metrics only) is finite wherever a metric is ever returned: a non-finite shaped
        # reward fails the call on both backends (Kernel.call, Interpreter.run) before any metric
        return FINITE if name in ("reward", "env_reward", "group_size", "position", "shaped") else MAYBE

    def var_levels(self) -> dict[str, int]:
        """The level of every let, gate, gate-rule block, channel, term and factor, in source order."""
        if self.var_levels_memo is not None:
            return self.var_levels_memo
        levels = self.var_levels_memo = {}  # kept before it is filled: a let's level reads those before it
        for name in self.ir.terms:
            levels[name] = NUMBER
        for name in self.ir.factors:
            levels[name] = NUMBER
        for name, node in self.ir.channels:
            levels[name] = self.level(node)
        for step in (*self.ir.batch_steps, *self.ir.steps):
            if step.kind is StepKind.GATERULES:
                levels[step.name] = FINITE
            elif step.kind in (StepKind.LET, StepKind.GATE) and step.expr is not None:
                levels[step.name] = self.level(step.expr)
        return levels

    def clean(self, node: Node) -> bool:
        """True when the value is certainly 0, 1 or NaN (so every helper reads it the same way)."""
        op = node.op
        if op in (Op.CMP, Op.AND, Op.OR, Op.SKIPPED):
            return True
        if op is Op.CONST:
            return node.attr in (0.0, 1.0)
        if op is Op.NOT:
            return self.clean(node.args[0])
        if op is Op.COND:
            return self.clean(node.args[1]) and self.clean(node.args[2])
        if op is Op.FALLBACK:
            return self.clean(node.args[0]) and self.clean(node.args[1])
        if op is Op.CALL:
            return node.attr in ("missing", "present")
        if op in (Op.REDUCE, Op.BREDUCE):  # any and all give 0 or 1 (or NaN where a selection is unusable)
            return (node.attr[0] if op is Op.REDUCE else node.attr) in ("any", "all")
        if op is Op.REF and node.ty.kind is TypeKind.BOOL:
            ns, name = node.attr
            if ns in ("input", "param"):  # inputs arrive as 0/1, bool params as 0/1 or NaN (absent)
                return True
            if ns == "var":
                return self.clean_var(name)
        return False

    def clean_var(self, name: str) -> bool:
        """A let or gate whose expression is clean, or a gate-rule block (it stores 0 or 1)."""
        memo = self.clean_vars
        if name not in memo:
            memo[name] = False  # a cycle cannot happen (lets are ordered), but stay safe
            step = next((s for s in (*self.ir.batch_steps, *self.ir.steps) if s.name == name), None)
            if step is not None and step.kind is StepKind.GATERULES:
                memo[name] = True
            elif step is not None and step.kind in (StepKind.LET, StepKind.GATE) and step.expr is not None:
                memo[name] = self.clean(step.expr)
        return memo[name]
