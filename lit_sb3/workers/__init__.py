"""The worker pool every process-parallel part of lit_sb3 runs on."""

from lit_sb3.workers.errors import PoolClosedError, WorkerDiedError, WorkerError, WorkerTimeoutError
from lit_sb3.workers.pool import WorkerPool

__all__ = ["PoolClosedError", "WorkerDiedError", "WorkerError", "WorkerPool", "WorkerTimeoutError"]
