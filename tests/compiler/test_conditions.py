"""Two-valued conditions (lowering/conditions.py) answer "is it 1?" and "is it 0?" exactly as the
three-valued helpers do, for every value a boolean can hold: 0, 1, NaN and, for a bool metadata
field that arrives as the user's number, anything else.

The rewrite is checked as Python code: random boolean IR trees over leaves with random values,
the native condition `truth()` writes (for 1, and with want=False for 0) against `ex()`'s helper form compared with 1 or
0, both evaluated by Python with the helpers of numba_helpers.py as plain functions. The whole
kernels are compared with the interpreter by tests/compiler/test_differential.py.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from shapec.ir.nodes import GROUP, ROLLOUT, Node, Op, Type, TypeKind
from shapec.compiler.lowering import numba_helpers
from shapec.compiler.lowering.conditions import Conditions
from shapec.compiler.lowering.definedness import Definedness
from shapec.compiler.lowering.emitter import Scope
from shapec.compiler.lowering.expressions import Expressions

LEAVES = {  # name -> (IR node, how the code reads it)
    "flag": Node(Op.REF, (), Type(TypeKind.BOOL, ROLLOUT), ("input", "flag")),  # an input: always 0 or 1
    "odd": Node(Op.REF, (), Type(TypeKind.BOOL, GROUP, maybe_missing=True), ("meta", "odd")),  # metadata: any number
    "x": Node(Op.REF, (), Type(TypeKind.NUM, ROLLOUT), ("input", "x")),
    "y": Node(Op.REF, (), Type(TypeKind.NUM, GROUP, maybe_missing=True), ("meta", "y")),
}


class Lowering(Conditions, Expressions):
    """Just enough of StageLowering to write expressions over the leaves above."""

    def __init__(self, definedness: Definedness | None = None):
        self.input_names = {"flag": "in_flag", "x": "in_x"}
        self.meta_names = {"odd": "m_odd", "y": "m_y"}
        self.pending: dict[str, str] = {}
        self.ir = None
        self.count = 0
        self.definedness = definedness or NothingDefined(None)

    def fresh(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"


class NothingDefined(Definedness):
    """No value is known to be present: ex() stays the three-valued oracle, helpers throughout
    (the leaves here take NaN, which the batch layer never lets an input hold; the forms for
    values that cannot be missing are tests/compiler/test_definedness.py's)."""

    def defined(self, node) -> bool:
        return False


def trees(depth: int = 5):
    bools = st.sampled_from([LEAVES["flag"], LEAVES["odd"], Node(Op.CONST, (), Type(TypeKind.BOOL), 1.0),
                             Node(Op.CONST, (), Type(TypeKind.BOOL), 0.0)])
    nums = st.sampled_from([LEAVES["x"], LEAVES["y"], Node(Op.CONST, (), Type(TypeKind.NUM), 2.0)])
    cmp = st.builds(lambda op, a, b: Node(Op.CMP, (a, b), Type(TypeKind.BOOL, ROLLOUT), op),
                    st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), nums, nums)
    return st.recursive(st.one_of(bools, cmp), lambda kids: st.one_of(
        st.builds(lambda a: Node(Op.NOT, (a,), Type(TypeKind.BOOL, ROLLOUT)), kids),
        st.builds(lambda op, a, b: Node(op, (a, b), Type(TypeKind.BOOL, ROLLOUT)), st.sampled_from([Op.AND, Op.OR]),
                  kids, kids),
    ), max_leaves=12)


VALUES = st.sampled_from([0.0, 1.0, math.nan, 0.5, -1.0, 2.0, 1e-20])


@settings(max_examples=500, deadline=None)
@given(tree=trees(), flag=st.sampled_from([0.0, 1.0]), odd=VALUES, x=VALUES, y=VALUES)
def test_native_conditions_match_the_three_valued_helpers(tree, flag, odd, x, y):
    low = Lowering()
    scope = Scope()
    env = {name: getattr(numba_helpers, name) for name in dir(numba_helpers) if name.startswith("k_")}
    env.update(isnan=math.isnan, nan=math.nan, i=0, g=0, s=0, in_flag=[flag], in_x=[x], m_odd=[odd], m_y=[y])
    three_valued = eval(low.ex(tree, "rollout", scope), env)
    for name, code in low.pending.items():
        env[name] = eval(code, env)
    assert eval(low.truth(tree, "rollout", scope), env) is (three_valued == 1.0)
    assert eval(low.truth(tree, "rollout", scope, want=False), env) is (three_valued == 0.0)


def test_clean_booleans_are_written_natively_and_others_through_the_helpers():
    low = Lowering()
    flag, odd, x = LEAVES["flag"], LEAVES["odd"], LEAVES["x"]
    x_over_2 = Node(Op.CMP, (x, Node(Op.CONST, (), Type(TypeKind.NUM), 2.0)), Type(TypeKind.BOOL, ROLLOUT), ">")
    both = Node(Op.AND, (flag, x_over_2), Type(TypeKind.BOOL, ROLLOUT))
    assert low.truth(both, "rollout", Scope()) == "((in_flag[i] == 1.0) and (in_x[i] > 2.0))"
    assert "k_and" in low.truth(Node(Op.AND, (flag, odd), Type(TypeKind.BOOL, ROLLOUT)), "rollout", Scope())
    assert low.truth(Node(Op.AND, (flag, odd), Type(TypeKind.BOOL, ROLLOUT)), "rollout", Scope(), want=False) == \
        "((in_flag[i] == 0.0) or (m_odd[g] == 0.0))"
