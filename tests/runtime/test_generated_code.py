"""The Python a shaper writes at run time (its binder and each kernel's argument list): made only of
the names its generator chooses and of constants, and doing what the plain readers do."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from shapec import compile_str
from shapec.runtime.binder import ARGUMENTS, NAMESPACE, binder_body

from ..helpers import src

# every kind of argument a binder reads: inputs of each type, scalar, band, record and list metadata
SPEC = src("""
    shaper every(k: float = 1) requires nonneg produces nonneg {
      input length: tokens
      input done: bool
      meta budget: float
      meta window: band
      meta rec: {w: float, pb: band}
      meta hist: list(reward: float, length: tokens)
      term bonus = k * (budget ?? 0) + (rec.w ?? 0) + float(mean(hist.length where hist.reward > 0) ?? 0)
      clamp >= 0
      factor fit = band(length, window) on reward > 0 and done
    }
""")
LOCALS = {"checks", "n", "G", "absent"}
MANGLED = re.compile(r"(input|meta|field|record|list|list_offsets|list_field|plan|offsets|ends|arrays|RULES|tables|rows)_\d+")


def _names_and_constants(body: list[ast.stmt]) -> tuple[set[str], list]:
    module = ast.Module(body, [])
    names = {node.id for node in ast.walk(module) if isinstance(node, ast.Name)}
    constants = [node.value for node in ast.walk(module) if isinstance(node, ast.Constant)]
    return names, constants


@pytest.fixture(scope="module")
def every():
    return compile_str(SPEC, "every.shape", "numba").every


def test_a_binder_is_made_only_of_its_own_names_and_constants(every):
    body, plans = binder_body(every.ir.inputs, every.ir.metas)
    names, constants = _names_and_constants(body)
    allowed = set(ARGUMENTS) | set(NAMESPACE) | LOCALS | {"Batch", "value_checks", "len"}
    assert {n for n in names if not MANGLED.fullmatch(n)} <= allowed
    assert set(plans) <= names and all(MANGLED.fullmatch(p) for p in plans)
    # the spec's names reach the code only as string constants (labels and keys)
    assert {"length", "done", "budget", "window", "rec", "hist"} <= {c for c in constants if isinstance(c, str)}
    assert all(c is None or isinstance(c, (str, int, float, bool, tuple)) for c in constants)


def test_a_spec_name_that_reads_as_code_stays_a_constant():
    shaper = compile_str(src("""
        shaper s() produces real {
          input __import__: tokens
          meta eval: float
          term t = (eval ?? 0) * float(__import__)
          result = reward + t
        }
    """), "s.shape", "numba").s
    body, _ = binder_body(shaper.ir.inputs, shaper.ir.metas)
    names, constants = _names_and_constants(body)
    assert "__import__" not in names and "eval" not in names
    assert {"__import__", "eval"} <= set(constants)
    out = shaper([1.0, 0.0], group_size=2, channels={"__import__": [3, 4]}, metadata={"eval": [2.0]})
    assert out.rewards.tolist() == [7.0, 8.0]


def test_kernel_arguments_are_made_only_of_their_own_names_and_constants(every):
    kernel = every._kernels[0]
    code = kernel.arguments.__code__  # the generated function's code object names all it reads
    assert code.co_filename == "<shapec arguments>"
    assert set(code.co_names) <= {"EMPTY", "nthreads", "state_array", "states", "rewards", "env_rewards", "offsets",
                                  "components", "inputs", "metas", "bands", "lists"}
    assert set(code.co_varnames) == {"batch", "packed", "state", "prompt_state"}


def test_kernel_arguments_are_the_batch_arrays_in_the_kernels_order(every):
    kernel = every._kernels[0]
    batch = every._batch(np.array([1.0, 0.0, 1.0, 1.0]), 2, None, {"length": [3, 4, 5, 6], "done": [1, 0, 2, 0]},
                         {"budget": [1.0, None], "window": None, "rec": None,
                          "hist": [{"reward": [1.0], "length": [2]}, None]}, None, None, False)
    packed = kernel.pack(every._bind(None).resolved[0].columns(2))
    values = kernel.arguments(batch, packed, {}, np.zeros((0, 0)))
    arrays = {"rewards": batch.rewards, "env_rewards": batch.env_rewards, "offsets": batch.offsets,
              "input": batch.inputs, "meta": batch.metas, "band": batch.bands}
    slot = 0
    for arg, value in zip(kernel.inputs, values):
        if arg.source in ("rewards", "env_rewards", "offsets"):
            assert value is arrays[arg.source]
        elif arg.source in ("input", "meta", "band"):
            assert value is arrays[arg.source][arg.key]
        elif arg.source == "list_offsets":
            assert value is batch.lists[arg.key][0]
        elif arg.source == "list_field":
            assert value is batch.lists[arg.key[0]][1][arg.key[1]]
        elif arg.source == "params":
            assert value is packed[slot]
            slot += 1
    assert slot == len(packed) and len(values) == len(kernel.inputs)
    assert values[[a.source for a in kernel.inputs].index("input")].dtype == np.float64
    assert batch.inputs["done"].tolist() == [1.0, 0.0, 1.0, 0.0]  # a bool input as 0/1 flags
