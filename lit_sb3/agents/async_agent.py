"""Drop-in asynchronous episode collection for Stable-Baselines3 gradient agents."""

from __future__ import annotations

import contextlib
import functools
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import GymEnv, RolloutReturn, TrainFreq
from stable_baselines3.common.utils import should_collect_more_steps
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from lit_sb3.checks import check_finite_number, check_non_negative_int, check_non_negative_number, check_positive_int
from lit_sb3.collection import (
    AsyncCollector,
    CollectionPlan,
    EpisodePacket,
    acting_module,
    add_transitions,
    check_supported,
    final_info,
    flat_weights,
    one_column_replay_buffer,
)
from lit_sb3.collection.acting import samples_directly
from lit_sb3.collection.collector import WORKER_PRELOAD
from lit_sb3.collection.envs import EnvFactory, WorkerEnvRouting, collection_env_fns
from lit_sb3.collection.lag_correction import LagCorrection, check_lag_correction, correct_for_policy_lag
from lit_sb3.collection.observations import select, stack
from lit_sb3.envs.multi_env import IndexableMultiEnv
from lit_sb3.workers.choice import BackendChoice

Algorithm = TypeVar("Algorithm", bound=BaseAlgorithm)

#: Off-policy: how many times its acting time before an episode's end the trainer lets its environment begin the
#: next (see :class:`_HandOverTiming`).
ACTING_TIME_MARGIN = 2.0
#: Off-policy: seconds the acknowledgement and the hand-over of an episode add to its acting time.
HAND_OVER_SECONDS = 0.01
#: Off-policy: weight of the newest interval in the moving average of the trainer's seconds per transition.
PACE_SMOOTHING = 0.05


@dataclass(frozen=True)
class _Transition:
    """
    One step of a collected episode, as the off-policy trainer takes it.

    :param episode: The episode.
    :param step: The step's index in it.
    :param info: The step's info dict (the last one completed as ``DummyVecEnv`` and ``Monitor`` do).
    """

    episode: EpisodePacket
    step: int
    info: dict[str, Any]

    @property
    def done(self) -> bool:
        """Whether the step ends the episode."""
        return self.step == self.episode.length - 1


@dataclass
class _TakeStatistics:
    """
    What the trainer found each time it asked the collection for data (async-gym-agents 0.1's buffer figures).

    :param takes: Rollouts (on-policy) or episodes (off-policy) taken.
    :param buffered: Finished episodes waiting in the workers' buffer, summed over the takes.
    :param empty: Takes that had to wait for their data.
    :param episodes: Episodes taken.
    :param truncated: Episodes taken that were truncated.
    :param decoupled: On-policy rollouts taken whose lag correction decoupled them (see
        :mod:`lit_sb3.collection.lag_correction`).
    """

    takes: int = 0
    buffered: int = 0
    empty: int = 0
    episodes: int = 0
    truncated: int = 0
    decoupled: int = 0

    def record(self, collector: AsyncCollector) -> None:
        """Count a take, just before it."""
        self.takes += 1
        self.buffered += collector.stream.buffered
        self.empty += not collector.assembler.ready

    def record_episodes(self, episodes: list[EpisodePacket]) -> None:
        """Count the episodes a take brought."""
        self.episodes += len(episodes)
        self.truncated += sum(episode.truncated for episode in episodes)


class _HandOverTiming:
    """
    When the off-policy trainer lets an environment begin its next episode: as late as keeps the trainer from
    waiting for it, so that the newest weights act it. Acknowledged as the episode is taken, it would be acted at
    once by the weights of that moment, and trained on an episode's worth of gradient steps later (a worker acts a
    200-step Pendulum episode in tens of milliseconds; SAC trains on it for seconds).

    The lead is the episode's own acting time, times :data:`ACTING_TIME_MARGIN`, plus :data:`HAND_OVER_SECONDS`, at
    the trainer's pace: a moving average of the seconds between the transitions it takes once it trains (callbacks
    and training included). Before it trains, its pace says nothing of what follows: an episode that ends within
    the warm-up is acknowledged at once (random actions begin the next), any other at its last step until the pace
    is known.
    """

    def __init__(self) -> None:
        self._last_taken_at: float | None = None
        self._step_seconds: float | None = None  # the moving average, once the trainer trains

    def acknowledges(self, episode: EpisodePacket, step: int, warm_up_steps_left: int) -> bool:
        """
        Call as the trainer takes each transition.

        :param episode: The episode under way.
        :param step: The step of it taken now.
        :param warm_up_steps_left: Steps the trainer takes before its warm-up (``learning_starts``) ends.
        :return: Whether to let the episode's environment begin its next episode now.
        """
        now = time.monotonic()
        if warm_up_steps_left < 0 and self._last_taken_at is not None:  # it trained since the last one
            seconds = now - self._last_taken_at
            average = self._step_seconds
            self._step_seconds = seconds if average is None else average + PACE_SMOOTHING * (seconds - average)
        self._last_taken_at = now
        remaining = episode.length - step
        if remaining <= warm_up_steps_left or remaining == 1:
            return True
        if self._step_seconds is None:
            return False
        return remaining * self._step_seconds <= ACTING_TIME_MARGIN * episode.seconds + HAND_OVER_SECONDS


