"""A failure in any engine thread stops the run and reaches the caller with its traceback within 2 s; one in a
worker stops training and reaches the caller with the worker's traceback; nothing is left behind; a worker that dies
is replaced and training goes on."""

from __future__ import annotations

import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from stable_baselines3 import PPO

from engine.helpers import engine_threads, small_ppo_engine, small_sac_engine, worker_processes
from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup
from lit_sb3.workers.errors import WorkerError

#: The step method each thread runs, and whose failure the test injects.
THREAD_STEPS = {
    "rollout": "_rollout_step",
    "dataset": "_prepare_dataset",
    "train": "_train_step",
    "weight_sync": "_publish",
    "evaluate": "_evaluate",
}


class BrokenStepError(RuntimeError):
    """Raised on purpose in an engine thread."""


def engine_failing_in(method: str, at_call: int) -> type[AsyncRLEngine]:
    """:return: An engine whose ``method`` raises on its ``at_call``-th call (remembering when)."""

    class FailingEngine(AsyncRLEngine):
        calls = 0
        raised_at = 0.0

        def _fail_or_run(self, *args: Any) -> Any:
            FailingEngine.calls += 1
            if FailingEngine.calls == at_call:
                FailingEngine.raised_at = time.monotonic()
                raise BrokenStepError(f"{method} broke on purpose")
            return getattr(AsyncRLEngine, method)(self, *args)

    setattr(FailingEngine, method, FailingEngine._fail_or_run)
    return FailingEngine


@pytest.mark.parametrize("thread", list(THREAD_STEPS))
@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_an_exception_in_any_thread_is_raised_from_run_with_its_traceback_within_2_s(
    thread: str, algorithm: str
) -> None:
    engine_class = engine_failing_in(THREAD_STEPS[thread], at_call=3)
    make = small_ppo_engine if algorithm == "ppo" else small_sac_engine
    engine = make(engine_class, total_env_steps=10**6, eval_interval=1, eval_episodes=1)
    with pytest.raises(BrokenStepError, match="broke on purpose") as caught:
        engine.run()
    assert time.monotonic() - engine_class.raised_at < 2.0
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "_fail_or_run" in frames and "_guarded" in frames  # raised in the thread, traceback kept
    assert engine_threads() == []


def test_a_failure_of_the_evaluation_due_at_the_end_of_the_budget_is_raised() -> None:
    """The one evaluation comes due as the budget is spent: done by the evaluation thread or after it, never dropped."""
    engine_class = engine_failing_in("_evaluate", at_call=1)
    engine = small_ppo_engine(engine_class, total_env_steps=2000, eval_interval=2000, eval_episodes=1)
    with pytest.raises(BrokenStepError, match="broke on purpose") as caught:
        engine.run()
    assert "_fail_or_run" in [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert engine_threads() == []


class TrainStepClock(AsyncRLEngine):
    """Records when each train step begins (``time.time()``: the workers' environments write the same clock)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.train_step_starts: list[float] = []

    def _train_step(self) -> None:
        self.train_step_starts.append(time.time())
        super()._train_step()


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_an_env_exception_in_a_worker_stops_the_run_and_is_raised_with_the_worker_traceback(
    backend: str, tmp_path: Path
) -> None:
    from engine.engine_envs import FailingCartPole

    marker = tmp_path / "failed-at"
    group = EnvGroup([partial(FailingCartPole, fail_at=300, marker=str(marker))], backend=backend)
    model = PPO("MlpPolicy", group.env, n_steps=16, batch_size=16, n_epochs=1)
    # A lag bound of 2 leaves one episode in flight a worker (see InFlightBudget): the failing episode began before
    # at most 2 more train steps could start, whatever the load.
    config = EngineConfig(total_env_steps=10**6, max_policy_lag=2, verbose=False, log_formats=())
    engine = TrainStepClock(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))
    with pytest.raises(WorkerError, match="the environment broke on purpose") as caught:
        engine.run()
    failed_at = float(marker.read_text())
    # Training stops on the failure: after it, only train steps on rollouts collected before it began (the one
    # being prepared and the one taken for the next), never one on data collected after it.
    assert len([started for started in engine.train_step_starts if started > failed_at]) <= 2
    assert engine.collected_steps < 300  # every step trained on came before the failing one
    assert caught.value.exception_type == "RuntimeError"
    assert "in step" in caught.value.remote_traceback
    assert engine_threads() == []
    assert worker_processes() == []


def test_a_dead_worker_is_replaced_and_training_goes_on(tmp_path: Path) -> None:
    from engine.engine_envs import FailingCartPole

    group = EnvGroup(
        [partial(FailingCartPole, kill_at=200, marker=str(tmp_path / "killed"))], backend="processes", max_restarts=2
    )
    model = PPO("MlpPolicy", group.env, n_steps=64, batch_size=64, n_epochs=1)
    config = EngineConfig(total_env_steps=2000, verbose=False, log_formats=())
    engine = AsyncRLEngine(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))
    summary = engine.run()
    assert summary["worker_restarts"] == 1
    assert engine.num_timesteps >= 2000
    assert worker_processes() == []
