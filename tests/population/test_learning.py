"""Each algorithm learns CartPole with its default hyper-parameters (from the zero policy) on a small budget."""

from __future__ import annotations

import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from population.helpers import ALGORITHMS

#: 500 is the maximum.
LEARNED_RETURN = 300.0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cartpole_return_rises_far_above_the_start(algorithm):
    """From the zero policy (always pushing left: about 9 steps) to balancing."""
    model = algorithm("LinearPolicy", "CartPole-v1", seed=0, zero_policy=True)
    start_return, _ = evaluate_policy(model, make_vec_env("CartPole-v1", seed=100), n_eval_episodes=10)
    model.learn(10_000)
    mean_return, _ = evaluate_policy(model, make_vec_env("CartPole-v1", seed=100), n_eval_episodes=10)
    assert start_return < LEARNED_RETURN / 3
    assert mean_return >= LEARNED_RETURN
