"""Messages exchanged between the pool (main process) and its workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lit_sb3.workers.errors import RemoteFailure

#: ``request_id`` of the reply a worker sends once its app is built (or failed to build).
READY_REQUEST_ID = -1
#: Method name of the request that stops a worker.
CLOSE_METHOD = "__close__"
#: Method name of the request that hands a worker its progress board (see :mod:`lit_sb3.workers.progress`).
ATTACH_PROGRESS_METHOD = "__attach_progress__"


@dataclass(frozen=True)
class Request:
    """
    A call to a method of the worker's app.

    :param request_id: Unique id; the worker answers with exactly one :class:`Reply` carrying it.
    :param method: Name of the app method.
    :param args: Positional arguments, pickled (so that arguments a worker cannot rebuild fail the request only).
    :param is_task: Task requests are pipelined (the worker accepts more while it runs them); control
        requests run only once every earlier request has been answered.
    """

    request_id: int
    method: str
    args: bytes
    is_task: bool


@dataclass(frozen=True)
class Reply:
    """
    Answer to one :class:`Request`.

    :param request_id: The request answered.
    :param value: Return value of the method, if it succeeded.
    :param failure: Description of the exception, if it failed.
    """

    request_id: int
    value: Any = None
    failure: RemoteFailure | None = None


@dataclass(frozen=True)
class Cancel:
    """
    Drop task requests: the worker stops running them and answers each with a failure.

    :param request_ids: The task requests to drop (unknown ids are ignored).
    """

    request_ids: tuple[int, ...]
