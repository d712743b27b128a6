"""Each algorithm learns CartPole with its default hyper-parameters on a small budget."""

from __future__ import annotations

import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from population.helpers import ALGORITHMS

#: A random CartPole policy lasts about 20 steps; 500 is the maximum.
RANDOM_RETURN = 22.0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cartpole_return_rises_far_above_random(algorithm):
    model = algorithm("LinearPolicy", "CartPole-v1", seed=0)
    model.learn(10_000)
    mean_return, _ = evaluate_policy(model, make_vec_env("CartPole-v1", seed=100), n_eval_episodes=10)
    assert mean_return >= 300.0 > 10 * RANDOM_RETURN
