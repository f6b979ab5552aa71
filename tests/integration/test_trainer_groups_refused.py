"""The trainer adapters, fed what trainers feed (torch tensors, OpenRLHF experiences, miles
samples): groups that the trainer cannot mean are refused before anything is shaped, and errors
name rows in the trainer's order, not the grouped one."""

from __future__ import annotations

import types

import pytest

from shapec.compat import trl as trl_adapter
from shapec.compat._groups import resolve_shaper, shape_by_group
from shapec.compat.miles import post_process_rewards
from shapec.compat.openrlhf import length_penalty_hook
from shapec.runtime.batch import BatchError

from ..compat.test_miles_hook import Sample, _args
from .require import need

torch = need("torch", "trl")


@pytest.fixture(scope="module")
def kimi():
    return resolve_shaper("kimi", "kimi_length", backend="interpreter")


KEYS = ["a", "b", "a", "b"]  # grouped order is rows 0, 2, 1, 3: trainer row 1 is grouped row 2


@pytest.mark.parametrize("rewards, lengths, message", [
    ([1, None, 1, 1], [1, 2, 3, 4], r"^rewards: index 1: expected a number, got None$"),
    ([1, float("nan"), 1, 1], [1, 2, 3, 4], r"^rewards: NaN at index 1; expected a number$"),
    ([1, 1, 1, 1], [1, -2, 3, 4], r"^channels\['length'\]: negative length at index 1; tokens must be >= 0$"),
    ([1, 1, 1, 1], [1, "2", 3, 4], r"^channels\['length'\]: index 1: expected a number, got '2'$"),
])
def test_shape_by_group_names_the_row_in_the_trainers_order(kimi, rewards, lengths, message):
    with pytest.raises(BatchError, match=message):
        shape_by_group(kimi, rewards, KEYS, lengths=lengths)


def test_an_unhashable_group_key_names_the_rollout(kimi):
    with pytest.raises(ValueError, match=r"^group key of rollout 2 is \['a'\]; a group key is a hashable value"):
        shape_by_group(kimi, [1, 1, 1, 1], ["a", "b", ["a"], "b"], lengths=[1, 2, 3, 4])


# ------------------------------------------------------------------ OpenRLHF
def _experience(index, rewards, lengths):
    return types.SimpleNamespace(index=list(index), rewards=torch.tensor(rewards, dtype=torch.float32),
                                 response_length=torch.tensor(lengths, dtype=torch.float32), info={})


def _openrlhf_args(per_prompt=2):
    return types.SimpleNamespace(reward=types.SimpleNamespace(overlong_buffer_len=None, stop_properly_penalty_coef=None),
                                 rollout=types.SimpleNamespace(n_samples_per_prompt=per_prompt))


@pytest.mark.parametrize("indices, per_prompt, message", [
    ([[0, 1, 2]], 2, r"the rollout batch has 3 samples, not a multiple of rollout\.n_samples_per_prompt=2"),
    ([[0, 0], [1, 2]], 2, r"sample index 0 appears twice; the experiences' indices must number the 4 samples 0\.\.3"),
    ([[0, 1], [4, 5]], 2, r"sample index 4 is not in 0\.\.3"),
    ([[0, 1], [2, None]], 2, r"sample index None is not in 0\.\.3"),
    ([[0, 1]], 0, r"rollout\.n_samples_per_prompt must be a positive integer, got 0"),
])
def test_openrlhf_refuses_indices_its_grouping_cannot_read_and_shapes_nothing(indices, per_prompt, message):
    experiences = [_experience(idx, [1.0] * len(idx), [10.0 * (k + 1) for k in range(len(idx))]) for idx in indices]
    before = [e.rewards.tolist() for e in experiences]
    with pytest.raises(ValueError, match=r"^shapec\.compat\.openrlhf: " + message):
        length_penalty_hook("kimi", shaper="kimi_length", backend="interpreter")(experiences, _openrlhf_args(per_prompt))
    assert [e.rewards.tolist() for e in experiences] == before


def test_openrlhf_groups_indices_spread_over_experiences():
    # prompt 0 is samples 0 and 1, held by different experiences
    experiences = [_experience([0, 2], [1.0, 1.0], [10, 20]), _experience([1, 3], [1.0, 1.0], [30, 40])]
    length_penalty_hook("kimi", shaper="kimi_length", backend="interpreter")(experiences, _openrlhf_args())
    assert [e.rewards.tolist() for e in experiences] == [[1.5, 1.5], [0.5, 0.5]]


# ------------------------------------------------------------------ miles hook
def test_miles_refuses_a_batch_where_only_some_samples_have_a_group_index():
    samples = [Sample(group_index=0, index=0, reward=1.0, response_length=4),
               Sample(group_index=None, index=1, reward=1.0, response_length=8)]
    with pytest.raises(ValueError, match=r"post_process_rewards: sample 1 has no group_index while sample 0 has one"):
        post_process_rewards(_args(n_samples_per_prompt=2, rollout_batch_size=1), samples)


