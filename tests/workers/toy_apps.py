"""Small worker apps that exercise the pool without environments: pickled by value into workers."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, ClassVar

import torch

from lit_sb3.workers.app import TaskError, WorkerApp

#: Longest sleep of a worker waiting for its next unit to be due.
WAIT_SLICE = 0.1


class CountingApp(WorkerApp):
    """
    Task ``count(n, unit_seconds, fail_at)`` emits units ``0..n-1`` (skipping delivered ones) one every
    ``unit_seconds``, each as ``(unit, tag)`` with the current ``tag``, and ends with the list of units it emitted.
    ``fail_at`` makes the task raise on that unit; the tag ``"unpicklable"`` makes units that cannot be pickled. Task
    ``forever(unit_seconds)`` emits units until cancelled. Task ``running_sum(n, unit_seconds, total)`` emits units
    ``0..n-1`` each as ``(unit, total + 0 + 1 + ... + unit)``; its state is more than its units: it resumes from the
    total its resume arguments carry.

    :param worker_index: Index of the worker (returned by ``whoami``).
    """

    immediate_methods: ClassVar[frozenset[str]] = frozenset({"whoami", "set_tag"})
    control_methods: ClassVar[frozenset[str]] = frozenset({"whoami", "set_tag", "finished_tasks", "lock"})
    task_methods: ClassVar[frozenset[str]] = frozenset({"count", "forever", "running_sum"})

    def __init__(self, worker_index: int = 0) -> None:
        super().__init__()
        self.worker_index = worker_index
        self.tag: Any = None
        self.finished = 0
        self._tasks: dict[int, dict[str, Any]] = {}

    def whoami(self) -> tuple[int, int, int]:
        """:return: Worker index, process id and thread id."""
        return self.worker_index, os.getpid(), threading.get_ident()

    def set_tag(self, tag: Any) -> None:
        """:param tag: Tag of the units emitted from now on."""
        self.tag = tag

    def finished_tasks(self) -> int:
        """:return: How many tasks ended so far."""
        return self.finished

    def lock(self) -> Any:
        """:return: A lock, which cannot be pickled (a reply a worker process cannot send)."""
        return threading.Lock()

    def submit(
        self, request_id: int, method: str, args: tuple[Any, ...], delivered: frozenset[int] = frozenset()
    ) -> None:
        total = None
        fail_at = None
        if method == "count":
            n, unit_seconds, fail_at = args
            todo = [unit for unit in range(n) if unit not in delivered]
        elif method == "running_sum":
            n, unit_seconds, total = args
            todo = [unit for unit in range(n) if unit not in delivered]
        else:
            (unit_seconds,) = args
            todo = None
        start = max(delivered, default=-1) + 1 if todo is None else 0
        self._tasks[request_id] = {
            "todo": todo,
            "next": start,
            "unit_seconds": unit_seconds,
            "fail_at": fail_at,
            "emitted": [],
            "due": time.monotonic() + unit_seconds,
            "n": len(todo) + len(delivered) if todo is not None else None,
            "total": total,
        }

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    def advance(self) -> list[tuple[int, Any]]:
        request_id, task = min(self._tasks.items(), key=lambda item: item[1]["due"])
        wait = task["due"] - time.monotonic()
        time.sleep(max(0.0, min(wait, WAIT_SLICE)))
        if wait > WAIT_SLICE:
            return []  # not due yet: the worker loop answers its controls (close, cancel) meanwhile
        unit = task["todo"].pop(0) if task["todo"] is not None else task["next"]
        task["next"] = unit + 1
        self.mark_started(0, unit, request_id)
        if unit == task["fail_at"]:
            try:
                raise ValueError(f"unit {unit} failed on purpose")
            except ValueError as exc:
                raise TaskError(request_id, unit) from exc
        self.mark_idle(0)
        if task["total"] is None:
            self.emit(request_id, unit, (unit, threading.Lock() if self.tag == "unpicklable" else self.tag))
        else:
            task["total"] += unit
            self.emit(request_id, unit, (unit, task["total"]), (task["n"], task["unit_seconds"], task["total"]))
        task["emitted"].append(unit)
        task["due"] = time.monotonic() + task["unit_seconds"]
        if task["todo"] is not None and not task["todo"]:
            del self._tasks[request_id]
            self.finished += 1
            return [(request_id, task["emitted"])]
        return []

    def cancel(self, request_ids: tuple[int, ...] | None = None) -> list[int]:
        dropped = [rid for rid in self._tasks if request_ids is None or rid in request_ids]
        for request_id in dropped:
            del self._tasks[request_id]
        return dropped


class SquareApp(WorkerApp):
    """Task ``square(x)`` answers ``x * x`` at once, without partial results; ``emit_too`` also emits one."""

    task_methods: ClassVar[frozenset[str]] = frozenset({"square"})

    def __init__(self) -> None:
        super().__init__()
        self._done: list[tuple[int, Any]] = []

    def submit(
        self, request_id: int, method: str, args: tuple[Any, ...], delivered: frozenset[int] = frozenset()
    ) -> None:
        x, emit_too = args
        if emit_too:
            self.emit(request_id, 0, x)
        self._done.append((request_id, x * x))

    @property
    def busy(self) -> bool:
        return bool(self._done)

    def advance(self) -> list[tuple[int, Any]]:
        done, self._done = self._done, []
        return done

    def cancel(self, request_ids: tuple[int, ...] | None = None) -> list[int]:
        dropped = [rid for rid, _ in self._done if request_ids is None or rid in request_ids]
        self._done = [entry for entry in self._done if entry[0] not in dropped]
        return dropped


class TorchThreadsApp(SquareApp):
    """:class:`SquareApp` that also answers ``torch_threads()``: torch's thread count where the worker runs."""

    immediate_methods: ClassVar[frozenset[str]] = frozenset({"torch_threads"})
    control_methods: ClassVar[frozenset[str]] = frozenset({"torch_threads"})

    def torch_threads(self) -> int:
        """:return: ``torch.get_num_threads()`` in the worker."""
        return torch.get_num_threads()


