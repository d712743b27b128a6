"""
RLightning's engine loops run on our AsyncCoordinator.

The four loops below follow RLightning's ``AsyncRLEngine`` (``rlightning/engine/async_rl_engine.py``): the train
loop starts the coordinator itself, waits for a dataset and for the weights of the step before, and stops the
coordinator when its epochs are done; the rollout, dataset and weight-sync loops run ``while
coordinator.is_running()`` and may begin before the train loop has started it. Toy data stands in for environments
and policies: a transition is the weight version that acted, a train step makes a new version.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lit_sb3.engine.async_rl_engine import AsyncCoordinator

#: Seconds any thread of a run may take before the test reports which thread is stuck.
DEADLINE = 30.0


class RLightningLoops:
    """
    A toy engine whose thread loops do what RLightning's do, in its order of calls to the coordinator.

    :param max_epochs: Train steps of the run.
    :param batch_size: Transitions in each dataset.
    """

    def __init__(self, max_epochs: int, batch_size: int) -> None:
        self.coordinator = AsyncCoordinator()
        self.max_epochs, self.batch_size = max_epochs, batch_size
        self.lock = threading.Lock()
        self.transitions: list[int] = []
        self.train_version = 0
        self.rollout_version = 0
        self.dataset: list[int] = []
        self.events: list[str] = []
        self.versions_trained_after: list[int] = []  # the rollout weights when each train step ran
        self.in_loop = {name: threading.Event() for name in ("rollout", "dataset", "weight_sync")}

    def record(self, event: str) -> None:
        with self.lock:
            self.events.append(event)

    def rollout(self) -> None:
        coordinator = self.coordinator
        while coordinator.is_running():
            with self.lock:
                self.transitions.append(self.rollout_version)
            self.in_loop["rollout"].set()
            time.sleep(0.0005)

    def update_dataset_loop(self) -> None:
        coordinator = self.coordinator
        while coordinator.is_running():
            self.in_loop["dataset"].set()
            coordinator.wait_for_update_dataset()
            if not coordinator.is_running():
                break
            while coordinator.is_running() and len(self.transitions) < self.batch_size:  # its pre-update hook
                time.sleep(0.01)
            with self.lock:
                self.dataset = self.transitions[-self.batch_size :]
            self.record("dataset")
            coordinator.notify_dataset_ready()

    def train_loop(self) -> None:
        coordinator = self.coordinator
        try:
            coordinator.start()
            for _ in range(self.max_epochs):
                coordinator.wait_for_dataset_ready()
                coordinator.wait_for_weights_updated()
                self.versions_trained_after.append(self.rollout_version)
                self.record("train")
                self.train_version += 1
                coordinator.notify_train_step_done()
        finally:
            coordinator.stop()

    def sync_weights_loop(self) -> None:
        coordinator = self.coordinator
        while coordinator.is_running():
            self.in_loop["weight_sync"].set()
            coordinator.wait_for_sync_weights()
            if not coordinator.is_running():
                break
            self.rollout_version = self.train_version
            self.record("synced")
            coordinator.notify_weight_update_step_done()


def run_threads(engine: RLightningLoops, train_last: bool) -> dict[str, BaseException]:
    """
    Run the four loops as RLightning's ``run()`` does (one thread each, then join them all), with a deadline.

    :param train_last: Start the train thread only once the other three are inside their loops.
    :return: The exception of each thread that raised one.
    """
    failures: dict[str, BaseException] = {}

    def guarded(name: str, loop: Callable[[], None]) -> Callable[[], None]:
        def target() -> None:
            try:
                loop()
            except BaseException as error:
                failures[name] = error

        return target

    loops = {
        "rollout": engine.rollout,
        "dataset": engine.update_dataset_loop,
        "train": engine.train_loop,
        "weight_sync": engine.sync_weights_loop,
    }
    threads = {name: threading.Thread(target=guarded(name, loop), daemon=True) for name, loop in loops.items()}
    order = [name for name in loops if name != "train"] + ["train"] if train_last else list(loops)
    try:
        for name in order:
            if name == "train" and train_last:
                for other, inside in engine.in_loop.items():
                    assert inside.wait(DEADLINE), f"the {other} loop ended before the train thread started"
            threads[name].start()
        for thread in threads.values():
            thread.join(DEADLINE)
        stuck = [name for name, thread in threads.items() if thread.is_alive()]
        assert not stuck, (
            f"threads {stuck} still running {DEADLINE} s on: {engine.train_version} of {engine.max_epochs} train "
            f"steps done, events {engine.events[-6:]}"
        )
    finally:
        engine.coordinator.stop()  # a stuck thread is released
    return failures


@pytest.mark.parametrize("train_last", [False, True], ids=["started-in-rlightning-order", "train-thread-last"])
def test_rlightnings_loops_train_every_epoch_on_fresh_data_and_weights_then_stop(train_last: bool) -> None:
    engine = RLightningLoops(max_epochs=20, batch_size=8)
    assert run_threads(engine, train_last) == {}
    assert engine.train_version == 20
    assert not engine.coordinator.is_running()
    # Each train step waited for the weights of the one before (start() opened the first wait) ...
    assert engine.versions_trained_after == list(range(20))
    # ... and for a dataset prepared after it (start() opened the first dataset update).
    trains_and_datasets = [event for event in engine.events if event != "synced"]
    assert trains_and_datasets[:40] == ["dataset", "train"] * 20
    assert len(trains_and_datasets) <= 41  # at most one dataset more, prepared after the last step
    assert engine.events.count("synced") >= 19
    assert len(engine.transitions) >= 8
    assert set(engine.transitions) <= set(range(21))
