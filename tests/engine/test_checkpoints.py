"""Checkpoints keep every step collected (trained on, or waiting to be) and the ``VecNormalize`` statistics."""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.save_util import load_from_pkl
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from engine.helpers import small_ppo_engine, small_sac_engine
from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup
from lit_sb3.engine.base import ALGORITHM_FILE, COUNTERS_FILE, NORMALIZE_FILE, ROLLOUTS_FILE, BaseEngine
from lit_sb3.engine.buffer import RolloutQueue


def checkpoints(folder: Path) -> list[Path]:
    return sorted(folder.glob("train_step_*"), key=lambda path: int(path.name.rsplit("_", 1)[1]))


def normalized_ppo_engine(folder: Path, **config: object) -> AsyncRLEngine:
    group = EnvGroup([partial(gym.make, "CartPole-v1") for _ in range(2)], backend="threads", n_workers=1)
    model = PPO("MlpPolicy", VecNormalize(group.env), seed=0, n_steps=32, batch_size=64, n_epochs=1)
    settings = {"total_env_steps": 1500, "seed": 0, "verbose": False, "log_formats": (), **config}
    settings.update(checkpoint_interval=5, checkpoint_folder=folder)
    return AsyncRLEngine(EngineConfig(**settings), group, PolicyGroup(model), DataBuffer.for_algorithm(model))


def prefetching_ppo_engine(**config: object) -> AsyncRLEngine:
    """A small PPO engine whose rollout thread takes a rollout ahead of the one being prepared."""
    group = EnvGroup([partial(gym.make, "CartPole-v1") for _ in range(2)], backend="threads", n_workers=1)
    model = PPO("MlpPolicy", group.env, seed=0, n_steps=32, batch_size=64, n_epochs=1)
    settings = {"total_env_steps": 3000, "seed": 0, "verbose": False, "log_formats": (), **config}
    return AsyncRLEngine(EngineConfig(**settings), group, PolicyGroup(model), RolloutQueue(prefetch=1))


def test_an_on_policy_checkpoint_keeps_the_rollouts_not_yet_trained_on(tmp_path: Path) -> None:
    engine = prefetching_ppo_engine(checkpoint_interval=1, checkpoint_folder=tmp_path)
    engine.run()
    saved = checkpoints(tmp_path)
    assert len(saved) == engine.train_steps
    waiting = 0
    for folder in saved:
        counters = json.loads((folder / COUNTERS_FILE).read_text())
        rollouts = load_from_pkl(folder / ROLLOUTS_FILE)
        # Every step collected is either in the weights already or in a rollout the checkpoint keeps.
        assert counters["collected_steps"] == counters["num_timesteps"] + sum(rollout.length for rollout in rollouts)
        waiting += len(rollouts)
    assert waiting > 0  # the rollout thread collects the next rollout while a step trains

    folder = next(folder for folder in saved if load_from_pkl(folder / ROLLOUTS_FILE))
    resumed = prefetching_ppo_engine()
    resumed.load_checkpoint(folder)
    queued = resumed.buffer.queued()  # type: ignore[attr-defined]
    assert [len(rollout.rewards) for rollout in queued] == [r.length for r in load_from_pkl(folder / ROLLOUTS_FILE)]
    steps_before = resumed.num_timesteps
    resumed.run()
    assert resumed.num_timesteps >= 3000 and resumed.num_timesteps > steps_before


def test_an_off_policy_checkpoint_counts_only_the_gradient_steps_done(tmp_path: Path) -> None:
    engine = small_sac_engine(AsyncRLEngine, checkpoint_interval=1, checkpoint_folder=tmp_path)
    engine.run()
    saved = checkpoints(tmp_path)
    assert len(saved) == engine.train_steps
    for folder in saved:
        counters = json.loads((folder / COUNTERS_FILE).read_text())
        # Batches drawn for the next train step while this one was saved are not counted: they are drawn again.
        assert SAC.load(folder / ALGORITHM_FILE)._n_updates == counters["gradient_steps"]


