"""The loop every worker runs, whatever the backend: build the app, then answer requests until told to stop."""

from __future__ import annotations

import dataclasses
import pickle
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import cloudpickle

from lit_sb3.workers.app import TaskError, WorkerApp
from lit_sb3.workers.errors import RemoteFailure
from lit_sb3.workers.messages import (
    ATTACH_PROGRESS_METHOD,
    CLOSE_METHOD,
    READY_REQUEST_ID,
    Cancel,
    Credit,
    Reply,
    Request,
)

#: Longest a worker waiting for credit sleeps before it looks at its put timeout again (seconds).
CREDIT_POLL_INTERVAL = 0.05


class Channel(Protocol):
    """The worker's end of its link to the pool (a ``multiprocessing`` connection has this shape)."""

    def send(self, message: Any) -> None:
        """:param message: A reply for the pool."""

    def recv(self) -> Any:
        """:return: The next message of the pool; raises ``EOFError`` once the pool is gone."""

    def poll(self, timeout: float | None = 0.0) -> bool:
        """
        :param timeout: Seconds to wait for a message (None: until one comes).
        :return: Whether a message (or the end of the link) can be read.
        """


def run_worker(channel: Channel, app_factory: bytes) -> None:
    """
    Build the app and serve the pool until it says stop or goes away.

    :param channel: The link to the pool.
    :param app_factory: Cloudpickled callable that builds the :class:`WorkerApp`.
    """
    try:
        factory: Callable[[], WorkerApp] = cloudpickle.loads(app_factory)
        app = factory()
        description = app.describe()
    except BaseException as exc:
        channel.send(Reply(READY_REQUEST_ID, failure=RemoteFailure.from_exception(exc)))
        return
    try:
        channel.send(Reply(READY_REQUEST_ID, value=(app.slot_count, description)))
    except (EOFError, OSError):
        app.close()  # the pool is gone
        return
    except Exception as exc:
        channel.send(_unsendable(READY_REQUEST_ID, exc))
        return
    try:
        _WorkerLoop(channel, app).run()
    except (EOFError, OSError):
        app.close()  # the pool is gone
    finally:
        app.detach_progress()


