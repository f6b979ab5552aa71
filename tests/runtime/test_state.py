"""Shaper state: atomic per call under threads, validated on load, kept when an update is not a number."""

from __future__ import annotations

import math
import pickle
import random
import sys
import threading

import numpy as np
import pytest

import shapec
from shapec import compile_str
from shapec.compat.short_rl import ShortRL
from shapec.runtime.states import StateError

from ..helpers import src

BACKENDS = ["interpreter", "numba"]
THREADS, CALLS, TRIALS, N = 8, 30, 10, 50


def hammer(call, seed: int) -> float:
    """8 threads released together, each shaping CALLS batches of random accuracy; the true best."""
    rng = random.Random(seed)
    hits = [[rng.randint(0, N) for _ in range(CALLS)] for _ in range(THREADS)]
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work(mine):
        try:
            barrier.wait()
            for k in mine:
                call([1.0] * k + [0.0] * (N - k))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(h,)) for h in hits]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so an unlocked read-compute-write would interleave
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    return max(max(h) for h in hits) / N


COUNTING = src("""
    shaper s() produces real {
      input ok: bool
      state best: float = 0 update max(best, batch.mean(ok))
      state calls: float = 0 update calls + 1
      term t = 0
    }
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_never_lose_a_state_update(backend):
    # a counter loses a step on any interleaved read-compute-write, the running best only sometimes
    shaper = compile_str(COUNTING, backend=backend).s
    for trial in range(TRIALS):
        shaper.load_state_dict({"s": {"best": 0.0, "calls": 0.0}})
        best = hammer(lambda c: shaper(c, group_size=10, channels={"ok": c}), trial)
        assert shaper.state_dict() == {"s": {"best": best, "calls": THREADS * CALLS}}, f"trial {trial}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_short_rl_running_best_under_threads(backend):
    shaper = shapec.load("short_rl", backend=backend).short_rl
    for trial in range(TRIALS):
        shaper.load_state_dict({"short_rl": {"acc_max": 0.0}})
        best = hammer(lambda c: shaper(c, group_size=10, channels={"correct": c, "length": [100] * N}), trial)
        assert shaper.state_dict() == {"short_rl": {"acc_max": best}}, f"trial {trial}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_short_rl_drop_in_under_threads(backend, monkeypatch):
    monkeypatch.setenv("SHAPEC_BACKEND", backend)
    for trial in range(TRIALS):
        shaper = ShortRL()
        best = hammer(lambda c: shaper(c, c, [100] * N, group_size=10), 100 + trial)
        assert shaper.acc_max == best, f"trial {trial}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_stateless_shapers_run_in_threads_without_a_lock(backend):
    shaper = shapec.load("miles", backend=backend).length_penalty
    assert shaper._lock.__class__.__name__ == "nullcontext"
    expected = shaper([1.0, 1.0], group_size=2, channels={"loss_tokens": [100, 200]}, params={"coeff": 1.0}).rewards
    results = []
    hammer(lambda c: results.append(
        shaper([1.0, 1.0], group_size=2, channels={"loss_tokens": [100, 200]}, params={"coeff": 1.0}).rewards), 7)
    assert len(results) == THREADS * CALLS and all(np.array_equal(r, expected) for r in results)


# ------------------------------------------------------------------ load_state_dict
TWO = src("""
    shaper s() produces real {
      input ok: bool
      let acc = batch.mean(ok)
      state best: float = 0 update max(best, acc)
      state calls: float = 0 update calls + 1
      term t = best
    }
""")


@pytest.fixture()
def stateful():
    s = compile_str(TWO, backend="interpreter").s
    s([1.0, 0.0], group_size=2, channels={"ok": [1, 0]})
    return s


@pytest.mark.parametrize("state, message", [
    (None, r"state of 's': expected a mapping of stage -> \{state: value\}, got NoneType"),
    ([0.5], r"state of 's': expected a mapping of stage -> \{state: value\}, got list"),
    ({}, r"state s\.best: missing; a checkpoint must carry every state"),
    ({"s": {"best": 0.5}}, r"state s\.calls: missing"),
    ({"t": {"best": 0.5}}, r"state of 's': no stateful stage 't'; stateful stages: \['s'\]"),
    ({"s": [0.5, 1]}, r"state 's': expected a mapping of state -> value, got list"),
    ({"s": {"best": 0.5, "calls": 1, "bets": 1}}, r"state s\.bets: no such state; 's' has \['best', 'calls'\]"),
    ({"s": {"best": math.nan, "calls": 1}}, r"state s\.best: expected a finite number, got nan"),
    ({"s": {"best": math.inf, "calls": 1}}, r"state s\.best: expected a finite number, got inf"),
    ({"s": {"best": "0.5", "calls": 1}}, r"state s\.best: expected a finite number, got '0.5'"),
    ({"s": {"best": None, "calls": 1}}, r"state s\.best: expected a finite number, got None"),
    ({"s": {"best": True, "calls": 1}}, r"state s\.best: expected a finite number, got True"),
    ({"s": {"best": 0.5, "calls": 10**400}}, r"state s\.calls: expected a finite number"),
])
def test_load_state_dict_names_the_bad_key_and_changes_nothing(stateful, state, message):
    before = stateful.state_dict()
    with pytest.raises(StateError, match=message):
        stateful.load_state_dict(state)
    assert stateful.state_dict() == before == {"s": {"best": 0.5, "calls": 1.0}}


def test_load_state_dict_round_trips_and_accepts_numpy_numbers(stateful):
    clone = compile_str(TWO, backend="interpreter").s
    clone.load_state_dict(stateful.state_dict())
    assert clone.state_dict() == {"s": {"best": 0.5, "calls": 1.0}}
    clone.load_state_dict({"s": {"best": np.float32(0.25), "calls": np.int64(3)}})
    assert clone.state_dict() == {"s": {"best": 0.25, "calls": 3.0}}


def test_a_stateless_shaper_loads_its_empty_state():
    s = shapec.load("miles", backend="interpreter").length_penalty
    s.load_state_dict(s.state_dict())
    assert s.state_dict() == {}
    with pytest.raises(StateError, match=r"no stateful stage 'length_penalty'; stateful stages: none"):
        s.load_state_dict({"length_penalty": {}})


# ------------------------------------------------------------------ updates that are not a number
UPDATES = src("""
    shaper s() produces real {
      input length: tokens
      gate right = reward > 0
      state ema: float = 0.5 update 0.9 * ema + 0.1 * batch.mean(float(length) where right)
      state grown: float = 1 update grown + exp(batch.max(float(length)) - 20)
      state blown: float = 0.5 update blown * 1e308 * 1e308
      term high = ema > 1 ? 1 : 0
    }
""")


def saved_and_pickled(shaper):
    """The shaper after its state_dict() is loaded back, and a copy through pickle (Ray, multiprocessing)."""
    shaper.load_state_dict(shaper.state_dict())
    clone = pickle.loads(pickle.dumps(shaper))
    assert clone.state_dict() == shaper.state_dict()
    return clone


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_update_that_is_missing_or_overflows_keeps_the_previous_state(backend):
    shaper = compile_str(UPDATES, backend=backend).s
    # no correct rollout: the mean over none is missing; exp(99980) and blown * 1e308 * 1e308 are inf
    out = shaper([0.0, 0.0], group_size=2, channels={"length": [100000, 30]})
    assert shaper.state_dict() == {"s": {"ema": 0.5, "grown": 1.0, "blown": 0.5}}
    assert out.rewards.tolist() == [0.0, 0.0]  # the kept ema, compared with 1
    shaper = saved_and_pickled(shaper)
    out = shaper([1.0, 0.0], group_size=2, channels={"length": [20, 10]})  # then a good batch updates them
    assert shaper.state_dict() == {"s": {"ema": 0.9 * 0.5 + 0.1 * 20.0, "grown": 2.0, "blown": 0.5}}
    assert out.rewards.tolist() == [2.0, 1.0]
    shaper = saved_and_pickled(shaper)
    shaper([0.0], group_size=1, channels={"length": [20]})
    assert shaper.state_dict() == {"s": {"ema": 0.9 * 0.5 + 0.1 * 20.0, "grown": 3.0, "blown": 0.5}}


DECAYING = src("""
    shaper budgeted(decay: float in [0, 1] = 0.9, w: float = 0.001) produces real {
      input length: tokens
      state budget: float = 1000 update budget * decay
      term over = -w * float(length) when float(length) > budget
    }
""")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_state_update_reads_a_param_given_for_the_call(backend):
    """`update budget * decay`: the budget tightens by the call's decay on every call, whatever the
    decay of each call, on both backends as a loop written by hand computes it."""
    shaper = compile_str(DECAYING, backend=backend).budgeted
    budget = 1000.0
    for decay in (0.8, 0.5, 1.0, 0.9, 0.0):
        budget *= decay
        out = shaper([1.0, 1.0], group_size=2, channels={"length": [100, 600]}, params={"decay": decay})
        assert shaper.state_dict() == {"budgeted": {"budget": budget}}
        assert out.rewards.tolist() == [1.0 - 0.001 * n if n > budget else 1.0 for n in (100, 600)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_call_of_no_rollouts_still_updates_a_state_by_its_params(backend):
    shaper = compile_str(DECAYING, backend=backend).budgeted
    shaper([], group_size=2, channels={"length": []}, params={"decay": 0.5})
    shaper(np.zeros(0), offsets=[0], channels={"length": np.zeros(0)}, params={"decay": 0.25})
    assert shaper.state_dict() == {"budgeted": {"budget": 125.0}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_param_a_state_update_reads_is_one_value_per_call(backend):
    shaper = compile_str(DECAYING, backend=backend).budgeted
    with pytest.raises(shapec.ParamError if hasattr(shapec, "ParamError") else ValueError,
                       match="param 'decay' of shaper 'budgeted': a state update reads it"):
        shaper([1.0, 1.0], group_size=1, channels={"length": [1, 2]}, params={"decay": [0.5, 0.6]})
    assert shaper.state_dict() == {"budgeted": {"budget": 1000.0}}
