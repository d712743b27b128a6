"""The worker pool every parallel part of lit_sb3 runs on."""

from lit_sb3.workers.choice import BackendChoice
from lit_sb3.workers.errors import PoolClosedError, WorkerDiedError, WorkerError, WorkerTimeoutError
from lit_sb3.workers.local import LocalBackend
from lit_sb3.workers.pool import RetryPolicy, WorkerPool
from lit_sb3.workers.stream import Stream, StreamCounts, StreamItem
from lit_sb3.workers.threads import ThreadBackend

__all__ = [
    "BackendChoice",
    "LocalBackend",
    "PoolClosedError",
    "RetryPolicy",
    "Stream",
    "StreamCounts",
    "StreamItem",
    "ThreadBackend",
    "WorkerDiedError",
    "WorkerError",
    "WorkerPool",
    "WorkerTimeoutError",
]
