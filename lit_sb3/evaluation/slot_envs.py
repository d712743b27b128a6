"""Sub-environments seen as slots: each slot runs one episode of one candidate at a time.

Three ways to drive a vectorised environment, from the best to the most general:

* :class:`EnvListSlots` steps the gymnasium environments inside a ``DummyVecEnv`` (or a gymnasium
  ``SyncVectorEnv``) one by one. A slot whose episode ends starts the next one at once, reset with that episode's own
  seed, and idle slots are not stepped. Exact and fast.
* :class:`WaveSlots` drives any other Stable-Baselines3 ``VecEnv`` (or a gymnasium ``AsyncVectorEnv``) as a whole:
  all slots reset together, each with its episode's seed, and the next wave starts once every slot finished its
  episode. Exact, but slots that finish early wait for the others.
* :class:`AutoresetSlots` drives a gymnasium ``VectorEnv`` whose sub-environments cannot be reset one by one with a
  seed of their own (a vector-entry-point env such as ``CartPoleVectorEnv``): the whole env is reset with one seed
  when a session starts, and a slot whose episode ends takes the next episode from the env's own autoreset. Fast,
  but an episode's start depends on what ran before it in the session: the evaluator makes each task a session of
  its own, so results depend on the chunk size and the number of sub-environments, not on the worker.

An episode of a sub-environment wrapped in a ``Monitor`` is the Monitor's, as Stable-Baselines3's ``evaluate_policy``
(and so sb3-contrib's ``AsyncEval``) counts it: it ends when the Monitor reports it (``info["episode"]``), with the
Monitor's return (rounded to 6 decimals) and length. An end that a wrapper outside the Monitor signals alone (Atari's
``EpisodicLifeEnv`` at a lost life) resets the sub-environment without a seed, as the ``VecEnv`` would, and the
episode goes on; a wrapper outside the Monitor that changes rewards (``ClipRewardEnv``) does not change the returns.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.monitor import Monitor
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
    ``n_slots`` sub-environments, with the return and length of the episode running on each.

    :param n_slots: Number of sub-environments.
    :param observation_space: Observation space of one sub-environment.
    :param action_space: Action space of one sub-environment.
    """

    #: Whether any slot can start an episode with a seed of its own whenever it is free.
    exact: bool = True

    def __init__(self, n_slots: int, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.n_slots = n_slots
        self.observation_space = observation_space
        self.action_space = action_space
        #: Slots whose episode is running and counted, in increasing order.
        self.running_slots: list[int] = []
        #: Latest observation of each slot: an array with a leading slot axis for Box spaces, else a list.
        self.observations: Any = (
            np.zeros((n_slots, *observation_space.shape), observation_space.dtype)
            if isinstance(observation_space, spaces.Box)
            else [None] * n_slots
        )
        self.episode_returns: Any = [0.0] * n_slots
        self.episode_lengths: Any = [0] * n_slots

    @property
    def busy(self) -> bool:
        """Whether some slot has an episode (running or about to start)."""
        return bool(self.running_slots)

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
    def step(self, actions: np.ndarray) -> list[int]:
        """
        Step the running slots with their actions, adding to their episode returns and lengths.

        :param actions: One action per slot.
        :return: The slots whose episode ended.
        :raises SlotEnvError: if an environment raised.
        """

    @abstractmethod
    def stop(self, slots: list[int]) -> None:
        """
        Abandon the episodes of ``slots``.

        :param slots: The slots.
        """

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
        #: Which environments have a ``Monitor`` (whose episodes count).
        self.monitored = [is_wrapped(env, Monitor) for env in envs]

    def free_slots(self) -> list[int]:
        running = set(self.running_slots)
        return [slot for slot in range(self.n_slots) if slot not in running]

    def start(self, seeds: dict[int, int | None], options: dict[str, Any] | None) -> None:
        for slot, seed in seeds.items():
            try:
                self.observations[slot], _ = self.envs[slot].reset(seed=seed, options=options)
            except (Exception, SystemExit) as exc:  # a Ctrl-C in this process is not the environment's failure
                raise SlotEnvError(slot) from exc
            self.episode_returns[slot] = 0.0
            self.episode_lengths[slot] = 0
        self.running_slots = sorted([*self.running_slots, *seeds])

    def step(self, actions: np.ndarray) -> list[int]:
        finished = []
        envs, observations, returns, lengths = self.envs, self.observations, self.episode_returns, self.episode_lengths
        for slot in self.running_slots:
            try:
                observations[slot], reward, terminated, truncated, info = envs[slot].step(actions[slot])
                returns[slot] += float(reward)
                lengths[slot] += 1
                if not (terminated or truncated):
                    continue
                if not self.monitored[slot]:
                    finished.append(slot)
                elif "episode" in info:
                    returns[slot], lengths[slot] = float(info["episode"]["r"]), int(info["episode"]["l"])
                    finished.append(slot)
                else:
                    observations[slot], _ = envs[slot].reset()
            except (Exception, SystemExit) as exc:
                raise SlotEnvError(slot) from exc
        if finished:
            self.stop(finished)
        return finished

    def stop(self, slots: list[int]) -> None:
        self.running_slots = [slot for slot in self.running_slots if slot not in slots]

    def close(self) -> None:
        for env in self.envs:
            env.close()


class _BatchSlots(SlotEnv):
    """Slots over a vectorised environment stepped as a whole, with numpy bookkeeping."""

    def __init__(self, env: VecEnv | GymVectorEnv, original_reward: VecNormalize | None) -> None:
        if isinstance(env, VecEnv):
            super().__init__(env.num_envs, env.observation_space, env.action_space)
        else:
            super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self.env = env
        self._original_reward = original_reward
        #: Which sub-environments have a ``Monitor`` (whose episodes count); not looked for in gymnasium vector envs.
        self.monitored = np.array(env.env_is_wrapped(Monitor) if isinstance(env, VecEnv) else [False] * env.num_envs)
        self.running = np.zeros(self.n_slots, dtype=bool)
        self.episode_returns = np.zeros(self.n_slots, np.float64)
        self.episode_lengths = np.zeros(self.n_slots, np.int64)

    def _step_all(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        """Step every sub-environment; :return: rewards, episode ends and infos."""
        infos: Any
        try:
            if isinstance(self.env, VecEnv):
                observations, rewards, dones, infos = self.env.step(actions)
                if self._original_reward is not None:
                    rewards = self._original_reward.get_original_reward()
            else:
                observations, rewards, terminations, truncations, infos = self.env.step(actions)
                dones = np.logical_or(terminations, truncations)
        except (Exception, SystemExit) as exc:
            raise SlotEnvError(None) from exc
        self._store(observations)
        return np.asarray(rewards, np.float64), np.asarray(dones, bool), infos

    def _count(self, rewards: np.ndarray, dones: np.ndarray, infos: Any) -> list[int]:
        """Add the step to the running episodes; :return: those that ended."""
        running = self.running
        self.episode_returns += np.where(running, rewards, 0.0)
        self.episode_lengths += running
        ended = running & dones
        if not ended.any():
            return []
        for slot in np.flatnonzero(ended & self.monitored):
            episode = infos[slot].get("episode")
            if episode is None:
                ended[slot] = False  # only a part of the Monitor's episode ended (the VecEnv reset it)
            else:
                self.episode_returns[slot], self.episode_lengths[slot] = episode["r"], episode["l"]
        running &= ~ended
        self.running_slots = np.flatnonzero(running).tolist()
        return np.flatnonzero(ended).tolist()

    def _run(self, slots: list[int]) -> None:
        self.running[slots] = True
        self.episode_returns[slots] = 0.0
        self.episode_lengths[slots] = 0
        self.running_slots = np.flatnonzero(self.running).tolist()

    def stop(self, slots: list[int]) -> None:
        self.running[slots] = False
        self.running_slots = np.flatnonzero(self.running).tolist()

    def _store(self, observations: Any) -> None:
        if isinstance(self.observations, np.ndarray):
            self.observations[:] = observations
        else:
            self.observations = [_index_observation(observations, slot) for slot in range(self.n_slots)]

    def close(self) -> None:
        self.env.close()


class WaveSlots(_BatchSlots):
    """
    Slots over any Stable-Baselines3 ``VecEnv`` or a gymnasium ``AsyncVectorEnv``: all slots reset together, each
    with its own seed; a new wave starts once every episode of the last one ended.

    :param env: The vectorised environment.
    :param original_reward: A ``VecNormalize`` inside ``env`` whose original (unscaled) rewards to count.
    """

    def free_slots(self) -> list[int]:
        return [] if self.running_slots else list(range(self.n_slots))

    def start(self, seeds: dict[int, int | None], options: dict[str, Any] | None) -> None:
        per_slot = [seeds.get(slot) for slot in range(self.n_slots)]
        try:
            if isinstance(self.env, VecEnv):
                self.env.unwrapped._seeds = per_slot  # VecEnv.seed() only offers seed + index
                self.env.set_options(options)
                observations = self.env.reset()
            else:
                observations, _ = cast(AsyncVectorEnv, self.env).reset(seed=per_slot, options=options)
        except (Exception, SystemExit) as exc:
            raise SlotEnvError(None) from exc
        self._store(observations)
        self._run(list(seeds))

    def step(self, actions: np.ndarray) -> list[int]:
        return self._count(*self._step_all(actions))


class AutoresetSlots(_BatchSlots):
    """
    Slots over a gymnasium ``VectorEnv`` with next-step or same-step autoreset, reset as a whole with one seed.

    :param env: The vector environment.
    """

    exact = False

    def __init__(self, env: GymVectorEnv) -> None:
        super().__init__(env, None)
        self.vector_env = env
        self.next_step_reset = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) == AutoresetMode.NEXT_STEP
        #: Slots whose next observation starts a fresh episode (their last one just ended).
        self._fresh = np.zeros(self.n_slots, dtype=bool)
        #: Slots given an episode that starts with the next step's observation (next-step autoreset).
        self._pending = np.zeros(self.n_slots, dtype=bool)

    @property
    def busy(self) -> bool:
        return bool(self.running_slots) or bool(self._pending.any())

    def free_slots(self) -> list[int]:
        if not self.busy:
            return list(range(self.n_slots))
        return np.flatnonzero(self._fresh).tolist()

    def start(self, seeds: dict[int, int | None], options: dict[str, Any] | None) -> None:
        slots = list(seeds)
        if not self.busy:
            try:
                observations, _ = self.vector_env.reset(seed=seeds[min(seeds)], options=options)
            except (Exception, SystemExit) as exc:
                raise SlotEnvError(None) from exc
            self._store(observations)
            self._fresh[:] = False
            self._run(slots)
        elif self.next_step_reset:
            self._pending[slots] = True
            self._fresh[slots] = False
        else:
            self._fresh[slots] = False
            self._run(slots)

    def step(self, actions: np.ndarray) -> list[int]:
        rewards, dones, infos = self._step_all(actions)
        finished = self._count(rewards, dones, infos)
        # A sub-environment that ended resets on this step (same-step) or the next (next-step): either way its next
        # episode is fresh only for one step; left unassigned it runs an episode nobody counts.
        self._fresh[:] = False
        if self._pending.any():
            pending = np.flatnonzero(self._pending).tolist()
            self._pending[:] = False
            self._run(pending)  # this step's observation was the reset one
        self._fresh[dones] = True
        self._fresh[self.running] = False
        return finished

    def stop(self, slots: list[int]) -> None:
        self._pending[slots] = False
        super().stop(slots)


def _index_observation(observations: Any, slot: int) -> Any:
    if isinstance(observations, dict):
        return {key: _index_observation(value, slot) for key, value in observations.items()}
    if isinstance(observations, tuple):
        return tuple(_index_observation(value, slot) for value in observations)
    return observations[slot]


def peel_monitors(env: VecEnv | GymVectorEnv) -> VecEnv | GymVectorEnv:
    """
    :param env: A vectorised environment.
    :return: What is below its outer ``VecMonitor`` wrappers: they only record episode statistics, which the
        evaluation computes itself.
    """
    while isinstance(env, VecMonitor):
        env = env.venv
    return env


def make_slot_env(env: VecEnv | GymVectorEnv, original_reward: VecNormalize | None = None) -> SlotEnv:
    """
    Pick the fastest exact driver for ``env``.

    :param env: A Stable-Baselines3 ``VecEnv`` or a gymnasium ``VectorEnv``.
    :param original_reward: A ``VecNormalize`` inside ``env`` whose original rewards to count.
    :return: :class:`EnvListSlots` for a ``DummyVecEnv`` (under ``VecMonitor`` wrappers only) or a
        ``SyncVectorEnv``; :class:`WaveSlots` for other ``VecEnv`` and for ``AsyncVectorEnv``;
        :class:`AutoresetSlots` for other gymnasium vector environments.
    """
    inner = peel_monitors(env)
    if isinstance(inner, DummyVecEnv | SyncVectorEnv) and original_reward is None:
        return EnvListSlots(list(inner.envs))
    if isinstance(env, VecEnv | AsyncVectorEnv):
        return WaveSlots(env, original_reward)
    if env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) == AutoresetMode.DISABLED:
        raise ValueError(
            f"{type(env).__name__} disables autoreset and cannot reset its sub-environments one by one with a seed "
            "each; wrap its sub-environments in a SyncVectorEnv or a DummyVecEnv instead"
        )
    return AutoresetSlots(env)
