"""`**`: the interpreter computes C's pow, as the kernels do, bit for bit (NumPy's vectorised power does not)."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import shapec
from shapec.ir.powers import c_pow
from shapec.runtime.interp import power

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1e-300, 1e300, -1e300, math.inf, -math.inf,
           math.nan, 1024.0, -1025.0, 0.8, 1.5, -1.5]


@numba.njit(cache=False)
def _kernel_pow(x, y):
    return x ** y


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def test_c_pow_is_the_kernels_pow_on_every_special_pair():
    for x in SPECIAL:
        for y in SPECIAL:
            assert _same(c_pow(x, y), _kernel_pow(x, y)), (x, y)


def test_c_pow_is_the_kernels_pow_where_numpys_power_is_not():
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 3, 20000)
    y = rng.uniform(-3, 3, 20000)
    ours = power(x, y)
    kernels = np.array([_kernel_pow(a, b) for a, b in zip(x, y)])
    assert np.array_equal(ours, kernels)


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_a_power_in_a_spec_gives_the_same_bits_on_both_backends(backend):
    src = ('shaper p() produces real {\n  input base: tokens\n  input e: tokens\n'
           '  term t = (float(base) / 1000) ** (float(e) / 1000 - 3)\n}\n')
    rng = np.random.default_rng(3)
    base = rng.integers(1, 3000, 4096).astype(float)
    e = rng.integers(0, 6000, 4096).astype(float)
    out = shapec.compile_str(src, backend=backend).p(np.zeros(4096), group_size=16,
                                                     channels={"base": base, "e": e})
    expect = np.array([(b / 1000) ** (x / 1000 - 3) for b, x in zip(base.tolist(), e.tolist())])
    assert np.array_equal(out.rewards, 0.0 + expect)