class _AsyncAgent:
    """
    What async collection adds to an algorithm, on- or off-policy: the keywords, the collector, ``shutdown`` and
    ``get_profiler_report``.
    """

    env: VecEnv | None
    policy: Any
    num_timesteps: int
    seed: Any

    def __init__(
        self,
        policy: Any,
        env: GymEnv | str | None,
        *args: Any,
        use_mp: bool = False,
        max_episodes_in_buffer: int = 8,
        queue_put_timeout: float | None = None,
        n_workers: int | None = None,
        weight_sync_interval: float = 0.05,
        max_policy_lag: int | None = None,
        max_restarts: int = 3,
        reproducible: bool = False,
        lag_correction: LagCorrection | None = "auto",
        backend: str | None = None,
        ray_address: str | None = None,
        worker_resources: Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        check_positive_int("max_episodes_in_buffer", max_episodes_in_buffer)
        if n_workers is not None:
            check_positive_int("n_workers", n_workers)
        if queue_put_timeout is not None:
            check_non_negative_number("queue_put_timeout", queue_put_timeout)
        if check_finite_number("weight_sync_interval", weight_sync_interval) < 0:  # inf: acting forever on old weights
            raise ValueError(f"weight_sync_interval must be a non-negative number, got {weight_sync_interval}")
        if not isinstance(reproducible, bool):
            raise TypeError(f"reproducible must be a bool, got {type(reproducible)!r}")
        if max_policy_lag is not None:
            check_non_negative_int("max_policy_lag", max_policy_lag)
        check_non_negative_int("max_restarts", max_restarts)
        check_lag_correction(lag_correction, type(self))
        self._workers = BackendChoice.from_use_mp(
            use_mp, backend, ray_address=ray_address, worker_resources=worker_resources
        )
        self.use_mp = use_mp
        self.backend = backend
        self.ray_address = ray_address
        self.worker_resources = worker_resources
        self.max_episodes_in_buffer = max_episodes_in_buffer
        self.queue_put_timeout = queue_put_timeout
        self.n_workers = n_workers
        self.weight_sync_interval = weight_sync_interval
        self.max_policy_lag = max_policy_lag
        self.max_restarts = max_restarts
        self.reproducible = reproducible
        self.lag_correction = lag_correction
        self._workers.prepare(WORKER_PRELOAD)
        self._collector: AsyncCollector | None = None
        self._release_collector: weakref.finalize | None = None
        self._env_routing: WorkerEnvRouting | None = None
        self._plan: CollectionPlan | None = None
        self._weights_version = 0
        self._collections_started = 0
        self._train_seconds = 0.0
        self._train_calls = 0
        self._take_statistics = _TakeStatistics()
        super().__init__(policy, env, *args, **kwargs)  # type: ignore[call-arg]
        if self.env is not None:
            self._collection_env_fns(self.env)  # refuses what the workers cannot step
        if reproducible:
            self._check_reproducible()

    def _check_reproducible(self) -> None:
        if not isinstance(self, OnPolicyAlgorithm):
            raise ValueError("reproducible=True is for on-policy algorithms (rollouts one weight version behind)")
        if self.seed is None:
            raise ValueError("reproducible=True needs a seed: two runs are identical for the same seed")
        if self.queue_put_timeout is not None:
            raise ValueError(
                "reproducible=True needs every episode: queue_put_timeout must be None (an episode dropped for want "
                f"of buffer room would leave its rollout incomplete), got {self.queue_put_timeout}"
            )
        if isinstance(self.env, VecNormalize):
            raise ValueError("reproducible=True does not support VecNormalize yet (its statistics follow timing)")
        if getattr(self, "use_sde", False):
            raise ValueError("reproducible=True does not support gSDE (its noise is sampled per batch)")
        if not (isinstance(self.policy, ActorCriticPolicy) and samples_directly(self.policy)):
            raise ValueError(
                "reproducible=True draws categorical or diagonal Gaussian actions through ActorCriticPolicy.forward, "
                f"not those of {type(self.policy).__name__}"
            )

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """
        As Stable-Baselines3's ``set_env``; the collection stops, and the next ``learn()`` collects from ``env``.

        :param env: The new environment (any the constructor takes).
        :param force_reset: Reset the environment at the start of the next ``learn()``.
        """
        wrapped = self._wrap_env(env, self.verbose)  # type: ignore[attr-defined]
        self._collection_env_fns(wrapped)  # refused before anything changes
        super().set_env(wrapped, force_reset)  # type: ignore[misc]
        self.shutdown()

    def learn(self, *args: Any, **kwargs: Any) -> Any:
        """
        As Stable-Baselines3's ``learn``. Thread workers step the agent's own environment objects: their collection
        stops when ``learn`` returns, so that the environments are the caller's alone again (the next ``learn``
        starts new threads; worker processes, which step copies, are kept until :meth:`shutdown`, or until a failure
        of the collection is raised here).
        """
        total_timesteps = args[0] if args else kwargs.get("total_timesteps")
        if check_finite_number("total_timesteps", total_timesteps) < 0:  # Stable-Baselines3 would do nothing
            raise ValueError(f"total_timesteps must be a non-negative number, got {total_timesteps}")
        if self.reproducible:  # again: set_env and load may have changed what it needs
            self._check_reproducible()
        try:
            return super().learn(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            if self._collector is not None and self._collector.failed:
                self._collector.close()  # its failure is raised now: the next learn() collects anew
            raise
        finally:
            if self._workers.name == "threads" and self._collector is not None:
                self._collector.close()  # kept for get_profiler_report

    def _collection_env_fns(self, env: VecEnv) -> list[EnvFactory]:
        """:return: The factory of each environment for the workers (raises on what they cannot step)."""
        return collection_env_fns(env, in_process=self._workers.name == "threads")

    def shutdown(self) -> None:
        """Stop the collection workers and free their resources (the agent can learn again afterwards)."""
        if self._env_routing is not None:
            self._env_routing.remove()
            self._env_routing = None
        if self._collector is not None:
            self._collector.close()
            self._collector = None
        if self._release_collector is not None:
            self._release_collector.detach()
            self._release_collector = None

    def get_profiler_report(self) -> dict[str, Any]:
        """
        :return: Sections ``trainer``, ``worker``, ``buffer``, ``transport`` and ``policy``: time spent training and
            waiting for data, the rollouts ``lag_correction`` decoupled, episodes and steps per worker, restarts, the
            buffer's capacity, what it holds, drops and ``avg_push_wait_seconds``, ``transport.utilization`` (the
            fraction of bounded episode slots in use now) and the policy lag (mean, p99, max, in weight versions).
        """
        collector = self._collector
        trainer = {
            "train_calls": self._train_calls,
            "train_seconds": self._train_seconds,
            "wait_seconds": collector.trainer_wait_seconds if collector is not None else 0.0,
            "consumed_steps": collector.consumed_steps if collector is not None else 0,
            "num_timesteps": self.num_timesteps,
            "decoupled_rollouts": self._take_statistics.decoupled,
        }
        if collector is None:
            return {"trainer": trainer, "worker": {}, "buffer": {}, "transport": {}, "policy": {}}
        return {"trainer": trainer, **collector.profile()}

    @property
    def buffer_utilization(self) -> float:
        """As async-gym-agents 0.1: the mean number of finished episodes waiting in the buffer when the trainer asked
        for data (0 before any)."""
        statistics = self._take_statistics
        return statistics.buffered / statistics.takes if statistics.takes else 0.0

    @property
    def buffer_emptyness(self) -> float:
        """As async-gym-agents 0.1: the fraction of the trainer's requests for data that had to wait for it."""
        statistics = self._take_statistics
        return statistics.empty / statistics.takes if statistics.takes else 0.0

    @property
    def truncated_episodes_fraction(self) -> float:
        """As async-gym-agents 0.1: the fraction of the episodes trained on that were truncated (0 before any)."""
        statistics = self._take_statistics
        return statistics.truncated / statistics.episodes if statistics.episodes else 0.0

    def _excluded_save_params(self) -> list[str]:
        # The collection is rebuilt by the next learn(): workers, and the episode under way off-policy.
        excluded = ["_collector", "_release_collector", "_env_routing", "_plan", "_episode", "_hand_over"]
        return [*super()._excluded_save_params(), *excluded]  # type: ignore[misc]

    def _timed_train(self, train: Any, *args: Any, **kwargs: Any) -> None:
        started = time.monotonic()
        # With gradients on: a Ctrl-C inside a torch.no_grad() block's __enter__ skips its __exit__ and leaves them
        # off for the thread, which would break every later train() of this model.
        with th.enable_grad():
            train(*args, **kwargs)
        self._train_seconds += time.monotonic() - started
        self._train_calls += 1
        self._weights_version += 1

    def _running_collector(self) -> AsyncCollector:
        """:return: The collection under way, started if there is none."""
        if self._collector is None or self._collector.pool.closed:
            return self._start_collector()
        return self._collector

    def _start_collector(self) -> AsyncCollector:
        """Start the collection (worker processes: kept across ``learn()`` calls until :meth:`shutdown`)."""
        assert self.env is not None
        env_fns = self._collection_env_fns(self.env)
        n_workers = self.n_workers if self.n_workers is not None else self._workers.default_workers(len(env_fns))
        self._plan = plan = CollectionPlan.for_algorithm(
            self,  # type: ignore[arg-type]
            self._next_collection_seed(),
            lockstep=self.reproducible,
            n_collection_envs=len(env_fns),
            # async-gym-agents' semantics for its own class: rollouts of whole episodes.
            split_episodes=not isinstance(self.env.unwrapped, IndexableMultiEnv),
        )
        self._collector = AsyncCollector(
            self.env,
            env_fns,
            self.policy,
            plan.acting,
            plan.progress(self.num_timesteps),
            rollout=plan.rollout,
            backend=self._workers,
            n_workers=n_workers,
            max_episodes_in_buffer=self.max_episodes_in_buffer,
            queue_put_timeout=self.queue_put_timeout,
            weight_sync_interval=self.weight_sync_interval,
            max_policy_lag=self.max_policy_lag,
            max_restarts=self.max_restarts,
            vec_normalize=self.env if isinstance(self.env, VecNormalize) else None,
            initial_version=self._weights_version,
        )
        if self._release_collector is not None:
            self._release_collector.detach()  # the last collection is closed
        # Dropped without shutdown(), the agent still stops its workers when collected.
        self._release_collector = weakref.finalize(self, self._collector.close)
        if self._workers.name != "threads":  # they step copies: get_attr, set_attr and env_method go to them
            if self._env_routing is not None:
                self._env_routing.remove()
            self._env_routing = WorkerEnvRouting(self.env, self._collector.env_call)
        return self._collector

    def _sync(self, collector: AsyncCollector, *, force: bool = False) -> None:
        """Tell the collection of the trainer's weights and progress."""
        assert self._plan is not None  # built with the collector
        collector.sync(
            self._weights_version, self._acting_weights, self._plan.progress(self.num_timesteps), force=force
        )

    def _acting_weights(self) -> np.ndarray:
        return flat_weights(acting_module(self.policy))

    def _next_collection_seed(self) -> int:
        """:return: The seed of a new collection's episodes: a seeded agent's first is its seed, and each later one
        (a new ``learn()`` with thread workers, after ``shutdown()``, ``set_env`` or a failure) another, so that
        no collection repeats the resets and random draws of an earlier one. Unseeded agents draw it from numpy's
        global generator, so that ``set_random_seed`` makes runs repeatable."""
        self._collections_started += 1
        if self.seed is None:
            return int(np.random.randint(0, 2**31 - 1))
        if self._collections_started == 1:
            return int(self.seed)
        return int(np.random.SeedSequence(self.seed, spawn_key=(self._collections_started,)).generate_state(1)[0])


class _AsyncOnPolicy(_AsyncAgent):
    """Async collection for on-policy algorithms: each rollout is ``n_steps * n_envs`` steps of episodes, the one
    that crosses the count cut there (whole episodes with an ``IndexableMultiEnv``)."""

    n_steps: int
    n_envs: int
    gamma: float
    gae_lambda: float
    device: Any
    use_sde: bool
    sde_sample_freq: int
    rollout_buffer: Any
    _update_info_buffer: Any

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int) -> bool:
        collector = self._running_collector()
        self._sync(collector, force=True)
        callback.on_rollout_start()
        self._take_statistics.record(collector)
        rollout = collector.next_rollout()
        self._take_statistics.record_episodes(rollout.episodes)
        if self.lag_correction is not None:
            weights = correct_for_policy_lag(self.policy, rollout.buffer, self.lag_correction)
            self._take_statistics.decoupled += weights is not None
        self.rollout_buffer = rollout_buffer = rollout.buffer  # the callbacks' locals name it too
        n_envs = env.num_envs
        for start in range(0, rollout.length, n_envs):
            stop = min(start + n_envs, rollout.length)
            rewards, dones, infos = rollout.rewards[start:stop], rollout.dones[start:stop], rollout.infos[start:stop]
            new_obs, actions = select(rollout.new_observations, slice(start, stop)), rollout.actions[start:stop]
            self.num_timesteps += stop - start
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def train(self) -> None:
        collector = self._collector
        with collector.training() if collector is not None else contextlib.nullcontext():
            self._timed_train(super().train)  # type: ignore[misc]


class _AsyncOffPolicy(_AsyncAgent):
    """Async collection for off-policy algorithms: transitions go into the replay buffer on the trainer thread."""

    learning_starts: int
    use_sde: bool
    sde_sample_freq: int
    use_sde_at_warmup: bool
    action_noise: ActionNoise | None
    replay_buffer: ReplayBuffer | None
    _episode_num: int
    _total_timesteps: int
    _update_info_buffer: Any
    _update_current_progress_remaining: Any
    _on_step: Any
    _current_progress_remaining: float
    dump_logs: Any

    def _setup_model(self) -> None:
        super()._setup_model()  # type: ignore[misc]
        if self.replay_buffer is not None:
            self.replay_buffer = one_column_replay_buffer(self.replay_buffer, getattr(self, "replay_buffer_kwargs", {}))
        self._episode: EpisodePacket | None = None
        self._episode_step = 0
        self._hand_over = _HandOverTiming()

    def collect_rollouts(  # noqa: PLR0917 - Stable-Baselines3's signature
        self,
        env: VecEnv,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: ActionNoise | None = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        # Built once: this runs every few env steps (unseeded, the seed draw would repeat).
        collector = self._running_collector()
        replay_buffer = self.replay_buffer if self.replay_buffer is not None else replay_buffer
        n_envs = env.num_envs
        collected_steps, collected_episodes = 0, 0
        callback.on_rollout_start()
        while should_collect_more_steps(train_freq, collected_steps, collected_episodes):
            self._sync(collector)
            transitions = [self._next_transition(collector) for _ in range(n_envs)]
            rewards = np.array([transition.episode.rewards[transition.step] for transition in transitions])
            dones = np.array([transition.done for transition in transitions])
            infos = [transition.info for transition in transitions]
            new_obs = stack([select(item.episode.observations, item.step + 1) for item in transitions])
            self.num_timesteps += n_envs
            collected_steps += 1
            callback.update_locals(locals())
            if not callback.on_step():
                return RolloutReturn(collected_steps * n_envs, collected_episodes, continue_training=False)
            self._update_info_buffer(infos, dones)
            for transition in transitions:
                add_transitions(
                    replay_buffer, transition.episode, range(transition.step, transition.step + 1), transition.info
                )
            self._update_current_progress_remaining(self.num_timesteps, self._total_timesteps)
            self._on_step()
            for done in dones:
                if done:
                    collected_episodes += 1
                    self._episode_num += 1
                    if log_interval is not None and self._episode_num % log_interval == 0:
                        self.dump_logs()
        callback.on_rollout_end()
        return RolloutReturn(collected_steps * n_envs, collected_episodes, continue_training=True)

    def _next_transition(self, collector: AsyncCollector) -> _Transition:
        """:return: The next transition of the stream."""
        if self._episode is None:
            self._take_statistics.record(collector)
            self._episode = collector.next_episode(acknowledge=False)
            self._take_statistics.record_episodes([self._episode])
            self._episode_step = 0
        episode, step = self._episode, self._episode_step
        warm_up_steps_left = self.learning_starts - self.num_timesteps
        if self._hand_over.acknowledges(episode, step, warm_up_steps_left):  # once: the collector forgets it
            collector.acknowledge_episode(episode)  # the weights of the last sync act it (weight_sync_interval)
        done = step == episode.length - 1
        info = final_info(episode, collector.started_at) if done else episode.infos[step]
        if done:
            self._episode = None
        self._episode_step += 1
        return _Transition(episode, step, info)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self._timed_train(super().train, gradient_steps, batch_size)  # type: ignore[misc]


@functools.cache
def get_injected_agent(algorithm_class: type[Algorithm]) -> type[Algorithm]:
    """
    A subclass of a Stable-Baselines3 (or sb3-contrib) algorithm whose episodes are collected asynchronously by a
    pool of workers (processes with ``use_mp=True``, threads of this process otherwise) while it trains.

    Extra constructor keywords: ``use_mp`` (False: worker threads, as async-gym-agents), ``max_episodes_in_buffer``
    (finished episodes buffered across all workers; 8 by default), ``queue_put_timeout`` (None: a worker waits for
    room; a finite timeout drops episodes instead, counted), ``n_workers``, ``weight_sync_interval``,
    ``max_policy_lag``, ``max_restarts``, ``reproducible`` (on-policy, with a seed: each rollout is acted by exactly
    the weights one version behind, so two runs give identical weights whatever the timing; see
    :mod:`lit_sb3.collection.lockstep`), ``lag_correction`` (on-policy: ``"values"`` recomputes each rollout's
    values, returns and advantages with the trainer's critic; ``"decoupled"`` also re-centres PPO's clipping on the
    trainer's policy and weights the advantages by ``pi_trainer / pi_acting``; ``"auto"``, the default, decouples
    the rollouts the trainer's policy has moved far from; None leaves the rollout as the workers acted it; see
    :mod:`lit_sb3.collection.lag_correction`), ``backend="ray"`` with
    ``use_mp=True`` (one Ray actor per worker, on this machine or the cluster of ``ray_address``, each with
    ``worker_resources``; ``pip install lit_sb3[ray]``). Extra
    methods: ``get_profiler_report()`` and ``shutdown()``; async-gym-agents 0.1's ``buffer_utilization``,
    ``buffer_emptyness`` and ``truncated_episodes_fraction`` are kept.

    The environment is what Stable-Baselines3's ``learn`` accepts: an env id, a ``gym.Env``, a ``DummyVecEnv``
    (``make_vec_env``'s output, a :class:`~lit_sb3.envs.multi_env.FactoryVecEnv`) or an
    :class:`~lit_sb3.envs.multi_env.IndexableMultiEnv`, optionally inside ``VecMonitor``, ``VecTransposeImage``,
    ``VecFrameStack`` and, outermost, ``VecNormalize``. An ``IndexableMultiEnv`` counts as one environment, as in
    async-gym-agents (``n_steps`` is the whole rollout, callbacks count transitions); any other VecEnv keeps
    Stable-Baselines3's meaning (``n_steps`` per environment). Thread workers step its environment objects themselves
    (nothing is pickled; ``get_env().env_method`` and ``set_attr`` reach them); worker processes step copies (the
    factories of an ``IndexableMultiEnv`` or a ``FactoryVecEnv`` are called in each worker), which
    ``get_env().get_attr``, ``set_attr`` and ``env_method`` reach while the collection runs. ``SubprocVecEnv``,
    an environment process workers cannot copy and wrappers the workers cannot reproduce are refused at
    construction, saying what to pass instead.

    :param algorithm_class: An on-policy (PPO, A2C, TRPO...) or off-policy (SAC, TD3, DDPG, DQN, TQC, QR-DQN...)
        algorithm class.
    :return: The injected subclass (the class itself if it is one already).
    """
    if isinstance(algorithm_class, type) and issubclass(algorithm_class, _AsyncAgent):
        return algorithm_class
    check_supported(algorithm_class)
    injection: type = _AsyncOnPolicy if issubclass(algorithm_class, OnPolicyAlgorithm) else _AsyncOffPolicy
    # The algorithm's own name: Stable-Baselines3's messages and logs name the class (``self.__class__.__name__``).
    name = algorithm_class.__name__
    attributes = {"__module__": __name__, "__qualname__": name, "__doc__": algorithm_class.__doc__}
    return type(name, (injection, algorithm_class), attributes)
