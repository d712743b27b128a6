"""The trainer's side of async collection: the pool of episode workers, weight publication, and the episodes and
rollouts the assembler builds from their stream."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from lit_sb3.collection.assembler import EpisodeAssembler
from lit_sb3.collection.budget import InFlightBudget
from lit_sb3.collection.envs import EnvCall, EnvFactory
from lit_sb3.collection.episode_worker import EpisodeWorker
from lit_sb3.collection.episodes import ActingSpec, EpisodePacket, Progress
from lit_sb3.collection.lockstep import LockstepEpisodeWorker
from lit_sb3.collection.rollout import Rollout, RolloutSpec
from lit_sb3.collection.statistics import NormalizationStatistics
from lit_sb3.collection.trainer_idle import TrainerIdle
from lit_sb3.collection.weights import WeightBoard
from lit_sb3.evaluation.policy_kernels import policy_copy
from lit_sb3.workers.choice import BackendChoice
from lit_sb3.workers.pool import WorkerPool
from lit_sb3.workers.stream import Stream, StreamItem

#: Policy lags kept for the profiler's percentiles.
LAG_WINDOW = 10_000
#: What the fork server of worker processes imports ahead of them.
WORKER_PRELOAD = (EpisodeWorker.__module__,)


def check_worker_count(n_workers: int, n_envs: int) -> None:
    """
    :param n_workers: Collection workers asked for.
    :param n_envs: Environments they share out.
    :raises ValueError: if some workers would have no environment to step.
    """
    if n_workers > n_envs:
        raise ValueError(
            f"n_workers={n_workers} is more than the {n_envs} environments to collect from: each worker steps one at "
            f"least (give n_workers <= {n_envs}, or more environments)"
        )


class AsyncCollector:
    """
    Streams complete episodes from a pool of :class:`~lit_sb3.collection.episode_worker.EpisodeWorker` s, one task
    per environment, bounded by ``max_episodes_in_buffer`` across workers, and publishes the trainer's weights to
    them. An :class:`~lit_sb3.collection.assembler.EpisodeAssembler` turns the stream into what the trainer takes.

    :param env: The agent's environments (their spaces).
    :param env_fns: The factory of each of them for the workers (see
        :func:`~lit_sb3.collection.envs.collection_env_fns`).
    :param policy: A policy of the trainer's class and arguments (copied to the workers, whose weights it gives
        until the first publication).
    :param spec: How workers act.
    :param progress: The trainer's progress now.
    :param rollout: On-policy: how rollouts are built; None for off-policy (episodes are handed one ahead).
    :param backend: Where the workers run.
    :param n_workers: Number of workers.
    :param max_episodes_in_buffer: Most finished episodes buffered at once, across all workers.
    :param queue_put_timeout: Seconds a finished episode waits for buffer room before it is dropped (counted);
        None to wait.
    :param weight_sync_interval: Least seconds between two weight publications.
    :param max_policy_lag: Episodes acted by weights more than this many versions old when they are assembled
        are dropped (counted); None for no bound. An on-policy rollout is assembled while the one before it trains,
        so the episodes it trains on are at most ``max_policy_lag + 1`` versions old, and workers wait rather than
        begin episodes that could only be dropped or left over (see :class:`~lit_sb3.collection.budget.InFlightBudget`).
        Off-policy a version is a gradient step: an episode is as many versions old as the steps trained while it ran.
    :param max_restarts: Dead workers replaced before the collection fails.
    :param vec_normalize: The trainer's ``VecNormalize``, if any: its statistics are updated with every episode
        consumed (each observation and return counted once, in consumption order) and published to the workers,
        which normalise observations with them; an on-policy rollout is counted in them, and its rewards normalised,
        when the trainer takes it (on its thread); off-policy, a whole episode when the trainer takes its first step.
    :param initial_version: The version of ``policy``'s weights (the trainer's version counter when collection
        starts).
    """

    def __init__(
        self,
        env: VecEnv,
        env_fns: Sequence[EnvFactory],
        policy: BasePolicy,
        spec: ActingSpec,
        progress: Progress,
        *,
        rollout: RolloutSpec | None,
        backend: BackendChoice,
        n_workers: int,
        max_episodes_in_buffer: int,
        queue_put_timeout: float | None,
        weight_sync_interval: float,
        max_policy_lag: int | None,
        max_restarts: int,
        vec_normalize: VecNormalize | None = None,
        initial_version: int = 0,
    ) -> None:
        self.statistics = NormalizationStatistics(vec_normalize) if vec_normalize is not None else None
        self.max_policy_lag = max_policy_lag
        self.max_episodes_in_buffer = max_episodes_in_buffer
        self.lockstep = spec.lockstep_steps is not None
        if self.statistics is not None:  # every step of every episode acts on normalised observations
            progress = dataclasses.replace(progress, obs_rms=self.statistics.observation_statistics())
        n_envs = len(env_fns)
        check_worker_count(n_workers, n_envs)
        self.budget = (
            None
            if self.lockstep
            else InFlightBudget(
                max_policy_lag, rollout.target_steps if rollout is not None else None, n_workers, n_envs
            )
        )
        worker_policy = policy_copy(policy)
        max_envs = math.ceil(n_envs / n_workers)
        self.trainer_idle = TrainerIdle()  # see training()
        # On-policy, worker threads share the trainer's interpreter lock through all of a long train().
        shares_lock = backend.name == "threads" and rollout is not None
        factories: list[Callable[[], EpisodeWorker]] = [
            _WorkerFactory(
                list(env_fns),
                worker_policy,
                spec,
                max_envs=max_envs,
                progress=progress,
                version=initial_version,
                limits_in_flight=self.budget is not None,
                in_flight_limit=self.budget.per_worker(index) if self.budget is not None else None,
                trainer_idle=self.trainer_idle if shares_lock else None,
            )
            for index in range(n_workers)
        ]
        self.pool = WorkerPool(  # closes the backend if it fails
            factories,
            backend=backend.build(WORKER_PRELOAD),
            max_restarts=max_restarts,
            unit_name="episode",
            stream_capacity=max_episodes_in_buffer,
            put_timeout=queue_put_timeout,
            # Off-policy, workers act one episode ahead of the trainer and wait for it: its torch keeps every core
            # (SAC on one Pendulum with worker threads ran at 0.88x plain SB3's steps/s with torch kept to one).
            busy_workers=rollout is not None,
        )
        board: WeightBoard | None = None
        try:  # from here on the pool (and the board) are ours to close, also on a Ctrl-C
            publishers = (self.pool.backend.array_publisher(), self.pool.backend.array_publisher())
            self.board = board = WeightBoard(publishers, weight_sync_interval, initial_version)
            self.stream: Stream = self.pool.stream_tasks(
                "collect",
                [(index,) for index in range(n_envs)],
                labels=[f"env {index}" for index in range(n_envs)],
                capacities=[max_envs] * n_workers,
            )
            self.started_at = time.monotonic()
            self.version = initial_version  # of the trainer's weights, as last told
            self._publications: list[Future] = []
            self._acknowledgements: list[Future | None] = [None] * n_workers
            self._progress = progress
            self._lags: deque[int] = deque(maxlen=LAG_WINDOW)
            # Off-policy episodes taken and not acknowledged, by (env, episode).
            self._unacknowledged: dict[tuple[int, int], StreamItem] = {}
            self.trainer_wait_seconds = 0.0
            self.consumed_steps = 0
            self.assembler = EpisodeAssembler(
                self.stream,
                n_workers,
                rollout_spec=rollout,
                lockstep_envs=n_envs if self.lockstep else None,
                spaces_=(env.observation_space, env.action_space),
                statistics=self.statistics,
                max_policy_lag=max_policy_lag,
                current_version=lambda: self.version,
                acknowledge=self._acknowledge,
                started_at=self.started_at,
            )
        except BaseException:
            self.pool.close()
            if board is not None:
                board.close()
            raise

    # ------------------------------------------------------------------------------------------- trainer side

    def sync(self, version: int, weights: Callable[[], np.ndarray], progress: Progress, *, force: bool = False) -> None:
        """
        Publish the trainer's weights if they changed (and the workers read the previous ones) and its progress,
        at most once per ``weight_sync_interval`` unless ``force``.

        :param version: Version of the trainer's current weights.
        :param weights: Gives them as a flat vector of the acting module's parameters (called only to publish).
        :param progress: The trainer's progress.
        :param force: Publish even within the interval.
        """
        self.raise_failure()
        self.version = version
        if not (force or self.lockstep or self.board.due()):
            return
        # The warm-up ends once learning_starts steps were collected, not once the trainer consumed them: episodes
        # buffered ahead would otherwise all be random.
        collected = self.assembler.received.steps
        progress = dataclasses.replace(progress, num_timesteps=max(progress.num_timesteps, collected))
        if self.statistics is not None:
            progress = dataclasses.replace(progress, obs_rms=self.statistics.observation_statistics())
        for future in self._publications:
            if future.done() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        if self.lockstep:  # every version reaches the workers: wait until they all heard of the previous one
            for future in self._publications:
                future.result()
        read_by_all = all(future.done() for future in self._publications)
        if version > self.board.version and read_by_all:
            handle = self.board.write(version, weights())
            # A lockstep worker also hears of the version before, which a resumed environment may need.
            previous = (self.board.previous,) if self.lockstep else ()
            self._publications = [
                self.pool.call(worker, "sync", version, handle, progress, *previous, sticky=True)
                for worker in range(self.pool.n_workers)
            ]
        elif progress != self._progress:
            for worker in range(self.pool.n_workers):
                self.pool.call(worker, "sync", None, None, progress)
        else:
            return
        self._progress = progress

    def next_rollout(self) -> Rollout:
        """:return: The next on-policy rollout (waits for it; raises a worker's failure)."""
        item = self._take()
        assert isinstance(item, Rollout)
        for episode in item.episodes:
            self._lags.append(self.version - episode.first_version)
        self.consumed_steps += item.length
        return item

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """
        Wrap the trainer's on-policy ``train()``: worker threads whose environments step fast wait until it ends.
        Their Python runs under the trainer's interpreter lock, and slows ``train()`` more than it collects: on
        PPO's CartPole, 100k steps, ``train()`` took 10.6-10.9 s beside a worker thread, against 9.0 s alone.
        """
        self.trainer_idle.clear()
        try:
            yield
        finally:
            self.trainer_idle.set()

    def wait_for_episode(self) -> None:
        """Off-policy: wait until :meth:`next_episode` returns at once (raises a worker's failure meanwhile)."""
        self.assembler.wait_ready(self.raise_failure)

    def next_episode(self, *, acknowledge: bool = True) -> EpisodePacket:
        """
        :param acknowledge: Let the episode's environment begin its next episode now (each environment has at most
            one episode between its worker and the trainer); False to do it later, with
            :meth:`acknowledge_episode`, so that the next one is acted by newer weights.
        :return: The next episode, off-policy, counted in the ``VecNormalize`` statistics if any (waits for it;
            raises a worker's failure).
        """
        item = self._take()
        assert isinstance(item, StreamItem)
        packet: EpisodePacket = item.value
        if self.statistics is not None:
            self.statistics.count(packet)
        self._lags.append(self.version - packet.first_version)
        self.consumed_steps += packet.length
        if acknowledge:
            self._acknowledge(item)
        else:
            self._unacknowledged[packet.env_index, packet.episode_index] = item
        return packet

    def acknowledge_episode(self, packet: EpisodePacket) -> None:
        """
        Let the environment of an episode taken with ``next_episode(acknowledge=False)`` begin its next episode.

        :param packet: The episode (ignored if it was acknowledged already, or taken from a collection closed since:
            its environment stopped with it).
        """
        item = self._unacknowledged.pop((packet.env_index, packet.episode_index), None)
        if item is not None:
            self._acknowledge(item)

    def env_call(self, call: EnvCall, env_indices: list[int]) -> list[Any]:
        """
        Make a VecEnv's ``get_attr``, ``set_attr`` or ``env_method`` on the environments the workers run.

        :param call: The call.
        :param env_indices: The environments, by index.
        :return: What it returned on each, in the order of ``env_indices``.
        :raises RuntimeError: if an environment runs in no worker (its worker is being replaced).
        """
        self.raise_failure()
        results: dict[int, Any] = {}
        for reply in self.pool.call_all("env_call", [(call, env_indices)] * self.pool.n_workers):
            results.update(reply)
        missing = [index for index in env_indices if index not in results]
        if missing:
            raise RuntimeError(f"environments {missing} run in no worker now (a worker is being replaced): call again")
        return [results[index] for index in env_indices]

    @property
    def failed(self) -> bool:
        """Whether the collection stopped on a failure (see :meth:`raise_failure`)."""
        return self.assembler.error is not None or self.pool.failure is not None

    def raise_failure(self) -> None:
        """Raise the collection's failure, if any (a worker's exception, with its traceback, or the death of a worker
        past the restart budget, which the assembler may not have seen yet)."""
        if self.assembler.error is not None:
            raise self.assembler.error
        if self.pool.failure is not None:
            raise self.pool.failure

    def profile(self) -> dict[str, Any]:
        """:return: Worker, buffer, transport and policy figures (see ``get_profiler_report``)."""
        counts = self.stream.counts
        received = self.assembler.received
        lags = np.asarray(self._lags) if self._lags else np.zeros(1)
        elapsed = time.monotonic() - self.started_at
        return {
            "worker": {
                "workers": self.pool.n_workers,
                "episodes": list(received.episodes_per_worker),
                "steps": list(received.steps_per_worker),
                "restarts": self.pool.restarts,
                "episodes_resumed": counts.resumed,
                "episodes_interrupted": counts.interrupted,
                "max_episodes_in_flight": self.budget.total() if self.budget is not None else None,
                "collected_steps": received.steps,
                "wasted_fraction": 1.0 - self.consumed_steps / received.steps if received.steps else 0.0,
            },
            "buffer": {
                "capacity": self.max_episodes_in_buffer,
                "buffered_episodes": self.stream.buffered,
                "episodes_received": counts.received,
                "episodes_dropped": counts.dropped,
                "episodes_discarded": counts.discarded,
                "episodes_stale": received.stale_episodes,
                "steps_stale": received.stale_steps,
                "avg_push_wait_seconds": counts.avg_push_wait_seconds,
            },
            "transport": {
                "utilization": self.stream.buffered / self.max_episodes_in_buffer,
                "backend": self.pool.backend.name,
                "env_steps_per_second": received.steps / elapsed if elapsed > 0 else 0.0,
            },
            "policy": {
                "version": self.version,
                "published_version": self.board.version,
                "publications": self.board.publications,
                "lag_mean": float(lags.mean()),
                "lag_p99": float(np.percentile(lags, 99)),
                "lag_max": int(lags.max()),
                "max_policy_lag": self.max_policy_lag,
            },
        }

    def close(self) -> None:
        """Stop the assembler and the workers; free the weight board. Idempotent."""
        self.stream.cancel()
        self.assembler.stop()
        self.pool.close()
        self.board.close()

    def _take(self) -> Rollout | StreamItem:
        started = time.monotonic()
        try:
            return self.assembler.take(self.raise_failure)
        finally:
            self.trainer_wait_seconds += time.monotonic() - started

    def _acknowledge(self, item: StreamItem) -> None:
        """Tell the worker its episode is in (see the assembler), and how many it may have in flight (with an
        in-flight budget)."""
        if self.budget is None:
            return
        packet: EpisodePacket = item.value
        self.budget.record(packet.length)
        previous = self._acknowledgements[item.worker_index]
        if previous is not None and previous.done() and previous.exception() is not None:
            raise previous.exception()  # type: ignore[misc]
        self._acknowledgements[item.worker_index] = self.pool.call(
            item.worker_index,
            "acknowledge",
            (packet.env_index, packet.episode_index),
            self.budget.per_worker(item.worker_index),
        )


class _WorkerFactory:
    """Builds one episode worker."""

    def __init__(
        self,
        env_fns: list[Any],
        policy: BasePolicy,
        spec: ActingSpec,
        *,
        max_envs: int,
        progress: Progress,
        version: int,
        limits_in_flight: bool,
        in_flight_limit: int | None,
        trainer_idle: TrainerIdle | None,
    ) -> None:
        self.env_fns = env_fns
        self.policy = policy
        self.spec = spec
        self.max_envs = max_envs
        self.progress = progress
        self.version = version
        self.limits_in_flight = limits_in_flight
        self.in_flight_limit = in_flight_limit
        self.trainer_idle = trainer_idle

    def __call__(self) -> EpisodeWorker:
        worker = EpisodeWorker if self.spec.lockstep_steps is None else LockstepEpisodeWorker
        return worker(
            self.env_fns,
            self.policy,
            self.spec,
            max_envs=self.max_envs,
            progress=self.progress,
            version=self.version,
            limits_in_flight=self.limits_in_flight,  # never for lockstep collection (its budget is None)
            in_flight_limit=self.in_flight_limit,
            trainer_idle=self.trainer_idle,
        )
