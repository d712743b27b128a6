"""Vectorised environments that also hand out their environment factories, one per index, to collection workers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import gymnasium as gym
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices

EnvFactory = Callable[[], gym.Env]


def check_env_fns(env_fns: Sequence[EnvFactory]) -> list[EnvFactory]:
    """
    :param env_fns: One callable per environment, each returning a gymnasium ``Env``.
    :return: Them, as a list.
    :raises TypeError: if ``env_fns`` is not a sequence of callables.
    :raises ValueError: if it is empty.
    """
    if isinstance(env_fns, str | bytes) or not isinstance(env_fns, Sequence):
        raise TypeError(f"env_fns must be a list of callables returning a gymnasium Env, got {type(env_fns)!r}")
    if len(env_fns) == 0:
        raise ValueError("env_fns is empty: give one environment factory per environment")
    for index, env_fn in enumerate(env_fns):
        if not callable(env_fn):
            raise TypeError(f"env_fns[{index}] must be callable (returning a gymnasium Env), got {type(env_fn)!r}")
    return list(env_fns)


def _given(env: gym.Env) -> gym.Env:
    return env


def _built(env_fn: EnvFactory, index: int) -> gym.Env:
    env = env_fn()
    if not isinstance(env, gym.Env):
        raise TypeError(
            f"env_fns[{index}]() returned {type(env).__name__}, not a gymnasium Env: give one factory per environment "
            "(a factory returning a VecEnv or a list of environments is not supported)"
        )
    return env


def check_same_spaces(envs: Sequence[gym.Env]) -> None:
    """
    :param envs: The environments of one agent.
    :raises ValueError: if one has other observation or action spaces than the first (its policy would act on it
        with the first one's: another shape fails in a worker, other bounds go unnoticed).
    """
    first = envs[0]
    for index, env in enumerate(envs[1:], start=1):
        if env.observation_space != first.observation_space or env.action_space != first.action_space:
            raise ValueError(
                f"environment {index} has other spaces (observation {env.observation_space}, action "
                f"{env.action_space}) than environment 0 (observation {first.observation_space}, action "
                f"{first.action_space}): the environments of an agent must all have the same spaces"
            )


class FactoryVecEnv(DummyVecEnv):
    """
    A ``DummyVecEnv`` that keeps its factories: worker processes build environment ``i`` with ``env_fns[i]`` instead
    of copying it. As any Stable-Baselines3 VecEnv, it counts ``len(env_fns)`` environments (``n_steps`` is per
    environment).

    :param env_fns: One callable per environment, each returning a gymnasium ``Env``, picklable by cloudpickle
        (lambdas and ``functools.partial`` are).
    """

    def __init__(self, env_fns: Sequence[EnvFactory]) -> None:
        self.env_fns = check_env_fns(env_fns)
        built = [_built(env_fn, index) for index, env_fn in enumerate(self.env_fns)]
        check_same_spaces(built)
        super().__init__([functools.partial(_given, env) for env in built])


class IndexableMultiEnv(DummyVecEnv):
    """
    The environments of an agent whose episodes are collected asynchronously (see
    :func:`~lit_sb3.agents.async_agent.get_injected_agent`), as async-gym-agents' class of that name: workers build
    environment ``i`` with ``env_fns[i]`` (so each environment runs in one worker, and its episodes are seeded from
    ``(seed, i, episode)`` whichever worker runs it), and Stable-Baselines3 sees ONE environment (``num_envs == 1``):
    ``n_steps`` is the whole rollout and callbacks are called once per transition.

    In this process it holds every environment (built once here; thread workers step these very objects):
    ``get_attr``, ``set_attr`` and ``env_method`` address them all (index ``i`` is ``env_fns[i]``'s), while stepping
    it as a VecEnv (``reset``, ``step``, evaluation) steps environment 0 (or ``stub_env``).

    :param env_fns: One callable per environment, each returning a gymnasium ``Env``; worker processes call them,
        so they must be picklable by cloudpickle (lambdas and ``functools.partial`` are).
    :param stub_env: The environment stepped as the VecEnv; by default the one ``env_fns[0]`` built.
    """

    def __init__(self, env_fns: Sequence[EnvFactory], stub_env: gym.Env | None = None) -> None:
        self.env_fns = check_env_fns(env_fns)
        if stub_env is not None and not isinstance(stub_env, gym.Env):
            raise TypeError(f"stub_env must be a gymnasium Env, got {type(stub_env)!r}")
        self.environments = [_built(env_fn, index) for index, env_fn in enumerate(self.env_fns)]
        check_same_spaces(self.environments)
        stepped = self.environments[0] if stub_env is None else stub_env
        super().__init__([lambda: stepped])

    def __len__(self) -> int:
        return len(self.env_fns)

    def __getitem__(self, index: int) -> EnvFactory:
        """
        :param index: Index of the environment.
        :return: Its factory.
        """
        return self.env_fns[index]

    def close(self) -> None:
        for env in self.environments:
            env.close()
        if self.envs[0] is not self.environments[0]:  # a stub_env
            self.envs[0].close()

    def _get_target_envs(self, indices: VecEnvIndices) -> list[gym.Env]:
        if indices is None:
            return list(self.environments)
        if isinstance(indices, int):
            indices = [indices]
        return [self.environments[index] for index in indices]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [is_wrapped(env, wrapper_class) for env in self._get_target_envs(indices)]
