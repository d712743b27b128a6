"""
The signals between the engine's threads, as RLightning's ``AsyncCoordinator`` gives them: the coordinator runs until
``stop()`` (also before ``start()``, so loops begun before the train thread starts it keep going), and ``start()``
opens the first dataset update and the first weight wait. On top: every wait has a timeout, ends once the
coordinator stops and says why it returned; every signal is a broadcast that each waiting thread sees once.
"""

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

    :param reason: The signal came, the coordinator stopped, or the timeout passed.
    :param notifications: Notifications of the signal since the calling thread's previous wait for it (or since the
        last ``start()``), coalesced.
    """

    reason: WakeReason
    notifications: int

    @property
    def by_event(self) -> bool:
        """Whether the signal woke the wait (and the coordinator still runs)."""
        return self.reason is WakeReason.EVENT


class _Signal:
    """
    A broadcast signal: each waiting thread sees every notification once, counted since its own last wait; a
    thread that has not waited since the last :meth:`forget_pending` counts from there.
    """

    def __init__(self, condition: threading.Condition) -> None:
        self.condition = condition
        self.generation = 0
        self.start_generation = 0
        self.seen: dict[int, int] = {}

    def notify(self) -> None:
        with self.condition:  # re-entrant: start() notifies with it held
            self.generation += 1
            self.condition.notify_all()

    def forget_pending(self) -> None:
        """Drop every notification sent so far, for every thread (call with the condition held)."""
        self.start_generation = self.generation
        self.seen.clear()

    def wait(self, stopped: threading.Event, timeout: float | None) -> Wakeup:
        reader = threading.get_ident()
        with self.condition:
            self.condition.wait_for(lambda: stopped.is_set() or self.generation > self._seen_by(reader), timeout)
            notifications = self.generation - self._seen_by(reader)
            self.seen[reader] = self.generation
        if stopped.is_set():
            return Wakeup(WakeReason.STOPPED, notifications)
        return Wakeup(WakeReason.EVENT if notifications else WakeReason.TIMEOUT, notifications)

    def _seen_by(self, reader: int) -> int:
        return self.seen.get(reader, self.start_generation)


class AsyncCoordinator:
    """
    A coordinator to manage asynchronous tasks: the dataset thread tells the train thread a dataset is ready, the
    train thread tells the dataset and weight-sync threads a step is done, the weight-sync thread tells the rollout,
    train and evaluation threads new weights are out.

    As RLightning's: :meth:`is_running` holds from construction until :meth:`stop` (and again after a new
    :meth:`start`), so loops ``while coordinator.is_running()`` may begin before the train thread calls
    :meth:`start`; :meth:`start` drops the notifications sent before it and opens the first dataset update and the
    first weight wait (the train step before any weight sync); after :meth:`stop` every wait returns at once.

    Every signal is a broadcast: each thread that waits for it sees each notification once, counted from its own
    previous wait (a notification sent before the wait is never lost; several are coalesced into one wake-up).
    Every wait takes an optional timeout (seconds) and returns with a :class:`Wakeup` saying why it returned.
    """

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._condition = threading.Condition()
        self._dataset_ready = _Signal(self._condition)
        self._update_dataset = _Signal(self._condition)
        self._sync_weights = _Signal(self._condition)
        self._weights_updated = _Signal(self._condition)

    def start(self) -> None:
        """Start the coordinator: forget earlier notifications, then open the first dataset update and weight wait."""
        with self._condition:
            self._stopped.clear()
            for signal in (self._dataset_ready, self._update_dataset, self._sync_weights, self._weights_updated):
                signal.forget_pending()
            self._update_dataset.notify()
            self._weights_updated.notify()

    def stop(self) -> None:
        """Stop the coordinator: every wait, under way or to come, returns with :attr:`WakeReason.STOPPED`."""
        with self._condition:
            self._stopped.set()
            self._condition.notify_all()

    def is_running(self) -> bool:
        """
        Check if the coordinator is still running.

        :return: Whether it was not stopped since it was made or last started.
        """
        return not self._stopped.is_set()

    def notify_dataset_ready(self) -> None:
        """Notify that dataset is ready for training."""
        self._dataset_ready.notify()

    def wait_for_dataset_ready(self, timeout: float | None = None) -> Wakeup:
        """
        Wait until dataset is ready for training.

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._dataset_ready.wait(self._stopped, timeout)

    def notify_train_step_done(self) -> None:
        """Notify that the training step is done (wakes the dataset and the weight-sync waits)."""
        self._update_dataset.notify()
        self._sync_weights.notify()

    def wait_for_update_dataset(self, timeout: float | None = None) -> Wakeup:
        """
        Wait for signal to update dataset (a train step is done, or the coordinator just started).

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._update_dataset.wait(self._stopped, timeout)

    def wait_for_sync_weights(self, timeout: float | None = None) -> Wakeup:
        """
        Wait for signal to sync weights (a train step is done).

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._sync_weights.wait(self._stopped, timeout)

    def notify_weight_update_step_done(self) -> None:
        """Notify that the weight update is done."""
        self._weights_updated.notify()

    def wait_for_weights_updated(self, timeout: float | None = None) -> Wakeup:
        """
        Wait until weights are updated for evaluation (and rollouts), or the coordinator just started.

        :param timeout: Seconds to wait at most; None to wait until the signal or the stop.
        :return: Why the wait ended.
        """
        return self._weights_updated.wait(self._stopped, timeout)
