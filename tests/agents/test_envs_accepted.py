"""Every environment Stable-Baselines3's learn accepts: thread workers step the agent's own environment objects,
worker processes copies of them; what the workers cannot step is refused at construction, saying what to pass."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO, SAC, TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import FakeImageEnv
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)

from agents.agent_envs import LockedEnv, OddEnv, SleepyOddEnv
from agents.helpers import multi_env
from lit_sb3 import FactoryVecEnv, IndexableMultiEnv, get_injected_agent

CNN_KWARGS = {"features_extractor_kwargs": {"features_dim": 16}}


def small_ppo(env: Any, use_mp: bool) -> Any:
    return get_injected_agent(PPO)("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, use_mp=use_mp, seed=0)


ENVS = {
    "env id": lambda: "Pendulum-v1",
    "gym.Env": lambda: gym.make("Pendulum-v1"),
    "make_vec_env": lambda: make_vec_env("Pendulum-v1", n_envs=2),
    "VecNormalize(make_vec_env)": lambda: VecNormalize(make_vec_env("Pendulum-v1", n_envs=2)),
    "VecMonitor(DummyVecEnv)": lambda: VecMonitor(DummyVecEnv([lambda: gym.make("Pendulum-v1")] * 2)),
    "IndexableMultiEnv": lambda: multi_env("Pendulum-v1", 2),
}


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("make_env", ENVS.values(), ids=ENVS.keys())
def test_every_env_stable_baselines3_accepts_is_collected(make_env: Any, use_mp: bool) -> None:
    model = small_ppo(make_env(), use_mp)
    try:
        model.learn(200)
    finally:
        model.shutdown()
    assert model.num_timesteps >= 200
    assert len(model.ep_info_buffer) >= 1  # whole Pendulum episodes (200 steps) arrived with their statistics
    assert all(info["l"] == 200 for info in model.ep_info_buffer)


def test_thread_workers_step_the_agents_own_env_objects_nothing_pickled() -> None:
    env = DummyVecEnv([LockedEnv, LockedEnv])  # a lock cannot be pickled
    model = get_injected_agent(SAC)("MlpPolicy", env, learning_starts=20, use_mp=False, seed=0)
    try:
        model.learn(100)
        vec_env = model.get_env()
        assert isinstance(vec_env, VecEnv)
        stepped = vec_env.get_attr("total_steps")  # reaches the very objects the workers step
        assert sum(stepped) >= 100 and all(steps > 0 for steps in stepped)
        vec_env.set_attr("length", 3)  # and what is set there changes what the workers collect next
        model.learn(200, reset_num_timesteps=False)  # (after the episodes buffered ahead, up to 8 of 7 steps)
        assert model.ep_info_buffer[-1]["l"] == 3
    finally:
        model.shutdown()


ROUTED_ENVS = {
    "DummyVecEnv": lambda: DummyVecEnv([OddEnv, OddEnv]),
    "VecNormalize(IndexableMultiEnv)": lambda: VecNormalize(IndexableMultiEnv([OddEnv, OddEnv])),
}


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("make_env", ROUTED_ENVS.values(), ids=ROUTED_ENVS.keys())
def test_get_attr_set_attr_and_env_method_reach_the_environments_the_workers_step(make_env: Any, use_mp: bool) -> None:
    model = get_injected_agent(SAC)("MlpPolicy", make_env(), learning_starts=20, use_mp=use_mp, seed=0)
    try:
        model.learn(100)
        vec_env = model.get_env()
        assert isinstance(vec_env, VecEnv)
        stepped = vec_env.get_attr("total_steps")  # both environments, as the workers stepped them
        assert len(stepped) == 2 and sum(stepped) >= 100 and all(steps > 0 for steps in stepped)
        vec_env.set_attr("length", 3, indices=[1])
        assert vec_env.env_method("get_wrapper_attr", "length") == [7, 3]
        vec_env.set_attr("length", 3)  # and what is set there changes what the workers collect next
        model.learn(200, reset_num_timesteps=False)  # (after the episodes buffered ahead, up to 8 of 7 steps)
        assert model.ep_info_buffer[-1]["l"] == 3
    finally:
        model.shutdown()
    assert model.get_env().get_attr("length") == [3, 3]  # set in this process too


def test_when_learn_returns_thread_workers_no_longer_step_the_agents_env_objects() -> None:
    env = DummyVecEnv([SleepyOddEnv, SleepyOddEnv])
    model = small_ppo(env, use_mp=False)  # on-policy: the next rollout would be collected ahead
    try:
        model.learn(64)
        before = env.get_attr("total_steps")
        time.sleep(0.3)  # time enough for a background worker to step (about 2 ms a step)
        env.reset()
        for _ in range(20):  # the caller steps them, as after Stable-Baselines3's learn
            env.step(np.zeros((2, 1), np.float32))
        assert env.get_attr("total_steps") == [steps + 20 for steps in before]  # and nobody else did
        model.learn(64, reset_num_timesteps=False)  # new worker threads take them up again
        assert model.num_timesteps >= 128
    finally:
        model.shutdown()


def test_worker_processes_refuse_an_env_they_cannot_copy_at_construction() -> None:
    env = DummyVecEnv([OddEnv, LockedEnv])
    with pytest.raises(TypeError, match=r"environment 1 \(LockedEnv\) cannot be copied to worker processes.*use_mp="):
        small_ppo(env, use_mp=True)


def test_vec_envs_the_workers_cannot_step_are_refused_at_construction() -> None:
    subprocess_env = SubprocVecEnv([lambda: gym.make("CartPole-v1")])
    try:
        with pytest.raises(TypeError, match=r"SubprocVecEnv runs its environments in its own processes.*make_vec_env"):
            small_ppo(subprocess_env, use_mp=True)
    finally:
        subprocess_env.close()
    with pytest.raises(TypeError, match="VecNormalize must be the outermost wrapper"):
        small_ppo(VecFrameStack(VecNormalize(make_vec_env("CartPole-v1")), 2), use_mp=False)


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
def test_channel_last_images_are_transposed_in_the_workers_as_stable_baselines3_does(use_mp: bool) -> None:
    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, discrete=True)  # channel-last
    model = get_injected_agent(PPO)(
        "CnnPolicy", env, n_steps=32, batch_size=32, n_epochs=1, use_mp=use_mp, policy_kwargs=CNN_KWARGS
    )
    try:
        model.learn(64)
    finally:
        model.shutdown()
    assert isinstance(model.get_env(), VecTransposeImage)  # added by Stable-Baselines3 itself
    assert model.rollout_buffer.observations.shape[-3:] == (1, 36, 36)  # channel-first, as the policy takes them
    assert model.num_timesteps >= 64


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
def test_vec_frame_stack_is_reproduced_in_the_workers_episode_by_episode(use_mp: bool) -> None:
    env = VecFrameStack(DummyVecEnv([OddEnv]), n_stack=3)  # observation t of a 7-step episode: [t]
    model = get_injected_agent(TD3)("MlpPolicy", env, learning_starts=1000, use_mp=use_mp, seed=0)
    try:
        model.learn(21)
    finally:
        model.shutdown()
    assert model.replay_buffer is not None
    stored = model.replay_buffer.observations[:21, 0]
    following = model.replay_buffer.next_observations[:21, 0]
    steps = np.arange(21) % 7  # three episodes: each starts a new stack
    expected = np.clip(steps[:, None] + np.array([-2, -1, 0]), 0, None)
    np.testing.assert_array_equal(stored, expected)
    np.testing.assert_array_equal(following, np.clip(steps[:, None] + np.array([-1, 0, 1]), 0, None))


@pytest.mark.parametrize(
    "make_env",
    [
        IndexableMultiEnv,
        FactoryVecEnv,
        lambda fns: get_injected_agent(SAC)("MlpPolicy", DummyVecEnv(fns)).learn(100),
    ],
    ids=["IndexableMultiEnv", "FactoryVecEnv", "DummyVecEnv"],
)
def test_environments_with_other_spaces_are_refused_naming_them(make_env: Any) -> None:
    # Other action bounds: the policy would act on environment 1 with environment 0's, and nothing would fail.
    fns = [lambda: gym.make("Pendulum-v1"), lambda: gym.wrappers.RescaleAction(gym.make("Pendulum-v1"), -0.5, 0.5)]
    with pytest.raises(
        ValueError, match=r"environment 1 has other spaces .*action Box\(-0.5, 0.5, .* than environment"
    ):
        make_env(fns)


def test_more_workers_than_environments_are_refused_before_any_starts() -> None:
    agent = get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 2), n_steps=32, use_mp=True, n_workers=3)
    with pytest.raises(ValueError, match="n_workers=3 is more than the 2 environments to collect from"):
        agent.learn(64)
    assert agent._collector is None
