"""The trainer's side of async collection: the pool of episode workers, weight publication, and a background
assembler that turns the stream of episodes into rollout buffers (on-policy) or hands them one ahead (off-policy)."""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import ReplayBuffer, RolloutBuffer
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3.agents.episode_worker import EpisodeWorker
from lit_sb3.agents.episodes import ActingSpec, EpisodePacket, Progress
from lit_sb3.agents.lockstep import LockstepEpisodeWorker
from lit_sb3.agents.weights import WeightBoard, acting_module, flat_weights
from lit_sb3.envs.multi_env import IndexableMultiEnv
from lit_sb3.workers.backend import Backend, make_backend
from lit_sb3.workers.local import start_fork_server
from lit_sb3.workers.pool import WorkerPool
from lit_sb3.workers.stream import Stream
from lit_sb3.workers.threads import ThreadBackend

#: Seconds between two checks for a failure while the trainer waits for data.
WAIT_SLICE = 0.05
#: Policy lags kept for the profiler's percentiles.
LAG_WINDOW = 10_000
#: What the fork server of worker processes imports ahead of them.
WORKER_PRELOAD = (EpisodeWorker.__module__,)
#: The profiler's name of each backend.
BACKEND_LABELS = {"LocalBackend": "processes", "ThreadBackend": "threads", "RayBackend": "ray"}


@dataclass(frozen=True)
class RolloutSpec:
    """
    How on-policy rollouts are built.

    :param target_steps: Steps of a rollout (``n_steps * n_envs``); the last episode may take it beyond.
    :param gamma: Discount.
    :param gae_lambda: GAE's lambda.
    :param device: Device of the rollout buffer.
    """

    target_steps: int
    gamma: float
    gae_lambda: float
    device: Any


@dataclass
class Rollout:
    """
    A rollout made of complete episodes, concatenated, with what callbacks see step by step.

    :param buffer: The filled rollout buffer (one environment column; returns and advantages computed).
    :param episodes: The episodes, in the order they were concatenated.
    :param rewards: Environment rewards of every step.
    :param dones: Whether each step ended its episode.
    :param infos: Info dict of every step (the last one of an episode with ``episode``, ``terminal_observation``
        and ``TimeLimit.truncated`` as a Stable-Baselines3 ``VecEnv`` with ``Monitor`` gives).
    :param new_observations: The observation after every step.
    :param actions: The action of every step.
    """

    buffer: RolloutBuffer
    episodes: list[EpisodePacket]
    rewards: np.ndarray
    dones: np.ndarray
    infos: list[dict[str, Any]]
    new_observations: np.ndarray
    actions: np.ndarray

    @property
    def length(self) -> int:
        """Steps in the rollout."""
        return len(self.rewards)


def final_info(packet: EpisodePacket, started_at: float) -> dict[str, Any]:
    """
    :param packet: A finished episode.
    :param started_at: When collection started (for Monitor's ``t``).
    :return: The info dict of its last step, completed as Stable-Baselines3's ``DummyVecEnv`` and ``Monitor`` do
        (``terminal_observation``, ``TimeLimit.truncated``, ``episode``), and with ``collection``: the environment
        and episode index, the weight versions that acted, the randomly chosen steps and the worker's time.
    """
    info = dict(packet.infos[-1])
    info["terminal_observation"] = packet.observations[-1]
    info["TimeLimit.truncated"] = packet.truncated
    info.setdefault("episode", {"r": packet.episode_return, "l": packet.length, "t": time.monotonic() - started_at})
    info["collection"] = {
        "env_index": packet.env_index,
        "episode_index": packet.episode_index,
        "first_version": packet.first_version,
        "last_version": packet.last_version,
        "random_steps": packet.random_steps,
        "seconds": packet.seconds,
    }
    return info


