"""Workers' Monitor wrappers keep a bounded episode history; the caller's own environments are left as they are."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from lit_sb3 import AsyncEval, LinearPolicy, get_injected_agent
from lit_sb3.envs.multi_env import IndexableMultiEnv
from lit_sb3.evaluation.monitor_history import MONITOR_HISTORY, bound_monitor_history
from lit_sb3.workers.threads import ThreadBackend

#: The environments the thread workers of the test below built (thread workers share this module).
built_envs: list = []


def recorded_cartpole() -> DummyVecEnv:
    env = make_vec_env("CartPole-v1", n_envs=2)
    built_envs.append(env)
    return env


def monitor_of(env: gym.Env) -> Monitor:
    while not isinstance(env, Monitor):
        env = env.env  # type: ignore[attr-defined]
    return env


def test_async_eval_workers_keep_the_last_episodes_of_their_monitors() -> None:
    built_envs.clear()
    spaces = gym.make("CartPole-v1")
    policy = LinearPolicy(spaces.observation_space, spaces.action_space)
    weights = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
    with AsyncEval([recorded_cartpole], policy, backend=ThreadBackend()) as async_eval:
        async_eval.seed(0)
        for _ in range(4):  # 256 episodes on two sub-environments
            async_eval.send_jobs(weights, pop_size=64)
            assert len(async_eval.get_results()) == 64
    (env,) = built_envs
    monitors = [monitor_of(sub_env) for sub_env in env.envs]
    assert sum(len(monitor.episode_returns) for monitor in monitors) == 2 * MONITOR_HISTORY
    for monitor in monitors:
        assert len(monitor.episode_lengths) == len(monitor.episode_times) == MONITOR_HISTORY


def test_bounding_reaches_the_monitors_inside_wrappers_and_vector_envs() -> None:
    vec_env = VecNormalize(DummyVecEnv([lambda: TimeLimit(Monitor(gym.make("CartPole-v1")), 50)] * 2))
    gym_vector_env = gym.vector.SyncVectorEnv([lambda: Monitor(gym.make("CartPole-v1"))])
    monitors = [monitor_of(env) for env in vec_env.venv.envs] + [monitor_of(gym_vector_env.envs[0])]
    for monitor in monitors:
        monitor.episode_returns.extend([1.0, 2.0, 3.0])
    bound_monitor_history(vec_env, max_episodes=2)
    bound_monitor_history(gym_vector_env, max_episodes=2)
    for monitor in monitors:
        assert isinstance(monitor.episode_returns, deque) and list(monitor.episode_returns) == [2.0, 3.0]
        assert monitor.episode_lengths.maxlen == monitor.episode_times.maxlen == 2  # type: ignore[attr-defined]


def test_the_agents_own_environments_keep_their_whole_history() -> None:
    # Episodes of at most 10 steps: 2,048 steps are more than MONITOR_HISTORY episodes, whatever the policy does.
    multi_env = IndexableMultiEnv([lambda: Monitor(gym.make("CartPole-v1", max_episode_steps=10))] * 2)
    model = get_injected_agent(PPO)("MlpPolicy", multi_env, n_steps=256, batch_size=64, n_epochs=1)
    try:
        model.learn(2_048)
    finally:
        model.shutdown()
    monitors = [monitor_of(env) for env in multi_env.envs]
    assert all(isinstance(monitor.episode_returns, list) for monitor in monitors)
    assert sum(len(monitor.episode_returns) for monitor in monitors) > MONITOR_HISTORY
