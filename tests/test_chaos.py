"""Short runs of ``benchmarks/chaos.py``: workers killed at random while ARS, an injected PPO and the async engine
train on worker processes, and at chosen moments of a reproducible PPO; past the restart budget, a clear error within
seconds."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from types import ModuleType

import cloudpickle
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

from lit_sb3 import WorkerDiedError

ROOT = Path(__file__).resolve().parents[1]
#: Mean seconds between two kills: several kills in runs of a few seconds.
INTERVAL = 0.6


def load_chaos() -> ModuleType:
    """:return: ``benchmarks/chaos.py`` as a module, pickled by value (its environment factories run in workers)."""
    if "chaos" not in sys.modules:
        spec = importlib.util.spec_from_file_location("chaos", ROOT / "benchmarks" / "chaos.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["chaos"] = module
        spec.loader.exec_module(module)
        cloudpickle.register_pickle_by_value(module)
    return sys.modules["chaos"]


def check_survived(outcome: object) -> None:
    assert outcome.kills >= 1, outcome  # type: ignore[attr-defined]
    assert outcome.passed, outcome  # type: ignore[attr-defined]


def test_ars_on_async_eval_under_kills_ends_with_the_undisturbed_weights() -> None:
    # As many rounds as 3 s of undisturbed training on this machine (20 ended in 0.9 s on a quiet one: no kill).
    outcome = load_chaos().ars_case("local", 3.0, INTERVAL, seed=0)
    check_survived(outcome)
    assert "bit-identical" in outcome.result


def test_an_injected_ppo_under_kills_completes_its_training() -> None:
    # A budget of 3 s of undisturbed training on this machine: several kills whatever its speed.
    outcome = load_chaos().ppo_case("local", 3.0, INTERVAL, seed=0)
    check_survived(outcome)
    assert outcome.resumed >= 1 and outcome.dropped == 0


class KillAtRolloutStart(BaseCallback):
    """
    SIGKILLs a worker process of the agent's pool as the trainer starts to wait for a rollout: it has just published
    new weights, and the workers may still be collecting the rollout before, which needs the weights before them.

    :param kills: Worker to kill at the start of each of these rollouts (numbered from 1).
    """

    def __init__(self, kills: dict[int, int]) -> None:
        super().__init__()
        self.kills = kills
        self.rollouts = 0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        self.rollouts += 1
        if self.rollouts in self.kills:
            handle = self.model._collector.pool.handles[self.kills[self.rollouts]]  # type: ignore[attr-defined]
            os.kill(handle.pid, signal.SIGKILL)


def reproducible_ppo_parameters(kills: dict[int, int], max_restarts: int) -> tuple[list[torch.Tensor], dict]:
    model = load_chaos().reproducible_ppo("local", max_restarts, seed=0)
    try:
        model.learn(96 * 8, callback=KillAtRolloutStart(kills))
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    return list(model.policy.parameters()), report


def test_reproducible_ppo_with_killed_workers_ends_with_the_undisturbed_parameters() -> None:
    expected, _ = reproducible_ppo_parameters({}, max_restarts=2)
    # Worker 0 runs environments 0 and 2: one resumes on its replacement, the other on worker 1.
    got, report = reproducible_ppo_parameters({3: 0, 5: 1}, max_restarts=2)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    assert report["worker"]["restarts"] == 2
    assert report["worker"]["episodes_resumed"] >= 3  # every task of the two workers killed
    assert report["trainer"]["train_calls"] >= 5  # rollouts collected after the last kill


def test_reproducible_ppo_killed_past_its_restart_budget_fails_clearly() -> None:
    with pytest.raises(WorkerDiedError, match=r"worker 1 \(pid \d+, killed by SIGKILL\) died.*max_restarts=1"):
        reproducible_ppo_parameters({3: 0, 5: 1}, max_restarts=1)


def test_the_async_engine_under_kills_completes_its_run() -> None:
    # A budget of 3 s of undisturbed training on this machine (6,000 steps took 0.8 s on a quiet one: no kill).
    outcome = load_chaos().engine_case("local", 3.0, INTERVAL, seed=0)
    check_survived(outcome)
    assert outcome.dropped == 0


@pytest.mark.parametrize("kind", ["ars", "ppo", "reproducible", "engine"])
def test_past_the_restart_budget_the_run_fails_clearly_within_seconds(kind: str) -> None:
    chaos = load_chaos()
    outcome = chaos.exhausted_case(kind, "local", seed=0)
    assert outcome.passed, outcome
    assert outcome.kills > chaos.TIGHT_RESTARTS and outcome.seconds < chaos.FAILURE_DEADLINE
