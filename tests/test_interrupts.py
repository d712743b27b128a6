"""Ctrl-C at random moments: SIGINT sent at seeded random delays into ``learn()`` of ARS on an AsyncEval and of an
injected PPO, and into ``AsyncRLEngine.run()``, all on worker processes: 20 times in all in the default run, 20 times
each with ``-m slow``. Each interrupt raises KeyboardInterrupt from the call, the object is still usable (a short run
after it trains), and once closed no process, thread or shared-memory segment is left."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch as th
from sb3_contrib.ars.policies import LinearPolicy

from fixture_envs import scalar_vec_env
from lit_sb3 import ARS, AsyncEval

REPO = Path(__file__).resolve().parents[1]
#: Longest delay between the start of a call and its SIGINT (seconds): from the call's first steps to deep in it.
MAX_DELAY = 0.8
#: Seconds the threads of a closed pool get to end (a writer thread finishing its last send; a leaked thread never
#: ends, and a closing pool on a machine at load 10 took more than 5 s).
THREAD_GRACE = 20.0

SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, os, signal, sys, threading, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job starts with it ignored
    from functools import partial
    import gymnasium as gym
    import psutil
    from sb3_contrib.ars.policies import LinearPolicy
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from lit_sb3 import ARS, AsyncEval
    from lit_sb3.agents.async_agent import get_injected_agent
    from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup
    from lit_sb3.envs.multi_env import IndexableMultiEnv
    from lit_sb3.workers import shared_array

    created = []  # every shared-memory segment this process makes
    original = shared_array.SharedArray.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        created.append(self.handle.name)

    shared_array.SharedArray.__init__ = recording

    def pendulum():
        return VecNormalize(make_vec_env("Pendulum-v1", n_envs=4), norm_reward=False)

    def build(target):
        ''':return: The call to interrupt, a short call that must then work, and what closes everything.'''
        if target == "ars":
            model = ARS(LinearPolicy, pendulum(), n_delta=8, seed=0)
            async_eval = AsyncEval([pendulum] * 2, model.policy)
            return (
                lambda: model.learn(10**9, async_eval=async_eval),
                lambda: model.learn(1, async_eval=async_eval, reset_num_timesteps=False),
                async_eval.close,
            )
        if target == "ppo":
            env = IndexableMultiEnv([partial(gym.make, "CartPole-v1") for _ in range(4)])
            agent = get_injected_agent(PPO)(
                "MlpPolicy", env, use_mp=True, n_workers=2, n_steps=64, batch_size=64, n_epochs=1, seed=0
            )
            return (
                lambda: agent.learn(10**9, reset_num_timesteps=False),
                lambda: agent.learn(64, reset_num_timesteps=False),
                agent.shutdown,
            )
        group = EnvGroup([partial(gym.make, "CartPole-v1") for _ in range(4)], backend="processes", n_workers=2)
        model = PPO("MlpPolicy", group.env, n_steps=64, batch_size=64, n_epochs=1, seed=0)
        endless = EngineConfig(total_env_steps=10**9, verbose=False, log_formats=())
        engine = AsyncRLEngine(endless, group, PolicyGroup(model), DataBuffer.for_algorithm(model))

        def short_run():
            engine.config = dataclasses.replace(endless, total_env_steps=engine.num_timesteps + 256)
            try:
                engine.run()
            finally:
                engine.config = endless

        return engine.run, short_run, engine.close

    if __name__ == "__main__":
        call, short_call, close = build(sys.argv[1])
        outcomes = []
        for index in range({interrupts}):
            try:
                print("go", index, flush=True)
                call()
                outcomes.append("returned")
            except KeyboardInterrupt:
                outcomes.append("interrupted")
            print("stopped", index, flush=True)
            short_call()  # usable after the interrupt
        close()
        deadline = time.monotonic() + {thread_grace}
        while True:
            threads = [thread.name for thread in threading.enumerate() if thread.name.startswith("lit-sb3")]
            if not threads or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        children = []
        for process in psutil.Process().children(recursive=True):
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    children.append(" ".join(process.cmdline()))
            except psutil.Error:
                pass
        left = [name for name in created if os.path.exists(os.path.join("/dev/shm", name))]
        print("report", json.dumps({{
            "outcomes": outcomes, "threads": threads, "children": children, "segments": len(created), "left": left
        }}), flush=True)
    """
)


def is_multiprocessing_helper(command: str) -> bool:
    return "forkserver" in command or "resource_tracker" in command


