"""Backend running each worker in a local process, talking through a pipe."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import threading
from collections.abc import Sequence
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from lit_sb3.workers.backend import Backend, WorkerHandle
from lit_sb3.workers.errors import describe_exit
from lit_sb3.workers.worker import run_worker

#: Modules the fork server always imports (what every worker process imports to set itself up); users of the pool
#: add the heavy modules of their apps.
BASE_PRELOAD = ("torch", "threadpoolctl", "lit_sb3.workers.local")
#: Seconds a writer thread gets to finish when its worker is released.
WRITER_JOIN_TIMEOUT = 1.0
#: Seconds between a writer thread's checks that its worker is alive while it has nothing to send (a worker whose
#: handle was never released, e.g. after a Ctrl-C while its pool started, still lets its writer end).
WRITER_IDLE_CHECK = 1.0
#: How often a worker checks that the process that started it is still alive (seconds).
PARENT_CHECK_INTERVAL = 0.5


def _exit_when_orphaned(lifeline: Connection) -> None:
    # The main process holds the only write end of the lifeline: its death makes the lifeline readable (end of
    # file). Under fork, sibling workers inherit that write end too, but there the parent is the main process
    # itself, so a changed parent pid tells instead.
    parent_pid = os.getppid()

    def watch() -> None:
        while not lifeline.poll(PARENT_CHECK_INTERVAL) and os.getppid() == parent_pid:
            pass
        os._exit(1)

    threading.Thread(target=watch, name="lit-sb3-orphan-watch", daemon=True).start()


def _process_main(connection: Connection, lifeline: Connection, app_factory: bytes) -> None:
    os.setsid()  # own process group: stopping the worker stops what its environments started; no terminal Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_when_orphaned(lifeline)
    # One thread per worker: workers already fill the cores, and BLAS threads spinning on busy cores cost more than
    # they bring (1000x1000 matrix products ran over ten times slower with two workers on two cores).
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
    run_worker(connection, app_factory)


def default_start_method() -> str:
    """:return: ``"forkserver"`` where available, else ``"spawn"``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def start_fork_server(preload: Sequence[str] = ()) -> None:
    """
    Start this process's fork server now, where the platform has one; it imports its modules in the background,
    so that workers started later do not wait for those imports (a cold start took about 2 s here, 0.1 s warm).
    Only the first start of a process sets what the server imports.

    :param preload: Modules the server imports besides :data:`BASE_PRELOAD` (the heavy modules of the apps).
    """
    if "forkserver" in mp.get_all_start_methods():
        mp.get_context("forkserver").set_forkserver_preload([*BASE_PRELOAD, *preload])
        forkserver.ensure_running()


class LocalWorker(WorkerHandle):
    """
    A worker process and the main end of its pipe.

    Messages are written by a thread of the handle's own, so that a worker that stops reading (stuck in its
    environment) never blocks the pool's dispatcher.

    :param worker_index: Index of the worker in the pool.
    :param process: The started process.
    :param connection: The main end of its pipe.
    :param start_method: The ``multiprocessing`` start method that started it.
    """

    def __init__(self, worker_index: int, process: BaseProcess, connection: Connection, start_method: str) -> None:
        self.worker_index = worker_index
        self.start_method = start_method
        self.process = process
        self.connection = connection
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer = threading.Thread(
            target=self._write, name=f"lit-sb3-writer-{worker_index}-{process.pid}", daemon=True
        )
        self._writer.start()

    @property
    def pid(self) -> int | None:
        """Process id of the worker."""
        return self.process.pid

    def send(self, message: Any) -> None:
        self._outbox.put(message)

    def _next_message(self) -> Any:
        """:return: The next message to send; None when released, or when the worker ended."""
        while True:
            try:
                return self._outbox.get(timeout=WRITER_IDLE_CHECK)
            except queue.Empty:
                try:
                    if wait([self.process.sentinel], 0):
                        return None
                except ValueError:  # the process object was closed
                    return None

    def _write(self) -> None:
        while (message := self._next_message()) is not None:
            # What the dispatcher sent meanwhile goes in one write (a worker's tasks arrive together, not one by one
            # while the first already runs).
            batch = [message]
            while not self._outbox.empty() and (message := self._outbox.get()) is not None:
                batch.append(message)
            try:
                self.connection.send(batch)
            except (OSError, ValueError):
                return  # the worker is gone; the pool learns it from the process sentinel
            if message is None:
                return

    def recv(self) -> Any:
        return self.connection.recv()

    def poll(self) -> bool:
        return self.connection.poll()

    def describe_exit(self) -> str:
        return f"pid {self.process.pid}, {describe_exit(self.process.exitcode)}"

    def startup_failure_hint(self) -> str:
        # Exit code 1 without a reply: Python failed before the worker's code ran, which catches and sends its errors.
        if self.process.exitcode != 1 or self.start_method == "fork":
            return ""
        return (
            f"; it failed before lit_sb3's worker code ran (its traceback is on stderr above). With start method "
            f"{self.start_method!r} every new process imports the main module first: a script must build agents, "
            'evaluators and engines under `if __name__ == "__main__":`'
        )

    def kill(self) -> None:
        # The worker leads its own process group: take what its environments started along with it.
        if self.process.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()

    def join(self, timeout: float) -> bool:
        self.process.join(timeout)
        return self.process.exitcode is not None

    def release(self) -> None:
        if self.process.pid is not None:  # stragglers of the worker's process group
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self._outbox.put(None)
        self._writer.join(WRITER_JOIN_TIMEOUT)
        self.connection.close()
        with contextlib.suppress(ValueError):
            self.process.close()


