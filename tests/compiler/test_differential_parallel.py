"""Parallel kernels (`parallel=True`, groups in chunks across threads) against the interpreter and
the sequential kernel, on batches large enough to be split (helpers from test_differential.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec
from shapec.compiler.lowering.groups import PARALLEL_MIN_ROLLOUTS

from .spec_writer import EVERY_CONSTRUCT
from .test_differential import _COMPILED, assert_agree, backends, outcome, random_call, random_state


def large_sizes(seed: int, largest: int) -> list[int]:
    """Group sizes (a few empty) adding up to a batch large enough to run in chunks across threads."""
    rng = random.Random(seed)
    sizes: list[int] = []
    while sum(sizes) < 2 * PARALLEL_MIN_ROLLOUTS:
        sizes.append(0 if rng.random() < 0.05 else rng.randint(1, largest))
    return sizes


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), largest=st.integers(1, 64), per_group=st.booleans())
def test_parallel_kernels_agree_on_large_batches(seed, largest, per_group):
    """parallel=True: the interpreter's results to 1e-12, and the sequential kernel's bit for bit."""
    build = lambda b: shapec.compile_str(EVERY_CONSTRUCT, "generated_all.shape", b)["generated_all"]  # noqa: E731
    interp, sequential = backends(("fixed", 0), build)
    if "parallel" not in _COMPILED:
        _COMPILED["parallel"] = shapec.compile_str(EVERY_CONSTRUCT, "generated_all.shape", "numba",
                                                   parallel=True)["generated_all"]
    parallel = _COMPILED["parallel"]
    assert parallel.parallel and not sequential.parallel
    kwargs, rewards = random_call(interp, seed, large_sizes(seed, largest), per_group)
    state = random_state(interp, seed, [random.Random(seed).random(), 0.0, 3.5])
    assert_agree(interp, parallel, rewards, kwargs, state)
    sequential.load_state_dict(state)
    parallel.load_state_dict(state)
    a, b = outcome(sequential, rewards, kwargs), outcome(parallel, rewards, kwargs)
    if isinstance(a, Exception):
        assert str(a) == str(b)
        return
    np.testing.assert_array_equal(a.rewards, b.rewards)
    for k in a.terms:
        np.testing.assert_array_equal(a.terms[k], b.terms[k])
