"""Backend running each worker in a local process, talking through a pipe."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import threading
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from lit_sb3.workers.backend import Backend, WorkerHandle
from lit_sb3.workers.errors import describe_exit
from lit_sb3.workers.worker import worker_main

#: Modules the fork server imports once, so that each worker starts without importing torch again.
FORKSERVER_PRELOAD = ["lit_sb3.evaluation.evaluator", "lit_sb3.workers.worker"]


def default_start_method() -> str:
    """:return: ``"forkserver"`` where available, else ``"spawn"``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


class LocalWorker(WorkerHandle):
    """
    A worker process and the main end of its pipe.

    :param worker_index: Index of the worker in the pool.
    :param process: The started process.
    :param connection: The main end of its pipe.
    """

    def __init__(self, worker_index: int, process: BaseProcess, connection: Connection) -> None:
        self.worker_index = worker_index
        self.process = process
        self.connection = connection

    @property
    def pid(self) -> int | None:
        """Process id of the worker."""
        return self.process.pid

    def send(self, message: Any) -> None:
        self.connection.send(message)

    def recv(self) -> Any:
        return self.connection.recv()

    def poll(self) -> bool:
        return self.connection.poll()

    def is_alive(self) -> bool:
        return self.process.is_alive()

    def describe_exit(self) -> str:
        return f"pid {self.process.pid}, {describe_exit(self.process.exitcode)}"

    def kill(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()

    def join(self, timeout: float) -> bool:
        self.process.join(timeout)
        return self.process.exitcode is not None

    def release(self) -> None:
        self.connection.close()
        with contextlib.suppress(ValueError):
            self.process.close()


class LocalBackend(Backend):
    """
    Workers as local processes.

    :param start_method: ``multiprocessing`` start method; defaults to ``"forkserver"`` where available, else
        ``"spawn"``. Under forkserver, torch, Stable-Baselines3 and gymnasium are imported once in the fork server.
    """

    def __init__(self, start_method: str | None = None) -> None:
        if start_method is None:
            start_method = default_start_method()
        available = mp.get_all_start_methods()
        if start_method not in available:
            raise ValueError(f"start_method must be one of {available}, got {start_method!r}")
        self.start_method = start_method
        self._context = mp.get_context(start_method)
        if start_method == "forkserver":
            self._context.set_forkserver_preload(FORKSERVER_PRELOAD)
        self._wake_reader, self._wake_writer = mp.Pipe(duplex=False)
        self._wake_lock = threading.Lock()
        self._woken = False

    def start_worker(self, worker_index: int, app_factory: bytes) -> LocalWorker:
        main_end, worker_end = self._context.Pipe(duplex=True)
        process = self._context.Process(  # type: ignore[attr-defined]
            target=worker_main,
            args=(worker_end, worker_index, app_factory),
            name=f"lit-sb3-worker-{worker_index}",
            daemon=False,  # workers may start processes of their own (SubprocVecEnv)
        )
        process.start()
        worker_end.close()
        return LocalWorker(worker_index, process, main_end)

    def wait(self, handles: list[WorkerHandle], timeout: float | None) -> tuple[list[WorkerHandle], list[WorkerHandle]]:
        by_object: dict[Any, tuple[LocalWorker, bool]] = {}
        for handle in handles:
            assert isinstance(handle, LocalWorker)
            by_object[handle.connection] = (handle, False)
            by_object[handle.process.sentinel] = (handle, True)
        ready = wait([*by_object, self._wake_reader], timeout)
        if self._wake_reader in ready:
            with self._wake_lock:
                while self._wake_reader.poll():
                    self._wake_reader.recv_bytes()
                self._woken = False
        readable: list[WorkerHandle] = []
        dead: list[WorkerHandle] = []
        for item in ready:
            if item is self._wake_reader:
                continue
            handle, is_sentinel = by_object[item]
            target = dead if is_sentinel else readable
            if handle not in target:
                target.append(handle)
        return readable, dead

    def wake(self) -> None:
        with self._wake_lock:
            if not self._woken:
                self._woken = True
                self._wake_writer.send_bytes(b"")

    def close(self) -> None:
        self._wake_reader.close()
        self._wake_writer.close()
