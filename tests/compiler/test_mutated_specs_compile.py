"""Mutated stdlib and example specs past check: whatever check accepts compiles, and its generated
module (run as plain Python, and on numba for a few) gives the interpreter's results; whatever it
refuses, it refuses with coded diagnostics. The mutations swap words and put in the constants that
broke this once: a negative base to a fractional power, arithmetic past float64, fractional ints."""

from __future__ import annotations

import inspect
import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shapec
from shapec.compiler import lowering
from shapec.runtime.shaper import CompiledShaper

from . import test_differential as differential
from ..checker.test_random_source import CORPUS, WORDS, assert_only_coded
from .test_generated_code_is_safe import _python_kernels

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+\.?\d*(e-?\d+)?")
CONSTANTS = ["(-8) ** 0.5", "(0 - 1) ** 2.5", "1e308 * 10", "1e308 * 10 - 1e308 * 10", "0.5", "-0.0", "0 / 0", "1e300",
             "9007199254740993", "1e-320", "(0 - 2) ** (1 / 3)"]
# the interpreter and a plain-Python run of the kernel, compared as test_differential does, minus the
# second lean call (a plain-Python kernel indexes the zero-width breakdown numba never bounds-checks)
_source = inspect.getsource(differential.assert_agree)
exec(_source.replace("def assert_agree(", "def agree(").replace("if not kernel.state_dict():", "if False:"),
     vars(differential))
agree = differential.agree


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 3)):
        i, j = rng.choice([m.span() for m in WORD.finditer(text)])
        text = text[:i] + rng.choice(WORDS + CONSTANTS) + text[j:]
    return text


def accepted(text: str) -> bool:
    assert_only_coded(text)
    return shapec.check_source(text, "fuzz.shape") == []


def calls(shaper, rng: random.Random, count: int):
    for _ in range(count):
        sizes = [rng.choice([1, 2, 3, 5]) for _ in range(rng.randint(1, 4))]
        kwargs, rewards = differential.random_call(shaper, rng.randrange(10 ** 6), sizes, rng.random() < 0.5)
        yield rewards, kwargs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(CORPUS))), st.integers(0, 2 ** 32))
def test_what_check_accepts_compiles_and_its_kernel_agrees(index, seed):
    rng = random.Random(seed)
    text = mutate(CORPUS[index], rng)
    if not accepted(text):
        return
    module = shapec.compile_str(text, "fuzz.shape", "interpreter")
    for name in module.names():
        ir = module.ir(name)
        source, stages = lowering.module.lower_module(ir)
        for rewards, kwargs in calls(module[name], rng, 2):
            kernel = CompiledShaper(ir, "interpreter")
            kernel._kernels = _python_kernels(source, stages)
            agree(CompiledShaper(ir, "interpreter"), kernel, rewards, kwargs)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(CORPUS))), st.integers(0, 2 ** 32))
def test_what_check_accepts_runs_on_numba_like_the_interpreter(index, seed):
    rng = random.Random(seed)
    text = mutate(CORPUS[index], rng)
    if not accepted(text):
        return
    module = shapec.compile_str(text, "fuzz.shape", "numba")
    name = rng.choice(module.names())
    for rewards, kwargs in calls(module[name], rng, 1):
        agree(CompiledShaper(module.ir(name), "interpreter"), module[name], rewards, kwargs)
