"""Backend running each worker as a thread of this process: same loop, messages and failure handling as processes,
without the start-up cost or copies of replies (arguments are still pickled, so workers own what they get)."""

from __future__ import annotations

import sys
import threading
import traceback
from abc import abstractmethod
from collections import deque
from typing import Any

import torch

from lit_sb3.workers.backend import Backend, WorkerHandle
from lit_sb3.workers.torch_threads import torch_on_this_thread_alone
from lit_sb3.workers.worker import run_worker

#: Seconds between the interpreter's forced thread switches while worker threads run (Python's default: 0.005).
#: A thread that gave the GIL up (the trainer, in each torch operation that releases it) waits up to this long
#: for a busy worker thread to hand it back.
WORKER_SWITCH_INTERVAL = 0.0005


class SwitchInterval:
    """
    Shortens ``sys.setswitchinterval`` while any worker thread runs, and puts the value it found back when the last
    one ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._saved = 0.0

    @property
    def holders(self) -> int:
        """Worker threads running."""
        return self._holders

    def hold(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(self._saved, WORKER_SWITCH_INTERVAL))
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                sys.setswitchinterval(self._saved)


#: The interval of every worker thread of this process.
SWITCH_INTERVAL = SwitchInterval()


class MessagePipe:
    """One direction of a link between two threads: a deque guarded by a condition shared with the reader's waits."""

    def __init__(self, condition: threading.Condition) -> None:
        self.condition = condition
        self.items: deque[Any] = deque()
        self.closed = False

    def put(self, message: Any) -> None:
        with self.condition:
            if not self.closed:
                self.items.append(message)
                self.condition.notify_all()

    def get(self) -> Any:
        with self.condition:
            self.condition.wait_for(lambda: self.items or self.closed)
            if not self.items:
                raise EOFError("the pool closed the link")
            return self.items.popleft()

    def poll(self, timeout: float | None = 0.0) -> bool:
        with self.condition:
            return bool(self.condition.wait_for(lambda: self.items or self.closed, timeout))

    def close(self) -> None:
        with self.condition:
            self.closed = True
            self.condition.notify_all()


class PipeChannel:
    """The :class:`~lit_sb3.workers.worker.Channel` of a worker loop whose other end is a thread of its process."""

    def __init__(self, inbox: MessagePipe, outbox: MessagePipe) -> None:
        self._inbox = inbox
        self._outbox = outbox

    def send(self, message: Any) -> None:
        if self._inbox.closed:
            raise EOFError("the pool closed the link")
        self._outbox.put(message)

    def recv(self) -> Any:
        return self._inbox.get()

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self._inbox.poll(timeout)


class NotifyingHandle(WorkerHandle):
    """A worker whose replies and end are noticed in this process, each notifying its backend's activity condition."""

    @property
    @abstractmethod
    def ended(self) -> bool:
        """Whether the worker is gone for the pool."""


class NotifiedBackend(Backend):
    """A backend whose workers notify one condition of this process (their replies and ends): what :meth:`wait`
    blocks on."""

    def __init__(self) -> None:
        self._activity = threading.Condition()
        self._woken = False

    def wait(self, handles: list[WorkerHandle], timeout: float | None) -> tuple[list[WorkerHandle], list[WorkerHandle]]:
        workers = [handle for handle in handles if isinstance(handle, NotifyingHandle)]

        def ready() -> bool:
            return self._woken or any(worker.poll() or worker.ended for worker in workers)

        with self._activity:
            self._activity.wait_for(ready, timeout)
            self._woken = False
            readable: list[WorkerHandle] = [worker for worker in workers if worker.poll()]
            dead: list[WorkerHandle] = [worker for worker in workers if worker.ended]
        return readable, dead

    def wake(self) -> None:
        with self._activity:
            self._woken = True
            self._activity.notify_all()


class ThreadWorker(NotifyingHandle):
    """
    A worker thread and the pool's end of its link.

    A thread cannot be killed: :meth:`kill` cuts its link, so the pool treats it as dead at once and the thread ends
    as soon as its app returns control (a thread stuck inside an environment step stays until the step returns).

    :param worker_index: Index of the worker in the pool.
    :param app_factory: Cloudpickled callable building the app.
    :param activity: Condition notified whenever the worker sends or ends.
    """

    def __init__(self, worker_index: int, app_factory: bytes, activity: threading.Condition) -> None:
        self.worker_index = worker_index
        self._activity = activity
        self.to_worker = MessagePipe(threading.Condition())
        self.from_worker = MessagePipe(activity)
        self.killed = False
        self.failure: str | None = None
        self.thread = threading.Thread(
            target=self._run, args=(app_factory,), name=f"lit-sb3-worker-{worker_index}", daemon=True
        )
        self._torch_set = threading.Event()
        torch_threads = torch.get_num_threads()
        SWITCH_INTERVAL.hold()
        try:
            self.thread.start()
        except BaseException:
            SWITCH_INTERVAL.release()
            raise
        self._torch_set.wait()
        torch.set_num_threads(torch_threads)  # what threads begin with again (the worker's count is its own)

    def _run(self, app_factory: bytes) -> None:
        try:
            try:
                torch_on_this_thread_alone()
            finally:
                self._torch_set.set()
            run_worker(PipeChannel(self.to_worker, self.from_worker), app_factory)
        except BaseException:  # a failure of the loop itself: the pool sees a dead worker and this traceback
            self.failure = traceback.format_exc()
        finally:
            SWITCH_INTERVAL.release()
            with self._activity:
                self._activity.notify_all()

    @property
    def ended(self) -> bool:
        """Whether the worker is gone for the pool (its thread ended, or it was killed)."""
        return self.killed or not self.thread.is_alive()

    def send(self, message: Any) -> None:
        self.to_worker.put(message)

    def recv(self) -> Any:
        return self.from_worker.get()

    def poll(self) -> bool:
        return bool(self.from_worker.items)

    def describe_exit(self) -> str:
        if self.killed:
            return f"thread {self.thread.name}, killed"
        if self.failure is not None:
            return f"thread {self.thread.name}, failed:\n{self.failure}"
        return f"thread {self.thread.name}, ended"

    def kill(self) -> None:
        self.killed = True
        self.to_worker.close()
        self.from_worker.close()

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def release(self) -> None:
        self.kill()


class ThreadBackend(NotifiedBackend):
    """
    Workers as threads of this process (``use_mp=False``). While worker threads run, the interpreter switches
    threads every :data:`WORKER_SWITCH_INTERVAL` seconds, so that a thread waiting for the GIL (the trainer) is not
    held up by a worker thread's pure-Python steps for Python's default 5 ms.
    """

    name = "threads"
    takes_cores = True

    def start_worker(self, worker_index: int, app_factory: bytes) -> ThreadWorker:
        return ThreadWorker(worker_index, app_factory, self._activity)

    def close(self) -> None:
        """Nothing to release: the workers' links go with their handles."""
