"""The signals between the engine's threads: every wait has a timeout and ends once the coordinator stops."""

from __future__ import annotations

import enum
import threading
from typing import NamedTuple


class WakeReason(enum.Enum):
    """Why a wait of :class:`AsyncCoordinator` returned."""

    EVENT = "event"
    STOPPED = "stopped"
    TIMEOUT = "timeout"


class Wakeup(NamedTuple):
    """
    What a wait of :class:`AsyncCoordinator` returns.

    :param reason: The signal came, the coordinator stopped (or never started), or the timeout passed.
    :param notifications: Notifications of the signal since the calling thread's previous wait for it (coalesced).
    """

    reason: WakeReason
    notifications: int

    @property
    def by_event(self) -> bool:
        """Whether the signal woke the wait (and the coordinator still runs)."""
        return self.reason is WakeReason.EVENT


class _Signal:
    """A broadcast signal: each waiting thread sees every notification once, counted since its own last wait."""

    def __init__(self, condition: threading.Condition) -> None:
        self.condition = condition
        self.generation = 0
        self.seen: dict[int, int] = {}

    def notify(self) -> None:
        with self.condition:
            self.generation += 1
            self.condition.notify_all()

    def wait(self, running: threading.Event, timeout: float | None) -> Wakeup:
        reader = threading.get_ident()
        with self.condition:
            self.condition.wait_for(lambda: not running.is_set() or self.generation > self.seen.get(reader, 0), timeout)
            notifications = self.generation - self.seen.get(reader, 0)
            self.seen[reader] = self.generation
        if not running.is_set():
            return Wakeup(WakeReason.STOPPED, notifications)
        return Wakeup(WakeReason.EVENT if notifications else WakeReason.TIMEOUT, notifications)


class AsyncCoordinator:
    """
    A coordinator to manage asynchronous tasks: the dataset thread tells the train thread a dataset is ready, the
    train thread tells the dataset and weight-sync threads a step is done, the weight-sync thread tells the rollout
    and evaluation threads new weights are out.

    Every signal is a broadcast: each thread that waits for it sees each notification once, counted from its own
    previous wait (a notification sent before the wait is never lost; several are coalesced into one wake-up).
    Every wait takes an optional timeout (seconds) and returns at once when the coordinator is stopped, with a
    :class:`Wakeup` saying why it returned.
    """

    def __init__(self) -> None:
        self._running = threading.Event()
        self._condition = threading.Condition()
        self._dataset_ready = _Signal(self._condition)
        self._update_dataset = _Signal(self._condition)
        self._sync_weights = _Signal(self._condition)
        self._weights_updated = _Signal(self._condition)

    def start(self) -> None:
        """Start the coordinator."""
        self._running.set()

    def stop(self) -> None:
        """Stop the coordinator: every wait, under way or to come, returns with :attr:`WakeReason.STOPPED`."""
        with self._condition:
            self._running.clear()
            self._condition.notify_all()

    def is_running(self) -> bool:
        """
        Check if the coordinator is still running.

        :return: Whether it was started and not stopped since.
        """
        return self._running.is_set()

    def notify_dataset_ready(self) -> None:
        """Notify that dataset is ready for training."""
        self._dataset_ready.notify()

    def wait_for_dataset_ready(self, timeout: float | None = None) -> Wakeup:
        """
        Wait until dataset is ready for training.

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._dataset_ready.wait(self._running, timeout)

    def notify_train_step_done(self) -> None:
        """Notify that the training step is done (wakes the dataset and the weight-sync waits)."""
        self._update_dataset.notify()
        self._sync_weights.notify()

    def wait_for_update_dataset(self, timeout: float | None = None) -> Wakeup:
        """
        Wait for signal to update dataset (a train step is done).

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._update_dataset.wait(self._running, timeout)

    def wait_for_sync_weights(self, timeout: float | None = None) -> Wakeup:
        """
        Wait for signal to sync weights (a train step is done).

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._sync_weights.wait(self._running, timeout)

    def notify_weight_update_step_done(self) -> None:
        """Notify that the weight update is done."""
        self._weights_updated.notify()

    def wait_for_weights_updated(self, timeout: float | None = None) -> Wakeup:
        """
        Wait until weights are updated for evaluation (and rollouts).

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._weights_updated.wait(self._running, timeout)
