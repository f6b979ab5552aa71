"""The time-efficiency drop-in's one pass reads every row as the per-value readers read it: the same
flags, rewards, run times, calls and missing count, and for bad values the first error of each kind
in NeMo-RL's order (resolved, then rewards, then run times)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shapec.compat import _time_efficiency as te
from shapec.run.nemo_gym_rows import has_run_time, rollout_calls, rollout_seconds
from shapec.runtime.validate import flag

ANY = st.sampled_from([None, True, False, 0, 1, 2.5, -0.0, 0.0, -3.0, 1e308, math.nan, math.inf, -math.inf, "12",
                       "x", [1], np.float32(2.0), np.bool_(True), 2**60, 10**400, np.array([1.0, 2.0])])
OUTPUTS = st.sampled_from([None, [], [{"type": "function_call"}], [{"type": "message"}, {"type": "function_call"}],
                           "text", [{"type": "function_call"}, 3]])


def first_error(read, values):
    for i, v in enumerate(values):
        try:
            read(i, v)
        except ValueError as err:
            return str(err)
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(ANY, ANY, ANY, OUTPUTS), min_size=1, max_size=5))
def test_one_pass_reads_as_the_per_value_readers(rows):
    results = [{"full_result": {"resolved": done, "reward": reward, "openhands_run_time": run_time,
                                "response": {"output": output}}} for done, reward, run_time, output in rows]
    expected = [first_error(lambda i, r: flag(r["full_result"]["resolved"], f"results[{i}].full_result.resolved"),
                            results),
                first_error(lambda i, r: te.charged_reward(r["full_result"], i), results),
                first_error(lambda i, r: rollout_seconds(r, i), results)]
    try:
        full, resolved, rewards, seconds, calls, missing = te.read_rows(results)
    except ValueError as err:
        assert str(err) == next(e for e in expected if e is not None)
        return
    assert expected == [None, None, None]
    assert resolved.tolist() == [flag(r["full_result"]["resolved"], "x") for r in results]
    assert rewards.tobytes() == np.array([te.charged_reward(r["full_result"], i) for i, r in enumerate(results)]).tobytes()
    assert seconds == [rollout_seconds(r, i) for i, r in enumerate(results)]
    assert calls == [rollout_calls(r) for r in results]
    assert missing == sum(not has_run_time(r) for r in results)