@pytest.mark.parametrize(("target", "interrupts"), [("ars", 7), ("ppo", 7), ("engine", 6)])
def test_ctrl_c_at_random_moments_leaves_the_object_usable_and_nothing_behind(target: str, interrupts: int) -> None:
    interrupt_at_random(target, interrupts)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ars", "ppo", "engine"])
def test_twenty_ctrl_c_at_random_moments_leave_the_object_usable_and_nothing_behind(target: str) -> None:
    interrupt_at_random(target, 20)


def interrupt_at_random(target: str, interrupts: int) -> None:
    delays = random.Random(f"interrupts-{target}-{interrupts}")
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT.format(interrupts=interrupts, thread_grace=THREAD_GRACE), target],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    descendants: set[int] = set()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("go"):
                time.sleep(delays.uniform(0.0, MAX_DELAY))
                descendants |= {child.pid for child in psutil.Process(process.pid).children(recursive=True)}
                os.kill(process.pid, signal.SIGINT)
            elif line.startswith("report"):
                report = json.loads(line.split(" ", 1)[1])
                break
        else:
            pytest.fail(f"the script ended without its report:\n{process.communicate(timeout=30)[1]}")
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # a hang fails this test only: nothing is left for the next ones
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert report["outcomes"] == ["interrupted"] * interrupts
    assert report["threads"] == []
    assert [command for command in report["children"] if not is_multiprocessing_helper(command)] == []
    assert report["segments"] > 0 and report["left"] == []
    assert "leaked" not in stderr and "Traceback" not in stderr, stderr
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in descendants):
        time.sleep(0.1)
    alive = [pid for pid in descendants if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert alive == [], "processes of the script outlived it"


def ars_weights(interrupt_round: int | None) -> np.ndarray:
    """:return: ARS's weights after 6 rounds on an AsyncEval, with a Ctrl-C while waiting for round
    ``interrupt_round`` (then ``learn()`` again)."""
    model = ARS(LinearPolicy, scalar_vec_env(normalize=True), n_delta=2, seed=0)
    with AsyncEval([lambda: scalar_vec_env(normalize=True)] * 2, model.policy) as async_eval:
        finish_round = async_eval._finish_round
        waits = []

        def interrupted_once() -> list:
            waits.append(len(waits))
            if len(waits) - 1 == interrupt_round:
                raise KeyboardInterrupt  # as Ctrl-C does while get_results() waits: the round stays pending
            return finish_round()

        async_eval._finish_round = interrupted_once  # type: ignore[method-assign]
        budget = 6 * 4 * 20  # 6 rounds of 4 candidates of 20 steps
        if interrupt_round is not None:
            with pytest.raises(KeyboardInterrupt):
                model.learn(budget, async_eval=async_eval)
            assert async_eval.pending_round is not None
            model.learn(budget - model.num_timesteps, async_eval=async_eval, reset_num_timesteps=False)
        else:
            model.learn(budget, async_eval=async_eval)
        assert model.num_timesteps == budget
    return th.nn.utils.parameters_to_vector(model.policy.parameters()).detach().numpy()


def test_learn_after_a_ctrl_c_collects_the_round_left_running_and_ends_as_an_uninterrupted_run() -> None:
    np.testing.assert_array_equal(ars_weights(interrupt_round=3), ars_weights(interrupt_round=None))


def test_a_ctrl_c_as_the_collection_starts_its_assembler_leaves_no_worker_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from lit_sb3.agents.async_agent import get_injected_agent
    from lit_sb3.collection.assembler import EpisodeAssembler

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # the pool is up, the assembler not yet

    threads_before = set(threading.enumerate())
    agent = get_injected_agent(PPO)("MlpPolicy", make_vec_env("CartPole-v1", 2), use_mp=True, n_steps=32, batch_size=32)
    try:
        monkeypatch.setattr(EpisodeAssembler, "__init__", interrupted)
        with pytest.raises(KeyboardInterrupt):
            agent.learn(64)
        monkeypatch.undo()
        deadline = time.monotonic() + THREAD_GRACE
        while not set(threading.enumerate()) <= threads_before:  # the pool's dispatcher and writers ended
            assert time.monotonic() < deadline, sorted(thread.name for thread in threading.enumerate())
            time.sleep(0.05)
        agent.learn(64)  # and the agent starts its collection again
        assert agent.num_timesteps == 64
    finally:
        agent.shutdown()
