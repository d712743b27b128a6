"""Shared arrays (created without leaving a segment behind, opened in a worker least recently used closed first) and
the pool's errors crossing a pickle."""

from __future__ import annotations

import pathlib
import pickle
from dataclasses import dataclass, field
from multiprocessing import resource_tracker, shared_memory

import numpy as np
import pytest

from lit_sb3.workers.errors import RemoteFailure, WorkerError, WorkerTimeoutError
from lit_sb3.workers.shared_array import OpenedArrays, SharedArray


@dataclass
class Opened:
    """What a toy handle hands back to close: it records that it was closed."""

    closed: list[str]
    key: str

    def close(self) -> None:
        self.closed.append(self.key)


@dataclass(frozen=True)
class ToyHandle:
    """An array handle that records every open and close, by key."""

    key: str
    events: list[str] = field(default_factory=list, compare=False, hash=False)

    def open(self) -> tuple[Opened, np.ndarray]:
        self.events.append(f"open {self.key}")
        return Opened(self.events, f"close {self.key}"), np.full(2, ord(self.key[0]))


def test_opened_arrays_close_the_least_recently_used_one() -> None:
    events: list[str] = []
    a, b, c = (ToyHandle(key, events) for key in "abc")
    opened = OpenedArrays(capacity=2)
    opened.get(a)
    opened.get(b)
    assert opened.get(a)[0] == ord("a")  # a used again: b is now the least recently used
    opened.get(c)
    assert events == ["open a", "open b", "close b", "open c"]
    opened.get(a)  # still open
    opened.get(b)  # opened again, in place of c (a was used after it)
    assert events[4:] == ["close c", "open b"]
    opened.close()
    assert sorted(events[6:]) == ["close a", "close b"]


def test_opened_arrays_read_shared_memory_by_handle() -> None:
    shared = SharedArray((3,), np.float64)
    shared.array[:] = [1.0, 2.0, 3.0]
    opened = OpenedArrays()
    try:
        view = opened.get(shared.handle)
        np.testing.assert_array_equal(view, [1.0, 2.0, 3.0])
        assert opened.get(shared.handle) is view  # opened once
        del view
    finally:
        opened.close()
        shared.close()


def test_opened_arrays_refuse_a_capacity_below_one() -> None:
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        OpenedArrays(capacity=0)


def test_a_pickled_worker_error_keeps_what_the_units_are_called() -> None:
    failure = RemoteFailure("builtins.ValueError", "bad weights", "Traceback ...", unit_index=7)
    error = WorkerError(2, failure, unit_name="candidate")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) == "builtins.ValueError in worker 2 while running candidate 7: bad weights"
    assert copy.unit_name == "candidate" and copy.unit_index == 7 and copy.worker_index == 2
    assert copy.remote_traceback == "Traceback ..." and str(copy.__cause__) == str(error.__cause__)


def test_a_pickled_timeout_error_keeps_what_the_units_are_called() -> None:
    error = WorkerTimeoutError(1, 4, 2.5, unit_name="episode")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) == "episode 4 on worker 1 did not finish within 2.5 s"
    assert (copy.worker_index, copy.unit_index, copy.timeout, copy.unit_name) == (1, 4, 2.5, "episode")


SHM = pathlib.Path("/dev/shm")


@pytest.mark.skipif(not SHM.is_dir(), reason="shared-memory segments are files of /dev/shm on Linux only")
@pytest.mark.parametrize("interrupted", ["ftruncate", "register"])
def test_a_ctrl_c_while_a_segment_is_created_leaves_no_segment(
    monkeypatch: pytest.MonkeyPatch, interrupted: str
) -> None:
    # A KeyboardInterrupt between the segment's creation and its sizing (it would stay, empty) or between its
    # mapping and the standard library's registration of it with the resource tracker (it would stay, full-size):
    # raised there by stand-ins (lit_sb3 registers the name first, before the segment exists).
    def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    if interrupted == "ftruncate":
        monkeypatch.setattr(shared_memory.os, "ftruncate", interrupt)
    else:
        register = resource_tracker.register
        registered: list[str] = []

        def interrupt_the_second(name: str, rtype: str) -> None:
            registered.append(name)
            if len(registered) == 2:
                raise KeyboardInterrupt
            register(name, rtype)

        monkeypatch.setattr(resource_tracker, "register", interrupt_the_second)
    before = set(SHM.iterdir())
    with pytest.raises(KeyboardInterrupt):
        SharedArray((1000,), np.float64)
    monkeypatch.undo()
    assert set(SHM.iterdir()) - before == set()
    array = SharedArray((3,), np.float64)  # still works, and its segment goes when closed
    assert SHM.joinpath(array.handle.name).exists()
    array.close()
    assert not SHM.joinpath(array.handle.name).exists()
