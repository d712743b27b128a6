"""Small environments that make a worker fail, hang, crash or report what it saw; pickled by value into workers."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize


class ScalarEnv(gym.Env):
    """
    One-dimensional toy task: the observation drifts with the action, the reward is the negative distance to 0.

    Episodes last ``length`` steps; with ``random_length`` the length is drawn from the reset seed (1 to
    ``length``); each step takes ``step_seconds`` at least. Options: ``{"start": x}`` sets the first observation.
    Hooks make it fail on purpose: when the action exceeds ``trigger`` in magnitude, it does ``on_trigger``
    ("raise", "sleep", "exit", "sigkill", "segfault", "interrupt"; the last three only while ``marker`` does not
    exist, and they create it first, so a replacement worker survives).
    """

    def __init__(
        self,
        length: int = 20,
        random_length: bool = False,
        trigger: float = np.inf,
        on_trigger: str = "raise",
        marker: str | None = None,
        log_dir: str | None = None,
        fail_reset: bool = False,
        step_seconds: float = 0.0,
    ) -> None:
        super().__init__()
        self.step_seconds = step_seconds
        self.observation_space = spaces.Box(-1e6, 1e6, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-1e6, 1e6, shape=(1,), dtype=np.float32)
        self.max_length = length
        self.random_length = random_length
        self.trigger = trigger
        self.on_trigger = on_trigger
        self.marker = marker
        self.fail_reset = fail_reset
        self._log = None if log_dir is None else Path(log_dir) / f"obs-{os.getpid()}-{id(self)}.npy"
        self._logged: list[np.ndarray] = []
        self._state = np.zeros(2, np.float32)
        self._t = 0
        self._length = length

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if self.fail_reset:
            raise RuntimeError("reset failed on purpose")
        start = float(options["start"]) if options and "start" in options else self.np_random.uniform(-1.0, 1.0)
        self._state = np.array([start, self.np_random.uniform(-1.0, 1.0)], np.float32)
        self._length = int(self.np_random.integers(1, self.max_length + 1)) if self.random_length else self.max_length
        self._t = 0
        return self._observe(terminal=False), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        value = float(np.asarray(action).reshape(-1)[0])
        time.sleep(self.step_seconds)
        if abs(value) > self.trigger:
            self._misbehave()
        self._state = np.array([self._state[0] + 0.1 * np.tanh(value), self._state[1] * 0.9], np.float32)
        self._t += 1
        truncated = self._t >= self._length
        reward = -abs(float(self._state[0]))
        return self._observe(terminal=truncated), reward, False, truncated, {}

    def _observe(self, terminal: bool) -> np.ndarray:
        observation = self._state.copy()
        if self._log is not None and not terminal:  # the policy acts on every observation but the terminal one
            self._logged.append(observation)
            np.save(self._log, np.asarray(self._logged))
        return observation

    def _misbehave(self) -> None:
        if self.on_trigger == "raise":
            raise ValueError("step failed on purpose")
        if self.on_trigger == "sleep":
            time.sleep(3600)
        if self.on_trigger == "exit":
            raise SystemExit(3)
        if self.marker is not None and Path(self.marker).exists():
            return
        if self.marker is not None:
            Path(self.marker).touch()
        if self.on_trigger == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.on_trigger == "segfault":
            ctypes.string_at(0)
        if self.on_trigger == "interrupt":
            raise KeyboardInterrupt


class BrokenEnv(gym.Env):
    """Raises while being built."""

    def __init__(self) -> None:
        raise RuntimeError("this environment cannot be built")


class LivesWrapper(gym.Wrapper):
    """
    Ends a "life" every ``life_length`` steps and scales rewards by ``reward_scale``, as Atari's ``EpisodicLifeEnv``
    and reward wrappers do outside a ``Monitor``: a reset without a seed after a lost life goes on from the last
    observation.
    """

    def __init__(self, env: gym.Env, life_length: int = 5, reward_scale: float = 10.0) -> None:
        super().__init__(env)
        self.life_length = life_length
        self.reward_scale = reward_scale
        self._steps = 0
        self._real_done = True
        self._last_observation: Any = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self._steps = 0
        if self._real_done or kwargs.get("seed") is not None:
            self._last_observation, info = self.env.reset(**kwargs)
            return self._last_observation, info
        return self._last_observation, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._last_observation, reward, terminated, truncated, info = self.env.step(action)
        self._real_done = terminated or truncated
        self._steps += 1
        life_lost = self._steps == self.life_length
        return self._last_observation, self.reward_scale * float(reward), terminated or life_lost, truncated, info


def scalar_vec_env(n_envs: int = 1, normalize: bool = False, **kwargs: Any) -> DummyVecEnv | VecNormalize:
    """
    :param n_envs: Sub-environments.
    :param normalize: Wrap in ``VecNormalize`` (observations only).
    :param kwargs: :class:`ScalarEnv` arguments.
    :return: The vectorised environment.
    """
    env = DummyVecEnv([lambda: Monitor(ScalarEnv(**kwargs)) for _ in range(n_envs)])
    return VecNormalize(env, norm_reward=False) if normalize else env


class FragilePolicy(ActorCriticPolicy):
    """An ``ActorCriticPolicy`` (so it runs on the torch path) that refuses weights whose first value is huge."""

    def load_from_vector(self, vector: np.ndarray) -> None:
        if vector[0] > 1e5:
            raise ValueError("these weights cannot be loaded")
        super().load_from_vector(vector)
