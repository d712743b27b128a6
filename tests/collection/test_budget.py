"""The in-flight budget: how many episodes the workers may have begun and the assembler not received."""

from __future__ import annotations

import pytest

from lit_sb3.collection.budget import InFlightBudget


def shares(budget: InFlightBudget) -> list[int | None]:
    return [budget.per_worker(worker) for worker in range(budget.n_workers)]


def test_no_bound_until_an_on_policy_episode_arrived() -> None:
    budget = InFlightBudget(max_policy_lag=4, target_steps=256, n_workers=2, n_envs=8)
    assert budget.total() is None
    assert shares(budget) == [None, None]


@pytest.mark.parametrize(
    ("max_policy_lag", "episode_length", "total"),
    [
        (4, 500, 3),  # episodes longer than a rollout: one per rollout, (4 - 2) * 1 + 1
        (4, 100, 7),  # three episodes a rollout: (4 - 2) * 3 + 1
        (2, 100, 2),  # (2 - 2) * 3 + 1 = 1, but every worker may begin one
        (None, 100, 6),  # no bound: two rollouts' worth
    ],
)
def test_the_total_keeps_episodes_within_the_lag_bound(
    max_policy_lag: int | None, episode_length: int, total: int
) -> None:
    budget = InFlightBudget(max_policy_lag=max_policy_lag, target_steps=256, n_workers=2, n_envs=8)
    budget.record(episode_length)
    assert budget.total() == total
    worker_shares = shares(budget)
    assert sum(worker_shares) == total  # type: ignore[arg-type]
    assert max(worker_shares) - min(worker_shares) <= 1  # type: ignore[type-var,operator]


@pytest.mark.parametrize("max_policy_lag", [None, 1, 4])
def test_every_worker_may_begin_an_episode(max_policy_lag: int | None) -> None:
    budget = InFlightBudget(max_policy_lag=max_policy_lag, target_steps=256, n_workers=7, n_envs=8)
    budget.record(500)  # one episode a rollout: fewer episodes wanted in flight than there are workers
    assert shares(budget) == [1] * 7


def test_the_total_follows_the_recent_episode_lengths() -> None:
    budget = InFlightBudget(max_policy_lag=4, target_steps=256, n_workers=2, n_envs=8)
    for _ in range(30):
        budget.record(20)
    assert budget.total() == 2 * 13 + 1
    for _ in range(30):  # the policy got better: longer episodes, fewer of them a rollout
        budget.record(500)
    assert budget.total() == 3


def test_off_policy_every_environment_may_run_one_episode() -> None:
    budget = InFlightBudget(max_policy_lag=None, target_steps=None, n_workers=2, n_envs=5)
    assert budget.total() == 5
    assert shares(budget) == [3, 3]  # the most environments any worker runs
