"""Sub-environments seen as slots: each slot runs one episode of one candidate at a time.

Two ways to drive a vectorised environment:

* :class:`EnvListSlots` steps the gymnasium environments inside a ``DummyVecEnv`` (or a gymnasium
  ``SyncVectorEnv``) one by one. A slot whose episode ends starts the next one at once, reset with that episode's
  own seed, and idle slots are not stepped. This is the fast and exact path.
* :class:`WaveSlots` drives any other vectorised environment as a whole: all slots reset together (each with its
  episode's seed when the environment accepts one seed per sub-environment), and a new wave starts once every slot
  finished its episode.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecMonitor, VecNormalize


class SlotEnvError(Exception):
    """
    An environment raised; chained to the original exception.

    :param slot: The slot whose environment raised, if known.
    """

    def __init__(self, slot: int | None) -> None:
        super().__init__(f"environment of slot {slot} failed")
        self.slot = slot


class SlotEnv(ABC):
    """
    ``n_slots`` sub-environments.

    :param n_slots: Number of sub-environments.
    :param observation_space: Observation space of one sub-environment.
    :param action_space: Action space of one sub-environment.
    """

    def __init__(self, n_slots: int, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.n_slots = n_slots
        self.observation_space = observation_space
        self.action_space = action_space
        self.running = np.zeros(n_slots, dtype=bool)
        #: Latest observation of each slot: an array with a leading slot axis for Box spaces, else a list.
        self.observations: Any = (
            np.zeros((n_slots, *observation_space.shape), observation_space.dtype)
            if isinstance(observation_space, spaces.Box)
            else [None] * n_slots
        )

    @abstractmethod
    def free_slots(self) -> list[int]:
        """:return: Slots where an episode may start now."""

    @abstractmethod
    def start(self, seeds: dict[int, int | None], options: dict[str, Any] | None) -> None:
        """
        Start an episode on each given slot.

        :param seeds: Reset seed of each slot to start (all from :meth:`free_slots`).
        :param options: Reset options.
        :raises SlotEnvError: if an environment raised.
        """

    @abstractmethod
    def step(self, actions: np.ndarray, slots: list[int]) -> tuple[list[float], list[int]]:
        """
        Step the running slots.

        :param actions: One action per slot.
        :param slots: The running slots, in increasing order.
        :return: The reward of each running slot (in the order of ``slots``) and the slots whose episode ended.
        :raises SlotEnvError: if an environment raised.
        """

    def stop(self, slots: list[int]) -> None:
        """
        Abandon the episodes running on ``slots``.

        :param slots: The slots.
        """
        self.running[slots] = False

    @abstractmethod
    def close(self) -> None:
        """Close the environments."""


class EnvListSlots(SlotEnv):
    """
    Slots over a list of gymnasium environments, stepped one by one.

    :param envs: The environments.
    """

    def __init__(self, envs: list[gym.Env]) -> None:
        super().__init__(len(envs), envs[0].observation_space, envs[0].action_space)
        self.envs = envs

    def free_slots(self) -> list[int]:
        return np.flatnonzero(~self.running).tolist()

    def start(self, seeds: dict[int, int | None], options: dict[str, Any] | None) -> None:
        for slot, seed in seeds.items():
            try:
                self.observations[slot], _ = self.envs[slot].reset(seed=seed, options=options)
            except Exception as exc:
                raise SlotEnvError(slot) from exc
            self.running[slot] = True

    def step(self, actions: np.ndarray, slots: list[int]) -> tuple[list[float], list[int]]:
        rewards = []
        finished = []
        envs, observations = self.envs, self.observations
        for slot in slots:
            try:
                observations[slot], reward, terminated, truncated, _ = envs[slot].step(actions[slot])
            except Exception as exc:
                raise SlotEnvError(slot) from exc
            rewards.append(float(reward))
            if terminated or truncated:
                finished.append(slot)
        if finished:
            self.running[finished] = False
        return rewards, finished

    def close(self) -> None:
        for env in self.envs:
            env.close()


class WaveSlots(SlotEnv):
    """
    Slots over any Stable-Baselines3 ``VecEnv`` or gymnasium ``VectorEnv``, reset together.

    :param env: The vectorised environment.
    :param original_reward: Where to read rewards from when a ``VecNormalize`` inside ``env`` scales them.
    """

    def __init__(self, env: VecEnv | GymVectorEnv, original_reward: VecNormalize | None = None) -> None:
        if isinstance(env, VecEnv):
            super().__init__(env.num_envs, env.observation_space, env.action_space)
        else:
            super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self.env = env
        self._original_reward = original_reward

    def free_slots(self) -> list[int]:
        return [] if self.running.any() else list(range(self.n_slots))

    def start(self, seeds: dict[int, int | None], options: dict[str, Any] | None) -> None:
        per_slot: list[int | None] = [seeds.get(slot) for slot in range(self.n_slots)]
        try:
            if isinstance(self.env, VecEnv):
                self.env.unwrapped._seeds = per_slot
                self.env.set_options(options)
                observations = self.env.reset()
            else:
                seed: Any = per_slot if isinstance(self.env, AsyncVectorEnv) else per_slot[min(seeds)]
                observations, _ = self.env.reset(seed=seed, options=options)
        except Exception as exc:
            raise SlotEnvError(None) from exc
        self._store(observations)
        self.running[list(seeds)] = True

    def step(self, actions: np.ndarray, slots: list[int]) -> tuple[list[float], list[int]]:
        try:
            if isinstance(self.env, VecEnv):
                observations, rewards, dones, _ = self.env.step(actions)
                if self._original_reward is not None:
                    rewards = self._original_reward.get_original_reward()
            else:
                observations, rewards, terminations, truncations, _ = self.env.step(actions)
                dones = terminations | truncations
        except Exception as exc:
            raise SlotEnvError(None) from exc
        self._store(observations)
        finished = [slot for slot in slots if dones[slot]]
        if finished:
            self.running[finished] = False
        return [float(rewards[slot]) for slot in slots], finished

    def _store(self, observations: Any) -> None:
        if isinstance(self.observations, np.ndarray):
            self.observations[:] = observations
        else:
            self.observations = [_index_observation(observations, slot) for slot in range(self.n_slots)]

    def close(self) -> None:
        self.env.close()


def _index_observation(observations: Any, slot: int) -> Any:
    if isinstance(observations, dict):
        return {key: _index_observation(value, slot) for key, value in observations.items()}
    if isinstance(observations, tuple):
        return tuple(_index_observation(value, slot) for value in observations)
    return observations[slot]


def make_slot_env(env: VecEnv | GymVectorEnv, original_reward: VecNormalize | None = None) -> SlotEnv:
    """
    Pick the fastest exact driver for ``env``.

    :param env: A Stable-Baselines3 ``VecEnv`` or a gymnasium ``VectorEnv``.
    :param original_reward: A ``VecNormalize`` inside ``env`` whose original rewards to report.
    :return: :class:`EnvListSlots` for a ``DummyVecEnv`` (under ``VecMonitor`` wrappers only) or a
        ``SyncVectorEnv``, else :class:`WaveSlots`.
    """
    inner = env
    while isinstance(inner, VecMonitor):
        inner = inner.venv
    if isinstance(inner, DummyVecEnv | SyncVectorEnv) and original_reward is None:
        return EnvListSlots(list(inner.envs))
    return WaveSlots(env, original_reward)