class _WorkerLoop:
    """
    Reads messages whenever it can: cancels, credit and immediate controls act at once; other controls wait until
    the tasks accepted before them have ended (and hold back what came after them). Partial results are sent while
    the worker has credit; without credit the tasks pause (back-pressure) and, past the put timeout, the oldest
    partial result is dropped (and reported as dropped).
    """

    def __init__(self, channel: Channel, app: WorkerApp) -> None:
        self.channel = channel
        self.app = app
        self.backlog: deque[Request] = deque()  # behind a control request that waits for the tasks
        self.outbox: deque[tuple[Reply, float]] = deque()  # replies held back by missing credit, oldest first
        self.credit: int | None = None  # None: no limit
        self.put_timeout: float | None = None
        self.stopping = False
        app.attach_emitter(self._emit)

    def run(self) -> None:
        while not self.stopping:
            if not self.app.busy and self.backlog:
                self._run_backlog()
                continue
            self._flush()
            if self.app.busy and not self.outbox:
                while self.channel.poll():
                    self._handle(self.channel.recv())
                if not self.stopping and self.app.busy and not self.outbox:
                    self._advance()
            elif self.outbox:
                if self.channel.poll(self._credit_wait()):
                    self._handle(self.channel.recv())
            else:
                self._handle(self.channel.recv())

    # ------------------------------------------------------------------------------------------- messages

    def _handle(self, message: Request | Cancel | Credit | list[Request | Cancel | Credit]) -> None:
        if isinstance(message, list):  # sent together
            for part in message:
                if not self.stopping:  # nothing is read after a close
                    self._handle(part)
        elif isinstance(message, Credit):
            self.credit = (self.credit or 0) + message.count
            self.put_timeout = message.put_timeout
        elif isinstance(message, Cancel):
            self._cancel(message.request_ids)
        elif not message.is_task and message.method in self.app.immediate_methods:
            self._control(message)
        elif self.backlog:
            self.backlog.append(message)
        elif message.is_task:
            self._accept(message)
        elif not self.app.busy:
            self._control(message)
        else:
            self.backlog.append(message)

    def _run_backlog(self) -> None:
        while self.backlog and not self.stopping:
            message = self.backlog[0]
            if not message.is_task and self.app.busy:
                return
            self.backlog.popleft()
            if message.is_task:
                self._accept(message)
            else:
                self._control(message)

    def _accept(self, request: Request) -> None:
        try:
            self.app.submit(request.request_id, request.method, _arguments(request), request.delivered)
        except BaseException as exc:
            self.app.cancel((request.request_id,))
            self._reply(Reply(request.request_id, failure=RemoteFailure.from_exception(exc)))

    def _cancel(self, request_ids: tuple[int, ...] | None) -> None:
        def cancelled(message: Request) -> bool:  # a task not yet handed to the app, behind a control: never started
            return message.is_task and (request_ids is None or message.request_id in request_ids)

        waiting = [message.request_id for message in self.backlog if cancelled(message)]
        self.backlog = deque(message for message in self.backlog if not cancelled(message))
        dropped = [*self.app.cancel(request_ids), *waiting]
        for request_id in dropped:
            held = sum(1 for reply, _ in self.outbox if reply.request_id == request_id)
            self.outbox = deque(entry for entry in self.outbox if entry[0].request_id != request_id)
            self._reply(Reply(request_id, value=held, cancelled=True))

    def _control(self, request: Request) -> None:
        # An immediate control's answer does not wait behind partial results held for want of credit (a weight sync
        # would look unread until the consumer frees room); another's comes after the results of the tasks before it.
        answer = self._send if request.method in self.app.immediate_methods else self._reply
        value: Any = None
        try:
            arguments = _arguments(request)
            if request.method == CLOSE_METHOD:
                self.app.close()
                self.stopping = True
            elif request.method == ATTACH_PROGRESS_METHOD:
                self.app.attach_progress(*arguments)
            elif request.method in self.app.control_methods:
                value = getattr(self.app, request.method)(*arguments)
            else:
                raise AttributeError(f"{type(self.app).__name__} has no control method {request.method!r}")
        except BaseException as exc:
            answer(Reply(request.request_id, failure=RemoteFailure.from_exception(exc)))
        else:
            answer(Reply(request.request_id, value=value))

    # ---------------------------------------------------------------------------------------------- tasks

    def _advance(self) -> None:
        try:
            finished = self.app.advance()
        except TaskError as error:
            cause = error.__cause__ if error.__cause__ is not None else error
            self._reply(Reply(error.request_id, failure=RemoteFailure.from_exception(cause, error.unit_index)))
            # The failed task's work is lost: drop what else was accepted so the pool hears about each of them.
            self._cancel(None)
            return
        except BaseException as exc:
            # Not attributable to one task: every task accepted fails with it.
            failure = RemoteFailure.from_exception(exc)
            for request_id in self.app.cancel(None):
                self._reply(Reply(request_id, failure=failure))
            return
        for request_id, result in finished:
            self._reply(Reply(request_id, value=result))

    def _emit(self, request_id: int, unit: int, value: Any, resume_args: tuple[Any, ...] | None) -> None:
        self.outbox.append((Reply(request_id, value=value, unit=unit, resume_args=resume_args), time.monotonic()))

    def _reply(self, reply: Reply) -> None:
        if self.outbox:  # a task's final reply never overtakes its partial results
            self.outbox.append((reply, time.monotonic()))
        else:
            self._send(reply)

    def _send(self, reply: Reply) -> None:
        """Send a reply; one that cannot be pickled fails its request instead (a task that would go on is dropped)."""
        try:
            self.channel.send(reply)
        except (EOFError, OSError):
            raise  # the pool is gone
        except Exception as exc:
            if not reply.final:
                self.app.cancel((reply.request_id,))
                if self.credit is not None:
                    self.credit += 1  # the partial result was not sent: its credit stays unspent
            self.channel.send(_unsendable(reply.request_id, exc))

    # --------------------------------------------------------------------------------------------- credit

    def _flush(self) -> None:
        while self.outbox:
            reply, since = self.outbox[0]
            waited = time.monotonic() - since
            if reply.final or self.credit is None or self.credit > 0:
                if not reply.final and self.credit is not None:
                    self.credit -= 1
                self.outbox.popleft()
                self._send(dataclasses.replace(reply, wait_seconds=waited) if not reply.final else reply)
            elif self.put_timeout is not None and waited >= self.put_timeout:
                self.outbox.popleft()
                # A dropped unit counts as delivered: its resume arguments travel without it.
                self.channel.send(dataclasses.replace(reply, value=None, dropped=True, wait_seconds=waited))
                if reply.unit is not None:
                    self.app.dropped(reply.request_id, reply.unit)
            else:
                return

    def _credit_wait(self) -> float:
        if self.put_timeout is None:
            return CREDIT_POLL_INTERVAL
        waited = time.monotonic() - self.outbox[0][1]
        return min(CREDIT_POLL_INTERVAL, max(0.0, self.put_timeout - waited))


def _arguments(request: Request) -> tuple[Any, ...]:
    # Arguments travel pickled so that one that cannot be rebuilt here fails its request, not the worker.
    return pickle.loads(request.args)


def _unsendable(request_id: int, exc: Exception) -> Reply:
    """:return: The failure of a request whose reply could not be pickled (``exc``)."""
    error = TypeError(f"the worker's reply cannot be pickled to send it to the pool: {exc}")
    error.__cause__ = exc
    return Reply(request_id, failure=RemoteFailure.from_exception(error))
