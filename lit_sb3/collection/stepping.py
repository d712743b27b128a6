"""How a collection worker steps its environments: one after the other, or at the same time in threads once their
steps are measured to be slow (sleeps, I/O, simulators that release the GIL), so that a worker running ``k`` slow
environments waits for one step, not ``k``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np

#: Mean seconds of one ``env.step`` from which a worker steps its environments in threads. A thread hand-off costs
#: tens of microseconds: below this the environments step faster one after the other.
CONCURRENT_STEP_SECONDS = 3e-4
#: Environment steps timed one after the other before the choice is made.
PROBE_STEPS = 64

#: What one ``env.step`` returns, or the exception it raised.
StepOutcome = tuple[Any, Any, Any, Any, dict[str, Any]] | Exception


def _step(env: gym.Env, action: Any) -> StepOutcome:
    try:
        return env.step(action)
    except Exception as exc:
        return exc


class EnvStepper:
    """
    Steps several environments with one action each.

    :param concurrent_step_seconds: Mean step time from which environments step in threads; None never.
    :param probe_steps: Steps timed before the choice.
    """

    def __init__(
        self, concurrent_step_seconds: float | None = CONCURRENT_STEP_SECONDS, probe_steps: int = PROBE_STEPS
    ) -> None:
        self.concurrent_step_seconds = concurrent_step_seconds
        self.probe_steps = probe_steps
        self._timed_steps = 0
        self._timed_seconds = 0.0
        self._executor: ThreadPoolExecutor | None = None
        #: Whether the steps were measured fast (below ``concurrent_step_seconds``): they step one after the other.
        self.fast = False

    @property
    def concurrent(self) -> bool:
        """Whether the environments step in threads."""
        return self._executor is not None

    def step(self, envs: Sequence[gym.Env], actions: Sequence[Any] | np.ndarray) -> list[StepOutcome]:
        """
        :param envs: The environments.
        :param actions: One action per environment.
        :return: What each ``env.step`` returned, or the exception it raised, in order.
        """
        if self._executor is not None and len(envs) > 1:
            return list(self._executor.map(_step, envs, actions))
        threshold = self.concurrent_step_seconds
        if self._executor is not None or threshold is None:  # chosen: nothing more to time
            return [_step(env, action) for env, action in zip(envs, actions, strict=True)]
        outcomes: list[StepOutcome] = []
        for env, action in zip(envs, actions, strict=True):
            started = time.perf_counter()
            outcomes.append(_step(env, action))
            self._timed_seconds += time.perf_counter() - started
        self._timed_steps += len(envs)
        if self._timed_steps >= self.probe_steps:
            self._choose(len(envs), threshold)
        return outcomes

    def close(self) -> None:
        """Stop the threads, if any."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _choose(self, n_envs: int, threshold: float) -> None:
        """Fast steps: one after the other from now on. Slow ones: in threads once there are several environments
        (a single one goes on being timed)."""
        if self._timed_seconds / self._timed_steps < threshold:
            self.concurrent_step_seconds = None  # decided: one after the other
            self.fast = True
        elif n_envs > 1:
            self._executor = ThreadPoolExecutor(max_workers=n_envs, thread_name_prefix="lit-sb3-env-step")
