"""set_env redirects the collection, as it redirects Stable-Baselines3's own."""

from __future__ import annotations

import pathlib

import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.envs.multi_env import IndexableMultiEnv

from .agent_envs import OddEnv
from .helpers import EpisodeRecorder, multi_env


def test_episodes_after_set_env_come_from_the_new_env() -> None:
    model = get_injected_agent(PPO)(
        "MlpPolicy", IndexableMultiEnv([lambda: OddEnv(length=9)] * 2), n_steps=32, batch_size=32, seed=0
    )
    try:
        first, second = EpisodeRecorder(), EpisodeRecorder()
        model.learn(64, callback=first)
        model.set_env(IndexableMultiEnv([lambda: OddEnv(length=5)] * 2))
        model.learn(64, callback=second, reset_num_timesteps=False)
    finally:
        model.shutdown()
    assert {final["episode"]["l"] for final in first.finals} == {9}
    assert second.finals and {final["episode"]["l"] for final in second.finals} == {5}
    assert model.num_timesteps >= 128


def test_on_policy_set_env_and_load_reset_and_count_as_in_sb3(tmp_path: pathlib.Path) -> None:
    """What Stable-Baselines3's test_set_env checks of PPO, with a length of episode that does not divide the
    rollout (so rollouts cut episodes)."""
    injected = get_injected_agent(PPO)

    def vec_env(n_envs: int) -> DummyVecEnv:
        return DummyVecEnv([lambda: OddEnv(length=9)] * n_envs)

    model = injected("MlpPolicy", vec_env(1), n_steps=16, batch_size=16, seed=0)
    model.learn(16)
    assert model.num_timesteps == 16
    model.set_env(vec_env(1), force_reset=True)
    assert model._last_obs is None
    with pytest.raises(AssertionError):  # Stable-Baselines3's own check: the number of envs must stay
        model.set_env(vec_env(2))
    model.set_env(model.get_env(), force_reset=False)
    model.learn(16, reset_num_timesteps=False)
    assert model._last_obs is not None and model.num_timesteps == 32
    steps = model.num_timesteps
    model.save(tmp_path / "ppo")
    loaded = injected.load(tmp_path / "ppo", env=model.get_env(), force_reset=False)
    assert loaded._last_obs is not None and loaded.num_timesteps == steps
    loaded.learn(16, reset_num_timesteps=False)
    assert loaded.num_timesteps == steps + 16
    recorder = EpisodeRecorder()
    two_envs = injected.load(tmp_path / "ppo", env=vec_env(2))
    two_envs.learn(16, callback=recorder)
    assert {final["collection"]["env_index"] for final in recorder.finals} == {0, 1}
    assert two_envs.num_timesteps == 32


def test_set_env_refuses_what_workers_cannot_build() -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

    model = get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 1), n_steps=32, batch_size=32)
    with pytest.raises(TypeError, match="VecNormalize must be the outermost wrapper"):
        model.set_env(VecFrameStack(VecNormalize(make_vec_env("CartPole-v1", 1)), 1))
    assert isinstance(model.get_env(), IndexableMultiEnv)  # unchanged
