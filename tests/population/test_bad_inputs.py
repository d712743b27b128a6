"""Bad input gets a clear error naming the argument, before any work starts."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env

from lit_sb3 import AsyncEval
from lit_sb3.population import ARS, CEM, CMAES, ES
from population.helpers import ALGORITHMS, make_model, short_cartpole_vec_env


class SpacesEnv(gym.Env):
    """An environment that only has spaces."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


BOX = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_unknown_policy_name(algorithm):
    with pytest.raises(ValueError, match=r"policy='CnnPolicy' is unknown .*\['LinearPolicy', 'MlpPolicy'\]"):
        algorithm("CnnPolicy", "CartPole-v1")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(
    ("observation_space", "action_space", "message"),
    [
        (BOX, spaces.MultiDiscrete([2, 2]), "env: .* supports Box or Discrete action spaces only"),
        (BOX, spaces.MultiBinary(2), "env: .* supports Box or Discrete action spaces only"),
        (spaces.Dict({"position": BOX}), spaces.Discrete(2), "env: .* needs flat observations"),
    ],
)
def test_unsupported_spaces(algorithm, observation_space, action_space, message):
    with pytest.raises(ValueError, match=message):
        algorithm("LinearPolicy", SpacesEnv(observation_space, action_space))


@pytest.mark.parametrize(
    ("algorithm", "kwargs", "message"),
    [
        (ARS, {"n_delta": 4, "n_top": 5}, "n_top=5 is larger than n_delta=4"),
        (ARS, {"n_delta": 0}, "n_delta must be at least 1"),
        (ARS, {"n_top": 0}, "n_top must be at least 1"),
        (ARS, {"return_std_ddof": 2}, r"return_std_ddof must be 0 \(population std\) or 1 \(sample std\), got 2"),
        (ES, {"pop_size": 1}, r"pop_size must be an even int \(antithetic pairs\) >= 2, got 1"),
        (ES, {"pop_size": 7}, r"pop_size must be an even int \(antithetic pairs\) >= 2, got 7"),
        (ES, {"weight_decay": -1.0}, "weight_decay must be >= 0"),
        (CEM, {"pop_size": 1}, "pop_size must be an int >= 2, got 1"),
        (CEM, {"elite_fraction": 0.0}, "elite_fraction must be in"),
        (CEM, {"initial_std": 0.0}, "initial_std must be finite and > 0, got 0.0"),
        (CMAES, {"pop_size": 1}, "pop_size must be an int >= 2, got 1"),
        (CMAES, {"sigma0": -1.0}, "sigma0 must be finite and > 0, got -1.0"),
        (CMAES, {"restarts": -1}, "restarts must be a non-negative int"),
        (CMAES, {"incpopsize": 0.5}, "incpopsize must be >= 1"),
        (CMAES, {"cma_options": {"popsize": 4}}, "cma_options must not set 'popsize': use the pop_size argument"),
        (CMAES, {"cma_options": {"seed": 4}}, "cma_options must not set 'seed': use the seed argument"),
        (CEM, {"n_eval_episodes": 0}, "n_eval_episodes must be at least 1"),
        (ARS, {"delta_std": 0.0}, "delta_std must be finite and > 0, got 0.0"),
        (ARS, {"learning_rate": -0.1}, "learning_rate must be finite and >= 0, got -0.1"),
        (ARS, {"learning_rate": lambda _progress: float("nan")}, "learning_rate must be finite and >= 0, got nan"),
        (ES, {"sigma": 0.0}, "sigma must be finite and > 0, got 0.0"),
        (CEM, {"extra_noise": -0.01}, "extra_noise must be finite and >= 0, got -0.01"),
        (CMAES, {"restarts": True}, "restarts must be a non-negative int"),
    ],
)
def test_bad_hyper_parameters(algorithm, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_model(algorithm, **kwargs)


def test_a_schedule_that_turns_negative_fails_when_it_does():
    model = make_model(ARS, env=short_cartpole_vec_env(), delta_std=lambda progress_remaining: progress_remaining - 0.5)
    with pytest.raises(ValueError, match="delta_std must be finite and > 0, got -0"):
        model.learn(2000)  # rounds of 400 steps at most
    assert model._n_updates > 0  # the rounds before the schedule turned were run


def test_populations_sizes_as_numpy_ints_and_bad_types():
    assert make_model(CEM, pop_size=np.int64(6)).ask().shape[0] == 6
    with pytest.raises(TypeError, match="pop_size must be an int"):
        make_model(ES, pop_size=8.0)


def test_bad_async_eval():
    model = make_model(ARS)
    with pytest.raises(TypeError, match=r"async_eval must be a lit_sb3 AsyncEval, .*: build lit_sb3\.AsyncEval"):
        model.learn(100, async_eval=object())
    pendulum_policy = make_model(ARS, env="Pendulum-v1").policy
    with (
        AsyncEval([functools.partial(make_vec_env, "Pendulum-v1")], pendulum_policy) as async_eval,
        pytest.raises(ValueError, match="async_eval was built for a policy with 3 parameters"),
    ):
        model.learn(100, async_eval=async_eval)
    with (
        AsyncEval([functools.partial(make_vec_env, "CartPole-v1")], model.policy, n_eval_episodes=2) as async_eval,
        pytest.raises(ValueError, match="n_eval_episodes=2 per candidate but the model was created with"),
    ):
        model.learn(100, async_eval=async_eval)
    assert model.num_timesteps == 0


def test_learn_without_an_environment(tmp_path):
    make_model(ARS).save(tmp_path / "model.zip")
    with pytest.raises(ValueError, match="learn\\(\\) needs an environment"):
        ARS.load(tmp_path / "model.zip").learn(100)
