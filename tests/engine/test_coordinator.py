"""AsyncCoordinator: every wait ends after stop(), and notifications are neither lost nor invented."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lit_sb3.engine.coordinator import AsyncCoordinator, WakeReason, Wakeup

WAITS = ["wait_for_dataset_ready", "wait_for_update_dataset", "wait_for_sync_weights", "wait_for_weights_updated"]
#: Which notification wakes each wait.
NOTIFIER = {
    "wait_for_dataset_ready": "notify_dataset_ready",
    "wait_for_update_dataset": "notify_train_step_done",
    "wait_for_sync_weights": "notify_train_step_done",
    "wait_for_weights_updated": "notify_weight_update_step_done",
}
#: The waits start() opens (RLightning's: the first dataset update, the first train step's weight wait).
OPENED_BY_START = {"wait_for_update_dataset", "wait_for_weights_updated"}


def started() -> AsyncCoordinator:
    coordinator = AsyncCoordinator()
    coordinator.start()
    return coordinator


@pytest.mark.parametrize("wait", WAITS)
def test_every_wait_is_ended_by_stop_and_says_so(wait: str) -> None:
    coordinator = started()
    results: list[Wakeup] = []

    def wait_past_the_opening() -> None:
        if wait in OPENED_BY_START:
            getattr(coordinator, wait)()
        results.append(getattr(coordinator, wait)())

    thread = threading.Thread(target=wait_past_the_opening)
    thread.start()
    time.sleep(0.1)
    assert thread.is_alive()  # no timeout, no signal: it waits
    coordinator.stop()
    thread.join(10)  # a hang fails here; what ended the wait is the stop, not a timeout
    assert not thread.is_alive()
    assert results == [Wakeup(WakeReason.STOPPED, 0)]
    assert not coordinator.is_running()
    assert getattr(coordinator, wait)().reason is WakeReason.STOPPED  # and every later wait returns at once


@pytest.mark.parametrize("wait", WAITS)
def test_every_wait_is_woken_by_its_signal_and_times_out_without_it(wait: str) -> None:
    coordinator = started()
    if wait in OPENED_BY_START:
        assert getattr(coordinator, wait)(timeout=0) == Wakeup(WakeReason.EVENT, 1)
    started_at = time.monotonic()
    assert getattr(coordinator, wait)(timeout=0.05) == Wakeup(WakeReason.TIMEOUT, 0)
    assert time.monotonic() - started_at >= 0.05
    getattr(coordinator, NOTIFIER[wait])()
    getattr(coordinator, NOTIFIER[wait])()
    assert getattr(coordinator, wait)(timeout=5) == Wakeup(WakeReason.EVENT, 2)  # sent before: not lost, coalesced
    assert not getattr(coordinator, wait)(timeout=0).by_event  # and counted once


def test_it_runs_from_construction_to_stop_and_again_after_a_new_start() -> None:
    """RLightning's loops begin ``while coordinator.is_running()`` before the train thread calls start()."""
    coordinator = AsyncCoordinator()
    assert coordinator.is_running()
    coordinator.start()
    assert coordinator.is_running()
    coordinator.stop()
    assert not coordinator.is_running()
    coordinator.start()
    assert coordinator.is_running()


@pytest.mark.parametrize("wait", WAITS)
def test_before_start_a_wait_waits_and_start_opens_the_first_dataset_update_and_weight_wait(wait: str) -> None:
    coordinator = AsyncCoordinator()
    assert getattr(coordinator, wait)(timeout=0.01) == Wakeup(WakeReason.TIMEOUT, 0)
    results: list[Wakeup] = []
    thread = threading.Thread(target=lambda: results.append(getattr(coordinator, wait)(timeout=0.2)))
    thread.start()  # waits before start(), as RLightning's dataset loop does
    coordinator.start()
    thread.join(5)
    assert not thread.is_alive()
    if wait in OPENED_BY_START:
        assert results == [Wakeup(WakeReason.EVENT, 1)]
    else:
        assert results == [Wakeup(WakeReason.TIMEOUT, 0)]


@pytest.mark.parametrize("wait", WAITS)
def test_start_forgets_the_notifications_sent_before_it(wait: str) -> None:
    coordinator = AsyncCoordinator()
    coordinator.start()
    getattr(coordinator, NOTIFIER[wait])()
    coordinator.stop()
    coordinator.start()  # a new run: the last run's signals are not carried into it
    assert getattr(coordinator, wait)(timeout=0).notifications == (1 if wait in OPENED_BY_START else 0)


def test_train_step_done_wakes_both_the_dataset_and_the_weight_sync_waits() -> None:
    coordinator = started()
    for wait in sorted(OPENED_BY_START):
        assert getattr(coordinator, wait)(timeout=0).by_event
    coordinator.notify_train_step_done()
    assert coordinator.wait_for_update_dataset(timeout=1).by_event
    assert coordinator.wait_for_sync_weights(timeout=1).by_event
    assert not coordinator.wait_for_dataset_ready(timeout=0).by_event
    assert not coordinator.wait_for_weights_updated(timeout=0).by_event


def test_every_waiting_thread_sees_every_notification_of_many_notifying_threads() -> None:
    coordinator = started()
    notifiers, per_notifier, waiters = 8, 500, 6
    total = notifiers * per_notifier + 1  # and start()'s opening
    seen = [0] * waiters

    def wait(index: int) -> None:
        while seen[index] < total:
            wakeup = coordinator.wait_for_weights_updated(timeout=10)
            assert wakeup.reason is WakeReason.EVENT
            seen[index] += wakeup.notifications

    def notify() -> None:
        for _ in range(per_notifier):
            coordinator.notify_weight_update_step_done()

    threads = [threading.Thread(target=wait, args=(index,)) for index in range(waiters)]
    threads += [threading.Thread(target=notify) for _ in range(notifiers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert seen == [total] * waiters  # none lost, none invented
    # A thread that never waited sees them all at once.
    assert coordinator.wait_for_weights_updated(timeout=0) == Wakeup(WakeReason.EVENT, total)


def test_the_engine_cycle_keeps_its_order_under_many_rounds() -> None:
    """dataset ready -> train step -> weights synced -> next dataset, 2000 times over three threads, in turn."""
    coordinator = started()
    rounds = 2000
    log: list[str] = []
    lock = threading.Lock()

    def record(event: str) -> None:
        with lock:
            log.append(event)

    def loop(wait: Callable[[float | None], Wakeup], act: Callable[[], None], event: str) -> None:
        for _ in range(rounds):
            assert wait(10).by_event  # the dataset thread's first: start() opened the weight wait
            record(event)
            act()

    def sync() -> None:
        for _ in range(rounds):
            assert coordinator.wait_for_sync_weights(10).by_event
            record("synced")
            coordinator.notify_weight_update_step_done()

    threads = [
        threading.Thread(
            target=loop,
            args=(coordinator.wait_for_weights_updated, coordinator.notify_dataset_ready, "dataset"),
        ),
        threading.Thread(
            target=loop,
            args=(coordinator.wait_for_dataset_ready, coordinator.notify_train_step_done, "train"),
        ),
        threading.Thread(target=sync),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert log == ["dataset", "train", "synced"] * rounds
