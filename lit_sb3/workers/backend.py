"""The interface a pool backend implements: start workers, talk to them, move arrays, notice when they die."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from lit_sb3.workers.arrays import ArrayPublisher, ProgressBoard
from lit_sb3.workers.shared_array import SharedArray, SharedMemoryPublisher

#: The backends chosen by name: local processes, or Ray actors (``pip install lit_sb3[ray]``).
BackendName = Literal["local", "ray"]
BACKEND_NAMES: tuple[BackendName, ...] = ("local", "ray")


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
    """Where workers run: local processes, Ray actors..."""

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


def make_backend(
    backend: BackendName | Backend,
    *,
    start_method: str | None = None,
    preload: Sequence[str] = (),
    ray_address: str | None = None,
    worker_resources: Mapping[str, float] | None = None,
) -> Backend:
    """
    The backend a user of the pool chose with one keyword.

    :param backend: ``"local"`` (worker processes on this machine), ``"ray"`` (one Ray actor per worker) or a
        backend object, used as it is.
    :param start_method: ``multiprocessing`` start method of the local backend.
    :param preload: Modules the local backend's fork server imports once (the heavy modules of the app).
    :param ray_address: Ray cluster to connect to (``ray.init(address=...)``); by default the connection this process
        already has, else a new local Ray instance.
    :param worker_resources: Ray resources of each worker: ``num_cpus`` (1 by default), ``num_gpus``, ``memory``
        and custom resources by name.
    :return: The backend.
    """
    if isinstance(backend, Backend):
        chosen = "a backend object"
    elif backend in BACKEND_NAMES:
        chosen = f"backend={backend!r}"
    else:
        raise ValueError(f"backend must be one of {BACKEND_NAMES} or a Backend object, got {backend!r}")
    if backend != "ray" and (ray_address is not None or worker_resources is not None):
        raise ValueError(f"ray_address and worker_resources need backend='ray', got {chosen}")
    if backend != "local" and start_method is not None:
        raise ValueError(f"start_method is for backend='local' only, got {chosen}")
    if isinstance(backend, Backend):
        return backend
    if backend == "local":
        from lit_sb3.workers.local import LocalBackend

        return LocalBackend(start_method, preload=preload)
    from lit_sb3.workers.ray_backend import RayBackend

    return RayBackend(ray_address, worker_resources=worker_resources)