class BlockingApp(WorkerApp):
    """
    Task ``block(seconds)`` marks unit 0 started, blocks ``seconds`` in one call (where a worker thread cannot be
    stopped), then marks unit 1 started and ends without marking it idle (what a timed-out thread does when it wakes);
    task ``wait(seconds)`` ends after ``seconds`` and marks no unit.
    """

    task_methods: ClassVar[frozenset[str]] = frozenset({"block", "wait"})

    def __init__(self) -> None:
        super().__init__()
        self._tasks: dict[int, tuple[str, float]] = {}

    def submit(
        self, request_id: int, method: str, args: tuple[Any, ...], delivered: frozenset[int] = frozenset()
    ) -> None:
        (seconds,) = args
        self._tasks[request_id] = (method, seconds if method == "block" else time.monotonic() + seconds)

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    def advance(self) -> list[tuple[int, Any]]:
        request_id, (method, value) = next(iter(self._tasks.items()))
        if method == "block":
            self.mark_started(0, 0, request_id)
            time.sleep(value)
            self.mark_started(0, 1, request_id)  # left marked: the worker's channel is closed by then
        elif time.monotonic() < value:
            time.sleep(WAIT_SLICE)
            return []
        del self._tasks[request_id]
        return [(request_id, method)]

    def cancel(self, request_ids: tuple[int, ...] | None = None) -> list[int]:
        dropped = [rid for rid in self._tasks if request_ids is None or rid in request_ids]
        for request_id in dropped:
            del self._tasks[request_id]
        return dropped


class StuckWhileMarked(CountingApp):
    """A counting app whose constructor hangs while a marker file exists (a worker that never becomes ready)."""

    def __init__(self, marker: str) -> None:
        while os.path.exists(marker):
            time.sleep(0.05)
        super().__init__()


class DiesInMarkedConfigure(CountingApp):
    """A counting app whose control ``configure(marker)`` counts its calls (``configured``), and ends the worker
    process instead while the marker file exists (removing it: the next worker lives)."""

    control_methods: ClassVar[frozenset[str]] = CountingApp.control_methods | {"configure", "configured"}

    def __init__(self) -> None:
        super().__init__()
        self.configure_calls = 0

    def configure(self, marker: str) -> None:
        if os.path.exists(marker):
            os.remove(marker)
            os._exit(1)
        self.configure_calls += 1

    def configured(self) -> int:
        """:return: How many ``configure`` calls this worker ran."""
        return self.configure_calls


class BrokenApp(WorkerApp):
    """An app whose constructor fails."""

    def __init__(self) -> None:
        raise RuntimeError("cannot build this app")

    def submit(
        self, request_id: int, method: str, args: tuple[Any, ...], delivered: frozenset[int] = frozenset()
    ) -> None:
        """Never reached."""

    @property
    def busy(self) -> bool:
        return False

    def advance(self) -> list[tuple[int, Any]]:
        return []

    def cancel(self, request_ids: tuple[int, ...] | None = None) -> list[int]:
        return []
