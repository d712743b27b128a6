"""Small environments for the async-collection tests; pickled by value into workers."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.noise import ActionNoise


class OddEnv(gym.Env):
    """
    Episodes of ``length`` steps (odd by default), a one-dimensional observation counting the steps and a Box action.
    ``fail_at`` makes the ``fail_at``-th step of the process raise; ``kill_at`` SIGKILLs the process at that step;
    given a ``marker``, either happens once (while ``marker`` does not exist).
    """

    def __init__(self, length: int = 7, fail_at: int = -1, kill_at: int = -1, marker: str | None = None) -> None:
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
        self.length = length
        self.fail_at = fail_at
        self.kill_at = kill_at
        self.marker = marker
        self.t = 0
        self.total_steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.total_steps += 1
        if self.total_steps == self.fail_at and self._first_time():
            raise RuntimeError("the environment broke on purpose")
        if self.total_steps == self.kill_at and self.marker is not None and self._first_time():
            os.kill(os.getpid(), signal.SIGKILL)
        reward = -float(np.square(action).sum())
        return np.array([self.t], np.float32), reward, False, self.t >= self.length, {"t": self.t}

    def _first_time(self) -> bool:
        if self.marker is None:
            return True
        if Path(self.marker).exists():
            return False
        Path(self.marker).touch()
        return True


class SeedLoggingEnv(OddEnv):
    """An :class:`OddEnv` that appends the seed of every reset to the file ``log``."""

    def __init__(self, log: str) -> None:
        super().__init__()
        self.log = log

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        with open(self.log, "a") as file:
            file.write(f"{seed}\n")
        return super().reset(seed=seed, options=options)


class AlternatingNoise(ActionNoise):
    """+10, -10, +10... from its last reset: clipped into the scaled action, it shows who calls and resets it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __call__(self) -> np.ndarray:
        self.calls += 1
        return np.array([10.0 if self.calls % 2 else -10.0], np.float32)

    def reset(self) -> None:
        self.calls = 0


class LockedEnv(OddEnv):
    """An :class:`OddEnv` holding a handle that cannot be pickled (as a simulator connection would)."""

    def __init__(self, length: int = 7) -> None:
        super().__init__(length)
        self.handle = threading.Lock()


class SleepyOddEnv(OddEnv):
    """An :class:`OddEnv` whose steps take 2 ms (so that a background stepper is caught in the act)."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(0.002)
        return super().step(action)


class CueEnv(gym.Env):
    """
    Each step shows two random bits (the cue) and rewards the action that names them: 1 for each bit named right,
    halved (``box``: minus the mean square distance to the cue as -1/+1). Episodes of ``length`` steps.

    :param observation: ``"dict"``: ``{"cue": MultiBinary(2), "t": Box}`` with the step index in ``"t"``;
        ``"multi_binary"``: the cue alone.
    :param action: ``"discrete"`` (Discrete(4), the cue as a number), ``"multi_discrete"``, ``"multi_binary"``
        or ``"box"``.
    """

    def __init__(self, observation: str = "dict", action: str = "multi_discrete", length: int = 8) -> None:
        cue = spaces.MultiBinary(2)
        self.observation_space: spaces.Space = (
            spaces.Dict({"cue": cue, "t": spaces.Box(0.0, float(length), shape=(1,), dtype=np.float32)})
            if observation == "dict"
            else cue
        )
        self.action_space: spaces.Space = {
            "discrete": spaces.Discrete(4),
            "multi_discrete": spaces.MultiDiscrete([2, 2]),
            "multi_binary": spaces.MultiBinary(2),
            "box": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
        }[action]
        self.length = length
        self.t = 0
        self.cue = np.zeros(2, dtype=np.int8)

    def reward(self, cue: np.ndarray, action: Any) -> float:
        """:return: The reward of ``action`` where the cue was ``cue``."""
        if isinstance(self.action_space, spaces.Box):
            return -float(np.mean((np.asarray(action) - (2.0 * cue - 1.0)) ** 2))
        if isinstance(self.action_space, spaces.Discrete):
            named = np.array([int(action) // 2, int(action) % 2])
        else:
            named = np.asarray(action)
        return float(np.mean(named == cue))

    def _observation(self) -> Any:
        self.cue = self.np_random.integers(0, 2, size=2).astype(np.int8)
        if isinstance(self.observation_space, spaces.Dict):
            return {"cue": self.cue.copy(), "t": np.array([self.t], dtype=np.float32)}
        return self.cue.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        reward = self.reward(self.cue, action)
        self.t += 1
        return self._observation(), reward, False, self.t >= self.length, {}
