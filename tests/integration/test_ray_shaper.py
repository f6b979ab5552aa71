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
