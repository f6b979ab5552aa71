"""verl: the registered estimator through verl's own compute_advantage on a real DataProto."""

import numpy as np
import pytest

import shapec
from shapec.compat.verl import register_advantage_estimator

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
