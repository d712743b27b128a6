"""set_env redirects the collection, as it redirects Stable-Baselines3's own."""

from __future__ import annotations

from stable_baselines3 import PPO

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


def test_set_env_refuses_what_workers_cannot_build() -> None:
    import pytest
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

    model = get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 1), n_steps=32, batch_size=32)
    with pytest.raises(TypeError, match="VecNormalize must be the outermost wrapper"):
        model.set_env(VecFrameStack(VecNormalize(make_vec_env("CartPole-v1", 1)), 1))
    assert isinstance(model.get_env(), IndexableMultiEnv)  # unchanged
