"""Short runs of ``benchmarks/chaos.py``: workers killed at random while ARS, an injected PPO and the async engine
train on worker processes; past the restart budget, a clear error within seconds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import cloudpickle
import pytest

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
    outcome = load_chaos().ars_case("local", 0.0, INTERVAL, seed=0, rounds=20)
    check_survived(outcome)
    assert "bit-identical" in outcome.result


def test_an_injected_ppo_under_kills_completes_its_training() -> None:
    # A budget of 3 s of undisturbed training on this machine: several kills whatever its speed.
    outcome = load_chaos().ppo_case("local", 3.0, INTERVAL, seed=0)
    check_survived(outcome)
    assert outcome.resumed >= 1 and outcome.dropped == 0


def test_the_async_engine_under_kills_completes_its_run() -> None:
    outcome = load_chaos().engine_case("local", 0.0, INTERVAL, seed=0, budget=6000)
    check_survived(outcome)
    assert outcome.dropped == 0


@pytest.mark.parametrize("kind", ["ars", "ppo", "engine"])
def test_past_the_restart_budget_the_run_fails_clearly_within_seconds(kind: str) -> None:
    chaos = load_chaos()
    outcome = chaos.exhausted_case(kind, "local", seed=0)
    assert outcome.passed, outcome
    assert outcome.kills > chaos.TIGHT_RESTARTS and outcome.seconds < chaos.FAILURE_DEADLINE
