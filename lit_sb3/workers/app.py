"""What runs inside a worker: the :class:`WorkerApp` interface the worker loop drives."""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from lit_sb3.workers.arrays import ArrayHandle

#: Seconds an :meth:`WorkerApp.advance` runs at most before it hands control back, so that slow environments keep
#: neither a cancel, a close nor new weights waiting.
SECONDS_PER_ADVANCE = 0.1
#: Columns of a progress board row: the unit running on the slot (-1 when idle), when it started, its request.
PROGRESS_COLUMNS = 3


class TaskError(Exception):
    """
    Raised by :meth:`WorkerApp.advance` when a task fails; chain the original exception (``raise ... from exc``).

    :param request_id: The task request that failed.
    :param unit_index: The unit (candidate, episode...) that was running, if known.
    """

    def __init__(self, request_id: int, unit_index: int | None) -> None:
        super().__init__(f"task {request_id} failed on unit {unit_index}")
        self.request_id = request_id
        self.unit_index = unit_index


#: Hands a partial result of a task to the worker loop: ``(request_id, unit, value, resume_args)``.
Emit = Callable[[int, int, Any, tuple[Any, ...] | None], None]


class WorkerApp(ABC):
    """
    The object a worker builds and serves.

    Control methods (listed in ``control_methods``) are called by name once every earlier request is answered;
    those also listed in ``immediate_methods`` run at once, between two :meth:`advance` calls of busy tasks (weight
    updates, statistics), and are answered at once, even while partial results wait for buffer room. Task methods
    (listed in ``task_methods``) are handed to :meth:`submit`; the worker keeps calling :meth:`advance` while
    :attr:`busy` and accepts further tasks in between, so an app can start the next task while the last ones
    finish. A streaming task hands back partial results as it goes with :meth:`emit`.
    """

    control_methods: ClassVar[frozenset[str]] = frozenset()
    immediate_methods: ClassVar[frozenset[str]] = frozenset()
    task_methods: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self._progress: np.ndarray | None = None
        self._emit: Emit | None = None

    @property
    def slot_count(self) -> int:
        """How many units the app can run at the same time (rows of its progress board)."""
        return 1

    def describe(self) -> Any:
        """:return: What the main process learns about the app once it is built."""
        return None

    @abstractmethod
    def submit(
        self, request_id: int, method: str, args: tuple[Any, ...], delivered: frozenset[int] = frozenset()
    ) -> None:
        """
        Accept a task; its result is returned later by :meth:`advance`.

        :param request_id: Id to answer with.
        :param method: One of ``task_methods``.
        :param args: Arguments of the task.
        :param delivered: For a streaming task resumed after its worker died: the units whose partial results were
            delivered already (skip them). ``args`` are then the ``resume_args`` of the last of them, if it had any
            (see :meth:`emit`).
        """

    @property
    @abstractmethod
    def busy(self) -> bool:
        """Whether some accepted task is not finished."""

    @abstractmethod
    def advance(self) -> list[tuple[int, Any]]:
        """
        Run the accepted tasks for a short while (:data:`SECONDS_PER_ADVANCE` at most, beyond the step under way).

        :return: ``(request_id, result)`` of the tasks that finished.
        :raises TaskError: if a task failed.
        """

    @abstractmethod
    def cancel(self, request_ids: tuple[int, ...] | None = None) -> list[int]:
        """
        Drop accepted tasks.

        :param request_ids: The tasks to drop, or None for all of them.
        :return: The ids of the tasks dropped.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the app's resources (environments...)."""

    def dropped(self, request_id: int, unit: int) -> None:  # noqa: B027 - optional hook
        """
        A partial result the app emitted was dropped in the worker (no buffer room within the put timeout).

        :param request_id: Its task.
        :param unit: Its unit.
        """

    def attach_emitter(self, emit: Emit) -> None:
        """
        :param emit: Where :meth:`emit` hands partial results (set by the worker loop).
        """
        self._emit = emit

    def emit(self, request_id: int, unit: int, value: Any, resume_args: tuple[Any, ...] | None = None) -> None:
        """
        Hand back a partial result of a streaming task (during :meth:`advance`).

        :param request_id: The task.
        :param unit: What the result belongs to (an episode...): a resumed task is told which units were delivered.
        :param value: The partial result.
        :param resume_args: The task's arguments from the next unit on, for a task whose state is more than the
            units it delivered: resumed after its worker died, it is submitted with those of its last delivered
            result. None keeps the arguments it has (at first, its own).
        """
        if self._emit is None:
            raise RuntimeError(f"{type(self).__name__}.emit() needs a worker loop: no emitter is attached")
        self._emit(request_id, unit, value, resume_args)

    def attach_progress(self, handle: ArrayHandle) -> None:
        """
        Write unit progress to a board the main process reads to enforce timeouts.

        :param handle: Board of shape ``(slot_count, PROGRESS_COLUMNS)``.
        """
        self._board_block, self._progress = handle.open()
        self._progress[:, 0] = -1

    def detach_progress(self) -> None:
        """Stop writing to the progress board and close it (the worker loop does it when the worker ends)."""
        if self._progress is not None:
            self._progress = None
            with contextlib.suppress(BufferError):
                self._board_block.close()

    def mark_started(self, slot: int, unit_index: int, request_id: int, started_at: float | None = None) -> None:
        """
        Record that ``slot`` runs ``unit_index`` (for timeouts).

        :param slot: The slot.
        :param unit_index: The unit it runs.
        :param request_id: The task request the unit belongs to.
        :param started_at: When the unit started (``time.monotonic()``), now by default.
        """
        if self._progress is not None:
            row = self._progress[slot]
            row[1] = time.monotonic() if started_at is None else started_at
            row[2] = request_id
            row[0] = unit_index  # written last: the reader trusts the start time of a unit it sees

    def mark_idle(self, slot: int) -> None:
        """
        Record that ``slot`` runs nothing.

        :param slot: The slot.
        """
        if self._progress is not None:
            self._progress[slot, 0] = -1
