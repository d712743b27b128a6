"""Short runs of ``benchmarks/chaos.py`` on Ray: actors killed (``ray.kill``) while ARS trains on AsyncEval, and an
injected PPO past its restart budget."""

from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="the Ray backend's tests need Ray: pip install 'lit_sb3[ray]'")
from test_chaos import load_chaos


def test_ars_on_ray_actors_killed_at_random_ends_with_the_undisturbed_weights() -> None:
    # The first actor ready is killed within 0.15 s; 30 rounds of Pendulum outlast that on an idle machine too (an actor
    # takes seconds to start, the rounds well under a second on two ready ones).
    outcome = load_chaos().ars_case("ray", 0.0, 0.1, seed=0, rounds=30, max_kills=1)
    assert outcome.kills >= 1 and outcome.passed, outcome
    assert "bit-identical" in outcome.result


@pytest.mark.slow  # three actors killed, two replaced: a minute on a busy machine
def test_an_injected_ppo_on_ray_past_its_restart_budget_fails_clearly_within_seconds() -> None:
    chaos = load_chaos()
    outcome = chaos.exhausted_case("ppo", "ray", seed=0)
    assert outcome.passed, outcome
    assert outcome.kills > chaos.TIGHT_RESTARTS and outcome.seconds < chaos.FAILURE_DEADLINE
