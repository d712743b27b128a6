"""A vectorised environment that also hands out its environment factories, one per index, to collection workers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gymnasium as gym
from stable_baselines3.common.vec_env import DummyVecEnv

EnvFactory = Callable[[], gym.Env]


class IndexableMultiEnv(DummyVecEnv):
    """
    The environments of an agent whose episodes are collected asynchronously (see
    :func:`~lit_sb3.agents.async_agent.get_injected_agent`): workers build environment ``i`` with ``env_fns[i]``,
    so each environment runs in one worker, and its episodes are seeded from ``(seed, i, episode)`` whichever worker
    runs it. In this process it is an ordinary ``DummyVecEnv`` (spaces, evaluation, ``reset``).

    :param env_fns: One callable per environment, each returning a gymnasium ``Env``; they are pickled to the
        workers, so they must be picklable by cloudpickle (lambdas and ``functools.partial`` are).
    """

    def __init__(self, env_fns: Sequence[EnvFactory]) -> None:
        if isinstance(env_fns, str | bytes) or not isinstance(env_fns, Sequence):
            raise TypeError(f"env_fns must be a list of callables returning a gymnasium Env, got {type(env_fns)!r}")
        if len(env_fns) == 0:
            raise ValueError("env_fns is empty: give one environment factory per environment")
        for index, env_fn in enumerate(env_fns):
            if not callable(env_fn):
                raise TypeError(f"env_fns[{index}] must be callable (returning a gymnasium Env), got {type(env_fn)!r}")
        self.env_fns = list(env_fns)
        super().__init__(self.env_fns)

    def __len__(self) -> int:
        return len(self.env_fns)

    def __getitem__(self, index: int) -> EnvFactory:
        """
        :param index: Index of the environment.
        :return: Its factory.
        """
        return self.env_fns[index]
