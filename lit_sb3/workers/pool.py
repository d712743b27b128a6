"""The worker pool: starts workers, hands out tasks, replaces dead workers and shuts everything down."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

import cloudpickle

from lit_sb3.checks import check_non_negative_int, check_non_negative_number, check_positive_int, check_positive_number
from lit_sb3.workers.app import PROGRESS_COLUMNS, WorkerApp
from lit_sb3.workers.arrays import ProgressBoard
from lit_sb3.workers.backend import Backend, WorkerHandle
from lit_sb3.workers.errors import PoolClosedError, WorkerDiedError, WorkerError, WorkerTimeoutError
from lit_sb3.workers.local import LocalBackend
from lit_sb3.workers.messages import (
    ATTACH_PROGRESS_METHOD,
    CLOSE_METHOD,
    READY_REQUEST_ID,
    Cancel,
    Credit,
    Reply,
    Request,
)
from lit_sb3.workers.stream import Stream, StreamItem
from lit_sb3.workers.torch_threads import limit_torch_threads, release_torch_threads

#: Seconds a worker gets to exit after being asked to, before it is killed.
CLOSE_GRACE_PERIOD = 3.0
#: Seconds between two reads of the progress boards when a timeout is set, or while a worker is starting.
PROGRESS_CHECK_INTERVAL = 0.1
#: Seconds a worker may take to build its app after it was started (a Ray actor waiting for a free CPU included).
DEFAULT_START_TIMEOUT = 300.0

#: What happens to a task whose worker died: run it again from scratch, resume it on another worker (a stream: the
#: units already delivered are skipped, and the task gets the resume arguments of the last of them), or fail its job.
RetryPolicy = Literal["rerun", "resume", "fail"]
RETRY_POLICIES: tuple[RetryPolicy, ...] = ("rerun", "resume", "fail")

_live_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:
    for pool in list(_live_pools):
        pool.close()


def _new_future() -> Future:
    future: Future = Future()
    future.set_running_or_notify_cancel()  # only the pool resolves it: callers cannot cancel it under our feet
    return future


@dataclass
class _Call:
    """A control request to one worker, answered through ``future`` (None for replays nobody waits on)."""

    method: str
    args: bytes
    future: Future | None

    def request(self, request_id: int) -> Request:
        """:return: The request that carries the call to its worker."""
        return Request(request_id, self.method, self.args, False)


@dataclass
class _Job:
    """Tasks handed out to whichever worker has room, each answered once."""

    method: str
    payloads: list[bytes]
    labels: list[str]
    capacities: list[int]
    future: Future
    retry: RetryPolicy = "rerun"
    stream: Stream | None = None
    results: list[Any] = field(default_factory=list)
    pending: deque[int] = field(default_factory=deque)
    remaining: int = 0
    delivered: list[set[int]] = field(default_factory=list)
    resume_args: list[tuple[Any, ...] | None] = field(default_factory=list)  # of each task's last delivered unit

    def __post_init__(self) -> None:
        self.results = [None] * len(self.payloads)
        self.pending = deque(range(len(self.payloads)))
        self.remaining = len(self.payloads)
        self.delivered = [set() for _ in self.payloads]
        self.resume_args = [None] * len(self.payloads)

    def forget_delivered(self, payload_index: int) -> None:
        """A task that runs again from scratch: it delivers everything again, from its own arguments."""
        self.delivered[payload_index].clear()
        self.resume_args[payload_index] = None

    @property
    def finished(self) -> bool:
        return self.future.done()

    def complete(self, payload_index: int, result: Any) -> None:
        """Record a task's final reply; the job resolves with its last one."""
        self.results[payload_index] = result
        self.remaining -= 1
        if self.remaining == 0:
            self.resolve()

    def resolve(self) -> None:
        """Hand the results to the job's stream, or to its future."""
        if self.stream is not None:
            self.stream.finish(self.results)
        elif not self.future.done():
            self.future.set_result(self.results)

    def end(self, error: BaseException) -> None:
        """Fail the job (its stream, or its future) with ``error``; its tasks are the pool's to cancel."""
        if self.stream is not None:
            self.stream.end(error)
        elif not self.future.done():
            self.future.set_exception(error)