class AsyncCollector:
    """
    Streams complete episodes from a pool of :class:`~lit_sb3.agents.episode_worker.EpisodeWorker` s, one task per
    environment, bounded by ``max_episodes_in_buffer`` across workers.

    :param env: The agent's environments.
    :param policy: The trainer's policy (copied to the workers; its acting part is published with :meth:`sync`).
    :param spec: How workers act.
    :param progress: The trainer's progress now.
    :param rollout: On-policy: how rollouts are built; None for off-policy (episodes are handed one ahead).
    :param backend: Builds the backend workers run on (see :func:`collection_backend`).
    :param n_workers: Number of workers.
    :param max_episodes_in_buffer: Most finished episodes buffered at once, across all workers.
    :param queue_put_timeout: Seconds a finished episode waits for buffer room before it is dropped (counted);
        None to wait.
    :param weight_sync_interval: Least seconds between two weight publications.
    :param max_policy_lag: Episodes acted by weights more than this many versions old when they are assembled
        are dropped (counted); None for no bound. An on-policy rollout is assembled while the one before it trains,
        so the episodes it trains on are at most ``max_policy_lag + 1`` versions old.
    :param max_restarts: Dead workers replaced before the collection fails.
    :param vec_normalize: The trainer's ``VecNormalize``, if any: its statistics are updated with every episode
        consumed (each observation and return counted once, in consumption order) and published to the workers,
        which normalise observations with them; on-policy rewards are normalised when the rollout is assembled.
    """

    def __init__(
        self,
        env: IndexableMultiEnv,
        policy: BasePolicy,
        spec: ActingSpec,
        progress: Progress,
        *,
        rollout: RolloutSpec | None,
        backend: Callable[[], Backend],
        n_workers: int,
        max_episodes_in_buffer: int,
        queue_put_timeout: float | None,
        weight_sync_interval: float,
        max_policy_lag: int | None,
        max_restarts: int,
        vec_normalize: VecNormalize | None = None,
    ) -> None:
        self.policy = policy
        self.vec_normalize = vec_normalize
        self._statistics_lock = threading.Lock()
        self.rollout_spec = rollout
        self.max_policy_lag = max_policy_lag
        self.max_episodes_in_buffer = max_episodes_in_buffer
        self.n_envs = env.num_envs
        self.observation_space, self.action_space = env.observation_space, env.action_space
        worker_policy = policy_copy(policy)
        max_envs = math.ceil(self.n_envs / n_workers)
        factories: list[Callable[[], EpisodeWorker]] = [
            _WorkerFactory(env.env_fns, worker_policy, spec, max_envs=max_envs, progress=progress)
            for _ in range(n_workers)
        ]
        self.pool = WorkerPool(  # closes the backend if it fails
            factories,
            backend=backend(),
            max_restarts=max_restarts,
            unit_name="episode",
            stream_capacity=max_episodes_in_buffer,
            put_timeout=queue_put_timeout,
        )
        publishers = (self.pool.backend.array_publisher(), self.pool.backend.array_publisher())
        self.board = WeightBoard(publishers, weight_sync_interval)
        self.stream: Stream = self.pool.stream_tasks(
            "collect",
            [(index,) for index in range(self.n_envs)],
            labels=[f"env {index}" for index in range(self.n_envs)],
            capacities=[max_envs] * n_workers,
            # A lockstep environment cannot resume elsewhere: its rollout bookkeeping lived in the dead worker.
            retry="resume" if spec.lockstep_steps is None else "fail",
        )
        self.lockstep = spec.lockstep_steps is not None
        self.started_at = time.monotonic()
        self.version = 0  # of the trainer's weights
        self._publications: list[Future] = []
        self._progress = progress
        self._ready: queue.Queue[Rollout | EpisodePacket] = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._stopping = threading.Event()
        self._taken = threading.Event()
        self._lags: deque[int] = deque(maxlen=LAG_WINDOW)
        self.stale_episodes = 0
        self.episodes_per_worker = [0] * n_workers
        self.steps_per_worker = [0] * n_workers
        self.trainer_wait_seconds = 0.0
        self.consumed_steps = 0
        self._assembler = threading.Thread(target=self._assemble, name="lit-sb3-episode-assembler", daemon=True)
        self._assembler.start()

    # ------------------------------------------------------------------------------------------- trainer side

    def sync(self, version: int, progress: Progress, *, force: bool = False) -> None:
        """
        Publish the trainer's weights if they changed (and the workers read the previous ones) and its progress,
        at most once per ``weight_sync_interval`` unless ``force``.

        :param version: Version of the trainer's current weights.
        :param progress: The trainer's progress.
        :param force: Publish even within the interval.
        """
        self.raise_failure()
        self.version = version
        if not (force or self.lockstep or self.board.due()):
            return
        # The warm-up ends once learning_starts steps were collected, not once the trainer consumed them: episodes
        # buffered ahead would otherwise all be random.
        collected = sum(self.steps_per_worker)
        progress = self._with_statistics(
            dataclasses.replace(progress, num_timesteps=max(progress.num_timesteps, collected))
        )
        for future in self._publications:
            if future.done() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        if self.lockstep:  # every version reaches the workers: wait until they all read the previous one
            for future in self._publications:
                future.result()
        read_by_all = all(future.done() for future in self._publications)
        if version > self.board.version and read_by_all:
            handle = self.board.write(version, flat_weights(acting_module(self.policy)))
            self._publications = [
                self.pool.call(worker, "sync", version, handle, progress, sticky=True)
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

    def next_episode(self) -> EpisodePacket:
        """:return: The next episode, off-policy (waits for it; raises a worker's failure)."""
        item = self._take()
        assert isinstance(item, EpisodePacket)
        self._update_statistics(item)
        self._lags.append(self.version - item.first_version)
        self.consumed_steps += item.length
        return item

    def raise_failure(self) -> None:
        """Raise the collection's failure, if any (a worker's exception, with its traceback)."""
        if self._error is not None:
            raise self._error

    def profile(self) -> dict[str, Any]:
        """:return: Worker, buffer, transport and policy figures (see ``get_profiler_report``)."""
        counts = self.stream.counts
        lags = np.asarray(self._lags) if self._lags else np.zeros(1)
        elapsed = time.monotonic() - self.started_at
        return {
            "worker": {
                "workers": self.pool.n_workers,
                "episodes": list(self.episodes_per_worker),
                "steps": list(self.steps_per_worker),
                "restarts": self.pool.restarts,
                "episodes_resumed": counts.resumed,
                "episodes_interrupted": counts.interrupted,
            },
            "buffer": {
                "capacity": self.max_episodes_in_buffer,
                "buffered_episodes": self.stream.buffered,
                "episodes_received": counts.received,
                "episodes_dropped": counts.dropped,
                "episodes_discarded": counts.discarded,
                "episodes_stale": self.stale_episodes,
                "avg_push_wait_seconds": counts.avg_push_wait_seconds,
            },
            "transport": {
                "utilization": self.stream.buffered / self.max_episodes_in_buffer,
                "backend": BACKEND_LABELS[type(self.pool.backend).__name__],
                "env_steps_per_second": sum(self.steps_per_worker) / elapsed if elapsed > 0 else 0.0,
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
        self._stopping.set()
        self.stream.cancel()
        self.pool.close()
        self._assembler.join(5)
        self.board.close()

    def _take(self) -> Rollout | EpisodePacket:
        started = time.monotonic()
        try:
            while True:
                self.raise_failure()
                try:
                    item = self._ready.get(timeout=WAIT_SLICE)
                except queue.Empty:
                    continue
                self._taken.set()
                return item
        finally:
            self.trainer_wait_seconds += time.monotonic() - started

    # ---------------------------------------------------------------------------------------- assembler thread

    def _assemble(self) -> None:
        try:
            if self.lockstep:
                self._assemble_lockstep()
                return
            gathered: list[EpisodePacket] = []
            steps = 0
            for packet in self._packets():
                if self.max_policy_lag is not None and self.version - packet.first_version > self.max_policy_lag:
                    self.stale_episodes += 1
                    continue
                if self.rollout_spec is None:
                    self._hand_over(packet)
                    continue
                gathered.append(packet)
                steps += packet.length
                if steps >= self.rollout_spec.target_steps:
                    self._hand_over(self._build_rollout(gathered))
                    gathered, steps = [], 0
                    # One rollout ahead, no more: the next one starts once the trainer took this one.
                    while not self._taken.wait(WAIT_SLICE) and not self._stopping.is_set():
                        pass
        except BaseException as exc:
            if not self._stopping.is_set():
                self._error = exc

    def _assemble_lockstep(self) -> None:
        """Rollout ``r`` is every environment's episodes of rollout ``r``, ordered by environment and episode."""
        bins: dict[int, list[EpisodePacket]] = {}
        closed: dict[int, int] = {}
        next_rollout = 0
        for packet in self._packets():
            bins.setdefault(packet.rollout_index, []).append(packet)
            closed[packet.rollout_index] = closed.get(packet.rollout_index, 0) + packet.closes_rollout
            while closed.get(next_rollout, 0) == self.n_envs:
                episodes = sorted(bins.pop(next_rollout), key=lambda p: (p.env_index, p.episode_index))
                del closed[next_rollout]
                self._hand_over(self._build_rollout(episodes))
                next_rollout += 1

    def _packets(self) -> Iterator[EpisodePacket]:
        """The episodes of the stream, counted per worker, until the stream ends or the collector stops."""
        while not self._stopping.is_set():
            try:
                item = self.stream.get(timeout=WAIT_SLICE)
            except queue.Empty:
                continue
            if item is None:
                return
            packet: EpisodePacket = item.value
            self.episodes_per_worker[item.worker_index] += 1
            self.steps_per_worker[item.worker_index] += packet.length
            yield packet

    def _hand_over(self, item: Rollout | EpisodePacket) -> None:
        self._taken.clear()
        while not self._stopping.is_set():
            try:
                self._ready.put(item, timeout=WAIT_SLICE)
                return
            except queue.Full:
                continue

    def _with_statistics(self, progress: Progress) -> Progress:
        normalize = self.vec_normalize
        if normalize is None or not normalize.norm_obs:
            return progress
        with self._statistics_lock:
            obs_rms = copy.deepcopy(normalize.obs_rms)
        assert isinstance(obs_rms, RunningMeanStd)  # Box observations only
        return dataclasses.replace(progress, obs_rms=obs_rms)

    def _update_statistics(self, packet: EpisodePacket) -> np.ndarray:
        """
        Count the episode in the ``VecNormalize`` statistics (if they are being trained).

        :param packet: The episode.
        :return: Its training rewards, normalised as ``VecNormalize`` would (with the time-limit bootstrap).
        """
        normalize = self.vec_normalize
        if normalize is None or not normalize.training:
            return packet.train_rewards
        with self._statistics_lock:
            if normalize.norm_obs:
                normalize.obs_rms.update(packet.observations[:-1])
            if not normalize.norm_reward:
                return packet.train_rewards
            discounted = np.empty(packet.length)
            running = 0.0
            for step, reward in enumerate(packet.rewards):
                running = running * normalize.gamma + float(reward)
                discounted[step] = running
            normalize.ret_rms.update(discounted)
            rewards = normalize.normalize_reward(packet.rewards).astype(np.float32)
        if self.rollout_spec is not None:
            rewards[-1] += self.rollout_spec.gamma * packet.terminal_value
        return rewards

    def _build_rollout(self, episodes: list[EpisodePacket]) -> Rollout:
        spec = self.rollout_spec
        assert spec is not None
        length = sum(packet.length for packet in episodes)
        buffer = RolloutBuffer(
            length,
            self.observation_space,
            self.action_space,
            device=spec.device,
            gamma=spec.gamma,
            gae_lambda=spec.gae_lambda,
            n_envs=1,
        )
        train_rewards = [self._update_statistics(packet) for packet in episodes]
        observations = np.concatenate(
            [
                packet.observations[:-1] if packet.acted_observations is None else packet.acted_observations
                for packet in episodes
            ]
        )
        actions = np.concatenate([packet.actions for packet in episodes])
        buffer.observations[:, 0] = observations.reshape(buffer.observations[:, 0].shape)
        buffer.actions[:, 0] = actions.reshape(length, -1)
        buffer.rewards[:, 0] = np.concatenate(train_rewards)
        buffer.values[:, 0] = np.concatenate([packet.values for packet in episodes if packet.values is not None])
        log_probs = [packet.log_probs for packet in episodes if packet.log_probs is not None]
        buffer.log_probs[:, 0] = np.concatenate(log_probs)
        dones = np.zeros(length, dtype=bool)
        starts = np.cumsum([0] + [packet.length for packet in episodes[:-1]])
        buffer.episode_starts[starts, 0] = 1.0
        dones[starts[1:] - 1] = True
        dones[-1] = True
        buffer.pos, buffer.full = length, True
        # Every rollout ends with a finished episode: nothing to bootstrap beyond it.
        buffer.compute_returns_and_advantage(last_values=th.zeros(1), dones=np.ones(1))
        infos = [info for packet in episodes for info in [*packet.infos[:-1], final_info(packet, self.started_at)]]
        new_observations = np.concatenate([packet.observations[1:] for packet in episodes])
        rewards = np.concatenate([packet.rewards for packet in episodes])
        return Rollout(buffer, episodes, rewards, dones, infos, new_observations, actions)


class _WorkerFactory:
    """Builds one episode worker."""

    def __init__(
        self, env_fns: list[Any], policy: BasePolicy, spec: ActingSpec, *, max_envs: int, progress: Progress
    ) -> None:
        self.env_fns = env_fns
        self.policy = policy
        self.spec = spec
        self.max_envs = max_envs
        self.progress = progress

    def __call__(self) -> EpisodeWorker:
        worker = EpisodeWorker if self.spec.lockstep_steps is None else LockstepEpisodeWorker
        return worker(self.env_fns, self.policy, self.spec, max_envs=self.max_envs, progress=self.progress)


def policy_copy(policy: BasePolicy) -> BasePolicy:
    """
    :param policy: The trainer's policy.
    :return: A new policy of the same class and arguments with the same weights, on the CPU (built as
        Stable-Baselines3 rebuilds a saved policy: a deep copy fails on gSDE's sampled noise tensors).
    """
    copied = type(policy)(**policy._get_constructor_parameters())
    copied.load_state_dict(policy.state_dict())
    return copied.to("cpu")


def collection_backend(
    use_mp: bool,
    backend: str | None,
    *,
    ray_address: str | None = None,
    worker_resources: Mapping[str, float] | None = None,
) -> Backend:
    """
    :param use_mp: Whether workers are processes.
    :param backend: None (threads, or local processes with ``use_mp``) or ``"ray"`` (one Ray actor per worker,
        with ``use_mp``).
    :param ray_address: With ``backend="ray"``: the cluster to connect to.
    :param worker_resources: With ``backend="ray"``: the resources of each worker's actor.
    :return: The backend the collection's workers run on.
    """
    check_backend_choice(use_mp, backend, ray_address=ray_address, worker_resources=worker_resources)
    if not use_mp:
        return ThreadBackend()
    return make_backend(
        "local" if backend is None else "ray",
        preload=WORKER_PRELOAD if backend is None else (),
        ray_address=ray_address,
        worker_resources=worker_resources,
    )


def check_backend_choice(
    use_mp: bool,
    backend: str | None,
    *,
    ray_address: str | None = None,
    worker_resources: Mapping[str, float] | None = None,
) -> None:
    """
    :raises ValueError: if the choice of workers does not hold together (see :func:`collection_backend`).
    """
    if backend not in (None, "ray"):
        raise ValueError(
            f"backend must be None (threads, or local processes with use_mp=True) or 'ray', got {backend!r}"
        )
    if backend == "ray" and not use_mp:
        raise ValueError("backend='ray' runs workers as Ray actors, which are processes: pass use_mp=True with it")
    if backend is None and (ray_address is not None or worker_resources is not None):
        raise ValueError("ray_address and worker_resources need backend='ray'")


def prepare_workers(use_mp: bool, backend: str | None) -> None:
    """
    Start what local worker processes will be forked from, so that its imports run while the agent is being built.

    :param use_mp: Whether workers are processes.
    :param backend: None for local processes (threads and Ray actors need nothing).
    """
    if use_mp and backend is None:
        start_fork_server(WORKER_PRELOAD)


def default_workers(n_envs: int, use_mp: bool) -> int:
    """
    :param n_envs: Number of environments.
    :param use_mp: Whether workers are processes.
    :return: One process per core but one, which the trainer keeps (at most one per environment, at least one);
        one thread (threads share the GIL).
    """
    return max(1, min(n_envs, (os.cpu_count() or 1) - 1)) if use_mp else 1


def one_column_replay_buffer(replay_buffer: ReplayBuffer, replay_buffer_kwargs: dict[str, Any]) -> ReplayBuffer:
    """
    :param replay_buffer: An algorithm's replay buffer.
    :param replay_buffer_kwargs: The extra arguments it was built with.
    :return: It, or the same buffer with one environment column: collected episodes arrive one by one, not in
        lockstep across environments, so their transitions go in one at a time.
    """
    if replay_buffer.n_envs == 1:
        return replay_buffer
    return type(replay_buffer)(
        replay_buffer.buffer_size,
        replay_buffer.observation_space,
        replay_buffer.action_space,
        device=replay_buffer.device,
        n_envs=1,
        optimize_memory_usage=replay_buffer.optimize_memory_usage,
        **replay_buffer_kwargs,
    )
