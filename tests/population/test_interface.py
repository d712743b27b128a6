"""The Stable-Baselines3 algorithm interface: learn, predict, save/load, parameters, environments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

import lit_sb3
from lit_sb3.population import ARS, LinearPolicy, MlpPolicy
from population.helpers import ALGORITHMS, cartpole_vec_env, make_model


def test_package_exports_the_algorithms_and_policies():
    assert {"ARS", "ES", "CEM", "CMAES", "LinearPolicy", "MlpPolicy"} <= set(lit_sb3.__all__)
    assert lit_sb3.LinearPolicy is LinearPolicy and lit_sb3.MlpPolicy is MlpPolicy


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_learn_predict_save_load(algorithm, tmp_path):
    model = make_model(algorithm)
    assert model.learn(total_timesteps=300) is model
    assert model.num_timesteps >= 300 and model._n_updates >= 1
    observations = model.get_env().reset()
    actions, state = model.predict(observations, deterministic=True)
    assert actions.shape == (1,) and state is None

    model.save(tmp_path / "model.zip")
    loaded = algorithm.load(tmp_path / "model.zip")
    assert loaded.get_env() is None and loaded.num_timesteps == model.num_timesteps
    np.testing.assert_array_equal(loaded.predict(observations, deterministic=True)[0], actions)
    np.testing.assert_array_equal(loaded.policy.parameters_to_vector(), model.policy.parameters_to_vector())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_get_and_set_parameters(algorithm):
    source, target = make_model(algorithm), make_model(algorithm, seed=1)
    source.tell(np.arange(len(source.ask()), dtype=float))
    parameters = source.get_parameters()
    assert "policy" in parameters
    target.set_parameters(parameters)
    np.testing.assert_array_equal(target.policy.parameters_to_vector(), source.policy.parameters_to_vector())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_get_env_set_env_and_multiple_envs(algorithm):
    model = make_model(algorithm)
    assert isinstance(model.get_env(), DummyVecEnv)
    new_env = cartpole_vec_env()
    model.set_env(new_env)
    assert model.get_env() is new_env
    model.learn(200)
    assert model.num_timesteps >= 200
    two_envs = make_model(algorithm, env=DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2))
    two_envs.learn(200)  # candidates are evaluated two at a time
    assert two_envs.num_timesteps >= 200


def test_mlp_policy_and_policy_kwargs():
    model = ARS("MlpPolicy", "CartPole-v1", n_delta=2, policy_kwargs={"net_arch": [8]}, seed=0)
    assert isinstance(model.policy, MlpPolicy) and model.n_params == 4 * 8 + 8 + 8 * 2 + 2
    model.learn(200)


def test_load_then_learn_keeps_the_model_settings(tmp_path):
    model = make_model(ARS, n_top=2, alive_bonus_offset=-1.0)
    model.save(tmp_path / "model.zip")
    loaded = ARS.load(tmp_path / "model.zip", env=cartpole_vec_env())
    assert (loaded.n_delta, loaded.n_top, loaded.alive_bonus_offset) == (4, 2, -1.0)
    loaded.learn(100)
