"""Two-valued conditions: a boolean IR expression tested for "is 1" (or "is 0") as native code.

Booleans are three-valued floats (1 true, 0 false, NaN missing), and `ex()` writes them with the
helpers `k_and`, `k_or` and `k_cmp`, which carry a missing value through. But most booleans are
only ever *tested*: a `when`, a skip, a gate rule, a selection mask and a guard all ask "is it
1?". That question has an exact two-valued answer that needs no missing value at all:

    and(a, b) is 1  <=>  a is 1 and b is 1        and(a, b) is 0  <=>  a is 0 or b is 0
    or(a, b) is 1   <=>  a is 1 or b is 1         or(a, b) is 0   <=>  a is 0 and b is 0
    not(a) is 1     <=>  a is 0                   not(a) is 0     <=>  a is 1
    cmp(a < b) is 1 <=>  a < b (false on NaN)     cmp(a < b) is 0 <=>  a >= b (false on NaN)

so a condition lowers to Python's `and`, `or` and comparisons on plain float64, where a NaN
operand makes a comparison false, which is exactly "not 1". The rules for `and` is 1, `or` is 0
and `not` rely on the operands being *clean* booleans (only 0, 1 or NaN: `k_and` calls any
nonzero value true, `k_or` only 1); an operand that may hold another value (a bool metadata
field, which arrives as the user's number) is tested through the helpers instead, as is a
condition deeper than MAX_HEIGHT (so a long mixed chain still spills into temporaries).
"""

from __future__ import annotations

from ...ir.nodes import Node, Op
from .emitter import Scope

MAX_HEIGHT = 12  # and/or/not levels written as native code; deeper ones go through ex()
# False writes every condition through ex() (fully three-valued): tests/compiler/test_definedness.py compares
# whole kernels lowered both ways
TWO_VALUED = True
NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "!=": "=="}


def never(cond: Node) -> bool:
    """A conjunct that is the constant 0: the statement applies nowhere."""
    return cond.op is Op.CONST and cond.attr == 0.0


def always(cond: Node) -> bool:
    """A conjunct that is the constant 1: it leaves an `and` as the other operands are."""
    return cond.op is Op.CONST and cond.attr == 1.0


def conjuncts(when: Node) -> list[Node]:
    """The operands of a chain of `and`s, left to right (a stack: conditions can be deep). A chain
    longer than MAX_HEIGHT is one conjunct, tested whole: numba walks a long run of tests recursively."""
    out, stack = [], [when]
    while stack:
        n = stack.pop()
        if n.op is Op.AND and len(n.args) <= MAX_HEIGHT:
            stack += reversed(n.args)
        else:
            out.append(n)
    return out


LOGIC = (Op.AND, Op.OR, Op.NOT, Op.CMP, Op.CONST)


def _height(node: Node, limit: int) -> int:
    """Levels of and/or/not/cmp above the leaves, counted up to `limit` (then: more than limit). A
    chain of n operands counts the n - 1 levels of the nested form it folds: numba walks the blocks
    of one short-circuit test recursively, so a long one goes through ex(), which spills it."""
    best = 0
    stack = [(node, 1)]
    while stack:
        n, h = stack.pop()
        if n.op not in LOGIC:
            continue
        best = max(best, h)
        if best > limit:
            return best
        if n.op is not Op.CMP:
            stack.extend((c, h + max(1, len(n.args) - 1)) for c in n.args)
    return best


def _chain(node: Node) -> list[Node]:
    """The operands of a chain of one and/or operator, left to right (no recursion)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.op == node.op:
            stack.extend(reversed(n.args))
        else:
            out.append(n)
    return out


class Conditions:
    """The part of StageLowering (stage.py) that writes tests of boolean expressions."""

    def truth(self, node: Node, ctx: str, scope: Scope, want: bool = True) -> str:
        """A Python bool expression, true exactly when `ex(node) == 1.0` (with want=False: `== 0.0`)."""
        if not TWO_VALUED or _height(node, MAX_HEIGHT) > MAX_HEIGHT:
            return f"({self.ex(node, ctx, scope)} == {1.0 if want else 0.0})"
        return self._test(node, want, ctx, scope)

    def _test(self, node: Node, want: bool, ctx: str, scope: Scope) -> str:
        op = node.op
        if op is Op.CONST and node.attr in (0.0, 1.0):
            return repr((node.attr == 1.0) == want)
        if op is Op.CMP:
            a, b = (self.ex(x, ctx, scope) for x in node.args)
            rel = node.attr if want else NEGATED.get(node.attr)
            if want and rel == "!=" or not want and rel is None:  # a != b is true on NaN: test both sides
                return f"({a} < {b} or {a} > {b})"
            return f"({a} {rel} {b})"
        if op in (Op.AND, Op.OR):
            parts = _chain(node)
            # "and is 1" and "or is 0" ask every operand a question whose answer holds only for clean ones
            needs_clean = (op is Op.AND) == want
            if needs_clean and not all(self.definedness.clean(p) for p in parts):
                return f"({self.ex(node, ctx, scope)} == {1.0 if want else 0.0})"
            joiner = " and " if needs_clean else " or "
            return "(" + joiner.join(self._test(p, want, ctx, scope) for p in parts) + ")"
        if op is Op.NOT and self.definedness.clean(node.args[0]):
            return self._test(node.args[0], not want, ctx, scope)
        return f"({self.ex(node, ctx, scope)} == {1.0 if want else 0.0})"
