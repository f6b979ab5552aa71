"""verl: the registered estimator through verl's own compute_advantage on a real DataProto."""

import uuid

import numpy as np
import pytest

import shapec
from shapec.compat.verl import register_advantage_estimator, with_columns

from ..stdlib.test_hapo import MAX_LEN
from ..stdlib.test_hapo import step as hapo_step
from .require import need

LENGTHS = [5, 9, 3, 7, 4, 8, 6, 2, 9]
CORRECT = [1, 1, 0, 1, 0, 0, 1, 1, 1]
UIDS = ["p0", "p1", "p2", "p0", "p1", "p2", "p0", "p1", "p2"]  # interleaved: groups are uids, not positions


def _data(torch):
    verl = need("verl", "verl")
    width = max(LENGTHS) + 2
    mask = torch.zeros(len(LENGTHS), width)
    rewards = torch.zeros(len(LENGTHS), width)
    for i, (n, r) in enumerate(zip(LENGTHS, CORRECT)):
        mask[i, :n] = 1
        rewards[i, n - 1] = r
    return verl.DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                                    non_tensors={"uid": np.array(UIDS, dtype=object)})


def _expected(backend, base, norm_std):
    """The shaper on each uid group, then GRPO (or RLOO) computed here in numpy."""
    shaper = shapec.load("kimi", backend=backend).kimi_length
    out = np.zeros(len(UIDS))
    for uid in dict.fromkeys(UIDS):
        rows = [i for i, u in enumerate(UIDS) if u == uid]
        shaped = shaper([CORRECT[i] for i in rows], group_size=len(rows),
                        channels={"length": [LENGTHS[i] for i in rows]}).rewards
        if base == "rloo":
            k = len(rows)
            adv = shaped * k / (k - 1) - shaped.mean() * k / (k - 1)
        elif norm_std:
            adv = (shaped - shaped.mean()) / (shaped.std(ddof=1) + 1e-6)
        else:
            adv = shaped - shaped.mean()
        out[rows] = adv
    return out


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
@pytest.mark.parametrize("base,norm_std", [("grpo", True), ("grpo", False), ("rloo", True)])
def test_estimator_through_compute_advantage(backend, base, norm_std):
    torch = need("torch", "verl")
    ray_trainer = need("verl.trainer.ppo.ray_trainer", "verl")
    config = need("verl.trainer.config", "verl").AlgoConfig(adv_estimator="x", norm_adv_by_std_in_grpo=norm_std)
    name = f"shapec_test_{backend}_{base}_{norm_std}"
    estimator = register_advantage_estimator(name, shapec.load("kimi", backend=backend), base=base)
    data = ray_trainer.compute_advantage(_data(torch), adv_estimator=name, config=config)
    advantages = data.batch["advantages"]
    mask = data.batch["response_mask"]
    expected = _expected(backend, base, norm_std)
    np.testing.assert_allclose((advantages * mask).sum(-1).numpy() / mask.sum(-1).numpy(), expected,
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(advantages, advantages * mask)  # nothing outside the response
    assert torch.equal(data.batch["returns"], advantages)
    assert estimator.last_metrics == {}  # kimi declares no metrics
    assert need("verl.trainer.ppo.core_algos", "verl").get_adv_estimator_fn(name) is estimator


def test_metrics_kept_and_unknown_base_named():
    torch = need("torch", "verl")
    ray_trainer = need("verl.trainer.ppo.ray_trainer", "verl")
    config = need("verl.trainer.config", "verl").AlgoConfig()
    estimator = register_advantage_estimator("shapec_test_miles", "miles", shaper="length_penalty",
                                             params={"coeff": 1.0}, backend="interpreter")
    ray_trainer.compute_advantage(_data(torch), adv_estimator="shapec_test_miles", config=config)
    assert set(estimator.last_metrics) == {"penalized_frac"}
    assert 0 < estimator.last_metrics["penalized_frac"] < 1
    with pytest.raises(ValueError, match=r"base='grp'; expected one of grpo, rloo \(did you mean 'grpo'\?\)"):
        register_advantage_estimator("shapec_test_bad", "kimi", base="grp")


REASONING = [120, 40, 300, 90, 60, 10, 200, 80, 50]
ANSWER = [30, 20, 10, 60, 5, 15, 25, 35, 45]
LOW_EFFORT = [0, 0, 0, 0, 1, 0, 0, 0, 0]
NEMO = {"longest_total_penalty": 0.2, "total_bonus": 0.1, "group_total_length_penalty_coeff": 0.05}


def _nemo_expected():
    """nemo_rl.length_penalty on each uid group with its columns, then GRPO, computed here."""
    shaper = shapec.load("nemo_rl", backend="interpreter").length_penalty
    out = np.zeros(len(UIDS))
    for uid in dict.fromkeys(UIDS):
        rows = [i for i, u in enumerate(UIDS) if u == uid]
        shaped = shaper([CORRECT[i] for i in rows], group_size=len(rows), params=NEMO, metadata={
            "profile_band": None, "profiled": None}, channels={
            "reasoning": [REASONING[i] for i in rows], "answer": [ANSWER[i] for i in rows],
            "low_effort": [LOW_EFFORT[i] for i in rows]}).rewards
        out[rows] = (shaped - shaped.mean()) / (shaped.std(ddof=1) + 1e-6)
    return out


def test_a_spec_with_several_inputs_reads_them_from_the_batchs_non_tensor_columns():
    torch = need("torch", "verl")
    ray_trainer = need("verl.trainer.ppo.ray_trainer", "verl")
    config = need("verl.trainer.config", "verl").AlgoConfig(adv_estimator="x")
    register_advantage_estimator("shapec_test_nemo", "nemo_rl", shaper="length_penalty", params=NEMO,
                                 backend="interpreter")
    data = _data(torch)
    with pytest.raises(ValueError, match=r"several length inputs without a column \(reasoning, answer\)"):
        ray_trainer.compute_advantage(data, adv_estimator="shapec_test_nemo", config=config)
    for name, values in (("reasoning", REASONING), ("answer", ANSWER), ("low_effort", LOW_EFFORT),
                         ("profile_band", [None] * len(UIDS)), ("profiled", [None] * len(UIDS))):
        data.non_tensor_batch[name] = np.array(values, dtype=object)
    data = with_columns(ray_trainer.compute_advantage)(data, adv_estimator="shapec_test_nemo", config=config)
    advantages, mask = data.batch["advantages"], data.batch["response_mask"]
    np.testing.assert_allclose((advantages * mask).sum(-1).numpy() / mask.sum(-1).numpy(), _nemo_expected(),
                               rtol=1e-5, atol=1e-5)
    plain = np.zeros(len(UIDS))  # GRPO on the unshaped rewards: the columns change the advantages
    for uid in dict.fromkeys(UIDS):
        rows = [i for i, u in enumerate(UIDS) if u == uid]
        r = np.array([CORRECT[i] for i in rows], dtype=float)
        plain[rows] = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    assert not np.allclose(_nemo_expected(), plain, atol=1e-3)


def test_the_rollouts_a_shaper_drops_leave_the_group_and_the_loss():
    """gfpo keeps each group's two shortest: GRPO's statistics are over those alone, and a dropped
    response has advantage 0 and a response mask of zeros in the batch verl's loss reads."""
    torch = need("torch", "verl")
    ray_trainer = need("verl.trainer.ppo.ray_trainer", "verl")
    config = need("verl.trainer.config", "verl").AlgoConfig(adv_estimator="x", norm_adv_by_std_in_grpo=True)
    gfpo = shapec.load("gfpo", backend="interpreter").gfpo
    register_advantage_estimator("shapec_test_gfpo", gfpo, params={"k": 2, "scale": "none"})
    data = ray_trainer.compute_advantage(_data(torch), adv_estimator="shapec_test_gfpo", config=config)
    kept, expected = np.zeros(len(UIDS), dtype=bool), np.zeros(len(UIDS))
    for uid in dict.fromkeys(UIDS):
        rows = [i for i, u in enumerate(UIDS) if u == uid]
        out = gfpo([CORRECT[i] for i in rows], group_size=len(rows), channels={"length": [LENGTHS[i] for i in rows]},
                   params={"k": 2, "scale": "none"})
        mine = [i for i, keep in zip(rows, out.kept) if keep]
        shaped = out.rewards[out.kept]
        kept[mine] = True
        expected[mine] = (shaped - shaped.mean()) / (shaped.std(ddof=1) + 1e-6)
    mask = data.batch["response_mask"]
    assert mask.sum(-1).gt(0).numpy().tolist() == kept.tolist()
    advantages = data.batch["advantages"]
    rows_sum = (advantages * mask).sum(-1).numpy() / np.maximum(mask.sum(-1).numpy(), 1)
    np.testing.assert_allclose(rows_sum, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(advantages[torch.as_tensor(~kept)], torch.zeros_like(advantages[torch.as_tensor(~kept)]))


HAPO = {"w_lr": 1.0, "type_lr": "cosine"}
STEPS = [[10, 11, 12], [12, 13, 10], [11, 10, 14, 12]]  # dataset indices: prompts recur, elsewhere in the batch


def _hapo_batch(torch, prompts, correct, lengths, extra_info=True, columns=None):
    """One step's batch as verl's PPO trainer hands it to compute_advantage: `rollout.n` responses per
    prompt, shuffled (balance_batch reorders), a fresh uid per prompt and the dataset row's extra_info."""
    verl = need("verl", "verl")
    n = len(correct)
    width = max(lengths) + 1
    mask, rewards = torch.zeros(n, width), torch.zeros(n, width)
    for i, (length, r) in enumerate(zip(lengths, correct)):
        mask[i, :length] = 1
        rewards[i, length - 1] = r
    uids = {p: str(uuid.uuid4()) for p in dict.fromkeys(prompts)}
    non_tensors = {"uid": np.array([uids[p] for p in prompts], dtype=object), **(columns or {})}
    if extra_info:
        non_tensors["extra_info"] = np.array([{"index": p, "split": "train"} for p in prompts], dtype=object)
    return verl.DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                                    non_tensors=non_tensors)


@pytest.mark.parametrize("backend,mode", [("interpreter", "min"), ("numba", "mean")])
def test_hapo_tracked_keeps_each_prompts_history_across_steps_by_its_dataset_index(backend, mode):
    """Three steps through verl's compute_advantage: the rewards are HAPO's training loop's, whose
    history table follows each prompt by its dataset index (the uid changes at every step)."""
    torch = need("torch", "verl")
    ray_trainer = need("verl.trainer.ppo.ray_trainer", "verl")
    config = need("verl.trainer.config", "verl").AlgoConfig(adv_estimator="x", norm_adv_by_std_in_grpo=True)
    name = f"shapec_test_hapo_{backend}_{mode}"
    estimator = register_advantage_estimator(name, shapec.load("hapo", backend=backend).hapo_tracked,
                                             params={**HAPO, "mode": mode})
    compute = with_columns(ray_trainer.compute_advantage)
    rng = np.random.default_rng(7)
    lens, counts = {p: MAX_LEN for p in range(10, 15)}, {p: 0 for p in range(10, 15)}
    for chosen in STEPS:
        prompts = [p for p in chosen for _ in range(3)]
        rng.shuffle(prompts)
        correct = (rng.random(len(prompts)) < 0.7).astype(int).tolist()
        lengths = rng.integers(2, 40, len(prompts)).tolist()
        shaped, _ = hapo_step(lens, counts, prompts, correct, lengths, HAPO["w_lr"], HAPO["type_lr"], mode)
        data = compute(_hapo_batch(torch, prompts, correct, lengths), adv_estimator=name, config=config)
        expected = np.zeros(len(prompts))
        for p in chosen:
            rows = [i for i, q in enumerate(prompts) if q == p]
            r = np.array([shaped[i] for i in rows])
            expected[rows] = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
        advantages, mask = data.batch["advantages"], data.batch["response_mask"]
        np.testing.assert_allclose((advantages * mask).sum(-1).numpy() / mask.sum(-1).numpy(), expected,
                                   rtol=1e-5, atol=1e-5)
    history = estimator.shaper.state_dict()["hapo_tracked"]["history"]
    assert history == {p: float(lens[p]) for p in range(10, 15) if p in history} and set(history) == set(range(10, 15))
    assert any(lens[p] < MAX_LEN for p in history)  # a history formed, so later steps were shaped by it


def test_a_prompt_key_may_be_a_column_and_a_missing_one_is_named():
    torch = need("torch", "verl")
    ray_trainer = need("verl.trainer.ppo.ray_trainer", "verl")
    config = need("verl.trainer.config", "verl").AlgoConfig(adv_estimator="x")
    hapo = shapec.load("hapo", backend="interpreter").hapo_tracked
    prompts, correct, lengths = ["a", "a", "b", "b"], [1, 0, 1, 1], [5, 9, 4, 6]
    register_advantage_estimator("shapec_test_hapo_key", hapo, prompt_key="question_id")
    register_advantage_estimator("shapec_test_hapo_index", hapo)
    compute = with_columns(ray_trainer.compute_advantage)
    ids = {"question_id": np.array(prompts, dtype=object)}  # e.g. an entry a compute_score function returns
    compute(_hapo_batch(torch, prompts, correct, lengths, extra_info=False, columns=ids),
            adv_estimator="shapec_test_hapo_key", config=config)
    assert set(hapo.state_dict()["hapo_tracked"]["history"]) == {"a", "b"}
    with pytest.raises(ValueError, match=r"^shapec\.compat\.verl \(shapec_test_hapo_index\): 'hapo_tracked' keeps "
                                         r"hapo_tracked\.history, hapo_tracked\.seen per prompt, .*the batch has no "
                                         r"extra_info .*give every dataset row extra_info=\{'index': "):
        compute(_hapo_batch(torch, prompts, correct, lengths, extra_info=False), adv_estimator="shapec_test_hapo_index",
                config=config)
    with pytest.raises(ValueError, match=r"only the uid, which is new at every step: wrap verl's compute_advantage "
                                         r"with with_columns"):
        ray_trainer.compute_advantage(_hapo_batch(torch, prompts, correct, lengths),
                                      adv_estimator="shapec_test_hapo_index", config=config)
