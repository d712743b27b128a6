"""Asynchronous reinforcement learning engine module.

The rollout thread takes episodes of the collection workers into the buffer, the dataset thread prepares the next
train step's data, the train thread trains on it, the weight-sync thread publishes each new version to the workers
and the evaluation thread evaluates it at the configured interval. An :class:`AsyncCoordinator` carries the signals
between them; a failure in any thread or worker stops them all and is raised from :meth:`AsyncRLEngine.run`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from lit_sb3.engine.base import WAIT_SLICE, BaseEngine
from lit_sb3.engine.buffer import DataBuffer, ReplayData, RolloutQueue
from lit_sb3.engine.config import EngineConfig
from lit_sb3.engine.coordinator import AsyncCoordinator
from lit_sb3.engine.env_group import EnvGroup
from lit_sb3.engine.policy_group import PolicyGroup

__all__ = ["AsyncCoordinator", "AsyncRLEngine"]

#: Seconds the engine waits for its threads to end once stopped, before it reports the one that does not.
JOIN_TIMEOUT = 10.0
#: Seconds between two checks of the main thread for a failure or the end of the run.
WATCH_SLICE = 0.02
#: Off-policy: episodes the rollout thread takes into the replay buffer beyond what the train steps drew from.
EPISODES_AHEAD = 1


class EngineThreadError(RuntimeError):
    """A thread of the engine did not end after the run stopped."""


class AsyncRLEngine(BaseEngine):
    """
    Asynchronous reinforcement learning engine.

    This engine implements asynchronous training where:

    - Rollout thread: Collects experience from environments.
    - Dataset thread: Prepares each train step's data from the buffer.
    - Training thread: Updates policy using collected experience.
    - Weight update thread: Broadcasts updated weights to the collection workers.
    - Evaluation thread (with ``eval_interval``): Evaluates them on separate environments through AsyncEval.

    Episodes begun by weights more than ``max_policy_lag`` train steps old when assembled are dropped (counted in
    the summary's ``episodes_stale``). On-policy, a rollout is taken from the collection only when the dataset thread
    asks for one and the collection was told of the newest weights; it is assembled while the step before it trains,
    so the rollouts trained on are at most ``max_policy_lag + 1`` train steps old. Off-policy, the rollout thread
    keeps one episode ahead of the train steps (the replay ratio holds whatever the speed of the workers).

    :param config: What the run does.
    :param env_group: The collection (and evaluation) environments.
    :param policy_group: The algorithm being trained.
    :param buffer: The data between the rollout and the dataset threads.
    """

    def __init__(
        self, config: EngineConfig, env_group: EnvGroup, policy_group: PolicyGroup, buffer: DataBuffer
    ) -> None:
        super().__init__(config, env_group, policy_group, buffer)
        self.coordinator = AsyncCoordinator()
        self._failure: BaseException | None = None

    # ----------------------------------------------------------------------------------------- the thread loops

    def rollout(self) -> None:
        """
        Perform rollout to collect experience from environments: takes each rollout or episode of the collection
        into the buffer until the coordinator stops.
        """
        clock, coordinator, buffer = self._clock("rollout"), self.coordinator, self.buffer
        while coordinator.is_running():
            with clock.idle():
                if isinstance(buffer, RolloutQueue):
                    room = buffer.wait_for_room(WAIT_SLICE)
                else:
                    assert isinstance(buffer, ReplayData)
                    room = buffer.wait_for_room(EPISODES_AHEAD, self._steps_for_next_gradient_step(), WAIT_SLICE)
                if room and self.synced_version < self.policy_group.latest.version:
                    # The collection checks episodes' ages against the version it was told of: tell it first.
                    coordinator.wait_for_weights_updated(WAIT_SLICE)
                    continue
            if room and coordinator.is_running():
                with clock.busy():
                    self._rollout_step()

    def update_dataset(self) -> None:
        """
        Update dataset from buffer to train policy: prepares one train step's data when the coordinator starts and
        after each train step.
        """
        clock, coordinator = self._clock("dataset"), self.coordinator
        asked = False  # whether the train thread waits for a dataset not yet prepared
        while coordinator.is_running():
            with clock.idle():
                asked = asked or coordinator.wait_for_update_dataset().by_event
                ready = asked and self._wait_for_data(WAIT_SLICE)
            if ready:
                with clock.busy():
                    self._prepare_dataset()
                asked = False
                coordinator.notify_dataset_ready()

    def train(self) -> None:
        """
        Perform training on collected experience: one train step per dataset, until the configured budget is spent
        (then the coordinator stops).
        """
        clock, coordinator = self._clock("train"), self.coordinator
        while coordinator.is_running():
            with clock.idle():
                wakeup = coordinator.wait_for_dataset_ready()
            if not wakeup.by_event:
                continue
            with clock.busy():
                self._train_step()
            coordinator.notify_train_step_done()
            if self.finished():
                coordinator.stop()

    def sync_weights(self) -> None:
        """Publish each new version of the weights to the collection workers (retrying while they read the last)."""
        clock, coordinator, board = self._clock("weight_sync"), self.coordinator, self.collector.board
        while coordinator.is_running():
            behind = board.version < self.policy_group.latest.version
            with clock.idle():
                coordinator.wait_for_sync_weights(WAIT_SLICE if behind else None)
            if board.version < self.policy_group.latest.version and coordinator.is_running():
                with clock.busy():
                    sent = self._publish()
                if sent:
                    coordinator.notify_weight_update_step_done()

    def evaluate(self) -> None:
        """
        Evaluate the newest weights through AsyncEval each time ``eval_interval`` more steps were collected. An
        evaluation that comes due while one is under way is done after it, on the newest weights then; one due when
        the budget is spent is done by :meth:`run` before it returns.
        """
        clock, coordinator = self._clock("evaluate"), self.coordinator
        while coordinator.is_running():
            with clock.idle():
                wakeup = coordinator.wait_for_weights_updated()
            if wakeup.by_event and self._evaluation_due():
                with clock.busy():
                    self._evaluate(self.policy_group.latest)

    # ---------------------------------------------------------------------------------------------------- run

    def run(self) -> dict[str, Any]:
        """
        Launch asynchronous training threads.

        Starts the rollout, dataset, train and weight-sync threads (and the evaluation thread with
        ``eval_interval``), waits until the budget is spent, a thread or worker fails, or Ctrl-C, then stops them all
        and the workers. Prints timing summary when finished.

        :return: The timing summary: time per phase and idle time of each thread, env steps/s, train steps/s, the
            policy lag (mean, p99, max).
        :raises BaseException: The first exception of a thread or worker, with its traceback.
        """
        if self.finished():
            raise ValueError(
                f"nothing to train: the budget of the config is spent (train steps {self.train_steps}, "
                f"env steps {self.num_timesteps})"
            )
        self._open()
        self.coordinator = coordinator = AsyncCoordinator()
        self._failure = None
        self._clocks = {}
        loops: dict[str, Callable[[], None]] = {
            "rollout": self.rollout,
            "dataset": self.update_dataset,
            "train": self.train,
            "weight_sync": self.sync_weights,
        }
        if self.config.eval_interval is not None:
            loops["evaluate"] = self.evaluate
        threads = {
            name: threading.Thread(target=self._guarded, args=(name, loop), name=f"lit-sb3-engine-{name}", daemon=True)
            for name, loop in loops.items()
        }
        started, steps_before, trained_before = time.monotonic(), self.num_timesteps, self.train_steps
        coordinator.start()
        try:
            for thread in threads.values():
                thread.start()
            while coordinator.is_running():
                time.sleep(WATCH_SLICE)
                self.collector.raise_failure()  # a worker's failure, even while no thread asks for data
        except BaseException as error:
            if self._failure is None:
                self._failure = error
        finally:
            coordinator.stop()
            self.collector.pool.close()  # a thread blocked on the collection wakes with PoolClosedError
            try:
                if self._failure is None:
                    self._finish_evaluations(threads.get("evaluate"))
            except BaseException as error:
                if self._failure is None:
                    self._failure = error
            if self._evaluator is not None:
                self._evaluator.close()  # a thread blocked on an evaluation wakes with PoolClosedError
            for thread in threads.values():
                if thread.ident is not None:  # started (Ctrl-C may come while they are being started)
                    thread.join(JOIN_TIMEOUT)
            stuck = [thread.name for thread in threads.values() if thread.is_alive()]
            try:
                if not stuck:
                    self._return_prepared_dataset()
                    self._summarise(
                        "AsyncRLEngine",
                        time.monotonic() - started,
                        self.num_timesteps - steps_before,  # trained on: the rollouts kept for later are not
                        self.train_steps - trained_before,
                    )
            finally:
                self.close()
        if self._failure is not None:
            raise self._failure
        if stuck:
            raise EngineThreadError(f"engine threads {stuck} did not end within {JOIN_TIMEOUT} s of the stop")
        assert self.last_summary is not None
        return self.last_summary

    def _finish_evaluations(self, evaluation: threading.Thread | None) -> None:
        """After the run stopped of itself: wait for the evaluation under way, then evaluate the final weights if an
        evaluation came due meanwhile (so none due is left undone).

        :param evaluation: The evaluation thread (None without ``eval_interval``).
        """
        while evaluation is not None and evaluation.is_alive():
            evaluation.join(WATCH_SLICE)  # in slices: Ctrl-C stays heard
        if self._failure is None and self._evaluation_due():
            with self._clock("evaluate").busy():
                self._evaluate(self.policy_group.latest)

    def _guarded(self, name: str, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as error:
            # After the stop, the main thread closes the collection: the failures it causes are the shutdown's echo.
            # The evaluator stays open until the evaluation thread ends, unless the run failed already.
            real = self.coordinator.is_running() or name == "evaluate"
            if real and self._failure is None:
                self._failure = error
            self.coordinator.stop()
