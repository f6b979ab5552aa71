"""The statement scheduler and loop fuser of the generated group code (compiler/schedule.py).

Fusion must never change what a block computes: the property test runs random blocks,
written the way the lowering writes them, before and after fusion in plain Python.
"""

import importlib.util
import textwrap
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shapec import compile_str
from shapec.compiler.lowering.module import emit_python
from shapec.compiler.lowering.reductions import MUTATING_HELPERS
from shapec.compiler.lowering.schedule import fuse_block


def bench_kernels_spec() -> str:
    """The spec benchmarks/bench_kernels.py times (the benchmarks are scripts, not a package)."""
    path = Path(__file__).parents[2] / "benchmarks" / "bench_kernels.py"
    spec = importlib.util.spec_from_file_location("bench_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SPEC


def fused(code: str) -> str:
    return "\n".join(fuse_block(textwrap.dedent(code).strip("\n").split("\n"), 0, MUTATING_HELPERS))


def loops(code: str) -> int:
    return code.count("for i in range(s, e):")


def test_adjacent_independent_loops_fuse_into_one():
    out = fused("""
        for i in range(s, e):
            a[i - s] = x[i]
        for i in range(s, e):
            b[i - s] = a[i - s] * 2.0
    """)
    assert loops(out) == 1
    assert out.index("a[i - s] = x[i]") < out.index("b[i - s] = a[i - s] * 2.0")


def test_a_reduction_between_loops_keeps_them_apart():
    out = fused("""
        for i in range(s, e):
            a[i - s] = x[i]
        r = red_min(a, ibuf, 4, 0.0)
        for i in range(s, e):
            b[i - s] = a[i - s] - r
    """)
    assert loops(out) == 2


def test_a_statement_moves_ahead_so_loops_can_fuse():
    out = fused("""
        for i in range(s, e):
            a[i - s] = x[i]
        m = p[g] * 2.0
        for i in range(s, e):
            b[i - s] = a[i - s] + m
    """)
    assert loops(out) == 1
    assert out.index("m = p[g] * 2.0") < out.index("for i")


def test_reading_another_iterations_element_blocks_fusion():
    out = fused("""
        for i in range(s, e):
            a[i - s] = x[i]
        for i in range(s, e):
            b[i - s] = a[0]
    """)
    assert loops(out) == 2


def test_mixed_index_forms_of_one_array_block_fusion():
    out = fused("""
        for i in range(s, e):
            a[i] = x[i]
        for i in range(s, e):
            b[i - s] = a[i - s]
    """)
    assert loops(out) == 2


def test_a_shared_counter_blocks_fusion_and_own_counters_do_not():
    shared = fused("""
        k = 0
        for i in range(s, e):
            buf[k] = x[i]
            k += x[i] > 0
        r = red_min(buf, ibuf, k, 0.0)
        k = 0
        for i in range(s, e):
            buf2[k] = y[i]
            k += y[i] > 0
    """)
    assert loops(shared) == 2
    own = fused("""
        k1 = 0
        for i in range(s, e):
            sel1[k1] = x[i]
            k1 += x[i] > 0
        k2 = 0
        for i in range(s, e):
            sel2[k2] = y[i]
            k2 += y[i] > 0
    """)
    assert loops(own) == 1


def test_a_temporary_assigned_first_may_be_reused_but_an_accumulator_may_not():
    temp = fused("""
        for i in range(s, e):
            t = x[i] * 2.0
            a[i - s] = t
        for i in range(s, e):
            t = y[i] + 1.0
            b[i - s] = t
    """)
    assert loops(temp) == 1
    acc = fused("""
        for i in range(s, e):
            t = x[i] * 2.0
            a[i - s] = t
        for i in range(s, e):
            t = t + y[i]
            b[i - s] = t
    """)
    assert loops(acc) == 2


def test_a_sort_in_place_is_a_write():
    out = fused("""
        for i in range(s, e):
            b[i - s] = buf[i - s]
        k_sort(buf, k)
        for i in range(s, e):
            c[i - s] = x[i]
    """)
    # the sort must stay after the loop that reads buf; the two loops cannot fuse across it
    assert out.index("b[i - s] = buf[i - s]") < out.index("k_sort(buf, k)")


def test_loops_with_break_are_never_fused():
    out = fused("""
        for i in range(s, e):
            a[i - s] = x[i]
        for i in range(s, e):
            if x[i] > 1.0:
                code = 1
                break
    """)
    assert loops(out) == 2


def test_branches_of_an_if_are_fused_on_their_own():
    out = fused("""
        if guard:
            for i in range(s, e):
                a[i - s] = x[i]
            for i in range(s, e):
                b[i - s] = a[i - s]
        else:
            for i in range(s, e):
                a[i - s] = 0.0
    """)
    assert loops(out) == 2


def test_ifs_of_one_test_merge_and_their_loops_fuse():
    out = fused("""
        if gate == 1.0:
            for i in range(s, e):
                a[i - s] = x[i]
        b0 = y[0]
        if (gate == 1.0):
            for i in range(s, e):
                b[i - s] = a[i - s] + b0
    """)
    assert out.count("if gate == 1.0:") == 1
    assert loops(out) == 1


def test_else_blocks_of_merged_ifs_merge_too():
    out = fused("""
        if gate == 1.0:
            for i in range(s, e):
                a[i - s] = x[i]
        else:
            for i in range(s, e):
                a[i - s] = 0.0
        if gate == 1.0:
            for i in range(s, e):
                b[i - s] = x[i]
        else:
            for i in range(s, e):
                b[i - s] = 0.0
    """)
    assert out.count("else:") == 1
    assert loops(out) == 2


def test_an_if_whose_block_changes_its_test_is_not_merged():
    out = fused("""
        if gate == 1.0:
            for i in range(s, e):
                a[i - s] = x[i]
            gate = 0.0
        if gate == 1.0:
            for i in range(s, e):
                b[i - s] = x[i]
    """)
    assert out.count("if gate == 1.0:") == 2
    assert loops(out) == 2


def test_comments_travel_with_their_statements():
    out = fused("""
        # term one
        for i in range(s, e):
            a[i - s] = x[i]
        # term two
        for i in range(s, e):
            b[i - s] = x[i]
    """)
    assert out.split("\n") == [
        "for i in range(s, e):", "    # term one", "    a[i - s] = x[i]", "    # term two", "    b[i - s] = x[i]"]


def test_the_benchmark_spec_walks_each_group_in_two_fused_passes():
    code = emit_python(compile_str(bench_kernels_spec(), backend="interpreter").three_channels.ir)
    groups = code.split("def groups_s0_three_channels(", 1)[1].split("\n\n\n", 1)[0]
    # the binary check, one pass for the gate and three selections, one for the three terms and
    # the clamp, the write-back (shaped or passed through), and in each of those two branches the
    # breakdown's copy under keep
    assert loops(groups) == 7


GATED = """
shaper gated(bonus: float >= 0 = 0.1) requires binary produces real {
  input reasoning: tokens
  input answer: tokens
  gate right = reward > 0
  gate block = count(right) >= 2
  term short_reasoning = bonus on argmin(reasoning where right) when block
  term short_answer = bonus on argmin(answer where right) when block
  term long_answer = -bonus on argmax(answer where right) when block and count(answer > 100) >= 2
}
"""


def test_statements_under_one_gate_share_its_if_and_their_passes():
    code = emit_python(compile_str(GATED, backend="interpreter").gated.ir)
    groups = code.split("def groups_s0_gated(", 1)[1].split("\n\n\n", 1)[0]
    gate = [line.strip() for line in groups.split("\n") if line.strip().startswith("if ") and "block" in line]
    assert len(gate) == 1
    # under the gate: one pass for the three terms' selections and the third's count, then the
    # third term's zeros in whichever branch of its own guard runs; outside it, one pass of zeros
    inside, _, outside = groups.split(gate[0], 1)[1].partition("\n        else:\n")
    assert loops(inside) == 3
    assert loops(outside.split("# the group's rewards")[0]) == 1


RELATIVE = """
shaper relative(coeff: float >= 0 = 0.1) requires binary produces real {
  input reasoning: tokens
  input answer: tokens
  gate right = reward > 0
  term shorter = coeff * (centered(1 - minmax(reasoning where right) where right)
                          + centered(1 - minmax(answer where right) where right)) on right
}
"""


def test_the_scaled_values_of_several_channels_share_their_passes():
    code = emit_python(compile_str(RELATIVE, backend="interpreter").relative.ir)
    groups = code.split("def groups_s0_relative(", 1)[1].split("\n\n\n", 1)[0]
    # the binary check; the gate and both ranges; both scaled values and both means; both
    # centred values and the term; then the write-back, shaped or passed through, each with the
    # breakdown's copy under keep
    assert loops(groups) == 8

# ---------------------------------------------------------------- the property
W = 6  # scratch width; the group is rollouts s..e-1 of inputs of length 8
LOOP = "for i in range(s, e):\n"


def _statements():
    arr = st.sampled_from(["A", "B", "C"])
    inp = st.sampled_from(["X", "Y"])
    own = st.sampled_from(["i - s"])
    const = st.sampled_from(["0.5", "2.0", "-1.0"])
    scalar = st.sampled_from(["p", "q"])
    return st.one_of(
        st.builds(lambda d, a, b, c: f"{LOOP}    {d}[i - s] = {a}[i - s] * {c} + {b}[i]", arr, arr, inp, const),
        st.builds(lambda d, a, c: f"{LOOP}    t = {a}[i - s] + {c}\n    {d}[i - s] = t * t", arr, arr, const),
        st.builds(lambda d, a, n: f"{LOOP}    {d}[i - s] = {a}[{n}]", arr, arr, st.integers(0, W - 1).map(str)),
        st.builds(lambda v, a: f"{LOOP}    {v} = {v} + {a}[i - s]", scalar, arr),
        st.builds(lambda d, a: f"{LOOP}    {d}[i - s] += {a}[i - s]", arr, arr),
        st.builds(lambda v, a: f"{LOOP}    {v} += {a}[i - s]", scalar, arr),
        st.builds(lambda d, a, k: f"{k} = 0\n{LOOP}    {d}[{k}] = {a}[i]\n    {k} += {a}[i] > 0.3",
                  arr, inp, st.sampled_from(["k1", "k2"])),
        st.builds(lambda v, a, n, w: f"{v} = {a}[{n}] + {w}", scalar, arr, st.integers(0, W - 1).map(str), scalar),
        st.builds(lambda a, k: f"k_sort({a}, {k})", arr, st.sampled_from(["k1", "k2", "3"])),
        st.builds(lambda v, d, a: f"if {v} > 0.0:\n    {LOOP}"
                                  f"        {d}[i - s] = {a}[i - s] - 1.0\n    q = 1.0\nelse:\n    q = 2.0",
                  scalar, arr, arr),
        st.builds(lambda v, d, a: f"if {v} > 0.0:\n    {LOOP}        {d}[i - s] = {a}[i - s] * 2.0", scalar, arr, arr),
        st.builds(lambda v, d: f"if {v} > 0.0:\n    {LOOP}        {d}[i - s] = 0.5\nelse:\n    {LOOP}"
                               f"        {d}[i - s] = -0.5", scalar, arr),
        st.builds(lambda v, w: f"if {v} > 0.0:\n    {w} = {w} - 0.75", scalar, scalar),
        own.map(lambda _: f"{LOOP}    C[i - s] = A[i - s] + B[i - s]"),
    )


def _run(code: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)

    def k_sort(buf, k):
        buf[:int(k)] = np.sort(buf[:int(k)])

    env = {"np": np, "k_sort": k_sort, "s": 1, "e": 5, "p": 0.25, "q": -0.5, "k1": 0, "k2": 0,
           **{a: rng.random(W) for a in "ABC"}, **{x: rng.random(8) for x in "XY"}}
    exec(code, env)
    return {k: env[k] for k in ("A", "B", "C", "p", "q", "k1", "k2")}


@settings(max_examples=300, deadline=None)
@given(st.lists(_statements(), min_size=1, max_size=10), st.integers(0, 2**32 - 1))
def test_fusion_never_changes_what_a_block_computes(stmts, seed):
    code = "\n".join(stmts)
    before, after = _run(code, seed), _run(fused(code), seed)
    for name, value in before.items():
        assert np.array_equal(value, after[name]), (name, code, fused(code))