class LocalBackend(Backend):
    """
    Workers as local processes.

    :param start_method: ``multiprocessing`` start method; defaults to ``"forkserver"`` where available, else
        ``"spawn"``.
    :param preload: Modules the fork server imports once (e.g. the module of the app, which imports torch), so that
        each worker starts without importing them again. Only the first pool of a process starts the fork server.
    """

    name = "processes"
    takes_cores = True

    def __init__(self, start_method: str | None = None, *, preload: Sequence[str] = ()) -> None:
        if start_method is None:
            start_method = default_start_method()
        available = mp.get_all_start_methods()
        if start_method not in available:
            raise ValueError(f"start_method must be one of {available}, got {start_method!r}")
        self.start_method = start_method
        self._context = mp.get_context(start_method)
        if start_method == "forkserver":
            start_fork_server(preload)
        self._lifeline_reader, self._lifeline_writer = self._context.Pipe(duplex=False)
        self._wake_reader, self._wake_writer = os.pipe()
        os.set_blocking(self._wake_reader, False)
        os.set_blocking(self._wake_writer, False)

    def start_worker(self, worker_index: int, app_factory: bytes) -> LocalWorker:
        main_end, worker_end = self._context.Pipe(duplex=True)
        process = self._context.Process(  # type: ignore[attr-defined]
            target=_process_main,
            args=(worker_end, self._lifeline_reader, app_factory),
            name=f"lit-sb3-worker-{worker_index}",
            daemon=False,  # workers may start processes of their own (SubprocVecEnv)
        )
        process.start()
        worker_end.close()
        return LocalWorker(worker_index, process, main_end, self.start_method)

    def wait(self, handles: list[WorkerHandle], timeout: float | None) -> tuple[list[WorkerHandle], list[WorkerHandle]]:
        by_object: dict[Any, tuple[LocalWorker, bool]] = {}
        for handle in handles:
            assert isinstance(handle, LocalWorker)
            by_object[handle.connection] = (handle, False)
            by_object[handle.process.sentinel] = (handle, True)
        ready = wait([*by_object, self._wake_reader], timeout)
        if self._wake_reader in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_reader, 4096):
                    pass
        readable: list[WorkerHandle] = []
        dead: list[WorkerHandle] = []
        for item in ready:
            if item == self._wake_reader:
                continue
            handle, is_sentinel = by_object[item]
            target = dead if is_sentinel else readable
            if handle not in target:
                target.append(handle)
        return readable, dead

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe is awake enough
            os.write(self._wake_writer, b"\0")

    def close(self) -> None:
        self._lifeline_writer.close()
        self._lifeline_reader.close()
        os.close(self._wake_reader)
        os.close(self._wake_writer)
