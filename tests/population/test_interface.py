"""The Stable-Baselines3 algorithm interface: learn, predict, save/load, parameters, environments."""

from __future__ import annotations

import inspect

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib
import torch as th
from stable_baselines3.common.vec_env import DummyVecEnv

import lit_sb3
import lit_sb3.population
from lit_sb3 import AsyncEval
from lit_sb3.policies import LinearPolicy, MlpPolicy
from lit_sb3.population import ARS, CEM, ES
from population.helpers import ALGORITHMS, cartpole_vec_env, make_model


def test_package_exports_the_algorithms_and_policies():
    assert {"ARS", "ES", "CEM", "CMAES", "PGPE", "SNES", "XNES", "LinearPolicy", "MlpPolicy"} <= set(lit_sb3.__all__)
    assert {"PGPE", "SNES", "XNES", "ClipUp"} <= set(lit_sb3.population.__all__)
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


@pytest.mark.parametrize("algorithm", [ARS, ES])
def test_set_parameters_drops_a_population_sampled_around_other_weights(algorithm):
    model = make_model(algorithm)
    first = model.ask()
    other = make_model(algorithm, zero_policy=False, seed=1)
    model.set_parameters(other.get_parameters())
    candidates = model.ask()
    assert not np.array_equal(candidates, first)
    n_pairs = len(candidates) // 2
    np.testing.assert_allclose(
        (candidates[:n_pairs] + candidates[n_pairs:]) / 2,
        np.tile(other.policy.parameters_to_vector(), (n_pairs, 1)),
        atol=1e-6,
    )
    model.set_parameters(model.get_parameters())  # the same weights: the population stays
    np.testing.assert_array_equal(model.ask(), candidates)


def test_cem_keeps_the_weights_it_was_given():
    model = make_model(CEM, initial_std=1e-3)
    model.ask()
    weights = np.full(model.n_params, 5.0, dtype=np.float32)
    model.set_parameters({"policy": {"action_net.0.weight": th.as_tensor(weights.reshape(2, 4))}})
    candidates = model.ask()
    model.tell(np.zeros(len(candidates)))
    np.testing.assert_allclose(model.policy.parameters_to_vector(), weights, atol=0.01)


def test_learn_with_log_interval_none_writes_no_logs(capsys):
    model = make_model(ARS, verbose=1)
    model.learn(300, log_interval=None)
    assert model._n_updates >= 1 and "total_timesteps" not in capsys.readouterr().out


def test_ars_has_the_arguments_and_defaults_of_sb3_contrib_ars():
    for method in ("__init__", "learn"):
        # The same arguments in the same order (their code runs unchanged, positional arguments included), then
        # keyword-only options of ours; the constructor's defaults are theirs (learn's tb_log_name is the class name).
        theirs = inspect.signature(getattr(sb3_contrib.ARS, method)).parameters
        ours = list(inspect.signature(getattr(ARS, method)).parameters.values())
        assert list(theirs) == [parameter.name for parameter in ours[: len(theirs)]], method
        assert all(parameter.kind is parameter.KEYWORD_ONLY for parameter in ours[len(theirs) :]), method
    theirs = inspect.signature(sb3_contrib.ARS.__init__).parameters
    ours_by_name = inspect.signature(ARS.__init__).parameters
    assert {name: parameter.default for name, parameter in theirs.items()} == {
        name: ours_by_name[name].default for name in theirs
    }
    # An rl-zoo style configuration (its algorithm keyword arguments) builds the same policy in both.
    config = {"n_delta": 8, "n_top": 4, "delta_std": 0.025, "learning_rate": 0.018, "alive_bonus_offset": -1.0}
    config |= {"zero_policy": False, "policy_kwargs": {"net_arch": [16]}}
    model = ARS("MlpPolicy", "Pendulum-v1", **config)
    reference = sb3_contrib.ARS("MlpPolicy", "Pendulum-v1", **config)
    assert model.policy.state_dict().keys() == reference.policy.state_dict().keys()
    model.learn(200)


def test_ars_takes_sb3_contrib_positional_arguments(monkeypatch):
    """``ARS(policy, env, n_delta, n_top, ...)`` and ``learn(..., reset_num_timesteps, async_eval)``: sb3-contrib's."""
    model = ARS("LinearPolicy", cartpole_vec_env(), 4, 2, 0.02, 0.05, seed=0)
    assert (model.n_delta, model.n_top, model.delta_std) == (4, 2, 0.05)
    with AsyncEval([cartpole_vec_env, cartpole_vec_env], model.policy) as async_eval:
        sent: list[int] = []
        send_jobs = async_eval.send_jobs
        monkeypatch.setattr(
            async_eval, "send_jobs", lambda weights, pop_size: [sent.append(pop_size), send_jobs(weights, pop_size)]
        )
        model.learn(100, None, 1, "ARS", True, async_eval)
        assert sent and set(sent) == {8}  # the rounds went to the workers
    with pytest.raises(TypeError, match="progress_bar must be a bool"):
        model.learn(100, None, 1, "ARS", True, None, async_eval)


class NaNRewards(gym.Wrapper):
    """An env whose rewards are NaN while ``broken`` is set."""

    broken = False

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, float("nan") if NaNRewards.broken else reward, terminated, truncated, info


def nan_rewards_cartpole() -> DummyVecEnv:
    return DummyVecEnv([lambda: NaNRewards(gym.make("CartPole-v1", max_episode_steps=50))])


def test_nan_rewards_are_named_and_the_batch_is_evaluated_again_once_fixed(monkeypatch):
    model = make_model(CEM, env=nan_rewards_cartpole())
    monkeypatch.setattr(NaNRewards, "broken", True)
    with pytest.raises(ValueError, match=r"the episodes of candidates \[0, 1, 2, 3, 4, 5, 6, 7\] have NaN or infinite"):
        model.learn(300)
    assert model.num_timesteps == 0 and model._n_updates == 0 and not model.ep_info_buffer
    monkeypatch.setattr(NaNRewards, "broken", False)
    model.learn(300)
    reference = make_model(CEM, env=nan_rewards_cartpole())
    reference.learn(300)
    assert model.num_timesteps == reference.num_timesteps and model._n_updates == reference._n_updates > 0
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), reference.policy.parameters_to_vector())