@dataclass(frozen=True)
class _Task:
    """One task of a job, sent to a worker and not yet answered."""

    job: _Job
    payload_index: int

    @property
    def label(self) -> str:
        """What the task covers, for error messages."""
        return self.job.labels[self.payload_index]

    def request(self, request_id: int) -> Request:
        """:return: The request that carries the task to its worker (told which units were delivered already, with
        the resume arguments of the last of them, if any)."""
        delivered = frozenset(self.job.delivered[self.payload_index])
        resume_args = self.job.resume_args[self.payload_index]
        args = self.job.payloads[self.payload_index] if resume_args is None else cloudpickle.dumps(resume_args)
        return Request(request_id, self.job.method, args, True, delivered)


@dataclass
class _Slot:
    """Everything the dispatcher knows about one worker position."""

    handle: WorkerHandle | None
    ready: bool = False
    started_at: float = field(default_factory=time.monotonic)  # when the worker was (re)started
    calls_in_flight: dict[int, _Call] = field(default_factory=dict)  # by request id, in the order sent
    tasks_in_flight: dict[int, _Task] = field(default_factory=dict)  # by request id, in the order sent
    waiting_calls: deque[_Call] = field(default_factory=deque)
    sticky: dict[str, _Call] = field(default_factory=dict)
    board: ProgressBoard | None = None
    expected_death: bool = False
    credit: int = 0  # partial results the worker may still send (granted, not yet received)
    unsent_credit: int | None = None  # granted but not yet told to the worker; None when there is nothing to tell

    def attach_board(self, board: ProgressBoard) -> None:
        """
        :param board: The worker's progress board, cleared and handed to the worker before any other call.
        """
        self.board = board
        board.array[:, 0] = -1
        self.waiting_calls.appendleft(_Call(ATTACH_PROGRESS_METHOD, cloudpickle.dumps((board.handle,)), None))

    def task_requests(self, job: _Job) -> tuple[int, ...]:
        """:return: The request ids of the job's tasks on this worker."""
        return tuple(request_id for request_id, task in self.tasks_in_flight.items() if task.job is job)


