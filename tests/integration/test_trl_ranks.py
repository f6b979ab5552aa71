"""TRL adapter across two real processes: a group split between ranks is gathered, shaped whole,
and each rank gets back its own slice (accelerate's gather_object over torch.distributed, gloo)."""

import json
import os
import socket
import subprocess
import sys

import pytest

import shapec
from shapec.compat.trl import reward_func

from .require import need

SCRIPT = r"""
import json, sys
from accelerate import PartialState
from shapec.compat.trl import reward_func

state = PartialState(cpu=True, backend="gloo")
rank = state.process_index
prompts = ["p"] * 4 + ["q"] * 4
ids = [[0] * n for n in (3, 9, 5, 4, 7, 2, 8, 6)]
correct = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
cut = (3, 5)[rank]  # rank 0 holds 3 completions, rank 1 holds 5: group "p" straddles the ranks
part = slice(0, 3) if rank == 0 else slice(3, 8)
logged = {}
f = reward_func("miles", "correct", shaper="length_penalty", params={"coeff": 1.0}, num_generations=4,
                backend=sys.argv[1])
out = f(prompts=prompts[part], completions=["x"] * cut, completion_ids=ids[part], correct=correct[part],
        log_metric=lambda k, v: logged.__setitem__(k, v))
print(json.dumps({"rank": rank, "out": out, "logged": logged}))
state.destroy_process_group()
"""


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_group_split_across_two_ranks(backend, tmp_path):
    need("accelerate", "trl")
    need("torch.distributed", "trl")
    port = str(_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, "-c", SCRIPT, backend], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = {}
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        line = json.loads(out.strip().splitlines()[-1])
        results[line["rank"]] = line
    lengths = [3, 9, 5, 4, 7, 2, 8, 6]
    whole = shapec.load("miles", backend=backend).length_penalty(
        [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0], group_size=4, channels={"loss_tokens": lengths},
        params={"coeff": 1.0})
    assert results[0]["out"] + results[1]["out"] == pytest.approx(whole.rewards.tolist(), abs=0)
    assert results[0]["out"] == [1.0, 1 / 3, 0.0]  # 9 and 5 tokens against the group's shortest correct, 3
    for rank in (0, 1):
        assert results[rank]["logged"] == {"shapec/penalized_frac": whole.metrics["penalized_frac"]}


def test_batch_not_a_multiple_of_num_generations():
    need("accelerate", "trl")
    f = reward_func(shapec.load("miles", backend="interpreter"), "correct", shaper="length_penalty",
                    num_generations=4)
    with pytest.raises(ValueError, match=r"the generation batch has 6 completions, not a multiple of "
                                         r"num_generations=4"):
        f(prompts=["p"] * 6, completions=["x"] * 6, completion_ids=[[0]] * 6, correct=[1.0] * 6)
    with pytest.raises(ValueError, match=r"completions 0-3 \(group 0\) come from 2 different prompts"):
        f(prompts=["p", "p", "q", "q"], completions=["x"] * 4, completion_ids=[[0]] * 4, correct=[1.0] * 4)
