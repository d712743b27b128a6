"""How arrays travel between the main process and workers, whatever the backend: by handle, never pickled whole."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

import numpy as np


class SupportsClose(Protocol):
    """What a worker keeps open while it uses an array (a shared memory block...)."""

    def close(self) -> None:
        """Release it (the array view must be dropped first)."""


class ArrayHandle(Protocol):
    """Picklable reference to an array a worker opens (shared memory, an object in Ray's store...)."""

    def open(self) -> tuple[SupportsClose, np.ndarray]:
        """:return: What to close once done, and the array."""


class ProgressBoard(Protocol):
    """
    A small float array a worker writes and the pool reads (see :meth:`~lit_sb3.workers.app.WorkerApp.mark_started`).

    :attr array: The pool's view.
    :attr handle: What the worker opens to write to it.
    """

    array: np.ndarray

    @property
    def handle(self) -> ArrayHandle:
        """What the worker opens to write to the board."""

    def close(self) -> None:
        """Release the board."""


class ArrayPublisher(ABC):
    """Makes one array at a time readable by every worker (e.g. the population of a round)."""

    @abstractmethod
    def publish(self, array: np.ndarray) -> ArrayHandle:
        """
        :param array: What the workers should read; copied, so the caller may change it afterwards.
        :return: The handle workers open; valid until the next :meth:`publish` or :meth:`close`.
        """

    @abstractmethod
    def close(self) -> None:
        """Release what was published."""
