"""Exceptions raised by the worker pool."""

from __future__ import annotations

import signal
import traceback
from dataclasses import dataclass


class RemoteTraceback(Exception):  # noqa: N818 - a traceback carrier, not an error of its own
    """Carries the traceback text of an exception raised in a worker process (chained as ``__cause__``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n\n--- traceback in the worker ---\n{self.text}"


@dataclass(frozen=True)
class RemoteFailure:
    """What a worker reports about an exception, in a form that always pickles.

    :param exception_type: Qualified name of the original exception type, e.g. ``"builtins.ValueError"``.
    :param message: ``str()`` of the original exception.
    :param remote_traceback: Formatted traceback text from the worker.
    :param unit_index: Index of the unit (candidate, episode...) the worker was running, if any.
    """

    exception_type: str
    message: str
    remote_traceback: str
    unit_index: int | None = None

    @classmethod
    def from_exception(cls, exc: BaseException, unit_index: int | None = None) -> RemoteFailure:
        """
        Describe ``exc`` for the main process.

        :param exc: The exception caught in the worker.
        :param unit_index: Index of the unit the worker was running.
        :return: A picklable description of the failure.
        """
        exc_type = type(exc)
        name = (
            exc_type.__qualname__
            if exc_type.__module__ == "builtins"
            else f"{exc_type.__module__}.{exc_type.__qualname__}"
        )
        text = "".join(traceback.format_exception(exc_type, exc, exc.__traceback__))
        return cls(name, str(exc), text, unit_index)


class WorkerError(RuntimeError):
    """
    An exception raised inside a worker: names the worker and the unit (candidate) it was running, and carries
    the original exception type, message and the remote traceback (also chained as ``__cause__``).

    :param worker_index: Index of the worker that raised.
    :param failure: The worker's description of the exception.
    :param unit_name: What the pool's units are called, e.g. ``"candidate"``.
    """

    def __init__(self, worker_index: int, failure: RemoteFailure, unit_name: str = "unit") -> None:
        self.worker_index = worker_index
        self.unit_name = unit_name
        self.exception_type = failure.exception_type
        self.remote_message = failure.message
        self.remote_traceback = failure.remote_traceback
        self.unit_index = failure.unit_index
        where = f"worker {worker_index}"
        if failure.unit_index is not None:
            where += f" while running {unit_name} {failure.unit_index}"
        super().__init__(f"{failure.exception_type} in {where}: {failure.message}")
        self.__cause__ = RemoteTraceback(failure.remote_traceback)

    def __reduce__(self) -> tuple[type, tuple]:
        failure = RemoteFailure(self.exception_type, self.remote_message, self.remote_traceback, self.unit_index)
        return (type(self), (self.worker_index, failure, self.unit_name))


class WorkerDiedError(RuntimeError):
    """A worker process died (killed, crashed, out of memory) and could not be replaced."""


class WorkerTimeoutError(TimeoutError):
    """
    A unit (candidate) ran longer than the pool's timeout; its worker was stopped.

    :param worker_index: Index of the worker running the unit.
    :param unit_index: Index of the unit that timed out.
    :param timeout: The timeout in seconds.
    :param unit_name: What the pool's units are called.
    """

    def __init__(self, worker_index: int, unit_index: int, timeout: float, unit_name: str = "unit") -> None:
        self.worker_index = worker_index
        self.unit_index = unit_index
        self.timeout = timeout
        self.unit_name = unit_name
        super().__init__(f"{unit_name} {unit_index} on worker {worker_index} did not finish within {timeout:g} s")

    def __reduce__(self) -> tuple[type, tuple]:
        return (type(self), (self.worker_index, self.unit_index, self.timeout, self.unit_name))


class PoolClosedError(ValueError):
    """The pool (or the object built on it) was used after ``close()``."""


def describe_exit(exitcode: int | None) -> str:
    """
    Human-readable description of a process exit code.

    :param exitcode: ``Process.exitcode`` (negative for a signal).
    :return: e.g. ``"killed by SIGKILL"`` or ``"exit code 3"``.
    """
    if exitcode is None:
        return "unknown exit status"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"
