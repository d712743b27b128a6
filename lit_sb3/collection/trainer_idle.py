"""The event on-policy thread workers wait on while the trainer is in ``train()``."""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import Any

_events: weakref.WeakValueDictionary[int, TrainerIdle] = weakref.WeakValueDictionary()
_keys = itertools.count()


class TrainerIdle(threading.Event):
    """
    Set while the trainer is not in ``train()`` (set from the start). It pickles (through the pool) as a key of
    this process, so the thread workers wait on this very event.
    """

    def __init__(self) -> None:
        super().__init__()
        self.set()
        self.key = next(_keys)
        self.process = os.getpid()
        _events[self.key] = self

    def __reduce__(self) -> tuple[Any, ...]:
        return _trainer_idle, (self.key, self.process)


def _trainer_idle(key: int, process: int) -> TrainerIdle:
    event = _events.get(key) if process == os.getpid() else None
    if event is None:
        raise RuntimeError("the trainer's idle event reached another process, or is gone: it is for thread workers")
    return event
