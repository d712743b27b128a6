"""Asynchronous evaluation of a population of policies on a pool of worker processes."""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import cloudpickle
import numpy as np
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv

from lit_sb3.checks import check_non_negative_int, check_positive_int, check_positive_number
from lit_sb3.evaluation.evaluator import CandidateEvaluator, RoundSpec
from lit_sb3.evaluation.monitor_history import BoundedMonitorHistory
from lit_sb3.evaluation.policy_kernels import cpu_copy
from lit_sb3.vec_env.candidate_eval import CandidateEval, ChunkResult
from lit_sb3.workers.arrays import ArrayPublisher
from lit_sb3.workers.backend import WorkerHandle
from lit_sb3.workers.choice import BackendChoice, BackendSpelling
from lit_sb3.workers.pool import WorkerPool

#: Chunks per worker and round when ``chunk_size`` is not given: small enough to balance uneven episode lengths.
CHUNKS_PER_WORKER = 8
#: Episodes per sub-environment in a chunk of an autoreset vector env (see ``AutoresetSlots``).
SESSION_FILLS = 2


class AsyncEval(CandidateEval):
    """
    Helper class to do asynchronous evaluation of different policies with multiple processes.
    It is useful when implementing population based methods like Evolution Strategies (ES),
    Cross Entropy Method (CEM) or Augmented Random Search (ARS).

    A drop-in replacement for sb3-contrib's ``AsyncEval``, built on :class:`~lit_sb3.workers.WorkerPool`: workers
    take small chunks of candidates as they have room, run one candidate per sub-environment with all actions of a
    step computed in one batched call, and read candidate weights from shared memory (from Ray's object store with
    ``backend="ray"``, where each worker is a Ray actor, on this machine or a cluster). Episode ``e`` of candidate
    ``c`` in round ``g`` after ``seed(s)`` is reset with a seed derived from ``(s, g, c, e)``, so results depend on
    neither the number of workers nor the backend. A worker that dies is replaced and its candidates re-run; an
    exception in a worker is raised here as :class:`~lit_sb3.workers.WorkerError` with the worker's traceback.

    .. warning::

        Only 'forkserver' and 'spawn' start methods are thread-safe,
        which is important to avoid race conditions.
        However, compared to
        'fork' they incur a small start-up cost and have restrictions on
        global variables. With those methods, users must wrap the code in an
        ``if __name__ == "__main__":`` block.
        For more information, see the multiprocessing documentation.

    :param envs_fn: Vectorized environments to run in subprocesses (callable), one worker per entry. Each may also
        return a gymnasium ``VectorEnv`` or a single gymnasium ``Env``.
    :param train_policy: The policy object that will load the different candidate weights.
    :param start_method: method used to start the subprocesses.
           Must be one of the methods returned by ``multiprocessing.get_all_start_methods()``.
           Defaults to 'forkserver' on available platforms, and 'spawn' otherwise.
    :param n_eval_episodes: The number of episodes to test each agent
    :param chunk_size: Candidates per task handed to a worker; by default about ``pop_size / (8 * n_workers)``.
        It does not change results, only load balancing (except for gymnasium vector envs that cannot seed their
        sub-environments one by one, where each chunk is one seeded session of the env).
    :param candidate_timeout: Seconds one episode of a candidate may take before its worker is stopped and
        :class:`~lit_sb3.workers.WorkerTimeoutError` raised (naming the candidate); None for no limit.
    :param max_restarts: How many dead workers are replaced (their candidates re-run) before
        :class:`~lit_sb3.workers.WorkerDiedError` is raised.
    :param backend: Where workers run: ``"local"`` processes started with ``start_method`` (the default, also for
        None; also spelled ``"processes"``), ``"threads"`` of this process, ``"ray"`` actors
        (``pip install lit_sb3[ray]``), or a :class:`~lit_sb3.workers.backend.Backend` (see
        :class:`~lit_sb3.workers.choice.BackendChoice`).
    :param ray_address: With ``backend="ray"``: the cluster to connect to (e.g. ``"ray://head:10001"`` or
        ``"auto"``); by default the Ray connection this process has, else a new local Ray instance, shut down by
        :meth:`close` (by the last one to close, where other pools of this process use it too).
    :param worker_resources: With ``backend="ray"``: the resources of each worker's actor, e.g.
        ``{"num_cpus": 2, "num_gpus": 0.25, "my_node_type": 1}`` (``num_cpus`` is 1 by default).
    """

    def __init__(
        self,
        envs_fn: list[Callable[[], VecEnv]],
        train_policy: BasePolicy,
        start_method: str | None = None,
        n_eval_episodes: int = 1,
        *,
        chunk_size: int | None = None,
        candidate_timeout: float | None = None,
        max_restarts: int = 3,
        backend: BackendSpelling = None,
        ray_address: str | None = None,
        worker_resources: Mapping[str, float] | None = None,
    ) -> None:
        if not isinstance(envs_fn, list | tuple):
            raise TypeError(f"envs_fn must be a list of callables returning a VecEnv, got {type(envs_fn)!r}")
        if len(envs_fn) == 0:
            raise ValueError("envs_fn is empty: give one environment factory per worker")
        for index, env_fn in enumerate(envs_fn):
            if not callable(env_fn):
                raise TypeError(f"envs_fn[{index}] must be callable (returning a VecEnv), got {type(env_fn)!r}")
            try:
                cloudpickle.dumps(env_fn)
            except Exception as error:
                raise TypeError(f"envs_fn[{index}] cannot be pickled to send it to its worker: {error}") from error
        super().__init__(train_policy, n_eval_episodes, n_workers=len(envs_fn))
        if chunk_size is not None:
            check_positive_int("chunk_size", chunk_size)
        if candidate_timeout is not None:
            check_positive_number("candidate_timeout", candidate_timeout)
        check_non_negative_int("max_restarts", max_restarts)
        workers = BackendChoice.parse(
            backend, start_method=start_method, ray_address=ray_address, worker_resources=worker_resources
        )
        policy = cpu_copy(train_policy)
        chosen_backend = workers.build(preload=[CandidateEvaluator.__module__])
        self.chunk_size = chunk_size
        self._pool = WorkerPool(
            [
                functools.partial(CandidateEvaluator, BoundedMonitorHistory(env_fn), policy, n_eval_episodes, index)
                for index, env_fn in enumerate(envs_fn)
            ],
            backend=chosen_backend,
            max_restarts=max_restarts,
            unit_timeout=candidate_timeout,
            unit_name="candidate",
        )
        self._synced_obs_rms = [description["obs_rms"] for description in self._pool.descriptions]
        self._population = chosen_backend.array_publisher()
        self._pending: Future | None = None
        # Dropped without close(), it still stops its workers and frees its shared memory when collected.
        self._release = weakref.finalize(self, _release, self._pool, self._population)

    @property
    def remotes(self) -> list[WorkerHandle | None]:
        """One handle per worker (sb3-contrib's ARS reads ``len(async_eval.remotes)``)."""
        return self._pool.handles

    @property
    def slot_counts(self) -> list[int]:
        """Sub-environments (candidates evaluated at once) of each worker."""
        return self._pool.slot_counts

    @property
    def closed(self) -> bool:
        return self._pool.closed

    @property
    def _round_pending(self) -> bool:
        return self._pending is not None

    def _start_round(self, weights: np.ndarray, spec_fields: dict[str, Any], pop_size: int) -> None:
        population = self._population.publish(weights[:pop_size].astype(np.float32, copy=False))
        spec = RoundSpec(population=population, **spec_fields)
        chunk = self.chunk_size or self._default_chunk_size(pop_size)
        payloads = [(spec, start, min(start + chunk, pop_size)) for start in range(0, pop_size, chunk)]
        labels = [f"candidates {start}-{stop - 1}" for _, start, stop in payloads]
        capacities = [math.ceil(slots / (chunk * self.n_eval_episodes)) for slots in self.slot_counts]
        self._pending = self._pool.run_tasks("evaluate", payloads, labels=labels, capacities=capacities)

    def _default_chunk_size(self, pop_size: int) -> int:
        if not all(description["exact"] for description in self._pool.descriptions):
            # A chunk is a seeded session of an autoreset vector env, so its size decides results: it depends on
            # the sub-environments only (never on the number of workers), filling them a few times over.
            return math.ceil(SESSION_FILLS * max(self.slot_counts) / self.n_eval_episodes)
        return max(1, math.ceil(pop_size / (CHUNKS_PER_WORKER * self.n_workers)))

    def _finish_round(self) -> list[ChunkResult]:
        assert self._pending is not None
        try:
            chunks = self._pending.result()
        except KeyboardInterrupt:
            raise  # the round stays pending: get_results() can wait again, close() cancels it
        except BaseException:
            self._pending = None
            raise
        self._pending = None
        return chunks

    def _worker_obs_rms(self) -> list[Any]:
        return self._pool.call_all("get_obs_rms", [()] * self.n_workers)

    def _sync_workers(self, obs_rms: Any) -> None:
        self._pool.call_all("sync_obs_rms", [(obs_rms,)] * self.n_workers, sticky=True)

    def _close(self) -> None:
        self._release()
        self._pending = None


def _release(pool: WorkerPool, population: ArrayPublisher) -> None:
    try:
        pool.close()
    finally:
        population.close()
