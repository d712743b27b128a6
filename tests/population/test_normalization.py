"""Observation normalisation (ARS V2): VecNormalize statistics, in-process and through AsyncEval."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from lit_sb3 import AsyncEval
from lit_sb3.population import ARS
from population.helpers import ALGORITHMS, make_model, normalized_pendulum_vec_env


class ObservationRecorder(gym.Wrapper):
    """Keeps every episode's observations but the last (the ones a policy acts on)."""

    def __init__(self, env: gym.Env, episodes: list[list[np.ndarray]]) -> None:
        super().__init__(env)
        self.episodes = episodes

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self.episodes.append([observation])
        return observation, info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            self.episodes[-1].append(observation)
        return observation, reward, terminated, truncated, info


def test_statistics_are_those_of_the_observations_the_candidates_acted_on():
    episodes: list[list[np.ndarray]] = []
    env = VecNormalize(
        DummyVecEnv([lambda: ObservationRecorder(gym.make("Pendulum-v1", max_episode_steps=20), episodes)]),
        norm_reward=False,
    )
    model = make_model(ARS, env=env)
    model.learn(1000)
    observations = np.concatenate([np.array(episode) for episode in episodes[1:]])  # [0]: learn()'s env reset
    obs_rms = model.get_vec_normalize_env().obs_rms
    assert len(observations) == model.num_timesteps
    assert obs_rms.count == pytest.approx(model.num_timesteps + 1e-4)  # VecNormalize starts from a count of 1e-4
    np.testing.assert_allclose(obs_rms.mean, observations.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(obs_rms.var, observations.var(axis=0), rtol=1e-5, atol=1e-6)


def test_in_process_and_async_eval_end_with_the_same_statistics_for_every_algorithm():
    """Bit for bit: the episodes' statistics are added in candidate order wherever they ran."""
    policy = make_model(ARS, env=normalized_pendulum_vec_env()).policy
    with AsyncEval([normalized_pendulum_vec_env] * 2, policy) as async_eval:
        for algorithm in ALGORITHMS:
            in_process = make_model(algorithm, env=normalized_pendulum_vec_env())
            in_process.learn(1000)
            on_workers = make_model(algorithm, env=normalized_pendulum_vec_env())
            on_workers.learn(1000, async_eval=async_eval)
            expected, merged = in_process.get_vec_normalize_env().obs_rms, on_workers.get_vec_normalize_env().obs_rms
            assert merged.count == expected.count
            np.testing.assert_array_equal(merged.mean, expected.mean)
            np.testing.assert_array_equal(merged.var, expected.var)
            np.testing.assert_array_equal(
                on_workers.policy.parameters_to_vector(), in_process.policy.parameters_to_vector()
            )
            for worker_obs_rms in async_eval.synced_obs_rms:  # the workers normalise with the model's statistics
                np.testing.assert_array_equal(worker_obs_rms.mean, merged.mean)


class StatisticsRecorder(BaseCallback):
    """Records, at each round end, the statistics in use, the exact ones and the steps so far."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[tuple[RunningMeanStd, RunningMeanStd, int]] = []

    def _on_rollout_end(self) -> None:
        in_use, exact = self.model.get_vec_normalize_env().obs_rms, self.model.exact_obs_rms
        self.rounds.append((in_use.copy(), exact.copy(), self.num_timesteps))

    def _on_step(self) -> bool:
        return True


def test_the_normalisation_can_update_every_k_rounds_while_the_exact_statistics_count_every_observation():
    model = make_model(ARS, env=normalized_pendulum_vec_env(), normalization_update_interval=3)
    recorder = StatisticsRecorder()
    model.learn(8 * 2 * 4 * 20, callback=recorder)  # 8 rounds of 2 * n_delta episodes of 20 steps
    assert len(recorder.rounds) == 8
    initial = recorder.rounds[0][0]  # VecNormalize's first statistics: count 1e-4, mean 0, variance 1
    assert initial.count == 1e-4
    updated = initial
    for round_number, (in_use, exact, steps) in enumerate(recorder.rounds, start=1):
        assert exact.count == pytest.approx(1e-4 + steps, abs=1e-9)  # every observation, once
        if round_number % 3 == 0:
            updated = exact
        assert in_use.count == updated.count
        np.testing.assert_array_equal(in_use.mean, updated.mean)
        np.testing.assert_array_equal(in_use.var, updated.var)
    assert not np.array_equal(recorder.rounds[-1][0].mean, recorder.rounds[-1][1].mean)


def test_statistics_with_inertia_weigh_the_ones_in_use_w_times_when_a_round_is_added():
    episodes: list[list[np.ndarray]] = []
    env = VecNormalize(
        DummyVecEnv([lambda: ObservationRecorder(gym.make("Pendulum-v1", max_episode_steps=20), episodes)]),
        norm_reward=False,
    )
    inertia = 3.0
    model = make_model(ARS, env=env, normalization_inertia=inertia)
    recorder = StatisticsRecorder()
    model.learn(6 * 2 * 4 * 20, callback=recorder)  # 6 rounds of 2 * n_delta episodes of 20 steps
    assert len(recorder.rounds) == 6
    count, mean, var = 1e-4, np.zeros(3), np.ones(3)  # VecNormalize's first statistics
    for round_number, (in_use, exact, steps) in enumerate(recorder.rounds):
        observations = np.concatenate(
            [np.array(episode, dtype=np.float64) for episode in episodes[1 + 8 * round_number :][:8]]
        )
        weight, n = inertia * count, len(observations)
        delta = observations.mean(axis=0) - mean
        mean = mean + delta * n / (weight + n)
        var = (weight * var + n * observations.var(axis=0) + np.square(delta) * weight * n / (weight + n)) / (
            weight + n
        )
        count += n
        assert exact.count == pytest.approx(1e-4 + steps, abs=1e-9)  # every observation, once
        assert in_use.count == pytest.approx(count, abs=1e-9)
        np.testing.assert_allclose(in_use.mean, mean, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(in_use.var, var, rtol=1e-6, atol=1e-9)
    assert not np.allclose(recorder.rounds[-1][0].mean, recorder.rounds[-1][1].mean, rtol=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"normalization_inertia": 0.0}, "normalization_inertia must be finite and > 0, got 0.0"),
        ({"normalization_inertia": float("inf")}, "normalization_inertia must be finite and > 0, got inf"),
        (
            {"normalization_inertia": 3.0, "normalization_update_interval": 2},
            "normalization_inertia=3.0 needs normalization_update_interval=1, got 2",
        ),
    ],
)
def test_bad_normalisation_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_model(ARS, env=normalized_pendulum_vec_env(), **kwargs)


def test_a_normalisation_inertia_that_is_no_number_is_refused_by_name():
    with pytest.raises(TypeError, match="normalization_inertia must be a number"):
        make_model(ARS, env=normalized_pendulum_vec_env(), normalization_inertia="3")


def test_loaded_statistics_go_into_the_new_vec_normalize(tmp_path):
    model = make_model(ARS, env=normalized_pendulum_vec_env())
    model.learn(500)
    model.save(tmp_path / "model.zip")
    loaded = ARS.load(tmp_path / "model.zip", env=normalized_pendulum_vec_env())
    np.testing.assert_array_equal(
        loaded.get_vec_normalize_env().obs_rms.mean, model.get_vec_normalize_env().obs_rms.mean
    )
    assert loaded.get_vec_normalize_env().obs_rms.count == model.get_vec_normalize_env().obs_rms.count


def test_vec_normalize_on_one_side_only_is_an_error():
    plain_policy = make_model(ARS, env="Pendulum-v1").policy
    with (
        AsyncEval([normalized_pendulum_vec_env], plain_policy) as normalizing_workers,
        pytest.raises(ValueError, match="async_eval's environments are wrapped in VecNormalize"),
    ):
        make_model(ARS, env="Pendulum-v1").learn(100, async_eval=normalizing_workers)
    with (
        AsyncEval([lambda: make_vec_env("Pendulum-v1")], plain_policy) as plain_workers,
        pytest.raises(ValueError, match="async_eval's environments are not"),
    ):
        make_model(ARS, env=normalized_pendulum_vec_env()).learn(100, async_eval=plain_workers)


def test_reward_normalisation_is_not_used_and_a_warning_says_so():
    env = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=20)]))  # norm_reward=True
    model = make_model(ARS, env=env)
    with pytest.warns(UserWarning, match="VecNormalize has norm_reward=True, which population methods do not use"):
        model.learn(200)
    assert env.obs_rms.count > 100  # the observations are normalised
    assert env.ret_rms.count == pytest.approx(1e-4)  # the returns never are: ranked raw
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_model(ARS, env=normalized_pendulum_vec_env()).learn(200)  # norm_reward=False: no warning
