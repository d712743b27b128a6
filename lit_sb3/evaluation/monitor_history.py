"""A bounded episode history for the ``Monitor`` wrappers of the environments a worker builds.

Stable-Baselines3's ``Monitor`` appends every finished episode's return, length and time to lists it never trims.
Inside a worker nobody reads them (the worker counts its episodes itself, and ``info["episode"]`` is built from the
running episode), yet they grow by about 100 bytes an episode: 6.5 KB a round of 64 candidates, gigabytes over a
long evolution-strategies run. A worker keeps the last :data:`MONITOR_HISTORY` episodes instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
from gymnasium.vector import SyncVectorEnv, VectorWrapper
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper

#: Episodes a worker's ``Monitor`` remembers (Stable-Baselines3 logs the means of the last 100 episodes too).
MONITOR_HISTORY = 100

_HISTORY_ATTRIBUTES = ("episode_returns", "episode_lengths", "episode_times")


def bound_monitor_history(env: Any, max_episodes: int = MONITOR_HISTORY) -> None:
    """
    Make every ``Monitor`` inside ``env`` keep only its last ``max_episodes`` episodes (the rest of its behaviour,
    ``info["episode"]``, the monitor file and the step counts, is unchanged).

    :param env: A gymnasium ``Env`` or ``VectorEnv``, or a Stable-Baselines3 ``VecEnv``; the sub-environments of a
        ``SubprocVecEnv`` or an ``AsyncVectorEnv`` live in other processes and are left as they are.
    :param max_episodes: Episodes kept.
    """
    for monitor in _monitors(env):
        for name in _HISTORY_ATTRIBUTES:
            setattr(monitor, name, deque(getattr(monitor, name), maxlen=max_episodes))


def _monitors(env: Any) -> Iterator[Monitor]:
    if isinstance(env, VecEnvWrapper):
        yield from _monitors(env.venv)
    elif isinstance(env, VectorWrapper):
        yield from _monitors(env.env)
    elif isinstance(env, (DummyVecEnv, SyncVectorEnv)):
        for sub_env in env.envs:
            yield from _monitors(sub_env)
    elif isinstance(env, gym.Wrapper):
        if isinstance(env, Monitor):
            yield env
        yield from _monitors(env.env)


class BoundedMonitorHistory:
    """
    An environment factory whose environments' ``Monitor`` wrappers keep a bounded history (for the environments
    a worker builds and owns: never the caller's own objects).

    :param env_fn: Builds the environment.
    :param max_episodes: Episodes each ``Monitor`` keeps.
    """

    def __init__(self, env_fn: Callable[[], Any], max_episodes: int = MONITOR_HISTORY) -> None:
        self.env_fn = env_fn
        self.max_episodes = max_episodes

    def __call__(self) -> Any:
        env = self.env_fn()
        bound_monitor_history(env, self.max_episodes)
        return env
