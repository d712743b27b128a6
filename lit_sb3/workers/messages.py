"""Messages exchanged between the pool and its workers, whatever carries them (a pipe, a queue, an actor call)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lit_sb3.workers.errors import RemoteFailure

#: ``request_id`` of the reply a worker sends once its app is built (or failed to build).
READY_REQUEST_ID = -1
#: Method name of the request that stops a worker.
CLOSE_METHOD = "__close__"
#: Method name of the request that hands a worker its progress board (see :meth:`WorkerApp.attach_progress`).
ATTACH_PROGRESS_METHOD = "__attach_progress__"


@dataclass(frozen=True)
class Request:
    """
    A call to a method of the worker's app.

    :param request_id: Unique id; the worker answers with exactly one final :class:`Reply` carrying it.
    :param method: Name of the app method.
    :param args: Positional arguments, pickled (so that arguments a worker cannot rebuild fail the request only).
    :param is_task: Task requests are pipelined (the worker accepts more while it runs them); control
        requests run once every earlier request has been answered, except the app's immediate methods, which run
        between two steps of busy tasks.
    :param delivered: For a task resumed on another worker: the units whose partial results were already delivered.
    """

    request_id: int
    method: str
    args: bytes
    is_task: bool
    delivered: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Reply:
    """
    Answer to one :class:`Request`: one final reply, preceded by any number of partial ones for a streaming task.

    :param request_id: The request answered.
    :param value: Return value of the method (or the partial result), if it succeeded.
    :param failure: Description of the exception, if it failed.
    :param cancelled: The task was dropped by a :class:`Cancel`; ``value`` is how many of its partial results the
        worker discarded unsent.
    :param unit: For a partial result, the unit (episode...) it belongs to; None for the final reply.
    :param dropped: A partial result the worker discarded because no credit came within its put timeout.
    :param wait_seconds: How long the partial result waited for credit in the worker.
    :param resume_args: For a partial result: the task's arguments should it resume after this unit (see
        :meth:`~lit_sb3.workers.app.WorkerApp.emit`), or None.
    """

    request_id: int
    value: Any = None
    failure: RemoteFailure | None = None
    cancelled: bool = False
    unit: int | None = None
    dropped: bool = False
    wait_seconds: float = 0.0
    resume_args: tuple[Any, ...] | None = None

    @property
    def final(self) -> bool:
        """Whether this reply ends its request."""
        return self.unit is None


@dataclass(frozen=True)
class Cancel:
    """
    Drop task requests: the worker stops running them and answers each with a cancelled reply.

    :param request_ids: The task requests to drop (unknown ids are ignored).
    """

    request_ids: tuple[int, ...]


@dataclass(frozen=True)
class Credit:
    """
    Lets a worker send ``count`` more partial results (each frees one when the pool's consumer takes it).

    :param count: Partial results the worker may send in addition to what it was granted before.
    :param put_timeout: Seconds a partial result may wait for credit before the worker drops it; None to wait.
    """

    count: int
    put_timeout: float | None = None
