"""The synchronous engine: the same four parts, one phase after the other in the caller's thread."""

from __future__ import annotations

import time
from typing import Any

from lit_sb3.engine.base import BaseEngine


class SyncRLEngine(BaseEngine):
    """
    Runs rollout, dataset, train and weight sync one after the other in the caller's thread, on the same env group,
    policy group and buffer as :class:`~lit_sb3.engine.async_rl_engine.AsyncRLEngine`, so the two can be compared by
    switching the class.

    What differs from the algorithm's own ``learn()`` with one worker and a seed: on-policy, each environment's
    rollout share is complete episodes (at least ``n_steps`` steps) acted by the weights one train step behind, in
    lockstep (reproducible: two runs with one seed give the same weights); off-policy, the replay buffer receives
    whole episodes and the gradient steps they are owed (``replay_ratio`` per step) run once each episode is in,
    with the weights of the previous episode acting; episode resets are seeded from the config seed episode by
    episode.
    """

    def _lockstep(self) -> bool:
        return self.policy_group.on_policy

    def rollout(self) -> None:
        """Take the next rollout (on-policy) or episode (off-policy) into the buffer."""
        with self._clock("rollout").busy():
            self._rollout_step()

    def update_dataset(self) -> None:
        """Prepare the next train step's data, if the buffer holds enough."""
        with self._clock("dataset").busy():
            if self._wait_for_data(timeout=0):
                self._prepare_dataset()

    def train(self) -> None:
        """Train one step on the prepared dataset (if any) and publish the new weights to the workers."""
        if self._dataset is None:
            return
        with self._clock("train").busy():
            self._train_step()
        with self._clock("weight_sync").busy():
            self._publish()

    def evaluate(self) -> None:
        """Evaluate the current weights through AsyncEval (needs ``eval_interval`` in the config)."""
        if self._evaluator is None:
            raise RuntimeError("evaluate() needs an eval_interval in the config and a running engine (warm_up())")
        with self._clock("evaluate").busy():
            self._evaluate(self.policy_group.latest)

    def run(self) -> dict[str, Any]:
        """
        Train until the budget is spent, evaluating at the configured interval.

        :return: The timing summary (also logged and, with ``verbose``, printed).
        """
        if self.finished():
            raise ValueError(
                f"nothing to train: the budget of the config is spent (train steps {self.train_steps}, "
                f"env steps {self.num_timesteps})"
            )
        self._clocks = {}
        started, collected_before, trained_before = time.monotonic(), self.collected_steps, self.train_steps
        self._open()
        try:
            while not self.finished():
                self.rollout()
                self.update_dataset()
                self.train()
                if self._evaluation_due():
                    self.evaluate()
            return self._summarise(
                "SyncRLEngine",
                time.monotonic() - started,
                self.collected_steps - collected_before,
                self.train_steps - trained_before,
            )
        finally:
            self.close()
