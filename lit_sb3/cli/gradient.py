"""The gradient agents of ``lit-sb3 train``: Stable-Baselines3 and sb3-contrib algorithms whose episodes are
collected asynchronously (:func:`~lit_sb3.agents.async_agent.get_injected_agent`) from an
:class:`~lit_sb3.envs.multi_env.FactoryVecEnv`."""

from __future__ import annotations

import functools
import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.noise import ActionNoise, NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.cli.common import CliError, require_module
from lit_sb3.envs.multi_env import FactoryVecEnv

#: ``lit-sb3 train`` names of the gradient algorithms: (module, class).
GRADIENT_ALGORITHMS: dict[str, tuple[str, str]] = {
    "a2c": ("stable_baselines3", "A2C"),
    "ddpg": ("stable_baselines3", "DDPG"),
    "dqn": ("stable_baselines3", "DQN"),
    "ppo": ("stable_baselines3", "PPO"),
    "qrdqn": ("sb3_contrib", "QRDQN"),
    "sac": ("stable_baselines3", "SAC"),
    "td3": ("stable_baselines3", "TD3"),
    "tqc": ("sb3_contrib", "TQC"),
    "trpo": ("sb3_contrib", "TRPO"),
}


def injected_class(name: str) -> type[BaseAlgorithm]:
    """
    :param name: A key of :data:`GRADIENT_ALGORITHMS`.
    :return: The algorithm with async collection, ``get_injected_agent(cls)``.
    :raises CliError: if the algorithm is sb3-contrib's and sb3-contrib is not installed.
    """
    module, class_name = GRADIENT_ALGORITHMS[name]
    if module != "stable_baselines3":
        require_module(module, class_name, "sb3-contrib")
    return get_injected_agent(getattr(importlib.import_module(module), class_name))


def make_multi_env(env_id: str, n_envs: int, normalize_kwargs: dict[str, Any] | None) -> VecEnv:
    """
    :param env_id: Gymnasium environment id.
    :param n_envs: Environments; each runs in one collection worker.
    :param normalize_kwargs: Wrap in ``VecNormalize`` with these arguments; None for no normalisation.
    :return: The ``FactoryVecEnv`` (``n_steps`` per environment, as rl-zoo counts; its factories
        ``functools.partial(gym.make, env_id)`` pickle to worker processes), possibly inside a ``VecNormalize``.
    """
    env: VecEnv = FactoryVecEnv([functools.partial(gym.make, env_id) for _ in range(n_envs)])
    if normalize_kwargs is not None:
        env = VecNormalize(env, **normalize_kwargs)
    return env


def make_action_noise(noise: tuple[str, float], action_space: spaces.Space, source: str) -> ActionNoise:
    """
    :param noise: rl-zoo's ``(noise_type, noise_std)``.
    :param action_space: The environment's actions.
    :param source: The hyper-parameter file, for the message.
    :return: Gaussian or Ornstein-Uhlenbeck noise of that standard deviation on every action dimension.
    :raises CliError: for actions that are not a ``Box``.
    """
    if not isinstance(action_space, spaces.Box):
        raise CliError(f"{source}: noise_type needs continuous (Box) actions, got {action_space}")
    noise_type, noise_std = noise
    mean, sigma = np.zeros(action_space.shape), noise_std * np.ones(action_space.shape)
    if noise_type == "normal":
        return NormalActionNoise(mean=mean, sigma=sigma)
    return OrnsteinUhlenbeckActionNoise(mean=mean, sigma=sigma)
