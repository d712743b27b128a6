"""While workers run on this machine, this process's torch threads keep to the cores they leave."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
import torch

from lit_sb3.workers.local import LocalBackend
from lit_sb3.workers.pool import WorkerPool
from lit_sb3.workers.threads import ThreadBackend
from lit_sb3.workers.torch_threads import limit_torch_threads, release_torch_threads
from workers.toy_apps import SquareApp, TorchThreadsApp

CORES = os.cpu_count() or 1


@pytest.fixture
def all_cores() -> Iterator[None]:
    """Torch on every core (as it starts on a quiet machine), put back as it was afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(CORES)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("all_cores")
@pytest.mark.parametrize("backend", [LocalBackend, ThreadBackend], ids=["processes", "threads"])
def test_workers_leave_torch_the_other_cores_until_their_pool_closes(backend: type) -> None:
    pool = WorkerPool([SquareApp, SquareApp], backend=backend())
    try:
        assert torch.get_num_threads() == max(1, CORES - 2)
    finally:
        pool.close()
    assert torch.get_num_threads() == CORES


@pytest.mark.usefixtures("all_cores")
def test_workers_that_mostly_wait_leave_torch_every_core() -> None:
    pool = WorkerPool([SquareApp, SquareApp], backend=ThreadBackend(), busy_workers=False)
    try:
        assert torch.get_num_threads() == CORES
    finally:
        pool.close()
    assert torch.get_num_threads() == CORES


@pytest.mark.usefixtures("all_cores")
def test_the_lowest_limit_holds_and_the_last_release_restores() -> None:
    first, second = object(), object()
    limit_torch_threads(first, CORES - 2)  # leaves 2 cores (at least 1)
    limit_torch_threads(second, CORES - 1)  # leaves 1
    assert torch.get_num_threads() == 1
    release_torch_threads(second)
    assert torch.get_num_threads() == max(1, min(2, CORES))
    release_torch_threads(first)
    assert torch.get_num_threads() == CORES


@pytest.mark.usefixtures("all_cores")
def test_a_count_set_by_the_user_meanwhile_is_kept() -> None:
    holder = object()
    limit_torch_threads(holder, CORES)
    torch.set_num_threads(3)
    release_torch_threads(holder)
    assert torch.get_num_threads() == 3


@pytest.mark.usefixtures("all_cores")
def test_a_worker_thread_runs_torch_on_itself_alone_and_other_threads_keep_their_count() -> None:
    pool = WorkerPool([TorchThreadsApp], backend=ThreadBackend(), busy_workers=False)
    try:
        assert pool.call(0, "torch_threads").result(timeout=30) == 1
        assert torch.get_num_threads() == CORES
        started_later: list[int] = []
        thread = threading.Thread(target=lambda: started_later.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert started_later == [CORES]
    finally:
        pool.close()
