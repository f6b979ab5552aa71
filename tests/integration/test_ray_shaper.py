"""A compiled shaper pickled into Ray tasks and actors (the mechanism users' own Ray code relies on)."""

import numpy as np
import pytest

import shapec

from .require import need

LENGTHS = [100, 200, 50, 400]


@pytest.fixture(scope="module")
def ray():
    ray = need("ray", "ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_shaper_inside_a_ray_actor_and_task(ray, backend):
    shaper = shapec.load("short_rl", backend=backend).short_rl
    shaper([1, 1, 0, 1], group_size=4, channels={"correct": [1, 1, 0, 1], "length": LENGTHS})  # state moves

    @ray.remote
    class Shaping:
        def __init__(self, shaper):
            self.shaper = shaper  # unpickled once, in the actor's process

        def shape(self, rewards):
            out = self.shaper(rewards, group_size=4, channels={"correct": rewards, "length": LENGTHS})
            return out.rewards, self.shaper.state_dict(), self.shaper.backend

    @ray.remote
    def shape_once(shaper, rewards):
        return shaper(rewards, group_size=4, channels={"correct": rewards, "length": LENGTHS}).rewards

    actor = Shaping.remote(shaper)
    first = ray.get(actor.shape.remote([1, 0, 1, 1]))
    second = ray.get(actor.shape.remote([1, 1, 1, 1]))
    task = ray.get(shape_once.remote(shaper, [1, 0, 1, 1]))
    local = shapec.load("short_rl", backend=backend).short_rl
    local.load_state_dict(shaper.state_dict())
    expected_first = local([1, 0, 1, 1], group_size=4, channels={"correct": [1, 0, 1, 1], "length": LENGTHS})
    expected_second = local([1, 1, 1, 1], group_size=4, channels={"correct": [1, 1, 1, 1], "length": LENGTHS})
    assert first[2] == backend
    np.testing.assert_array_equal(first[0], expected_first.rewards)
    np.testing.assert_array_equal(second[0], expected_second.rewards)  # the actor's state carried over calls
    assert second[1] == local.state_dict()
    np.testing.assert_array_equal(task, expected_first.rewards)  # the task started from the pickled state


def test_verl_estimator_registered_inside_a_task_runner_actor(ray):
    """docs/trainers.md's recipe: registration in the task runner's `run` reaches the actor's registry."""
    main_ppo = need("verl.trainer.main_ppo", "verl")
    core_algos = need("verl.trainer.ppo.core_algos", "verl")

    class Runner(main_ppo.TaskRunnerV1.__ray_actor_class__):
        def run(self, config):  # the recipe's override, minus the training verl's run would start
            import torch
            from verl.trainer.ppo.core_algos import get_adv_estimator_fn

            from shapec.compat.verl import register_advantage_estimator

            register_advantage_estimator("shapec_in_actor", "kimi", backend="interpreter")
            mask = torch.ones(4, 3)
            rewards = torch.tensor([[0, 0, 1.0], [0, 0, 1.0], [0, 0, 0.0], [0, 0, 1.0]])
            adv, _ = get_adv_estimator_fn("shapec_in_actor")(token_level_rewards=rewards, response_mask=mask,
                                                             index=np.array(["a", "a", "b", "b"], dtype=object))
            return adv[:, -1].tolist()

    runner = ray.remote(Runner).remote()
    got = ray.get(runner.run.remote(None))
    assert "shapec_in_actor" not in core_algos.ADV_ESTIMATOR_REGISTRY  # registered in the actor, not here
    flat = shapec.load("kimi", backend="interpreter").kimi_length([1, 1, 0, 1], group_size=2,
                                                                  channels={"length": [3, 3, 3, 3]}).rewards
    assert flat.tolist() == [1.0, 1.0, 0.0, 1.0]  # equal lengths: kimi leaves the rewards as they are
    assert got == pytest.approx([0.0, 0.0, -0.7071063, 0.7071063], abs=1e-6)