class WorkerPool:
    """
    A pool of workers, each serving a :class:`~lit_sb3.workers.app.WorkerApp`.

    Control calls go to one worker or all of them; jobs are lists of tasks that workers take as they have room
    (a worker holds at most a few at once, so the load balances itself). A streaming job hands its tasks' partial
    results to a :class:`~lit_sb3.workers.stream.Stream` as they come; the partial results waiting in all streams
    are bounded by ``stream_capacity``, shared out to the workers as credit. A background thread does all the talking
    to workers: it notices a dead worker at once, starts a replacement and hands its unfinished tasks to others
    according to each job's retry policy. Arguments are pickled in the caller's thread, so an argument that cannot
    be pickled raises right there.

    :param app_factories: One callable per worker, building its app inside the worker.
    :param backend: Where the workers run; local processes (forkserver) by default.
    :param max_restarts: How many dead workers the pool replaces over its life before it gives up.
    :param unit_timeout: Seconds a unit (as the app reports on its progress board) may run; None for no limit.
    :param unit_name: What the apps' units are called in error messages.
    :param stream_capacity: Most partial results buffered at once across all workers and streams (sent by a worker
        and not yet taken by a consumer); None for no limit.
    :param put_timeout: Seconds a worker waits for buffer room before dropping a partial result (counted); None to
        wait as long as it takes.
    :param start_timeout: Seconds a worker, or a dead worker's replacement, may take to become ready before the pool
        gives up with a :class:`~lit_sb3.workers.errors.WorkerDiedError`; None to wait as long as it takes.
    :param busy_workers: Whether the workers keep their cores busy while the pool is open: then, when they run on
        this machine's cores, the creator's torch keeps to the cores they leave (see
        :mod:`~lit_sb3.workers.torch_threads`). False for workers that mostly wait for the caller.
    """

    def __init__(
        self,
        app_factories: Sequence[Callable[[], WorkerApp]],
        *,
        backend: Backend | None = None,
        max_restarts: int = 3,
        unit_timeout: float | None = None,
        unit_name: str = "unit",
        stream_capacity: int | None = None,
        put_timeout: float | None = None,
        start_timeout: float | None = DEFAULT_START_TIMEOUT,
        busy_workers: bool = True,
    ) -> None:
        if len(app_factories) == 0:
            raise ValueError("app_factories is empty: a pool needs at least one worker")
        check_non_negative_int("max_restarts", max_restarts)
        if unit_timeout is not None:
            check_positive_number("unit_timeout", unit_timeout)
        if stream_capacity is not None:
            check_positive_int("stream_capacity", stream_capacity)
        if put_timeout is not None:
            check_non_negative_number("put_timeout", put_timeout)
        if start_timeout is not None:
            check_positive_number("start_timeout", start_timeout)
        self.unit_name = unit_name
        self.max_restarts = max_restarts
        self.restarts = 0
        self.unit_timeout = unit_timeout
        self.stream_capacity = stream_capacity
        self.put_timeout = put_timeout
        self.start_timeout = start_timeout
        self._free_credit = stream_capacity or 0
        self._backend = backend if backend is not None else LocalBackend()
        self._request_ids = itertools.count()
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._commands_lock = threading.Lock()
        self._accepting = True
        self._closed = False
        self._stopping = False
        self._broken: BaseException | None = None
        self._jobs: list[_Job] = []
        self._slots: list[_Slot] = []
        self._dispatcher = threading.Thread(target=self._dispatch, name="lit-sb3-pool-dispatcher", daemon=True)
        try:  # a failure or a Ctrl-C at any point leaves no worker, no dispatcher and no backend behind
            self._factories = [_pickled_factory(index, factory) for index, factory in enumerate(app_factories)]
            for index, factory in enumerate(self._factories):
                self._slots.append(_Slot(self._backend.start_worker(index, factory)))
            started = self._wait_until_ready()
            self.slot_counts = [slot_count for slot_count, _ in started]
            self.descriptions = [description for _, description in started]
            _live_pools.add(self)
            self._dispatcher.start()
            if busy_workers and self._backend.takes_cores:
                limit_torch_threads(self, len(self._slots))
        except BaseException:
            while self._dispatcher in threading.enumerate() and not self._dispatcher.is_alive():
                time.sleep(0.001)  # a Ctrl-C came as it started: it runs in a moment
            if self._dispatcher.is_alive():
                self.close()
            else:
                _live_pools.discard(self)
                self._kill_all()
                self._backend.close()
            raise

    # ----------------------------------------------------------------------------------------------- public API

    @property
    def n_workers(self) -> int:
        """Number of workers."""
        return len(self._slots)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def handles(self) -> list[WorkerHandle | None]:
        """The current handle of each worker (a replaced worker has a new one; None once it is gone for good)."""
        return [slot.handle for slot in self._slots]

    @property
    def failure(self) -> BaseException | None:
        """What made the pool unusable (a worker dead past ``max_restarts``, a replay that failed), or None."""
        return self._broken

    @property
    def backend(self) -> Backend:
        """Where the workers run."""
        return self._backend

    def call(self, worker_index: int, method: str, *args: Any, sticky: bool = False) -> Future:
        """
        Call a control method of one worker's app. An immediate method of the app runs between two steps of the
        worker's tasks; any other waits until the tasks sent before it have ended.

        :param worker_index: The worker.
        :param method: Name of the method.
        :param args: Its arguments.
        :param sticky: Also replay this call (the last one per method) on any replacement of the worker.
        :return: Future of the method's return value.
        """
        self._check_usable()
        if not 0 <= worker_index < self.n_workers:
            raise ValueError(f"worker_index must be in [0, {self.n_workers}), got {worker_index}")
        call = _Call(method, cloudpickle.dumps(args), _new_future())

        def command() -> None:
            if self._broken is not None:  # it broke after the check above: the call would wait for a dead worker
                assert call.future is not None
                call.future.set_exception(self._unusable_error())
                return
            slot = self._slots[worker_index]
            if sticky:
                slot.sticky[method] = call
            slot.waiting_calls.append(call)

        self._submit(command)
        assert call.future is not None
        return call.future

    def call_all(self, method: str, args_per_worker: Sequence[tuple[Any, ...]], *, sticky: bool = False) -> list[Any]:
        """
        Call a control method on every worker and wait for all answers.

        :param method: Name of the method.
        :param args_per_worker: Arguments for each worker.
        :param sticky: Replay the call on replacements of the workers.
        :return: The return value of each worker.
        """
        if len(args_per_worker) != self.n_workers:
            raise ValueError(f"args_per_worker has {len(args_per_worker)} entries for {self.n_workers} workers")
        futures = [self.call(i, method, *args, sticky=sticky) for i, args in enumerate(args_per_worker)]
        return [future.result() for future in futures]

    def run_tasks(
        self,
        method: str,
        payloads: list[tuple[Any, ...]],
        *,
        labels: list[str],
        capacities: list[int],
        retry: RetryPolicy = "rerun",
    ) -> Future:
        """
        Run one task per payload on whichever worker has room.

        :param method: Task method of the apps.
        :param payloads: Arguments of each task.
        :param labels: What each task covers, for error messages (e.g. ``"candidates 0-7"``).
        :param capacities: For each worker, how many of the job's tasks it runs at once. A worker also gets one
            task ahead while the job has more pending tasks than there are workers; not at the end, where a task
            sent ahead could wait on a busy worker while another is idle.
        :param retry: What happens to a task whose worker died (see :data:`RetryPolicy`).
        :return: Future of the list of task results, in payload order.
        """
        return self._start_job(method, payloads=payloads, labels=labels, capacities=capacities, retry=retry).future

    def stream_tasks(
        self,
        method: str,
        payloads: list[tuple[Any, ...]],
        *,
        labels: list[str],
        capacities: list[int],
        retry: RetryPolicy = "resume",
    ) -> Stream:
        """
        Run one streaming task per payload on whichever worker has room; their partial results go to the stream.

        :param method: Task method of the apps.
        :param payloads: Arguments of each task.
        :param labels: What each task covers, for error messages.
        :param capacities: For each worker, how many of the job's tasks it runs at once.
        :param retry: What happens to a task whose worker died; by default it resumes on another worker, told which
            units were delivered (nothing is delivered twice) and given the resume arguments of the last of them
            (see :meth:`~lit_sb3.workers.app.WorkerApp.emit`).
        :return: The stream; its ``result`` is the future of the final replies, in payload order.
        """

        def cancel() -> None:
            self._submit(lambda: self._cancel_tasks(job))

        stream = Stream(self._return_credit, cancel)
        job = self._start_job(
            method, payloads=payloads, labels=labels, capacities=capacities, retry=retry, stream=stream
        )
        return stream

    def close(self) -> None:
        """Cancel running jobs, stop every worker (killing those that do not exit) and free resources. Idempotent;
        called again after a Ctrl-C stopped it, it waits for the stop to end."""
        if not self._closed:
            self._closed = True
            _live_pools.discard(self)
            with contextlib.suppress(PoolClosedError):  # else the dispatcher stopped on a failure and cleaned up
                self._submit(self._request_stop)
        try:
            # The finaliser of a collected owner (AsyncEval, an agent) may run on the dispatcher thread itself: it
            # then stops once the call returns.
            if threading.current_thread() is not self._dispatcher:
                self._dispatcher.join()
        finally:
            release_torch_threads(self)

    # ------------------------------------------------------------------------------------------------ internals

    def _start_job(
        self,
        method: str,
        *,
        payloads: list[tuple[Any, ...]],
        labels: list[str],
        capacities: list[int],
        retry: RetryPolicy,
        stream: Stream | None = None,
    ) -> _Job:
        self._check_usable()
        if len(labels) != len(payloads) or len(capacities) != self.n_workers:
            raise ValueError("a job needs one label per payload and one capacity per worker")
        for index, capacity in enumerate(capacities):
            check_positive_int(f"capacities[{index}]", capacity)
        if retry not in RETRY_POLICIES:
            raise ValueError(f"retry must be one of {RETRY_POLICIES}, got {retry!r}")
        future = stream.result if stream is not None else _new_future()
        pickled = [cloudpickle.dumps(payload) for payload in payloads]
        job = _Job(method, pickled, labels, capacities, future, retry, stream)
        if not payloads:
            job.resolve()
            return job

        def command() -> None:
            if self._broken is not None:  # it broke after the check above
                job.end(self._unusable_error())
            else:
                self._jobs.append(job)

        self._submit(command)
        return job

    def _check_usable(self) -> None:
        if self._closed:
            raise PoolClosedError("the worker pool is closed")
        if self._broken is not None:
            raise self._unusable_error()

    def _unusable_error(self) -> RuntimeError:
        """:return: The error of a use of the pool after a failure broke it (a pool dead past its restarts gives a
        :class:`WorkerDiedError` to every caller), caused by that failure."""
        assert self._broken is not None
        error_type = WorkerDiedError if isinstance(self._broken, WorkerDiedError) else RuntimeError
        error = error_type(f"the worker pool is unusable after an earlier failure: {self._broken}")
        error.__cause__ = self._broken
        return error

    def _submit(self, command: Callable[[], None]) -> None:
        with self._commands_lock:
            if not self._accepting:
                raise PoolClosedError("the worker pool is closed")
            self._commands.put(command)
            self._backend.wake()

    def _return_credit(self, count: int) -> None:
        if self.stream_capacity is not None:
            self._submit(lambda: self._add_free_credit(count))

    def _kill_all(self) -> None:
        handles = [slot.handle for slot in self._slots if slot.handle is not None]
        for handle in handles:
            handle.kill()
        for handle in handles:
            handle.join(CLOSE_GRACE_PERIOD)
            handle.release()

    def _wait_until_ready(self) -> list[tuple[int, Any]]:
        started: dict[int, tuple[int, Any]] = {}
        while len(started) < len(self._slots):
            waiting = [
                slot.handle for i, slot in enumerate(self._slots) if i not in started and slot.handle is not None
            ]
            if self.start_timeout is None:
                remaining = None
            else:
                remaining = self._slots[0].started_at + self.start_timeout - time.monotonic()
                if remaining <= 0:
                    raise self._not_ready_error([i for i, slot in enumerate(self._slots) if not slot.ready])
            readable, dead = self._backend.wait(waiting, remaining)
            for handle in readable:
                try:
                    reply: Reply = handle.recv()
                except (EOFError, OSError):
                    dead.append(handle)
                    continue
                if reply.failure is not None:
                    raise WorkerError(handle.worker_index, reply.failure, self.unit_name)
                started[handle.worker_index] = reply.value
                self._on_ready(self._slots[handle.worker_index])
            for handle in dead:
                if handle.worker_index not in started:
                    handle.join(1.0)
                    raise WorkerDiedError(
                        f"worker {handle.worker_index} ({handle.describe_exit()}) died while building its app"
                        + handle.startup_failure_hint()
                    )
        return [started[i] for i in range(len(self._slots))]

    # -------------------------------------------------------------------------------- dispatcher thread below

    def _dispatch(self) -> None:
        try:
            for index, slot in enumerate(self._slots):
                slot.attach_board(self._backend.progress_board(index, (self.slot_counts[index], PROGRESS_COLUMNS)))
            self._grant_credit()
            while True:
                self._run_commands()
                if self._stopping:
                    break
                self._send_work()
                readable, dead = self._backend.wait(self._live_handles(), self._wait_timeout())
                for handle in readable:
                    self._receive(handle)
                for handle in dead:
                    self._on_death(handle)
                self._check_progress()
                self._check_starts()
        except BaseException as exc:
            self._broken = exc
            failure = RuntimeError(f"the worker pool's dispatcher failed: {exc!r}")
            failure.__cause__ = exc
            self._fail_everything(failure)
        finally:
            self._shutdown()

    def _run_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command()

    def _request_stop(self) -> None:
        self._stopping = True

    def _live_handles(self) -> list[WorkerHandle]:
        return [slot.handle for slot in self._slots if slot.handle is not None]

    def _wait_timeout(self) -> float | None:
        starting = self.start_timeout is not None and any(
            slot.handle is not None and not slot.ready for slot in self._slots
        )
        return PROGRESS_CHECK_INTERVAL if self.unit_timeout is not None or starting else None

    def _send_call(self, slot: _Slot, call: _Call) -> None:
        assert slot.handle is not None
        request_id = next(self._request_ids)
        slot.calls_in_flight[request_id] = call
        slot.handle.send(call.request(request_id))  # queued: a worker that stops reading never blocks the dispatcher

    def _send_task(self, slot: _Slot, task: _Task) -> None:
        assert slot.handle is not None
        request_id = next(self._request_ids)
        slot.tasks_in_flight[request_id] = task
        slot.handle.send(task.request(request_id))

    def _send_work(self) -> None:
        for slot in self._slots:
            if not slot.ready:
                continue
            if slot.unsent_credit is not None:
                assert slot.handle is not None
                slot.handle.send(Credit(slot.unsent_credit, self.put_timeout))
                slot.unsent_credit = None
            while slot.waiting_calls:
                self._send_call(slot, slot.waiting_calls.popleft())
        self._jobs = [job for job in self._jobs if not job.finished]
        for job in self._jobs:
            while job.pending and (worker := self._least_loaded(job)) is not None:
                self._send_task(worker, _Task(job, job.pending.popleft()))

    def _least_loaded(self, job: _Job) -> _Slot | None:
        ready = [index for index, slot in enumerate(self._slots) if slot.ready]
        # A stream's tasks never end by themselves, so a task sent ahead would never start: its capacities are hard
        # (the tasks of a dead worker wait for its replacement when the others are full).
        ahead = 1 if job.stream is None and len(job.pending) > len(ready) else 0
        best: _Slot | None = None
        best_count = 0
        for index in ready:
            count = len(self._slots[index].task_requests(job))
            if count < job.capacities[index] + ahead and (best is None or count < best_count):
                best, best_count = self._slots[index], count
        return best

    # ------------------------------------------------------------------------------------------------ credit

    def _on_ready(self, slot: _Slot) -> None:
        slot.ready = True
        if self.stream_capacity is not None:
            slot.unsent_credit = slot.credit  # a replacement starts with what its predecessor had left

    def _add_free_credit(self, count: int) -> None:
        if self.stream_capacity is not None:
            self._free_credit += count
            self._grant_credit()

    def _grant_credit(self) -> None:
        """Hand free buffer room to the workers with the least credit (a slow worker does not hoard it)."""
        ready = [slot for slot in self._slots if slot.ready]
        while self._free_credit > 0 and ready:
            slot = min(ready, key=lambda slot: slot.credit)
            slot.credit += 1
            slot.unsent_credit = (slot.unsent_credit or 0) + 1
            self._free_credit -= 1

    # ----------------------------------------------------------------------------------------------- replies

    def _receive(self, handle: WorkerHandle) -> None:
        if not self._drain(handle):
            self._on_death(handle)

    def _drain(self, handle: WorkerHandle) -> bool:
        """Handle every reply the worker has sent; False once its end of the link is closed."""
        while self._slots[handle.worker_index].handle is handle:
            try:
                if not handle.poll():
                    return True
                reply: Reply = handle.recv()
            except (EOFError, OSError):
                return False
            except Exception as exc:
                raise RuntimeError(f"a reply of worker {handle.worker_index} cannot be read here: {exc!r}") from exc
            self._on_reply(handle.worker_index, reply)
        return True

    def _on_reply(self, index: int, reply: Reply) -> None:
        slot = self._slots[index]
        if reply.request_id == READY_REQUEST_ID:
            self._on_restarted(index, reply)
            return
        if not reply.final:
            self._on_partial(index, reply)
            return
        call = slot.calls_in_flight.pop(reply.request_id, None)
        if call is not None:
            self._on_call_reply(index, call, reply)
            return
        task = slot.tasks_in_flight.pop(reply.request_id, None)
        if task is None or task.job.finished:
            return
        job = task.job
        if reply.cancelled:
            # Dropped because another task failed on that worker: the task runs again (a stream resumes).
            if job.stream is not None:
                job.stream.note_interrupted(reply.value)
            job.pending.appendleft(task.payload_index)
        elif reply.failure is None:
            job.complete(task.payload_index, reply.value)
        else:
            self._fail_job(job, WorkerError(index, reply.failure, self.unit_name))

    def _on_partial(self, index: int, reply: Reply) -> None:
        slot = self._slots[index]
        task = slot.tasks_in_flight.get(reply.request_id)
        if not reply.dropped and self.stream_capacity is not None:
            slot.credit -= 1
        if task is None or task.job.finished:
            if not reply.dropped:
                self._add_free_credit(1)  # a late result of a stopped job: its room is free again
            return
        job = task.job
        assert reply.unit is not None
        if job.stream is None:
            error = RuntimeError(f"{job.method} handed back partial results, but its job was not started as a stream")
            self._fail_job(job, error)
            self._add_free_credit(1)
            return
        job.delivered[task.payload_index].add(reply.unit)
        if reply.resume_args is not None:
            job.resume_args[task.payload_index] = reply.resume_args
        if reply.dropped:
            job.stream.note_dropped(reply.wait_seconds)
        else:
            job.stream.put(StreamItem(index, task.payload_index, reply.unit, reply.value, reply.wait_seconds))

    def _on_call_reply(self, index: int, call: _Call, reply: Reply) -> None:
        slot = self._slots[index]
        if reply.failure is not None and slot.sticky.get(call.method) is call:
            del slot.sticky[call.method]  # a call that failed is not replayed on replacements
        if call.future is None:
            if reply.failure is not None:  # a replay failed: the replacement is not in the state the caller set
                self._broken = WorkerError(index, reply.failure, self.unit_name)
                self._fail_everything(self._broken)
        elif call.future.done():
            return  # failed already, with the error that broke the pool: a late reply changes nothing
        elif reply.failure is None:
            call.future.set_result(reply.value)
        else:
            call.future.set_exception(WorkerError(index, reply.failure, self.unit_name))

    def _fail_job(self, job: _Job, error: BaseException) -> None:
        job.end(error)
        self._cancel_tasks(job)

    def _cancel_tasks(self, job: _Job) -> None:
        """Stop the job's tasks (a cancelled stream's job: the consumer has ended the stream already)."""
        job.pending.clear()
        for slot in self._slots:
            request_ids = slot.task_requests(job)
            if request_ids and slot.ready and slot.handle is not None:
                slot.handle.send(Cancel(request_ids))

    # ------------------------------------------------------------------------------------------------ deaths

    def _on_death(self, handle: WorkerHandle) -> None:
        index = handle.worker_index
        slot = self._slots[index]
        if slot.handle is not handle:
            return  # already replaced
        self._drain(handle)  # what it answered before dying counts
        if slot.handle is not handle:
            return
        handle.join(1.0)
        exit_description = handle.describe_exit()
        handle.release()
        slot.handle = None
        slot.ready = False
        slot.waiting_calls.extendleft(reversed(slot.calls_in_flight.values()))  # sent again, in the same order
        slot.calls_in_flight.clear()
        lost_tasks = list(slot.tasks_in_flight.items())
        slot.tasks_in_flight.clear()
        running_units = self._running_units(slot)
        running: list[str] = []
        for request_id, task in reversed(lost_tasks):
            job = task.job
            if job.finished:
                continue
            running.append(task.label)
            if job.retry == "fail":
                message = f"worker {index} ({exit_description}) died while running {task.label}"
                self._fail_job(job, WorkerDiedError(f"{message}; the job's retry policy is 'fail'"))
                continue
            if job.retry == "rerun":
                job.forget_delivered(task.payload_index)
            elif job.stream is not None:
                job.stream.note_resumed(running_units.get(request_id, 0))
            job.pending.appendleft(task.payload_index)
        if self._stopping or self._broken is not None:
            return
        if not slot.expected_death:
            if self.restarts >= self.max_restarts:
                activity = f" while running {', '.join(reversed(running))}" if running else ""
                self._broken = WorkerDiedError(
                    f"worker {index} ({exit_description}) died{activity}; the pool already replaced "
                    f"{self.restarts} dead worker(s) (max_restarts={self.max_restarts})"
                )
                self._fail_everything(self._broken)
                return
            self.restarts += 1
        slot.expected_death = False
        slot.handle = self._backend.start_worker(index, self._factories[index])
        slot.started_at = time.monotonic()

    def _running_units(self, slot: _Slot) -> dict[int, int]:
        """:return: How many units each task request had running on the slot, as its progress board says."""
        counts: dict[int, int] = {}
        if slot.board is not None:
            for unit, _, request_id in slot.board.array:
                if unit >= 0:
                    counts[int(request_id)] = counts.get(int(request_id), 0) + 1
        return counts

    def _on_restarted(self, index: int, reply: Reply) -> None:
        slot = self._slots[index]
        if reply.failure is not None:
            self._broken = WorkerError(index, reply.failure, self.unit_name)
            self._fail_everything(self._broken)
            return
        self._on_ready(slot)
        # The replays and the board are made anew for the replacement: those sent to, or queued for, the worker that
        # died would replay twice and attach a board closed below (the replacement failed to open it). A sticky call
        # still unanswered is sent once, as itself.
        callers = [call for call in slot.waiting_calls if call.future is not None]
        unanswered = {id(call) for call in callers}
        replays = [_Call(call.method, call.args, None) for call in slot.sticky.values() if id(call) not in unanswered]
        slot.waiting_calls = deque([*replays, *callers])
        if slot.board is not None:
            # A new board: a thread that timed out cannot be stopped, and would write on the old one when it returns.
            slot.board.close()
            slot.attach_board(self._backend.progress_board(index, (self.slot_counts[index], PROGRESS_COLUMNS)))
        self._grant_credit()

    def _check_progress(self) -> None:
        if self.unit_timeout is None:
            return
        now = time.monotonic()
        for index, slot in enumerate(self._slots):
            if slot.board is None or not slot.ready:
                continue
            for unit, started, request_id in slot.board.array.copy():
                if unit >= 0 and now - started > self.unit_timeout:
                    task = slot.tasks_in_flight.get(int(request_id))
                    if task is not None:
                        error = WorkerTimeoutError(index, int(unit), self.unit_timeout, self.unit_name)
                        self._fail_job(task.job, error)
                    slot.expected_death = True  # a stuck worker is replaced without counting as a crash
                    slot.ready = False
                    if slot.handle is not None:
                        slot.handle.kill()
                    break

    def _check_starts(self) -> None:
        if self.start_timeout is None or self._broken is not None:
            return
        now = time.monotonic()
        late = [
            index
            for index, slot in enumerate(self._slots)
            if slot.handle is not None and not slot.ready and now - slot.started_at > self.start_timeout
        ]
        if late:
            self._broken = self._not_ready_error(late)
            self._fail_everything(self._broken)
            for index in late:  # frees what it holds (a Ray actor's CPU) now, not at close()
                handle = self._slots[index].handle
                assert handle is not None
                handle.kill()

    def _not_ready_error(self, indices: list[int]) -> WorkerDiedError:
        return WorkerDiedError(
            f"worker(s) {', '.join(map(str, indices))} not ready {self.start_timeout:g} s after being started "
            "(start_timeout): building the app hangs, or (on Ray) no free resources for the actor"
        )

    def _fail_everything(self, error: BaseException) -> None:
        for job in self._jobs:
            if not job.finished:  # a finished stream keeps its results until they are taken
                job.end(error)
        for slot in self._slots:
            for call in [*slot.calls_in_flight.values(), *slot.waiting_calls]:
                if call.future is not None and not call.future.done():
                    call.future.set_exception(error)
            slot.waiting_calls.clear()

    def _shutdown(self) -> None:
        with self._commands_lock:
            self._accepting = False
        self._run_commands()  # what was submitted before the door closed is failed below
        self._fail_everything(PoolClosedError("the worker pool was closed"))
        deadline = time.monotonic() + CLOSE_GRACE_PERIOD
        handles = [slot.handle for slot in self._slots if slot.handle is not None]
        for slot in self._slots:
            if slot.handle is None:
                continue
            running = tuple(slot.tasks_in_flight)
            if running:
                slot.handle.send(Cancel(running))
            slot.handle.send(Request(next(self._request_ids), CLOSE_METHOD, cloudpickle.dumps(()), False))
        for handle in handles:
            if not handle.join(max(0.0, deadline - time.monotonic())):
                handle.kill()
                handle.join(CLOSE_GRACE_PERIOD)
            handle.release()
        for slot in self._slots:
            slot.handle = None
            if slot.board is not None:
                slot.board.close()
        self._backend.close()


def _pickled_factory(index: int, factory: Callable[[], WorkerApp]) -> bytes:
    try:
        return cloudpickle.dumps(factory)
    except Exception as error:
        raise TypeError(f"app_factories[{index}] cannot be pickled to start worker {index}: {error}") from error
