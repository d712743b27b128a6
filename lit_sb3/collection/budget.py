"""How many episodes workers may have under way, so that none is too old, or left over, by the time the trainer is
done with what came before it."""

from __future__ import annotations

import math
from collections import deque

#: Episode lengths the budget averages over.
LENGTH_WINDOW = 20
#: On-policy without a lag bound: rollouts' worth of episodes in flight (the next rollout, and one after it).
UNBOUNDED_ROLLOUTS_IN_FLIGHT = 2


class InFlightBudget:
    """
    Back-pressure tied to the lag bound (Sample Factory's ``max_policy_lag``, for whole episodes): the workers may
    have begun at most :meth:`total` episodes that the assembler has not received, shared out among them. When the
    trainer is the bottleneck, workers then wait for newer weights instead of acting out episodes that would be
    dropped as stale, or still be buffered when training ends.

    On-policy, a rollout of ``target_steps`` takes about ``K = ceil(target_steps / mean episode length)`` episodes.
    When an episode ``E`` begins, one rollout may be training, one waiting to be taken and ``K - 1`` episodes
    gathered; with ``B`` episodes in flight (``E`` among them), at most ``2 + floor((K + B - 2) / K)`` train steps
    end before ``E`` is received. ``B = (max_policy_lag - 2) K + 1`` is the most that keeps that within the bound
    (at least one episode per worker; without a bound: two rollouts' worth, enough to keep every environment of a
    slow-stepping worker busy). Off-policy, the trainer takes one episode at a time: each environment has at most
    one episode begun that the trainer has not acknowledged (as it takes it, or near its end: see
    :meth:`~lit_sb3.collection.collector.AsyncCollector.next_episode`).

    :param max_policy_lag: The collection's lag bound, in weight versions; None for none.
    :param target_steps: On-policy: steps of a rollout; None off-policy.
    :param n_workers: Number of workers the budget is shared among.
    :param n_envs: Number of environments.
    """

    def __init__(self, max_policy_lag: int | None, target_steps: int | None, n_workers: int, n_envs: int) -> None:
        self.max_policy_lag = max_policy_lag
        self.target_steps = target_steps
        self.n_workers = n_workers
        self.n_envs = n_envs
        self._lengths: deque[int] = deque(maxlen=LENGTH_WINDOW)

    def record(self, length: int) -> None:
        """:param length: The length of an episode received."""
        self._lengths.append(length)

    def total(self) -> int | None:
        """:return: Episodes all workers together may have in flight; None (no bound) until an on-policy episode
        arrived."""
        if self.target_steps is None:
            return self.n_envs
        if not self._lengths:
            return None
        episodes_per_rollout = math.ceil(self.target_steps / (sum(self._lengths) / len(self._lengths)))
        if self.max_policy_lag is None:
            wanted = UNBOUNDED_ROLLOUTS_IN_FLIGHT * episodes_per_rollout
        else:
            wanted = (self.max_policy_lag - 2) * episodes_per_rollout + 1
        return max(self.n_workers, wanted)  # every worker may begin one

    def per_worker(self, worker_index: int) -> int | None:
        """
        :param worker_index: The worker.
        :return: Episodes it may have in flight: its share of :meth:`total` (None: no bound yet); off-policy, one
            per environment of the most any worker runs.
        """
        if self.target_steps is None:
            return math.ceil(self.n_envs / self.n_workers)
        total = self.total()
        if total is None:
            return None
        return total // self.n_workers + (worker_index < total % self.n_workers)
