"""Asynchronous evaluation of a population of policies on a pool of worker processes."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv

from lit_sb3.evaluation.evaluator import CandidateEvaluator, RoundSpec
from lit_sb3.vec_env.obs_rms import ObsRms, copy_obs_rms, merge_obs_rms
from lit_sb3.workers.backend import Backend, WorkerHandle
from lit_sb3.workers.errors import PoolClosedError
from lit_sb3.workers.local import LocalBackend
from lit_sb3.workers.pool import WorkerPool
from lit_sb3.workers.shared_array import SharedArray

#: Chunks per worker and round when ``chunk_size`` is not given: small enough to balance uneven episode lengths.
CHUNKS_PER_WORKER = 8

Options = dict[str, Any] | list[dict[str, Any]] | None


class AsyncEval:
    """
    Helper class to do asynchronous evaluation of different policies with multiple processes.
    It is useful when implementing population based methods like Evolution Strategies (ES),
    Cross Entropy Method (CEM) or Augmented Random Search (ARS).

    A drop-in replacement for sb3-contrib's ``AsyncEval``, built on :class:`~lit_sb3.workers.WorkerPool`: workers
    take small chunks of candidates as they have room, run one candidate per sub-environment with all actions of a
    step computed in one batched call, and read candidate weights from shared memory. Episode ``e`` of candidate
    ``c`` in round ``g`` after ``seed(s)`` is reset with a seed derived from ``(s, g, c, e)``, so results do not
    depend on the number of workers. A worker that dies is replaced and its candidates re-run; an exception in a
    worker is raised here as :class:`~lit_sb3.workers.WorkerError` with the worker's traceback.

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
        It does not change results, only load balancing.
    :param candidate_timeout: Seconds one candidate's evaluation may take before its worker is stopped and
        :class:`~lit_sb3.workers.WorkerTimeoutError` raised; None for no limit.
    :param max_restarts: How many dead workers are replaced (their candidates re-run) before
        :class:`~lit_sb3.workers.WorkerDiedError` is raised.
    :param backend: Where workers run; local processes started with ``start_method`` by default.
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
        backend: Backend | None = None,
    ) -> None:
        if not isinstance(envs_fn, Sequence) or isinstance(envs_fn, str):
            raise TypeError(f"envs_fn must be a list of callables returning a VecEnv, got {type(envs_fn)!r}")
        if len(envs_fn) == 0:
            raise ValueError("envs_fn is empty: give one environment factory per worker")
        for index, env_fn in enumerate(envs_fn):
            if not callable(env_fn):
                raise TypeError(f"envs_fn[{index}] must be callable (returning a VecEnv), got {type(env_fn)!r}")
        if not isinstance(train_policy, BasePolicy):
            raise TypeError(f"train_policy must be a Stable-Baselines3 BasePolicy, got {type(train_policy)!r}")
        _check_positive_int("n_eval_episodes", n_eval_episodes)
        if chunk_size is not None:
            _check_positive_int("chunk_size", chunk_size)
        if candidate_timeout is not None and not candidate_timeout > 0:
            raise ValueError(f"candidate_timeout must be a positive number of seconds or None, got {candidate_timeout}")
        if not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be a non-negative int, got {max_restarts!r}")
        if backend is None:
            backend = LocalBackend(start_method)
        policy = copy.deepcopy(train_policy).to("cpu")
        self.n_params = sum(parameter.numel() for parameter in policy.parameters())
        self.n_eval_episodes = n_eval_episodes
        self.chunk_size = chunk_size
        self._pool = WorkerPool(
            [
                functools.partial(CandidateEvaluator, env_fn, policy, n_eval_episodes, index)
                for index, env_fn in enumerate(envs_fn)
            ],
            backend=backend,
            max_restarts=max_restarts,
            unit_timeout=candidate_timeout,
            unit_name="candidate",
        )
        self._synced_obs_rms: list[Any] = [description["obs_rms"] for description in self._pool.descriptions]
        self._population: SharedArray | None = None
        self._pending: Future | None = None
        self._base_seed: int | None = None
        self._round_index = 0
        self._round_serial = 0
        self._options: Options = None

    # ------------------------------------------------------------------------------------------- the seed API

    @property
    def remotes(self) -> list[WorkerHandle | None]:
        """One handle per worker (sb3-contrib's ARS reads ``len(async_eval.remotes)``)."""
        return self._pool.handles

    @property
    def n_workers(self) -> int:
        """Number of workers."""
        return self._pool.n_workers

    @property
    def slot_counts(self) -> list[int]:
        """Sub-environments (candidates evaluated at once) of each worker."""
        return self._pool.slot_counts

    def send_jobs(self, candidate_weights: th.Tensor | np.ndarray, pop_size: int) -> None:
        """
        Send jobs to the workers to evaluate new candidates.

        :param candidate_weights: The weights to be evaluated, shape ``(rows >= pop_size, n_params)``.
        :param pop_size: The number of candidate (size of the population); rows ``0..pop_size-1`` are evaluated.
        """
        self._check_open()
        if self._pending is not None:
            raise ValueError("send_jobs() was called again before get_results() collected the previous round")
        weights = _weights_matrix(candidate_weights, pop_size, self.n_params)
        if self._population is None or self._population.array.shape[0] < pop_size:
            if self._population is not None:
                self._population.close()
            self._population = SharedArray((pop_size, self.n_params), np.float32)
        self._population.array[:pop_size] = weights
        if self._base_seed is None:
            self._base_seed = int(np.random.randint(0, 2**31 - 1))
        spec = RoundSpec(self._round_serial, self._population.handle, self._round_index, self._base_seed, self._options)
        self._round_serial += 1
        self._round_index += 1
        chunk = self.chunk_size or max(1, math.ceil(pop_size / (CHUNKS_PER_WORKER * self.n_workers)))
        starts = range(0, pop_size, chunk)
        payloads = [(spec, start, min(start + chunk, pop_size)) for start in starts]
        labels = [f"candidates {start}-{stop - 1}" for _, start, stop in payloads]
        limits = [math.ceil(slots / (chunk * self.n_eval_episodes)) + 1 for slots in self.slot_counts]
        self._pending = self._pool.run_tasks("evaluate", payloads, labels=labels, in_flight_limits=limits)

    def seed(self, seed: int | None = None) -> list[None | int]:
        """
        Seed the environments.

        Episode ``e`` of candidate ``c`` in the ``g``-th round sent after this call is reset with a seed derived from
        ``(seed, g, c, e)``. With ``seed=None`` (or without any call), the seed is drawn from numpy's global
        generator when the next round is sent, so runs seeded the Stable-Baselines3 way stay reproducible.

        :param seed: The seed for the pseudo-random generators.
        :return: The seed each worker's episodes derive from.
        """
        self._check_open()
        if seed is not None and (not isinstance(seed, int | np.integer) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {type(seed)!r}")
        self._base_seed = None if seed is None else int(seed)
        self._round_index = 0
        return [self._base_seed] * self.n_workers

    def set_options(self, options: list[dict] | dict | None = None) -> list[None | int]:
        """
        Set environment options for all environments.

        If a dict is passed instead of a list, the same options will be used for all environments.
        The options are passed to every reset from the next round sent on (``None`` removes them).
        Per-worker options make a candidate's result depend on which worker ran it.

        :param options: A dictionary of environment options to pass to each environment at the next reset.
        :return: One ``None`` per worker.
        """
        self._check_open()
        if isinstance(options, list):
            if len(options) != self.n_workers:
                raise ValueError(f"options has {len(options)} entries but the pool has {self.n_workers} workers")
            if not all(isinstance(entry, dict) for entry in options):
                raise TypeError("options must be a dict, a list of dicts (one per worker) or None")
        elif options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict, a list of dicts (one per worker) or None, got {type(options)!r}")
        self._options = copy.deepcopy(options)
        return [None] * self.n_workers

    def get_results(self) -> list[tuple[int, tuple[np.ndarray, np.ndarray]]]:
        """
        Retreive episode rewards and lengths from each worker
        for all candidates (there might be multiple candidates per worker).

        :return: A list of tuples containing each candidate index and its
            result (episodic reward and episode length), ordered by candidate index.
        """
        self._check_open()
        if self._pending is None:
            raise ValueError("get_results() was called with no round pending: call send_jobs() first")
        try:
            chunks = self._pending.result()
        except Exception:
            self._pending = None
            raise
        self._pending = None
        return [
            (first + row, (episode_returns[row], episode_lengths[row]))
            for first, episode_returns, episode_lengths in chunks
            for row in range(len(episode_returns))
        ]

    def get_obs_rms(self) -> list[RunningMeanStd]:
        """
        Retrieve the observation filters (observation running mean std)
        of each process, they will be combined in the main process.
        Synchronisation is done afterward using ``sync_obs_rms()``.
        Use :meth:`merge_obs_rms` to combine them without counting the last synced statistics again.

        :return: A list of ``RunningMeanStd`` objects (one per process; None for workers without ``VecNormalize``)
        """
        self._check_idle("get_obs_rms")
        return self._pool.call_all("get_obs_rms", [()] * self.n_workers)

    def sync_obs_rms(self, obs_rms: RunningMeanStd) -> None:
        """
        Synchronise (and update) the observation filters
        (observation running mean std).

        :param obs_rms: The updated ``RunningMeanStd`` to be used
            by workers for normalizing observations.
        """
        self._check_idle("sync_obs_rms")
        if all(synced is None for synced in self._synced_obs_rms):
            raise ValueError("sync_obs_rms: the workers' environments have no VecNormalize (nothing to synchronise)")
        if not isinstance(obs_rms, RunningMeanStd | dict):
            raise TypeError(f"obs_rms must be a RunningMeanStd (or a dict of them), got {type(obs_rms)!r}")
        self._pool.call_all("sync_obs_rms", [(obs_rms,)] * self.n_workers, sticky=True)
        self._synced_obs_rms = [copy_obs_rms(obs_rms) for _ in range(self.n_workers)]

    def close(self) -> None:
        """
        Close the processes: cancels a pending round, stops every worker, frees shared memory. Idempotent.
        """
        self._pool.close()
        self._pending = None
        if self._population is not None:
            self._population.close()
            self._population = None

    # ---------------------------------------------------------------------------------------------- extras

    @property
    def synced_obs_rms(self) -> list[Any]:
        """Each worker's observation statistics right after the last ``sync_obs_rms`` (or at its start)."""
        return list(self._synced_obs_rms)

    def merge_obs_rms(self, base: ObsRms | None = None) -> ObsRms:
        """
        Merge what the workers observed since the last sync, counting every observation once
        (see :mod:`lit_sb3.vec_env.obs_rms`).

        :param base: Statistics to add the new observations to; by default the last synced ones.
        :return: The merged statistics, ready for :meth:`sync_obs_rms`.
        """
        worker_obs_rms = self.get_obs_rms()
        if any(rms is None for rms in worker_obs_rms):
            raise ValueError("merge_obs_rms: some workers' environments have no VecNormalize")
        return merge_obs_rms(self._synced_obs_rms[0] if base is None else base, worker_obs_rms, self._synced_obs_rms)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._pool.closed

    def __enter__(self) -> AsyncEval:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._pool.closed:
            raise PoolClosedError("this AsyncEval is closed")

    def _check_idle(self, method: str) -> None:
        self._check_open()
        if self._pending is not None:
            raise ValueError(f"{method}() was called while a round is pending: call get_results() first")


def _check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value)!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def _weights_matrix(candidate_weights: th.Tensor | np.ndarray, pop_size: int, n_params: int) -> np.ndarray:
    if isinstance(candidate_weights, th.Tensor):
        weights = candidate_weights.detach().cpu().numpy()
    elif isinstance(candidate_weights, np.ndarray):
        weights = candidate_weights
    else:
        raise TypeError(f"candidate_weights must be a torch.Tensor or a numpy array, got {type(candidate_weights)!r}")
    if weights.ndim != 2:
        raise ValueError(
            f"candidate_weights must have shape (rows, n_params) = (rows, {n_params}), got shape {weights.shape}"
        )
    if weights.shape[1] != n_params:
        raise ValueError(
            f"candidate_weights rows have {weights.shape[1]} values but the policy has {n_params} parameters"
        )
    _check_positive_int("pop_size", pop_size)
    if pop_size > weights.shape[0]:
        raise ValueError(f"pop_size={pop_size} exceeds the {weights.shape[0]} rows of candidate_weights")
    weights = weights[:pop_size]
    if not np.issubdtype(weights.dtype, np.number):
        raise TypeError(f"candidate_weights must be numeric, got dtype {weights.dtype}")
    finite = np.isfinite(weights).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ValueError(f"candidate_weights has NaN or inf values in candidates {bad[:10].tolist()}")
    return weights
