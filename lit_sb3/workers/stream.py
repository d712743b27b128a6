"""The consumer's end of a streaming job: partial results in arrival order, with counts of what was dropped."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from typing import Any

from lit_sb3.workers.errors import PoolClosedError


@dataclass(frozen=True)
class StreamItem:
    """
    One partial result of a streaming task.

    :param worker_index: The worker that produced it.
    :param task_index: Index of its task in the job's payloads.
    :param unit: What it belongs to (an episode...), as the app named it.
    :param value: The partial result.
    :param wait_seconds: How long it waited in the worker for buffer room (credit).
    """

    worker_index: int
    task_index: int
    unit: int
    value: Any
    wait_seconds: float


@dataclass
class StreamCounts:
    """
    What happened to a stream's partial results.

    :param received: Partial results that reached the stream's buffer.
    :param taken: Partial results the consumer took.
    :param dropped: Discarded in a worker because no buffer room came within the put timeout.
    :param discarded: Discarded on purpose: buffered or held back when the stream was cancelled or failed.
    :param interrupted: Units running on a worker when it died (their partial work is dropped; a resumed task
        runs them again).
    :param resumed: Tasks resumed on another worker after theirs died.
    :param push_wait_seconds: Total time the received and dropped results waited for buffer room in the workers.
    """

    received: int = 0
    taken: int = 0
    dropped: int = 0
    discarded: int = 0
    interrupted: int = 0
    resumed: int = 0
    push_wait_seconds: float = 0.0

    @property
    def avg_push_wait_seconds(self) -> float:
        """Mean time a partial result waited for buffer room (received and dropped ones)."""
        pushed = self.received + self.dropped
        return self.push_wait_seconds / pushed if pushed else 0.0


class Stream:
    """
    Partial results of a job's streaming tasks, consumed with :meth:`get` or by iterating.

    Each result taken frees room in the pool's bounded buffer. :attr:`result` is the future of the tasks' final
    replies, in payload order. A failure of a task ends the stream: :meth:`get` raises it. The pool feeds it
    through :meth:`put`, the ``note_`` methods, :meth:`finish` and :meth:`end`.

    :param return_credit: Called with the number of results that left the buffer (taken or discarded).
    :param cancel: Called by :meth:`cancel` to stop the job's tasks.
    """

    def __init__(self, return_credit: Callable[[int], None], cancel: Callable[[], None]) -> None:
        self.result: Future = Future()
        self.result.set_running_or_notify_cancel()
        self.counts = StreamCounts()
        self._return_credit = return_credit
        self._cancel = cancel
        self._condition = threading.Condition()
        self._items: deque[StreamItem] = deque()
        self._error: BaseException | None = None
        self._ended = False

    @property
    def buffered(self) -> int:
        """Partial results waiting for the consumer."""
        return len(self._items)

    @property
    def ended(self) -> bool:
        """Whether no more results will come (all tasks answered, cancelled or failed)."""
        return self._ended

    def get(self, timeout: float | None = None) -> StreamItem | None:
        """
        Take the oldest partial result.

        :param timeout: Seconds to wait for one; None to wait as long as the stream runs.
        :return: The result, or None once the stream has ended and every result was taken.
        :raises queue.Empty: if nothing came within ``timeout``.
        :raises Exception: the failure that ended the stream (e.g. :class:`~lit_sb3.workers.WorkerError`).
        """
        with self._condition:
            if not self._condition.wait_for(lambda: self._items or self._ended, timeout):
                raise queue.Empty
            if self._error is not None:
                raise self._error
            if not self._items:
                return None
            item = self._items.popleft()
            self.counts.taken += 1
        self._give_back(1)
        return item

    def __iter__(self) -> Iterator[StreamItem]:
        while (item := self.get()) is not None:
            yield item

    def cancel(self) -> None:
        """Stop the tasks and discard what is buffered (counted in ``counts.discarded``). Idempotent."""
        self.end(None)  # first: a task the pool hears about after this belongs to an ended stream, never re-run
        with contextlib.suppress(PoolClosedError):  # a closed pool has stopped the tasks already
            self._cancel()

    # ---------------------------------------------------------------------------- fed by the pool's dispatcher

    def put(self, item: StreamItem) -> None:
        """
        :param item: A partial result that reached the pool; discarded (and its room given back) once the stream
            has ended.
        """
        with self._condition:
            self.counts.received += 1
            self.counts.push_wait_seconds += item.wait_seconds
            if self._ended:
                self.counts.discarded += 1
                discarded = True
            else:
                self._items.append(item)
                self._condition.notify_all()
                discarded = False
        if discarded:
            self._give_back(1)

    def note_dropped(self, wait_seconds: float) -> None:
        """
        :param wait_seconds: How long a partial result a worker dropped waited for room before.
        """
        with self._condition:
            self.counts.dropped += 1
            self.counts.push_wait_seconds += wait_seconds

    def note_interrupted(self, units: int) -> None:
        """
        :param units: Units whose partial work was lost (running on a worker that died, or held back by a worker
            whose task was cancelled).
        """
        with self._condition:
            self.counts.interrupted += units

    def note_resumed(self, interrupted_units: int) -> None:
        """
        Count a task resumed on another worker after its own died.

        :param interrupted_units: Units it had running when its worker died.
        """
        with self._condition:
            self.counts.resumed += 1
            self.counts.interrupted += interrupted_units

    def finish(self, results: list[Any]) -> None:
        """
        :param results: The final replies of every task, in payload order: the stream ends once they are taken.
        """
        with self._condition:
            if not self.result.done():
                self.result.set_result(results)
            self._ended = True
            self._condition.notify_all()

    def end(self, error: BaseException | None) -> None:
        """
        End the stream at once: buffered results are discarded.

        :param error: Raised by :meth:`get` from now on; None for a cancelled stream.
        """
        with self._condition:
            # Under the lock: the dispatcher finishing and a consumer cancelling must not both resolve the future.
            if not self.result.done():
                self.result.set_exception(error if error is not None else CancelledError("the stream was cancelled"))
            if error is not None and self._error is None:
                self._error = error
            count = len(self._items)
            self._items.clear()
            self.counts.discarded += count
            self._ended = True
            self._condition.notify_all()
        self._give_back(count)

    def _give_back(self, count: int) -> None:
        if count:
            with contextlib.suppress(PoolClosedError):  # a closed pool needs no credit back
                self._return_credit(count)