# ------------------------------------------------------------------ TRL
def test_trl_reads_only_columns_every_rank_has(monkeypatch):
    """Rank 0 holds 2 completions with an extra per-row list; rank 1's 2 rows lack it (its list had
    another length): the gathered batch is shaped from the columns all rows have."""
    other = [{"base": 1.0, "length": n, "prompt": "q", "columns": {"correct": 1.0}} for n in (4, 8)]
    calls = []

    def gather_object(obj):
        calls.append(obj)
        return [2, 2] if len(calls) == 1 else obj + other

    fake = {"accelerate.utils": types.SimpleNamespace(gather_object=gather_object),
            "accelerate": types.SimpleNamespace(PartialState=lambda: types.SimpleNamespace(process_index=0))}
    monkeypatch.setattr(trl_adapter, "require", lambda module, extra: fake[module])
    f = trl_adapter.reward_func("miles", "correct", shaper="length_penalty", params={"coeff": 1.0},
                                num_generations=2, backend="interpreter")
    out = f(prompts=["p", "p"], completions=["x", "y"], completion_ids=[[0] * 2, [0] * 4], correct=[1.0, 1.0],
            extra=[0, 1])
    assert out == [1.0, 0.5]


META_SPEC = """shaper t() produces real {
  meta level: float
  term bonus = level ?? 0
}
"""


def test_a_metadata_column_must_hold_one_value_per_group():
    from shapec import compile_str

    shaper = compile_str(META_SPEC, backend="interpreter").t
    same = shape_by_group(shaper, [0, 0, 0, 0], KEYS, lengths=[1, 1, 1, 1],
                          columns={"level": [1.0, float("nan"), 1.0, float("nan")]})
    assert same.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]  # NaN (missing) twice is one value
    with pytest.raises(ValueError, match=r"^shapec: column 'level' is metadata, one value per prompt group, but "
                                         r"group 1 holds 2\.0 \(rollout 1\) and 3\.0 \(rollout 3\)$"):
        shape_by_group(shaper, [0, 0, 0, 0], KEYS, lengths=[1, 1, 1, 1], columns={"level": [1.0, 2.0, 1.0, 3.0]})


def _pair(second_reward, **first):
    return [Sample(**{"group_index": 0, "index": 0, "reward": 1.0, "response_length": 4, **first}),
            Sample(group_index=first.get("group_index", 0), index=1, reward=second_reward, response_length=8)]


@pytest.mark.parametrize("reward, shown", [(None, "None"), ("x", "'x'"), (float("nan"), "nan"),
                                           (torch.tensor([1.0, 0.0]), r"array\(\[1\., 0\.\], dtype=float32\)")])
def test_miles_names_a_sample_whose_reward_is_not_one_finite_number(reward, shown):
    with pytest.raises(ValueError, match=rf"post_process_rewards: sample 1's reward is {shown}; expected a finite number"):
        post_process_rewards(_args(n_samples_per_prompt=2, rollout_batch_size=1), _pair(reward))


def test_miles_takes_any_hashable_group_index_and_scalar_rewards():
    raw, out = post_process_rewards(_args(n_samples_per_prompt=2, rollout_batch_size=1),
                                    _pair(torch.tensor(0.0), group_index="prompt-a"))
    assert raw == [1.0, 0.0] and out == pytest.approx([0.7071057811879616, -0.7071057811879616])
    with pytest.raises(ValueError, match=r"post_process_rewards: sample 0: group_index \['a'\] and rollout id 0 "
                                         r"must be hashable ids"):
        post_process_rewards(_args(n_samples_per_prompt=2, rollout_batch_size=1), _pair(0.0, group_index=["a"]))


def _trl_call(num_generations, prompts, lengths):
    need("accelerate", "trl")
    f = trl_adapter.reward_func("miles", "correct", shaper="length_penalty", params={"coeff": 1.0},
                                num_generations=num_generations, backend="interpreter")
    n = len(prompts)
    return f(prompts=prompts, completions=["x"] * n, completion_ids=[[0] * k for k in lengths], correct=[1.0] * n)


def test_trl_refuses_groups_that_are_parts_of_the_trainers_groups():
    # the trainer made 4 completions per prompt ("q" drawn twice: 8 in a row): blocks of 2 are parts of its groups
    with pytest.raises(ValueError, match=r"^shapec\.compat\.trl: every prompt spans consecutive groups of "
                                         r"num_generations=2: runs of 4, 8 completions share one prompt \(the first "
                                         r"is completions 0-3\), so the trainer makes 4 per prompt and each of its "
                                         r"groups would be shaped in parts; set num_generations=4, the trainer's "
                                         r"GRPOConfig\.num_generations \(a batch whose every prompt is a duplicate "
                                         r"dataset row drawn next to its twin is refused the same way"):
        _trl_call(2, ["p"] * 4 + ["q"] * 8, [2, 4, 8, 16] * 3)


def test_trl_shapes_a_duplicate_prompt_drawn_next_to_its_twin_as_two_groups():
    # two dataset rows with the text "p", drawn side by side: TRL normalises their blocks apart, so does shapec
    out = _trl_call(2, ["p"] * 4 + ["q"] * 2, [2, 4, 8, 16, 2, 4])
    assert out == [1.0, 0.5, 1.0, 0.5, 1.0, 0.5]  # each block against its own shortest, not "p"'s 2 tokens


def test_trl_refuses_a_batch_of_duplicate_prompts_only_as_it_cannot_tell_it_from_a_mismatch():
    with pytest.raises(ValueError, match=r"^shapec\.compat\.trl: every prompt spans consecutive groups of "
                                         r"num_generations=2: runs of 4 completions share one prompt"):
        _trl_call(2, ["p"] * 4, [2, 4, 8, 16])
