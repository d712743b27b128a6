"""Bad input gets a clear error naming the argument, before any work starts."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env

from lit_sb3 import AsyncEval
from lit_sb3.population import ARS, CEM, CMAES, ES, PGPE, SNES, XNES
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
        (ES, {"weight_decay": -1.0}, "weight_decay must be finite and >= 0, got -1.0"),
        (XNES, {"alive_bonus_offset": float("nan")}, "alive_bonus_offset must be a finite number, got nan"),
        (CEM, {"pop_size": 1}, "pop_size must be an int >= 2, got 1"),
        (CEM, {"elite_fraction": 0.0}, "elite_fraction must be in"),
        (CEM, {"initial_std": 0.0}, "initial_std must be finite and > 0, got 0.0"),
        (CMAES, {"pop_size": 1}, "pop_size must be an int >= 2, got 1"),
        (CMAES, {"sigma0": -1.0}, "sigma0 must be finite and > 0, got -1.0"),
        (CMAES, {"restarts": -1}, "restarts must be a non-negative int"),
        (CMAES, {"incpopsize": 0.5}, "incpopsize must be finite and >= 1, got 0.5"),
        (CMAES, {"incpopsize": float("inf")}, "incpopsize must be a finite number, got inf"),
        (CMAES, {"cma_options": {"popsize": 4}}, "cma_options must not set 'popsize': use the pop_size argument"),
        (CMAES, {"cma_options": {"seed": 4}}, "cma_options must not set 'seed': use the seed argument"),
        (CEM, {"n_eval_episodes": 0}, "n_eval_episodes must be at least 1"),
        (ARS, {"delta_std": 0.0}, "delta_std must be finite and > 0, got 0.0"),
        (ARS, {"learning_rate": -0.1}, "learning_rate must be finite and >= 0, got -0.1"),
        (ARS, {"learning_rate": lambda _progress: float("nan")}, "learning_rate must be finite and >= 0, got nan"),
        (ES, {"sigma": 0.0}, "sigma must be finite and > 0, got 0.0"),
        (CEM, {"extra_noise": -0.01}, "extra_noise must be finite and >= 0, got -0.01"),
        (ES, {"optimizer_class": "rmsprop"}, "optimizer_class must be one of 'adam', 'clipup', 'sgd' or a torch"),
        (ES, {"optimizer_kwargs": {"lr": 0.1}}, "optimizer_kwargs must not set 'lr': use the learning_rate argument"),
        (ES, {"optimizer_kwargs": {"weight_decay": 0.1}}, "optimizer_kwargs must not set 'weight_decay': use the"),
        (PGPE, {"popsize": 7}, r"popsize must be an even int \(antithetic pairs\) >= 2, got 7"),
        (PGPE, {"pop_size": 8}, "give popsize or pop_size .*, not both: got 8 and 8"),
        (PGPE, {"popsize": None, "pop_size": 5}, r"pop_size must be an even int \(antithetic pairs\) >= 2, got 5"),
        (PGPE, {"center_learning_rate": -1.0}, "center_learning_rate must be finite and >= 0, got -1.0"),
        (PGPE, {"stdev_learning_rate": float("nan")}, "stdev_learning_rate must be finite and >= 0, got nan"),
        (PGPE, {"stdev_max_change": 1.5}, r"stdev_max_change must be in \(0, 1\), got 1.5"),
        (PGPE, {"stdev_init": 0.1, "radius_init": 1.0}, "give stdev_init or radius_init"),
        (PGPE, {"stdev_init": -0.1}, "stdev_init must be a finite number > 0 or a vector of them"),
        (PGPE, {"stdev_init": [0.1, 0.2]}, "stdev_init has 2 values but the policy has 8 parameters"),
        (PGPE, {"radius_init": 0.0}, "radius_init must be finite and > 0, got 0.0"),
        (PGPE, {"optimizer": "rmsprop"}, "optimizer must be one of 'adam', 'clipup', 'sgd' or a torch optimizer class"),
        (PGPE, {"optimizer": "adam", "max_speed": 0.1}, "max_speed is a setting of ClipUp, not of Adam"),
        (PGPE, {"max_speed": 0.1, "optimizer_config": {"max_speed": 0.2}}, "max_speed is given twice"),
        (PGPE, {"optimizer_config": {"beta1": 0.9}}, r"beta1 is not a setting of the ClipUp optimizer \(its settings"),
        (PGPE, {"optimizer": "adam", "optimizer_config": {"beta1": 0.9}}, "must give beta1 and beta2 together"),
        (PGPE, {"optimizer_config": {"lr": 0.1}}, "optimizer_config must not set 'lr': use center_learning_rate"),
        (PGPE, {"momentum": 1.5}, r"momentum must be in \[0, 1\], got 1.5"),
        (PGPE, {"max_speed": 0.0}, "max_speed must be finite and > 0, got 0.0"),
        (PGPE, {"ranking": "bogus"}, "ranking must be one of 'centered', 'linear', 'nes', 'normalized', 'raw'"),
        (PGPE, {"num_interactions": 0}, "num_interactions must be at least 1"),
        (PGPE, {"popsize_max": 100}, "popsize_max bounds the population num_interactions grows: set num_interactions"),
        (PGPE, {"num_interactions": 100, "popsize_max": 4}, "popsize_max=4 is smaller than one batch of popsize=8"),
        (SNES, {"popsize": 1}, "popsize must be an int >= 2, got 1"),
        (SNES, {"stdev_learning_rate": -0.1}, "stdev_learning_rate must be finite and >= 0, got -0.1"),
        (SNES, {"num_interactions": 100, "popsize_max": 4}, "popsize_max=4 is smaller than one batch of popsize=8"),
        (XNES, {"shape_learning_rate": -0.1}, "shape_learning_rate must be finite and >= 0, got -0.1"),
        (XNES, {"center_learning_rate": float("inf")}, "center_learning_rate must be finite and >= 0, got inf"),
        (XNES, {"ranking": 3}, "ranking must be one of"),
        (PGPE, {"ranking": np.array(["nes"])}, r"ranking must be one of .* got array\(\['nes'\]"),
        (PGPE, {"popsize": 0}, r"popsize must be an even int \(antithetic pairs\) >= 2, got 0"),
        (ES, {"pop_size": -2}, r"pop_size must be an even int \(antithetic pairs\) >= 2, got -2"),
    ],
)
def test_bad_hyper_parameters(algorithm, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_model(algorithm, **kwargs)


@pytest.mark.parametrize(
    ("algorithm", "kwargs", "name"),
    [
        (ARS, {"learning_rate": True}, "learning_rate"),
        (ES, {"sigma": "0.03"}, "sigma"),
        (ES, {"weight_decay": True}, "weight_decay"),
        (CEM, {"alive_bonus_offset": "-1"}, "alive_bonus_offset"),
        (CEM, {"elite_fraction": "0.2"}, "elite_fraction"),
        (CMAES, {"sigma0": None}, "sigma0"),
        (PGPE, {"center_learning_rate": True}, "center_learning_rate"),
        (PGPE, {"stdev_learning_rate": "0.1"}, "stdev_learning_rate"),
        (PGPE, {"radius_init": "1"}, "radius_init"),
        (PGPE, {"stdev_max_change": "0.2"}, "stdev_max_change"),
        (PGPE, {"momentum": "0.9"}, "momentum"),
        (SNES, {"stdev_learning_rate": True}, "stdev_learning_rate"),
        (XNES, {"shape_learning_rate": "1"}, "shape_learning_rate"),
    ],
)
def test_hyper_parameters_that_are_no_numbers(algorithm, kwargs, name):
    with pytest.raises(TypeError, match=f"{name} must be a number, got <class"):
        make_model(algorithm, **kwargs)


@pytest.mark.parametrize("stdev_init", [True, "abc", [0.1, "x"]])
def test_stdev_init_that_is_no_number(stdev_init):
    with pytest.raises(TypeError, match="stdev_init must be a number or a vector of numbers, got"):
        make_model(SNES, stdev_init=stdev_init)


@pytest.mark.parametrize(
    ("algorithm", "name"), [(CMAES, "cma_options"), (ES, "optimizer_kwargs"), (PGPE, "optimizer_config")]
)
@pytest.mark.parametrize("settings", ["max_speed=0.1", {0: 0.1}])
def test_settings_that_are_no_dict_by_name(algorithm, name, settings):
    with pytest.raises(TypeError, match=f"{name} must be a dict of settings by name, or None, got"):
        make_model(algorithm, **{name: settings})


@pytest.mark.parametrize(
    ("algorithm", "kwargs", "error", "message"),
    [
        (
            PGPE,
            {"optimizer": th.optim.RMSprop, "optimizer_config": {"max_sped": 0.1}},
            TypeError,
            r"RMSprop\(.*max_sped",
        ),
        (ES, {"optimizer_kwargs": {"max_speed": 0.1}}, TypeError, r"Adam\(lr=0.1, .*max_speed=0.1\): .*'max_speed'"),
        (PGPE, {"optimizer": "adam", "optimizer_config": {"beta1": 1.5, "beta2": 0.9}}, ValueError, "betas=.1.5"),
        (PGPE, {"optimizer": "sgd", "momentum": -0.5}, ValueError, r"SGD\(lr=0.075, momentum=-0.5\): .*momentum"),
        (PGPE, {"optimizer": "sgd", "momentum": "0.9"}, TypeError, "SGD.*momentum='0.9'"),
        (PGPE, {"max_speed": -1.0}, ValueError, r"ClipUp\(lr=0.075, max_speed=-1.0\): max_speed must be finite"),
        (ES, {"optimizer_kwargs": {"betas": (1.5, 0.9)}}, ValueError, "Invalid beta parameter"),
    ],
)
def test_optimizer_settings_are_checked_by_the_optimizer_before_anything_is_built(algorithm, kwargs, error, message):
    # No environment: the settings are refused before the model needs one.
    with pytest.raises(error, match=f"the optimizer's settings are refused: .*{message}"):
        algorithm("LinearPolicy", None, **kwargs, _init_setup_model=False)


def test_a_model_built_without_an_environment_says_it_needs_one():
    with pytest.raises(ValueError, match="env is None: the policy is built for the environment's observation and"):
        PGPE("LinearPolicy", None)


def test_numpy_scalars_are_numbers():
    model = make_model(ARS, delta_std=np.float32(0.05))
    assert model.delta_std_schedule(1.0) == pytest.approx(0.05)
    model.learn(500)
    assert model._n_updates > 0


def test_a_schedule_that_turns_negative_fails_when_it_does():
    model = make_model(ARS, env=short_cartpole_vec_env(), delta_std=lambda progress_remaining: progress_remaining - 0.5)
    with pytest.raises(ValueError, match="delta_std must be finite and > 0, got -0"):
        model.learn(2000)  # rounds of 400 steps at most
    assert model._n_updates > 0  # the rounds before the schedule turned were run


def test_populations_sizes_as_numpy_ints_and_bad_types():
    assert make_model(CEM, pop_size=np.int64(6)).ask().shape[0] == 6
    with pytest.raises(TypeError, match="pop_size must be an int"):
        make_model(ES, pop_size=8.0)
    with pytest.raises(TypeError, match="popsize must be an int"):
        make_model(SNES, popsize=8.0)
    with pytest.raises(TypeError, match="num_interactions must be an int"):
        make_model(PGPE, num_interactions=1e5)
    with pytest.raises(TypeError, match="restarts must be an int"):
        make_model(CMAES, restarts=True)
    with pytest.raises(TypeError, match="incpopsize must be a number"):
        make_model(CMAES, incpopsize="2")


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
