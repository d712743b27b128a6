"""Callbacks see real episodes; Stable-Baselines3's callbacks and progress bar work."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from stable_baselines3.common import callbacks as sb3_callbacks
from stable_baselines3.common.callbacks import (
    CheckpointCallback,
    EvalCallback,
    StopTrainingOnRewardThreshold,
)

from lit_sb3.population import ARS
from population.helpers import ALGORITHMS, EpisodeRecorder, cartpole_vec_env, make_model


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_on_step_runs_once_per_episode_with_its_data(algorithm):
    model = make_model(algorithm, n_eval_episodes=2)
    recorder = EpisodeRecorder()
    model.learn(600, callback=recorder)
    assert recorder.rollout_starts == recorder.rollout_ends == model._n_updates >= 1
    assert len(recorder.steps) == model._n_updates * model.pop_size * 2
    previous_timesteps = 0
    for step in recorder.steps:
        episode = step["infos"][0]["episode"]
        assert step["dones"].tolist() == [True]
        assert episode["r"] == step["episode_return"] and episode["l"] == step["episode_length"]
        assert step["num_timesteps"] == previous_timesteps + step["episode_length"]  # advanced by the episode
        assert step["episode_return"] == step["episode_length"]  # CartPole: reward 1 per step
        assert step["candidate_weights"].shape == (model.n_params,)
        previous_timesteps = step["num_timesteps"]
    first_round = recorder.steps[: model.pop_size * 2]
    assert [(step["candidate_index"], step["episode_index"]) for step in first_round] == [
        (candidate, episode) for candidate in range(model.pop_size) for episode in range(2)
    ]
    assert model.num_timesteps == previous_timesteps


def test_eval_and_checkpoint_callbacks(tmp_path):
    model = make_model(ARS)
    eval_callback = EvalCallback(
        cartpole_vec_env(),
        n_eval_episodes=2,
        eval_freq=4,
        log_path=str(tmp_path / "evaluations"),
        best_model_save_path=str(tmp_path / "best"),
    )
    checkpoint_callback = CheckpointCallback(save_freq=8, save_path=str(tmp_path / "checkpoints"))
    model.learn(1000, callback=[eval_callback, checkpoint_callback])
    n_episodes = model._n_updates * model.pop_size
    assert len(eval_callback.evaluations_timesteps) == n_episodes // 4
    assert (tmp_path / "best" / "best_model.zip").exists()
    checkpoints = sorted((tmp_path / "checkpoints").glob("*.zip"))
    assert len(checkpoints) == n_episodes // 8
    assert ARS.load(checkpoints[-1]).num_timesteps <= model.num_timesteps


def test_stop_on_reward_threshold_stops_mid_round_without_telling():
    model = make_model(ARS)
    stop = StopTrainingOnRewardThreshold(reward_threshold=0.0)
    eval_callback = EvalCallback(cartpole_vec_env(), n_eval_episodes=1, eval_freq=3, callback_on_new_best=stop)
    recorder = EpisodeRecorder()
    weights = model.policy.parameters_to_vector()
    model.learn(10_000, callback=[recorder, eval_callback])
    assert len(recorder.steps) == 3 < model.pop_size  # stopped at the first evaluation, inside round one
    assert model.num_timesteps == sum(step["episode_length"] for step in recorder.steps)
    assert model._n_updates == 0 and recorder.rollout_ends == 0
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), weights)  # the judged policy is kept


class FakeTqdm:
    """Stands in for tqdm: records the total and the updates."""

    instances: ClassVar[list[FakeTqdm]] = []

    def __init__(self, total: int) -> None:
        self.total, self.n, self.closed = total, 0, False
        FakeTqdm.instances.append(self)

    def update(self, n: int) -> None:
        self.n += n

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_progress_bar_counts_env_steps(monkeypatch):
    monkeypatch.setattr(sb3_callbacks, "tqdm", FakeTqdm)
    model = make_model(ARS)
    model.learn(700, progress_bar=True)
    bar = FakeTqdm.instances[-1]
    assert bar.total == 700 and bar.n == model.num_timesteps and bar.closed


def test_progress_bar_beside_a_functional_callback(monkeypatch):
    monkeypatch.setattr(sb3_callbacks, "tqdm", FakeTqdm)
    calls = []
    model = make_model(ARS)
    model.learn(300, progress_bar=True, callback=lambda _locals, _globals: calls.append(1) or True)
    assert len(calls) == model._n_updates * model.pop_size
    assert FakeTqdm.instances[-1].n == model.num_timesteps


@pytest.mark.filterwarnings("ignore::tqdm.TqdmExperimentalWarning")  # Stable-Baselines3 uses tqdm.rich
def test_progress_bar_with_tqdm_and_rich(capsys):
    model = make_model(ARS)
    model.learn(300, progress_bar=True)
    assert f"{model.num_timesteps}/300" in capsys.readouterr().out  # a round always completes: may pass the total
