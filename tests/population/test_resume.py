"""save() then load() then learn() continues a run bit for bit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.vec_env import DummyVecEnv

from lit_sb3.population import ARS, CMAES, ES, PGPE, PopulationAlgorithm
from population.helpers import (
    ALGORITHMS,
    EpisodeRecorder,
    RoundEnds,
    make_model,
    normalized_pendulum_vec_env,
    short_cartpole_vec_env,
)


def assert_same_state(model: PopulationAlgorithm, other: PopulationAlgorithm) -> None:
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), other.policy.parameters_to_vector())
    candidates = model.ask()
    np.testing.assert_array_equal(candidates, other.ask())  # same search distribution and generator state
    returns = -np.abs(candidates).sum(axis=1)
    model.tell(returns)
    other.tell(returns)  # same optimiser state (Adam moments, covariance...)
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), other.policy.parameters_to_vector())


def split_run(algorithm, make_env, tmp_path, **kwargs):
    """Learn in one go; learn half, save, load, learn the rest; return both models."""
    whole = make_model(algorithm, env=make_env(), **kwargs)
    rounds = RoundEnds()
    whole.learn(1500, callback=rounds)
    assert len(rounds.timesteps) >= 4
    half = make_model(algorithm, env=make_env(), **kwargs)
    half.learn(rounds.timesteps[len(rounds.timesteps) // 2 - 1])
    half.save(tmp_path / "half.zip")
    del half
    resumed = algorithm.load(tmp_path / "half.zip", env=make_env())
    resumed.learn(whole.num_timesteps - resumed.num_timesteps, reset_num_timesteps=False)
    assert resumed.num_timesteps == whole.num_timesteps and resumed._n_updates == whole._n_updates
    return whole, resumed


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resume_after_load_is_exact(algorithm, tmp_path):
    whole, resumed = split_run(algorithm, short_cartpole_vec_env, tmp_path)
    assert_same_state(whole, resumed)


def test_resume_is_exact_with_observation_normalisation(tmp_path):
    whole, resumed = split_run(ARS, normalized_pendulum_vec_env, tmp_path)
    whole_rms, resumed_rms = whole.get_vec_normalize_env().obs_rms, resumed.get_vec_normalize_env().obs_rms
    assert whole_rms.count == resumed_rms.count == whole.num_timesteps + 1e-4  # every evaluated step, once
    np.testing.assert_array_equal(whole_rms.mean, resumed_rms.mean)
    np.testing.assert_array_equal(whole_rms.var, resumed_rms.var)
    assert_same_state(whole, resumed)


def assert_same_exact_and_in_use_statistics(whole, resumed):
    """Both models hold the same exact statistics and the same ones in their ``VecNormalize``, bit for bit."""
    pairs = [
        (whole.exact_obs_rms, resumed.exact_obs_rms),
        (whole.get_vec_normalize_env().obs_rms, resumed.get_vec_normalize_env().obs_rms),
    ]
    for whole_rms, resumed_rms in pairs:
        assert whole_rms.count == resumed_rms.count
        np.testing.assert_array_equal(whole_rms.mean, resumed_rms.mean)
        np.testing.assert_array_equal(whole_rms.var, resumed_rms.var)


def test_resume_is_exact_with_a_normalisation_updated_every_k_rounds(tmp_path):
    whole, resumed = split_run(ARS, normalized_pendulum_vec_env, tmp_path, normalization_update_interval=3)
    assert whole._n_updates % 3  # the statistics in use lag behind the exact ones at the end
    assert_same_exact_and_in_use_statistics(whole, resumed)
    assert whole.exact_obs_rms.count == whole.num_timesteps + 1e-4
    assert_same_state(whole, resumed)


def test_resume_is_exact_with_a_normalisation_with_inertia(tmp_path):
    whole, resumed = split_run(ARS, normalized_pendulum_vec_env, tmp_path, normalization_inertia=3.0)
    assert whole.exact_obs_rms is not whole.get_vec_normalize_env().obs_rms
    assert_same_exact_and_in_use_statistics(whole, resumed)
    assert_same_state(whole, resumed)


def test_resume_is_exact_across_cma_restarts(tmp_path):
    whole, resumed = split_run(CMAES, short_cartpole_vec_env, tmp_path, restarts=3, cma_options={"maxiter": 2})
    assert whole.n_restarts == resumed.n_restarts >= 1
    assert whole.pop_size == resumed.pop_size > 8
    assert_same_state(whole, resumed)


def test_resume_is_exact_with_sgd_and_a_pending_population(tmp_path):
    import torch as th

    model = make_model(ES, optimizer_class=th.optim.SGD, optimizer_kwargs={"momentum": 0.9})
    model.learn(500)
    pending = model.ask()
    model.save(tmp_path / "pending.zip")
    loaded = ES.load(tmp_path / "pending.zip", env=short_cartpole_vec_env())
    np.testing.assert_array_equal(loaded.ask(), pending)
    assert isinstance(loaded.optimizer, th.optim.SGD)
    assert_same_state(model, loaded)


@pytest.mark.parametrize(
    ("algorithm", "kwargs"),
    [
        (ES, {"optimizer_class": "clipup"}),
        (PGPE, {"optimizer": "adam"}),
        (PGPE, {"optimizer": "sgd", "momentum": 0.9}),
    ],
)
def test_resume_is_exact_with_each_optimizer_state(algorithm, kwargs, tmp_path):
    whole, resumed = split_run(algorithm, short_cartpole_vec_env, tmp_path, **kwargs)
    assert type(resumed.optimizer) is type(whole.optimizer)
    assert_same_state(whole, resumed)


class StopAfterEpisodes(BaseCallback):
    """Stops training after ``n_episodes`` episodes."""

    def __init__(self, n_episodes: int) -> None:
        super().__init__()
        self.n_episodes = n_episodes

    def _on_step(self) -> bool:
        return self.n_calls < self.n_episodes


@pytest.mark.parametrize("stop_at_episode", [13, 16])  # inside round two; at its last episode
def test_a_run_stopped_by_a_callback_resumes_exactly(stop_at_episode, tmp_path):
    def linear_schedule(progress_remaining: float) -> float:
        return 0.02 * progress_remaining

    kwargs = {"learning_rate": linear_schedule, "delta_std": linear_schedule}
    whole = make_model(ARS, env=normalized_pendulum_vec_env(), **kwargs)
    whole.learn(1000)
    stopped = make_model(ARS, env=normalized_pendulum_vec_env(), **kwargs)
    stopped.learn(1000, callback=StopAfterEpisodes(stop_at_episode))
    assert stopped._n_updates == 1 and stopped.num_timesteps == 20 * stop_at_episode  # 20-step episodes
    stopped.save(tmp_path / "stopped.zip")
    resumed = ARS.load(tmp_path / "stopped.zip", env=normalized_pendulum_vec_env())
    resumed.learn(1000 - resumed.num_timesteps, reset_num_timesteps=False)
    assert resumed.num_timesteps == whole.num_timesteps and resumed._n_updates == whole._n_updates
    np.testing.assert_array_equal(
        whole.get_vec_normalize_env().obs_rms.mean, resumed.get_vec_normalize_env().obs_rms.mean
    )
    assert_same_state(whole, resumed)


def test_a_checkpoint_saved_mid_round_resumes_exactly(tmp_path):
    whole = make_model(ARS, env=normalized_pendulum_vec_env())
    whole.learn(800, callback=CheckpointCallback(save_freq=12, save_path=str(tmp_path)))  # 8 episodes a round
    checkpoint = tmp_path / "rl_model_240_steps.zip"  # saved after episode 12, inside round two
    resumed = ARS.load(checkpoint, env=normalized_pendulum_vec_env())
    assert resumed.num_timesteps == 240 and resumed._n_updates == 1
    resumed.learn(whole.num_timesteps - resumed.num_timesteps, reset_num_timesteps=False)
    assert resumed.num_timesteps == whole.num_timesteps and resumed._n_updates == whole._n_updates
    assert_same_state(whole, resumed)


def test_statistics_restored_by_load_go_into_an_env_set_later(tmp_path):
    model = make_model(ARS, env=normalized_pendulum_vec_env())
    model.learn(400)
    model.save(tmp_path / "model.zip")
    loaded = ARS.load(tmp_path / "model.zip")
    loaded.set_env(normalized_pendulum_vec_env())
    saved_rms, loaded_rms = model.get_vec_normalize_env().obs_rms, loaded.get_vec_normalize_env().obs_rms
    assert loaded_rms.count == saved_rms.count == model.num_timesteps + 1e-4
    np.testing.assert_array_equal(loaded_rms.var, saved_rms.var)


def test_statistics_survive_load_without_env_then_save_and_a_plain_env_in_between(tmp_path):
    model = make_model(ARS, env=normalized_pendulum_vec_env())
    model.learn(400)
    count = model.get_vec_normalize_env().obs_rms.count
    model.save(tmp_path / "first.zip")
    ARS.load(tmp_path / "first.zip").save(tmp_path / "second.zip")  # no env in between
    loaded = ARS.load(tmp_path / "second.zip", env=normalized_pendulum_vec_env())
    assert loaded.get_vec_normalize_env().obs_rms.count == count
    loaded.set_env(DummyVecEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=20)]))
    loaded.set_env(normalized_pendulum_vec_env())
    assert loaded.get_vec_normalize_env().obs_rms.count == count


def test_a_resumed_round_starts_for_the_callbacks_of_the_new_learn_call():
    model = make_model(ARS, env=short_cartpole_vec_env())
    model.learn(1000, callback=StopAfterEpisodes(3))
    recorder = EpisodeRecorder()
    model.learn(200, callback=recorder, reset_num_timesteps=False)
    assert recorder.rollout_starts == recorder.rollout_ends == model._n_updates >= 1
