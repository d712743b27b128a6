"""Seeding: one seed, one run, whether candidates run in-process or on any number of workers."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import set_random_seed

from lit_sb3 import AsyncEval
from lit_sb3.population import PopulationAlgorithm
from population.helpers import ALGORITHMS, make_model


def trained_weights(model: PopulationAlgorithm, async_eval: AsyncEval | None = None) -> np.ndarray:
    model.learn(1500, async_eval=async_eval)
    return model.policy.parameters_to_vector()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_same_seed_same_run_different_seed_different_run(algorithm):
    weights = trained_weights(make_model(algorithm))
    np.testing.assert_array_equal(trained_weights(make_model(algorithm)), weights)
    assert not np.array_equal(trained_weights(make_model(algorithm, seed=1)), weights)


def test_in_process_and_one_or_two_workers_give_the_same_run():
    policy = make_model(ALGORITHMS[0]).policy  # every algorithm's CartPole LinearPolicy has this shape
    one_worker = AsyncEval([functools.partial(make_vec_env, "CartPole-v1")], policy)
    two_workers = AsyncEval([functools.partial(make_vec_env, "CartPole-v1", n_envs=2)] * 2, policy)
    with one_worker, two_workers:
        for algorithm in ALGORITHMS:
            weights = trained_weights(make_model(algorithm))
            for async_eval in (one_worker, two_workers):
                np.testing.assert_array_equal(trained_weights(make_model(algorithm), async_eval), weights)
                assert not async_eval.closed  # the caller's pool stays open for the next learn()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_unseeded_runs_follow_the_global_seed(algorithm):
    set_random_seed(7)
    weights = trained_weights(make_model(algorithm, seed=None))
    set_random_seed(7)
    np.testing.assert_array_equal(trained_weights(make_model(algorithm, seed=None)), weights)
    assert not np.array_equal(trained_weights(make_model(algorithm, seed=None)), weights)
