"""What a long run must not pile up: shared-memory segments per round, threads or shared environments per
create/learn/shutdown cycle (the short checks of ``benchmarks/soak.py``)."""

from __future__ import annotations

import gc
import pathlib
import threading
from multiprocessing import shared_memory
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from sb3_contrib.ars.policies import LinearPolicy
from stable_baselines3 import PPO

from fixture_envs import scalar_vec_env
from lit_sb3 import AsyncEval, get_injected_agent
from lit_sb3.collection import envs
from lit_sb3.envs.multi_env import IndexableMultiEnv

SHM = pathlib.Path("/dev/shm")
pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="shared-memory segments are files of /dev/shm on Linux only")


@pytest.fixture
def created_segments(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The names of the shared-memory segments this process creates during the test."""
    names: set[str] = set()

    class Recording(shared_memory.SharedMemory):
        def __init__(self, name: str | None = None, create: bool = False, size: int = 0, **kwargs: Any) -> None:
            super().__init__(name, create, size, **kwargs)
            if create:
                names.add(self.name)

    monkeypatch.setattr(shared_memory, "SharedMemory", Recording)
    return names


def in_dev_shm(names: set[str]) -> set[str]:
    return {name for name in names if (SHM / name.lstrip("/")).exists()}


def test_async_eval_rounds_reuse_their_segments_and_close_unlinks_them(
    scalar_policy: LinearPolicy, created_segments: set[str]
) -> None:
    weights = np.random.default_rng(0).normal(size=(16, 2)).astype(np.float32)
    with AsyncEval([scalar_vec_env] * 2, scalar_policy) as async_eval:
        async_eval.seed(0)
        async_eval.send_jobs(weights, pop_size=16)
        async_eval.get_results()
        after_one_round = set(created_segments)
        for _ in range(5):
            async_eval.send_jobs(weights, pop_size=16)
            async_eval.get_results()
        assert created_segments == after_one_round and in_dev_shm(created_segments) == after_one_round
    assert after_one_round and in_dev_shm(created_segments) == set()


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def learn_and_shut_down(seed: int, **agent_kwargs: Any) -> None:
    model = get_injected_agent(PPO)(
        "MlpPolicy", IndexableMultiEnv([cartpole] * 2), n_steps=32, batch_size=32, n_epochs=1, seed=seed,
        **agent_kwargs,
    )  # fmt: skip
    try:
        model.learn(64)
    finally:
        model.shutdown()


def test_thread_agent_cycles_leave_no_thread_and_no_shared_environment_behind() -> None:
    learn_and_shut_down(0)  # the first cycle may start what the process keeps (torch's own threads)
    gc.collect()
    threads, shared = set(threading.enumerate()), len(envs._shared)
    for seed in range(1, 4):
        learn_and_shut_down(seed)
    gc.collect()
    assert set(threading.enumerate()) <= threads
    assert len(envs._shared) == shared  # the registry of environments lent to thread workers lets go of them


def test_process_agent_cycles_unlink_every_segment_they_create(created_segments: set[str]) -> None:
    for seed in range(2):
        learn_and_shut_down(seed, use_mp=True)
        assert in_dev_shm(created_segments) == set()
    assert created_segments  # weights and progress travel through shared memory
