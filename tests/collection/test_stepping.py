"""Environments stepped one after the other or, once measured slow, at the same time in threads."""

from __future__ import annotations

import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from lit_sb3.collection.stepping import EnvStepper


class Probe(gym.Env):
    """Returns its own index as observation; sleeps, fails or waits at a barrier as told."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int, seconds: float = 0.0, barrier: threading.Barrier | None = None) -> None:
        self.index, self.seconds, self.barrier = index, seconds, barrier
        self.fail = False

    def step(self, action: Any) -> Any:
        if self.fail:
            raise RuntimeError(f"env {self.index} failed")
        if self.seconds:
            time.sleep(self.seconds)
        if self.barrier is not None:
            self.barrier.wait(timeout=5)  # every environment is inside step() at once, or this breaks
        return np.array([self.index], np.float32), float(action), False, False, {"index": self.index}


def test_slow_environments_step_at_the_same_time_once_measured() -> None:
    envs = [Probe(index, seconds=0.002) for index in range(4)]
    stepper = EnvStepper(probe_steps=8)
    try:
        for _ in range(2):  # 8 timed steps: the choice is made
            stepper.step(envs, [1] * 4)
        assert stepper.concurrent
        barrier = threading.Barrier(4)
        for env in envs:
            env.seconds, env.barrier = 0.0, barrier
        outcomes = stepper.step(envs, [0, 1, 0, 1])
        assert [outcome[4]["index"] for outcome in outcomes] == [0, 1, 2, 3]  # type: ignore[index]
        assert [outcome[1] for outcome in outcomes] == [0.0, 1.0, 0.0, 1.0]  # type: ignore[index]
        assert not barrier.broken
    finally:
        stepper.close()
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("lit-sb3-env-step")]


def test_fast_environments_step_one_after_the_other() -> None:
    envs = [Probe(index) for index in range(4)]
    stepper = EnvStepper(probe_steps=8)
    assert not stepper.fast  # not measured yet
    for _ in range(4):
        stepper.step(envs, [0] * 4)
    assert not stepper.concurrent and stepper.fast


@pytest.mark.parametrize("seconds", [0.0, 0.002])
def test_a_single_environment_is_measured_too(seconds: float) -> None:
    stepper = EnvStepper(probe_steps=4)
    for _ in range(4):
        stepper.step([Probe(0, seconds)], [0])
    assert stepper.fast == (seconds == 0.0) and not stepper.concurrent


@pytest.mark.parametrize("concurrent", [False, True])
def test_an_environment_failure_is_returned_in_its_place(concurrent: bool) -> None:
    envs = [Probe(index, seconds=0.001 if concurrent else 0.0) for index in range(3)]
    stepper = EnvStepper(concurrent_step_seconds=0.0 if concurrent else None, probe_steps=3)
    try:
        stepper.step(envs, [0] * 3)
        assert stepper.concurrent == concurrent
        envs[1].fail = True
        outcomes = stepper.step(envs, [0] * 3)
        assert isinstance(outcomes[1], RuntimeError) and "env 1 failed" in str(outcomes[1])
        assert not isinstance(outcomes[0], Exception) and not isinstance(outcomes[2], Exception)
    finally:
        stepper.close()
