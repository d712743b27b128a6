"""How many episodes workers may have under way, so that none is too old by the time the trainer uses it."""

from __future__ import annotations

import math
from collections import deque

#: Episode lengths the budget averages over.
LENGTH_WINDOW = 20


class InFlightBudget:
    """
    Back-pressure tied to the lag bound (Sample Factory's ``max_policy_lag``, for whole episodes): a worker may
    have begun at most :meth:`per_worker` episodes that the assembler has not received. When the trainer is the
    bottleneck, workers then wait for newer weights instead of acting out episodes that would be dropped as stale.

    A rollout of ``target_steps`` takes about ``K = ceil(target_steps / mean episode length)`` episodes. One rollout
    trains while the next waits to be taken; ``max_policy_lag - 1`` more rollouts' worth of episodes in flight is
    then the most that is still within the bound when it is assembled.

    :param max_policy_lag: The collection's lag bound, in weight versions.
    :param target_steps: Steps of a rollout.
    :param n_workers: Number of workers the budget is shared among.
    """

    def __init__(self, max_policy_lag: int, target_steps: int, n_workers: int) -> None:
        self.max_policy_lag = max_policy_lag
        self.target_steps = target_steps
        self.n_workers = n_workers
        self._lengths: deque[int] = deque(maxlen=LENGTH_WINDOW)

    def record(self, length: int) -> None:
        """:param length: The length of an episode received."""
        self._lengths.append(length)

    def per_worker(self) -> int | None:
        """:return: Episodes each worker may have in flight; None (no bound) until an episode was received."""
        if not self._lengths:
            return None
        episodes_per_rollout = math.ceil(self.target_steps / (sum(self._lengths) / len(self._lengths)))
        in_flight = max(1, (self.max_policy_lag - 1) * episodes_per_rollout)
        return max(1, in_flight // self.n_workers)
