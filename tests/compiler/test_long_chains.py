"""A run of one associative operator (`a + b + c ...`, `*`, `and`, `or`) is one n-ary IR node,
evaluated as the left fold `((a op b) op c) ...`: a thousand terms check, compile and run, and
every backend gives the bits that nested binary evaluation gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec
from shapec.ir.nodes import Op, StepKind

from ..helpers import every_backend

HEADER = "shaper s() produces real {\n  input x: float\n  input y: float\n"


def operand(op: str, k: int, c: float) -> str:
    """The k-th operand of a chain of op: numbers for + and *, for and/or a test that is true,
    false or missing (0 / 0) depending on x and y."""
    v = "x" if k % 2 else "y"
    if op == "+":
        return f"{v} * {c!r}"
    if op == "*":
        return f"(1 + {v} * {c!r})"
    return f"(x - {k % 4}) / (y - {k // 4 % 6}) {'<' if op == 'and' else '>'} 1e300"


def term(op: str, value: str) -> str:
    return f"({value}) ? 1 : 2" if op in ("and", "or") else value


def chain_spec(op: str, parts: list[str]) -> str:
    return HEADER + f"  term t = {term(op, f' {op} '.join(parts))}\n}}\n"


def left_parenthesised_spec(op: str, parts: list[str]) -> str:
    text = "(" * (len(parts) - 1) + parts[0] + "".join(f" {op} {p})" for p in parts[1:])
    return HEADER + f"  term t = {term(op, text)}\n}}\n"


def let_spec(op: str, parts: list[str]) -> str:
    """The same fold written one binary operator per let: nested binary evaluation."""
    lets = [f"  let v1 = {parts[0]} {op} {parts[1]}\n"]
    lets += [f"  let v{k} = v{k - 1} {op} {p}\n" for k, p in enumerate(parts[2:], 2)]
    return HEADER + "".join(lets) + f"  term t = {term(op, f'v{len(parts) - 1}')}\n}}\n"


def numbers(rng, n: int = 12) -> dict[str, np.ndarray]:
    return {"x": rng.uniform(-3, 3, n), "y": rng.uniform(0, 1e3, n)}


def small_ints(rng, n: int = 24) -> dict[str, np.ndarray]:
    """x in 0..3 and y in 0..7: y past 5 divides by no operand's zero, x == a over y == b is 0 / 0."""
    return {"x": rng.integers(0, 4, n).astype(np.float64), "y": rng.integers(0, 8, n).astype(np.float64)}


def both(source: str) -> list:
    """The interpreter and the numba kernel of shaper s."""
    return [shapec.compile_str(source, "t.shape", backend)["s"] for backend in ("interpreter", "numba")]


def run(shaper, channels: dict[str, np.ndarray]):
    n = len(channels["x"])
    return shaper(np.linspace(0.0, 1.0, n), group_size=n // 2, channels=channels)


def constants(rng, n: int) -> list[float]:
    return [float(c) for c in rng.uniform(0.01, 2.0, n) * 10.0 ** rng.integers(-6, 6, n)]


@pytest.mark.slow
def test_a_thousand_term_sum_is_one_node_and_every_backend_gives_the_left_fold_bit_for_bit():
    rng = np.random.default_rng(1)
    cs, data = constants(rng, 1000), numbers(rng)
    source = chain_spec("+", [operand("+", k, c) for k, c in enumerate(cs)])
    assert shapec.check_source(source, "t.shape") == []
    [step] = [st for st in shapec.compile_str(source, "t.shape", "interpreter").ir("s").steps if st.kind is StepKind.TERM]
    assert (step.expr.op, step.expr.attr, len(step.expr.args)) == (Op.BIN, "+", 1000)
    expected = data["y"] * cs[0]
    for k, c in enumerate(cs[1:], 1):
        expected = expected + data["x" if k % 2 else "y"] * c
    for shaper in every_backend(source, "s"):
        assert run(shaper, data).terms["t"].tobytes() == expected.tobytes()


@pytest.mark.slow
def test_a_thousand_factor_product_gives_the_left_fold_bit_for_bit():
    rng = np.random.default_rng(2)
    cs, data = [float(c) for c in rng.uniform(-1e-3, 1e-3, 1000)], numbers(rng)
    source = chain_spec("*", [operand("*", k, c) for k, c in enumerate(cs)])
    expected = 1 + data["y"] * cs[0]
    for k, c in enumerate(cs[1:], 1):
        expected = expected * (1 + data["x" if k % 2 else "y"] * c)
    for shaper in every_backend(source, "s"):
        assert run(shaper, data).terms["t"].tobytes() == expected.tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("op", ["and", "or"])
def test_a_long_and_or_chain_is_three_valued_like_the_same_fold_written_with_lets(op):
    """true, false and missing (the term not applied: 0) all occur, as they do one `op` at a time;
    300 operands, past the 256 levels the nested form may have."""
    parts = [operand(op, k, 0.0) for k in range(300)]
    data = small_ints(np.random.default_rng(3))
    expected = run(shapec.compile_str(let_spec(op, parts), "t.shape", "interpreter")["s"], data).terms["t"]
    assert set(expected.tolist()) == {0.0, 1.0, 2.0}
    for shaper in both(chain_spec(op, parts)):
        assert run(shaper, data).terms["t"].tobytes() == expected.tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("op", ["and", "or"])
def test_a_long_chain_of_tests_that_are_never_missing_decides_a_when_and_a_conditional(op):
    """Comparisons of inputs are never missing: the kernels test them without the three-valued
    helpers, a few at a time (numba compiles one long short-circuit test recursively)."""
    chain = f" {op} ".join(f"x > {k / 300!r}" for k in range(300))
    source = HEADER + f"  term t = 1 when {chain}\n  term u = ({chain}) ? 1 : 2\n}}\n"
    data = {"x": np.array([-1.0, 0.0, 0.5, 0.9985, 1.0, 2.0]), "y": np.zeros(6)}
    expected = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0] if op == "or" else [0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    for shaper in both(source):
        out = run(shaper, data)
        assert out.terms["t"].tolist() == expected.tolist()
        assert out.terms["u"].tolist() == (2 - expected).tolist()


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(["+", "*", "and", "or"]), n=st.integers(2, 40), seed=st.integers(0, 2**32 - 1))
def test_a_chain_its_left_parenthesised_form_and_its_fold_in_lets_agree_on_every_backend(op, n, seed):
    rng = np.random.default_rng(seed)
    cs = [float(c) for c in rng.uniform(-1e-3, 1e-3, n)] if op == "*" else constants(rng, n)
    parts = [operand(op, k, c) for k, c in enumerate(cs)]
    data = small_ints(rng) if op in ("and", "or") else numbers(rng)
    expected = run(shapec.compile_str(let_spec(op, parts), "t.shape", "interpreter")["s"], data).rewards
    for source in (chain_spec(op, parts), left_parenthesised_spec(op, parts)):
        for shaper in both(source):
            assert run(shaper, data).rewards.tobytes() == expected.tobytes()
