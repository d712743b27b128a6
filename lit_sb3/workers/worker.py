"""The loop a worker process runs: build the app, then answer requests until told to stop."""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from lit_sb3.workers.app import TaskError, WorkerApp
from lit_sb3.workers.errors import RemoteFailure
from lit_sb3.workers.messages import (
    ATTACH_PROGRESS_METHOD,
    CLOSE_METHOD,
    READY_REQUEST_ID,
    Cancel,
    Reply,
    Request,
)

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


def worker_main(connection: Connection, lifeline: Connection, worker_index: int, app_factory: bytes) -> None:
    """
    Entry point of a worker process.

    :param connection: Duplex connection to the pool.
    :param lifeline: Read end of a pipe only the main process writes to (and never does).
    :param worker_index: Index of this worker in the pool.
    :param app_factory: Cloudpickled callable that builds the :class:`WorkerApp`.
    """
    os.setsid()  # own process group: stopping the worker stops what its environments started; no terminal Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_when_orphaned(lifeline)
    # One thread per worker: workers already fill the cores, and BLAS threads spinning on busy cores cost more than
    # they bring (1000x1000 matrix products ran over ten times slower with two workers on two cores).
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
    try:
        factory: Callable[[], WorkerApp] = cloudpickle.loads(app_factory)
        app = factory()
        description = app.describe()
    except BaseException as exc:
        connection.send(Reply(READY_REQUEST_ID, failure=RemoteFailure.from_exception(exc)))
        return
    connection.send(Reply(READY_REQUEST_ID, value=(app.slot_count, description)))
    try:
        _serve(connection, app)
    except (EOFError, OSError):
        app.close()  # the pool is gone


def _serve(connection: Connection, app: WorkerApp) -> None:
    held: Request | None = None  # a control request waiting for the running tasks to finish
    while True:
        if app.busy:
            while held is None and connection.poll():
                message = connection.recv()
                if isinstance(message, Request) and not message.is_task:
                    held = message
                else:
                    _accept(connection, app, message)
            _advance(connection, app)
            continue
        if held is not None:
            message, held = held, None
        else:
            message = connection.recv()
        if isinstance(message, Request) and not message.is_task:
            if not _control(connection, app, message):
                return
        else:
            _accept(connection, app, message)


def _arguments(request: Request) -> tuple[Any, ...]:
    # Arguments travel pickled so that one that cannot be rebuilt here fails its request, not the worker.
    return pickle.loads(request.args)


def _accept(connection: Connection, app: WorkerApp, message: Request | Cancel) -> None:
    if isinstance(message, Cancel):
        for request_id in app.cancel(message.request_ids):
            connection.send(Reply(request_id, failure=_cancelled()))
        return
    try:
        app.submit(message.request_id, message.method, _arguments(message))
    except BaseException as exc:
        app.cancel((message.request_id,))
        connection.send(Reply(message.request_id, failure=RemoteFailure.from_exception(exc)))


def _advance(connection: Connection, app: WorkerApp) -> None:
    try:
        finished = app.advance()
    except TaskError as error:
        cause = error.__cause__ if error.__cause__ is not None else error
        connection.send(Reply(error.request_id, failure=RemoteFailure.from_exception(cause, error.unit_index)))
        # The failed task's round is lost: drop what else was accepted so the pool hears about each of them.
        for request_id in app.cancel(None):
            connection.send(Reply(request_id, failure=_cancelled()))
        return
    except BaseException as exc:
        # Not attributable to one task: every task accepted fails with it.
        failure = RemoteFailure.from_exception(exc)
        for request_id in app.cancel(None):
            connection.send(Reply(request_id, failure=failure))
        return
    for request_id, result in finished:
        connection.send(Reply(request_id, value=result))


def _control(connection: Connection, app: WorkerApp, request: Request) -> bool:
    """Answer a control request; False once the worker must stop."""
    value: Any = None
    try:
        arguments = _arguments(request)
        if request.method == CLOSE_METHOD:
            app.close()
        elif request.method == ATTACH_PROGRESS_METHOD:
            app.attach_progress(*arguments)
        elif request.method in app.control_methods:
            value = getattr(app, request.method)(*arguments)
        else:
            raise AttributeError(f"{type(app).__name__} has no control method {request.method!r}")
    except BaseException as exc:
        connection.send(Reply(request.request_id, failure=RemoteFailure.from_exception(exc)))
    else:
        connection.send(Reply(request.request_id, value=value))
    return request.method != CLOSE_METHOD


def _cancelled() -> RemoteFailure:
    return RemoteFailure("Cancelled", "the task was cancelled", "")