def test_vec_normalize_statistics_count_the_steps_collected_and_come_back_from_a_checkpoint(tmp_path: Path) -> None:
    engine = normalized_ppo_engine(tmp_path, eval_interval=500, eval_episodes=2)
    engine.run()
    normalize = engine.vec_normalize
    assert normalize is not None
    # Each collected step's observation counted once (RunningMeanStd starts at a count of 1e-4).
    assert normalize.obs_rms.count == pytest.approx(engine.collected_steps + 1e-4)
    assert normalize.ret_rms.count == pytest.approx(engine.collected_steps + 1e-4)
    assert len(engine.evaluations) >= 2 and all(np.isfinite(e["mean_return"]) for e in engine.evaluations)

    folder = checkpoints(tmp_path)[-1]
    counters = json.loads((folder / COUNTERS_FILE).read_text())
    resumed = normalized_ppo_engine(tmp_path / "resumed", total_env_steps=2500)
    resumed.load_checkpoint(folder)
    restored = resumed.vec_normalize
    assert restored is not None and restored is not normalize
    assert restored.obs_rms.count == pytest.approx(counters["collected_steps"] + 1e-4)
    saved = VecNormalize.load(str(folder / NORMALIZE_FILE), DummyVecEnv([partial(gym.make, "CartPole-v1")]))
    np.testing.assert_array_equal(restored.obs_rms.mean, saved.obs_rms.mean)
    resumed.run()
    assert restored.obs_rms.count == pytest.approx(resumed.collected_steps + 1e-4)
    assert resumed.evaluations == []  # its config evaluates nothing, whatever the checkpoint's did


@pytest.mark.parametrize("saved_config", [{}, {"eval_interval": 5000, "eval_episodes": 2}], ids=["none", "other"])
def test_a_run_resumed_with_an_eval_interval_evaluates_at_it(tmp_path: Path, saved_config: dict) -> None:
    normalized_ppo_engine(tmp_path, **saved_config).run()  # no evaluation, or one due at 5000 steps
    folder = checkpoints(tmp_path)[-1]
    saved_steps = json.loads((folder / COUNTERS_FILE).read_text())["collected_steps"]
    resumed = normalized_ppo_engine(tmp_path / "resumed", total_env_steps=3000, eval_interval=500, eval_episodes=2)
    resumed.load_checkpoint(folder)
    resumed.run()
    steps = [evaluation["env_steps"] for evaluation in resumed.evaluations]
    assert steps and steps[0] >= (saved_steps // 500 + 1) * 500
    assert resumed.collected_steps < (steps[-1] // 500 + 1) * 500  # none left due


def test_a_vec_normalize_around_another_env_or_a_checkpoint_without_one_is_refused(tmp_path: Path) -> None:
    group = EnvGroup([partial(gym.make, "CartPole-v1")], backend="threads")
    model = PPO("MlpPolicy", VecNormalize(DummyVecEnv([partial(gym.make, "CartPole-v1")])), n_steps=32, batch_size=32)
    config = EngineConfig(total_env_steps=100, verbose=False, log_formats=())
    with pytest.raises(ValueError, match=r"VecNormalize must wrap the env group's env itself"):
        AsyncRLEngine(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))

    plain: BaseEngine = small_ppo_engine(AsyncRLEngine, checkpoint_interval=2, checkpoint_folder=tmp_path)
    plain.run()
    with pytest.raises(ValueError, match="saved without VecNormalize statistics"):
        normalized_ppo_engine(tmp_path / "other").load_checkpoint(checkpoints(tmp_path)[0])


def test_after_a_run_every_step_collected_is_trained_on_or_queued_for_the_next() -> None:
    engine = prefetching_ppo_engine(total_env_steps=1500)
    engine.run()
    queued = engine.buffer.queued()  # type: ignore[attr-defined]
    assert engine.collected_steps == engine.num_timesteps + sum(len(rollout.rewards) for rollout in queued)
    engine.config = dataclasses.replace(engine.config, total_env_steps=3000)
    engine.run()  # trains first on what the last run left queued
    assert engine.num_timesteps >= 3000
    queued = engine.buffer.queued()  # type: ignore[attr-defined]
    assert engine.collected_steps == engine.num_timesteps + sum(len(rollout.rewards) for rollout in queued)


def test_a_dqn_checkpoint_keeps_its_exploration_and_target_update_phase(tmp_path: Path) -> None:
    from stable_baselines3 import DQN

    group = EnvGroup([partial(gym.make, "CartPole-v1")], backend="threads")
    model = DQN("MlpPolicy", group.env, seed=0, learning_starts=100, target_update_interval=100)
    config = EngineConfig(total_env_steps=1000, seed=0, verbose=False, log_formats=())
    AsyncRLEngine(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model)).run()
    PolicyGroup(model).save(tmp_path / "dqn.zip")
    fresh = DQN("MlpPolicy", group.env, seed=1)
    PolicyGroup(fresh).load(tmp_path / "dqn.zip", version=3)
    for name in ("num_timesteps", "_n_calls", "exploration_rate", "_current_progress_remaining"):
        assert getattr(fresh, name) == getattr(model, name), name
    assert fresh.exploration_rate < fresh.exploration_initial_eps
