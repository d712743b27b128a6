"""Evaluating candidates in a worker: flat weights -> batched policy -> episodes on every sub-environment."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize, unwrap_vec_normalize

from lit_sb3.evaluation.normalization import FrozenNormalizer, ObservationNormalizer, WrappedNormalizer
from lit_sb3.evaluation.obs_rms import ObsRms, check_same_statistics, copy_obs_rms
from lit_sb3.evaluation.policy_kernels import make_batched_policy
from lit_sb3.evaluation.seeding import episode_seed
from lit_sb3.evaluation.slot_envs import SlotEnvError, make_slot_env, peel_monitors
from lit_sb3.workers.app import SECONDS_PER_ADVANCE, TaskError, WorkerApp
from lit_sb3.workers.arrays import ArrayHandle
from lit_sb3.workers.shared_array import OpenedArrays

#: Steps the loop runs before it lets the worker look for new messages (cancel, close); slow environments hand
#: control back sooner, after :data:`~lit_sb3.workers.app.SECONDS_PER_ADVANCE`.
STEPS_BETWEEN_POLLS = 256

EnvFactory = Callable[[], VecEnv | GymVectorEnv | gym.Env]


@dataclass(frozen=True)
class RoundSpec:
    """
    What every task of one round shares.

    :param serial: Unique number of the round in the evaluator's life.
    :param population: The candidate weight matrix, one row per candidate (published by the pool's backend, or the
        array itself when evaluating in-process).
    :param round_index: Index of the round since the last seeding.
    :param base_seed: Seed the episode seeds derive from.
    :param options: Reset options of every episode, for all workers (a dict) or per worker (a list).
    """

    serial: int
    population: ArrayHandle | np.ndarray
    round_index: int
    base_seed: int
    options: dict[str, Any] | list[dict[str, Any]] | None


class _Episode(NamedTuple):
    request_id: int
    candidate: int
    episode: int
    seed: int


@dataclass
class _Request:
    first_candidate: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    remaining: int
    episode_obs_rms: list[ObsRms | None]  # of each (candidate, episode), when the observations are collected


def make_vec_env_from(env: VecEnv | GymVectorEnv | gym.Env) -> VecEnv | GymVectorEnv:
    """
    :param env: What an ``envs_fn`` entry returned.
    :return: A vectorised environment (a single gymnasium env is wrapped in a ``DummyVecEnv``).
    """
    if isinstance(env, VecEnv | GymVectorEnv):
        return env
    if isinstance(env, gym.Env):
        return DummyVecEnv([lambda: env])
    raise TypeError(
        f"envs_fn must return a Stable-Baselines3 VecEnv, a gymnasium VectorEnv or a gymnasium Env, got {type(env)!r}"
    )


def _single_spaces(env: VecEnv | GymVectorEnv) -> tuple[gym.Space, gym.Space]:
    if isinstance(env, VecEnv):
        return env.observation_space, env.action_space
    return env.single_observation_space, env.single_action_space


class CandidateEvaluator(WorkerApp):
    """
    Runs ``n_eval_episodes`` episodes per candidate, one candidate per sub-environment at a time, all actions of a
    step in one batched call. Episode ``e`` of candidate ``c`` in round ``g`` is reset with a seed derived from
    ``(base_seed, g, c, e)`` only, so results do not depend on which worker or slot ran it.

    :param env_fn: Builds the worker's vectorised environment.
    :param policy: The policy whose flat weight vectors the candidates are.
    :param n_eval_episodes: Episodes per candidate.
    :param worker_index: Index of the worker (picks its entry of per-worker reset options).
    """

    control_methods: ClassVar[frozenset[str]] = frozenset({"get_obs_rms", "sync_obs_rms"})
    task_methods: ClassVar[frozenset[str]] = frozenset({"evaluate"})

    def __init__(self, env_fn: EnvFactory, policy: BasePolicy, n_eval_episodes: int, worker_index: int = 0) -> None:
        super().__init__()
        env = make_vec_env_from(env_fn())
        self.env = env
        observation_space, action_space = _single_spaces(env)
        if observation_space != policy.observation_space or action_space != policy.action_space:
            raise ValueError(
                f"the environment's spaces (observation {observation_space}, action {action_space}) differ from the "
                f"policy's (observation {policy.observation_space}, action {policy.action_space})"
            )
        vec_normalize = unwrap_vec_normalize(env) if isinstance(env, VecEnv) else None
        #: The ``VecNormalize`` whose observation statistics the worker keeps (None without ``norm_obs``).
        self.vec_normalize = vec_normalize if vec_normalize is not None and vec_normalize.norm_obs else None
        self.normalizer: ObservationNormalizer | None = None
        outer = peel_monitors(env)
        if isinstance(outer, VecNormalize) and isinstance(observation_space, gym.spaces.Box):
            # Normalise here and step what is below the VecNormalize (as fast as without one).
            if outer.norm_obs:
                self.normalizer = FrozenNormalizer(outer)
            self.slots = make_slot_env(outer.venv)
        else:
            if self.vec_normalize is not None:
                self.normalizer = WrappedNormalizer(self.vec_normalize)
            self.slots = make_slot_env(env, vec_normalize)
        self.policy = make_batched_policy(policy, self.slots.n_slots)
        self.n_eval_episodes = n_eval_episodes
        self.worker_index = worker_index
        self._arrays = OpenedArrays()
        self._round: RoundSpec | None = None
        self._population: np.ndarray | None = None
        self._options: dict[str, Any] | None = None
        self._queue: deque[_Episode] = deque()
        self._requests: dict[int, _Request] = {}
        n_slots = self.slots.n_slots
        self._slot_episode: list[_Episode | None] = [None] * n_slots
        self._slot_loaded: list[tuple[int, int] | None] = [None] * n_slots
        self._session_request = -1

    @property
    def slot_count(self) -> int:
        return self.slots.n_slots

    def describe(self) -> dict[str, Any]:
        return {
            "n_slots": self.slots.n_slots,
            "obs_rms": self.get_obs_rms(),
            "policy_kernel": type(self.policy).__name__,
            "slot_env": type(self.slots).__name__,
            "exact": self.slots.exact,
        }

    # ---------------------------------------------------------------------------------------- control methods

    def get_obs_rms(self) -> RunningMeanStd | dict[str, RunningMeanStd] | None:
        """:return: A copy of the full observation statistics of the worker's ``VecNormalize``, if any."""
        if self.normalizer is not None:
            self.normalizer.flush()
        return None if self.vec_normalize is None else copy_obs_rms(self.vec_normalize.obs_rms)

    def sync_obs_rms(self, obs_rms: RunningMeanStd | dict[str, RunningMeanStd]) -> None:
        """
        :param obs_rms: Statistics replacing the worker's (a copy of them, used for normalisation from the next
            round on).
        """
        if self.vec_normalize is None:
            raise ValueError("sync_obs_rms: the worker's environment has no VecNormalize")
        check_same_statistics(obs_rms, self.vec_normalize.obs_rms)
        if self.normalizer is not None:
            self.normalizer.flush()  # what was collected before the sync belongs to the old statistics
        # SB3 annotates obs_rms as a dict only; workers that are threads of one process share the object they get.
        self.vec_normalize.obs_rms = copy_obs_rms(obs_rms)  # type: ignore[assignment]

    # ---------------------------------------------------------------------------------------------- tasks

    def submit(
        self, request_id: int, method: str, args: tuple[Any, ...], delivered: frozenset[int] = frozenset()
    ) -> None:
        spec, first, stop = args
        if self._round is None or spec.serial != self._round.serial:
            self._round = spec
            population = spec.population
            self._population = population if isinstance(population, np.ndarray) else self._arrays.get(population)
            self._options = spec.options[self.worker_index] if isinstance(spec.options, list) else spec.options
            if self.normalizer is not None:
                self.normalizer.freeze()
        n_candidates, n_episodes = stop - first, self.n_eval_episodes
        episodes = [
            _Episode(request_id, candidate, episode, episode_seed(spec.base_seed, spec.round_index, candidate, episode))
            for candidate in range(first, stop)
            for episode in range(n_episodes)
        ]
        self._requests[request_id] = _Request(
            first,
            np.zeros((n_candidates, n_episodes), np.float64),
            np.zeros((n_candidates, n_episodes), np.int64),
            n_candidates * n_episodes,
            [None] * (n_candidates * n_episodes),
        )
        self._queue.extend(episodes)

    @property
    def busy(self) -> bool:
        return bool(self._requests)

    def advance(self) -> list[tuple[int, Any]]:
        finished: list[tuple[int, Any]] = []
        slots, policy, normalizer = self.slots, self.policy, self.normalizer
        slot_episode = self._slot_episode
        deadline = time.perf_counter() + SECONDS_PER_ADVANCE
        for _ in range(STEPS_BETWEEN_POLLS):
            if self._queue and None in slot_episode:
                self._fill()
            if not slots.busy:
                break
            running = slots.running_slots
            try:
                observations = slots.observations
                if normalizer is not None:
                    observations = normalizer.normalize(observations, running)
                ended = slots.step(policy.act(observations, running))
            except SlotEnvError as failure:
                raise self._task_error(failure.slot) from failure.__cause__
            except (Exception, SystemExit) as exc:  # SystemExit from an environment fails its task, not the worker
                raise self._task_error(None) from exc
            if ended:
                for slot in ended:
                    self._finish(slot, finished)
                if finished or not self._queue:
                    break
            if time.perf_counter() > deadline:
                break
        return finished

    def cancel(self, request_ids: tuple[int, ...] | None = None) -> list[int]:
        dropped = list(self._requests) if request_ids is None else [rid for rid in request_ids if rid in self._requests]
        dropped_set = set(dropped)
        self._queue = deque(episode for episode in self._queue if episode.request_id not in dropped_set)
        stopped = []
        for slot, episode in enumerate(self._slot_episode):
            if episode is not None and episode.request_id in dropped_set:
                self._slot_episode[slot] = None
                self.mark_idle(slot)
                stopped.append(slot)
        self.slots.stop(stopped)
        if self.normalizer is not None:
            for slot in stopped:
                self.normalizer.drop_episode(slot)
        for request_id in dropped:
            del self._requests[request_id]
        return dropped

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------------------------------ internals

    def _fill(self) -> None:
        free = self.slots.free_slots()
        if not free:
            return
        assert self._round is not None and self._population is not None
        # Without per-slot seeding, a session of the environment serves one task only (see AutoresetSlots).
        session = None if self.slots.exact or not self.slots.busy else self._session_request
        seeds: dict[int, int | None] = {}
        for slot in free:
            if not self._queue or (session is not None and self._queue[0].request_id != session):
                break
            episode = self._queue.popleft()
            session = self._session_request = episode.request_id
            self._slot_episode[slot] = episode
            loaded = (self._round.serial, episode.candidate)
            if self._slot_loaded[slot] != loaded:
                self._slot_loaded[slot] = None
                try:
                    self.policy.load(slot, self._population[episode.candidate])
                except (Exception, SystemExit) as exc:
                    raise TaskError(episode.request_id, episode.candidate) from exc
                self._slot_loaded[slot] = loaded
            seeds[slot] = episode.seed
            if self.normalizer is not None:
                self.normalizer.drop_episode(slot)  # nothing of an episode stopped by a failure goes on
            self.mark_started(slot, episode.candidate, episode.request_id)
        if not seeds:
            return
        try:
            self.slots.start(seeds, self._options)
        except SlotEnvError as failure:
            raise self._task_error(failure.slot if failure.slot is not None else min(seeds)) from failure.__cause__

    def _finish(self, slot: int, finished: list[tuple[int, Any]]) -> None:
        episode = self._slot_episode[slot]
        assert episode is not None
        self._slot_episode[slot] = None
        self.mark_idle(slot)
        request = self._requests[episode.request_id]
        row = episode.candidate - request.first_candidate
        request.episode_returns[row, episode.episode] = self.slots.episode_returns[slot]
        request.episode_lengths[row, episode.episode] = self.slots.episode_lengths[slot]
        if self.normalizer is not None:
            request.episode_obs_rms[row * self.n_eval_episodes + episode.episode] = self.normalizer.end_episode(slot)
        request.remaining -= 1
        if request.remaining == 0:
            del self._requests[episode.request_id]
            collected = self.normalizer is not None and self.normalizer.collect
            episode_obs_rms = cast(list[ObsRms], request.episode_obs_rms) if collected else None
            result = (request.first_candidate, request.episode_returns, request.episode_lengths, episode_obs_rms)
            finished.append((episode.request_id, result))

    def _task_error(self, slot: int | None) -> TaskError:
        episode = self._slot_episode[slot] if slot is not None else None
        if episode is None:
            episode = next((ep for ep in self._slot_episode if ep is not None), None)
        if episode is None:
            return TaskError(next(iter(self._requests)), None)
        return TaskError(episode.request_id, episode.candidate)
