"""The interface a pool backend implements: start workers, talk to them, move arrays, notice when they die."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from lit_sb3.workers.arrays import ArrayPublisher, ProgressBoard
from lit_sb3.workers.shared_array import SharedArray, SharedMemoryPublisher


class WorkerHandle(ABC):
    """The main process's side of one worker."""

    worker_index: int

    @abstractmethod
    def send(self, message: Any) -> None:
        """
        :param message: A request (or cancel) for the worker.
        """

    @abstractmethod
    def recv(self) -> Any:
        """:return: The next reply of the worker (call only when :meth:`poll` or :meth:`Backend.wait` says so)."""

    @abstractmethod
    def poll(self) -> bool:
        """:return: Whether a reply (or the end of the stream) can be read without blocking."""

    @abstractmethod
    def describe_exit(self) -> str:
        """:return: How the worker ended, e.g. ``"killed by SIGKILL"``."""

    def startup_failure_hint(self) -> str:
        """:return: What a worker that died before it said it was ready most likely needs (empty: nothing known)."""
        return ""

    @abstractmethod
    def kill(self) -> None:
        """Stop the worker at once."""

    @abstractmethod
    def join(self, timeout: float) -> bool:
        """
        :param timeout: Seconds to wait for the worker to exit.
        :return: Whether it has exited.
        """

    @abstractmethod
    def release(self) -> None:
        """Free the handle's resources once the worker has exited."""


class Backend(ABC):
    """Where workers run: local processes, Ray actors... (chosen by users through
    :class:`~lit_sb3.workers.choice.BackendChoice`)."""

    #: Whether the workers run on this machine's cores, as processes or threads (the pool then keeps its creator's
    #: torch threads to the cores they leave: see :mod:`~lit_sb3.workers.torch_threads`).
    takes_cores: bool = False

    @property
    @abstractmethod
    def name(self) -> str:
        """What reports call the backend: ``"processes"``, ``"threads"``, ``"ray"``..."""

    @abstractmethod
    def start_worker(self, worker_index: int, app_factory: bytes) -> WorkerHandle:
        """
        Start a worker that builds its app with ``app_factory``.

        :param worker_index: Index of the worker in the pool.
        :param app_factory: Cloudpickled callable returning a :class:`~lit_sb3.workers.app.WorkerApp`.
        :return: The handle.
        """

    @abstractmethod
    def wait(self, handles: list[WorkerHandle], timeout: float | None) -> tuple[list[WorkerHandle], list[WorkerHandle]]:
        """
        Block until a worker has a reply, a worker died, :meth:`wake` was called, or ``timeout`` passed.

        :param handles: The workers to watch.
        :param timeout: Maximum seconds to block.
        :return: The workers with a reply to read, and the workers that died.
        """

    @abstractmethod
    def wake(self) -> None:
        """Make a pending :meth:`wait` return (thread-safe)."""

    @abstractmethod
    def close(self) -> None:
        """Release the backend's own resources."""

    def array_publisher(self) -> ArrayPublisher:
        """:return: How arrays every worker reads travel (shared memory unless the backend says otherwise)."""
        return SharedMemoryPublisher()

    def progress_board(self, worker_index: int, shape: tuple[int, ...]) -> ProgressBoard:
        """
        :param worker_index: The worker (and any replacement of it) that writes the board.
        :param shape: Shape of the board.
        :return: A board the worker writes and the pool reads (shared memory unless the backend says otherwise).
        """
        return SharedArray(shape, np.float64)
