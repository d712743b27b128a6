"""The collection worker: runs its environments continuously with its own copy of the policy (in eval mode) and
hands back every finished episode as a partial result of the environment's streaming task."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy

from lit_sb3.collection.acting import (
    NumpyActorCritic,
    NumpyStateDependentActorCritic,
    sample_from_generators,
    sample_on_policy,
    samples_directly,
)
from lit_sb3.collection.envs import EnvCall, owns_env
from lit_sb3.collection.episodes import ActingSpec, EpisodePacket, Progress, collection_seed
from lit_sb3.collection.observations import Observations, as_tensor, select, stack
from lit_sb3.collection.off_policy_acting import NumpyOffPolicyActor
from lit_sb3.collection.stepping import EnvStepper, StepOutcome
from lit_sb3.collection.trainer_idle import TrainerIdle
from lit_sb3.collection.weights import acting_module, load_flat_weights, read_board
from lit_sb3.evaluation.monitor_history import bound_monitor_history
from lit_sb3.workers.app import SECONDS_PER_ADVANCE, TaskError, WorkerApp
from lit_sb3.workers.arrays import ArrayHandle
from lit_sb3.workers.shared_array import OpenedArrays

#: The action spaces workers act in (those of Stable-Baselines3's algorithms).
ACTION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
#: Steps an ``advance`` runs at most before the worker reads its messages (weights, cancels, credit); slow
#: environments hand control back sooner, after :data:`~lit_sb3.workers.app.SECONDS_PER_ADVANCE`.
STEPS_PER_ADVANCE = 32
#: Seconds a thread worker waits for the trainer to end its ``train()`` before it reads its messages again.
TRAINING_WAIT_SLICE = 0.05


@dataclass(eq=False)  # a record of one task: the same record, not equal fields
class EnvironmentRun:
    """
    One environment's task and its episode under way.

    :param request_id: The task's request.
    :param env_index: The environment's index among the agent's environments.
    :param env: The environment.
    :param episode_index: The index of the episode under way (or the next one, while parked).
    :param slot: The task's row of the progress board, kept until the task ends.
    :param steps: The environment's steps in this task, over its episodes.
    """

    request_id: int
    env_index: int
    env: gym.Env
    episode_index: int
    slot: int
    steps: int = 0
    observation: Any = None
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    noise: ActionNoise | None = None
    started_at: float = 0.0
    first_version: int = 0
    observations: list[Any] = field(default_factory=list)
    acted_observations: list[Any] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    random_steps: int = 0
    parked: bool = False
    #: Lockstep collection: the rollout the episode belongs to, the environment's steps in it so far, and the
    #: generator of the episode's actions.
    rollout: int = 0
    rollout_steps: int = 0
    generator: th.Generator | None = None
    #: gSDE on the numpy path: the episode's exploration matrix (drawn from ``rng`` when it first acts, and again
    #: whenever the worker resamples the noise).
    exploration_matrix: np.ndarray | None = None

    def begin_episode(self, observation: Any, first_version: int) -> None:
        """
        :param observation: The first observation of a new episode.
        :param first_version: The weight version that acts first in it.
        """
        self.observation = observation
        self.started_at = time.monotonic()
        self.first_version = first_version
        self.observations, self.actions, self.rewards = [observation], [], []
        self.acted_observations, self.values, self.log_probs, self.infos = [], [], [], []
        self.random_steps = 0
        self.exploration_matrix = None
        if self.noise is not None:
            self.noise.reset()

    def record_step(
        self,
        action: Any,
        reward: SupportsFloat,
        info: dict[str, Any],
        observation: Any,
        *,
        value: float | None = None,
        log_prob: float | None = None,
    ) -> None:
        """
        Record one step of the episode.

        :param action: The action as the buffer stores it.
        :param reward: The environment's reward.
        :param info: The environment's info dict.
        :param observation: The observation after the step.
        :param value: On-policy: the value of the observation the action was chosen on.
        :param log_prob: On-policy: the log-probability of the action.
        """
        self.steps += 1
        self.actions.append(action)
        self.rewards.append(float(reward))
        self.infos.append(info)
        if value is not None and log_prob is not None:
            self.values.append(value)
            self.log_probs.append(log_prob)
        self.observations.append(observation)
        self.observation = observation


class EpisodeWorker(WorkerApp):
    """
    Task ``collect(env_index)`` runs environment ``env_index`` episode after episode until cancelled, emitting each
    finished one as an :class:`~lit_sb3.collection.episodes.EpisodePacket` (unit: its episode index). All environments
    of the worker step together, with one batched policy call, and in threads once their steps are measured to be
    slow (see :class:`~lit_sb3.collection.stepping.EnvStepper`). Immediate control ``sync`` loads new weights and
    the trainer's progress between two steps; ``acknowledge`` frees room under an in-flight limit; ``env_call`` makes
    a VecEnv's ``get_attr``, ``set_attr`` or ``env_method`` on the environments it runs.

    :param env_fns: The factories of every environment of the agent (the worker builds those it is given).
    :param policy: A copy of the trainer's policy.
    :param spec: How to act.
    :param max_envs: Most environments the worker runs at once.
    :param progress: The trainer's progress when the worker starts.
    :param version: The version of ``policy``'s weights.
    :param limits_in_flight: Begin an episode only while fewer than the limit of :meth:`acknowledge` are in flight
        (begun and not yet acknowledged); an environment whose next episode may not begin waits.
    :param in_flight_limit: The limit until an acknowledgement gives another (None: none until then); known from
        the start off-policy (one per environment), so that a worker does not run ahead before the first one.
    :param trainer_idle: A worker thread of the trainer's process: set while the trainer is not in ``train()``.
        Once its environments' steps are measured fast, the worker steps only then: its Python would run under the
        trainer's interpreter lock and slow ``train()`` more than it collects (None: never waits).
    """

    immediate_methods: ClassVar[frozenset[str]] = frozenset({"sync", "acknowledge", "env_call"})
    control_methods: ClassVar[frozenset[str]] = frozenset({"sync", "acknowledge", "env_call"})
    task_methods: ClassVar[frozenset[str]] = frozenset({"collect"})

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        policy: BasePolicy,
        spec: ActingSpec,
        *,
        max_envs: int,
        progress: Progress,
        version: int = 0,
        limits_in_flight: bool = False,
        in_flight_limit: int | None = None,
        trainer_idle: TrainerIdle | None = None,
    ) -> None:
        super().__init__()
        self.trainer_idle = trainer_idle
        self.env_fns = env_fns
        self.policy = policy.to("cpu")
        self.policy.set_training_mode(False)
        self.acting = acting_module(self.policy)
        self.spec = spec
        self.max_envs = max_envs
        self._arrays = OpenedArrays(capacity=2)  # the trainer publishes through two publications in turn
        self.version = version
        self.progress = progress
        self.limits_in_flight = limits_in_flight
        self._in_flight: set[tuple[int, int]] = set()  # (env, episode) begun and not acknowledged
        self._in_flight_limit = in_flight_limit
        self._stepper = EnvStepper()
        self._envs: dict[int, gym.Env] = {}
        self._running: list[EnvironmentRun] = []
        self._steps_since_noise = 0
        if not isinstance(self.policy.action_space, ACTION_SPACES):
            raise ValueError(
                "async collection supports Box, Discrete, MultiDiscrete and MultiBinary actions, got "
                f"{self.policy.action_space}"
            )
        self.action_space: spaces.Space = self.policy.action_space
        free_running = spec.on_policy and spec.lockstep_steps is None and not spec.use_sde
        self._numpy_acting: NumpyActorCritic | None = None
        self._draws_from_generators = False  # each episode's actions drawn from its own generator
        if free_running and isinstance(self.policy, ActorCriticPolicy):
            self._numpy_acting = NumpyActorCritic.for_policy(self.policy)
            self._draws_from_generators = samples_directly(self.policy)
        free_running_sde = spec.on_policy and spec.lockstep_steps is None and spec.use_sde
        self._numpy_sde = (
            NumpyStateDependentActorCritic.for_policy(self.policy)
            if free_running_sde and isinstance(self.policy, ActorCriticPolicy)
            else None
        )
        self._numpy_actor = None if spec.on_policy else NumpyOffPolicyActor.for_policy(self.policy)

    @property
    def slot_count(self) -> int:
        return self.max_envs

    def describe(self) -> dict[str, Any]:
        return {"policy_id": id(self.policy), "policy_training": self.policy.training, "max_envs": self.max_envs}

    # ---------------------------------------------------------------------------------------------- control

    def sync(self, version: int | None, weights_handle: ArrayHandle | None, progress: Progress) -> int:
        """
        :param version: Version of newly published weights, or None.
        :param weights_handle: Where they were published.
        :param progress: The trainer's progress.
        :return: The version the worker acts with.
        """
        self.progress = progress
        if version is not None and weights_handle is not None and version > self.version:
            weights = read_board(self._arrays.get(weights_handle), version)
            if weights is not None:
                load_flat_weights(self.acting, weights)
                if self._numpy_acting is not None:
                    self._numpy_acting.load(weights)
                if self._numpy_sde is not None:
                    self._numpy_sde.load(weights)
                if self._numpy_actor is not None:
                    self._numpy_actor.load(weights)
                self.version = version
                self._resample_noise()
        return self.version

    def acknowledge(self, episode: tuple[int, int], limit: int | None) -> None:
        """
        :param episode: ``(env_index, episode_index)`` of an episode the trainer's side has (received, or taken
            off-policy).
        :param limit: Most episodes in flight from now on (None: no limit).
        """
        self._in_flight_limit = limit
        self._free(episode)

    def dropped(self, request_id: int, unit: int) -> None:
        """An episode dropped for want of buffer room is no longer in flight (it is never acknowledged)."""
        for run in self._running:
            if run.request_id == request_id:
                self._free((run.env_index, unit))

    def _free(self, episode: tuple[int, int]) -> None:
        """Take ``(env_index, episode_index)`` out of the episodes in flight; begin what waited for room."""
        self._in_flight.discard(episode)
        waiting = [run for run in self._running if run.parked]
        for run in waiting:
            if self._may_begin():
                self._begin(run)
        if waiting:
            self._resample_noise()

    def env_call(self, call: EnvCall, env_indices: list[int]) -> dict[int, Any]:
        """
        :param call: The call.
        :param env_indices: The environments it is for (those of them the worker runs are called).
        :return: What it returned, by environment index.
        """
        wanted = set(env_indices)
        return {run.env_index: call.apply(run.env) for run in self._running if run.env_index in wanted}

    # ------------------------------------------------------------------------------------------------ tasks

    def submit(
        self, request_id: int, method: str, args: tuple[Any, ...], delivered: frozenset[int] = frozenset()
    ) -> None:
        env_index, *resumed = args
        if env_index not in self._envs:
            env = self._envs[env_index] = self.env_fns[env_index]()
            if owns_env(self.env_fns[env_index]):  # the agent's own environment keeps its Monitor as it is
                bound_monitor_history(env)
        taken = {run.slot for run in self._running}
        free = [slot for slot in range(self.max_envs) if slot not in taken]
        if not free:
            raise RuntimeError(f"the worker runs {self.max_envs} environments at most, all {len(taken)} are running")
        running = EnvironmentRun(
            request_id, env_index, self._envs[env_index], max(delivered, default=-1) + 1, slot=free[0]
        )
        self._restore(running, tuple(resumed))
        noise = self.spec.action_noise
        # Stable-Baselines3 vectorises the noise over its environments; a worker keeps one copy per environment.
        running.noise = copy.deepcopy(noise.base_noise if isinstance(noise, VectorizedActionNoise) else noise)
        self._running.append(running)
        if self._may_begin():
            self._begin(running)
            self._resample_noise()
        else:
            running.parked = True

    @property
    def busy(self) -> bool:
        return any(not run.parked for run in self._running)

    def advance(self) -> list[tuple[int, Any]]:
        idle = self.trainer_idle
        if idle is not None and self._stepper.fast and not idle.wait(TRAINING_WAIT_SLICE):
            return []  # the trainer trains
        deadline = time.perf_counter() + SECONDS_PER_ADVANCE
        for _ in range(STEPS_PER_ADVANCE):
            if self._step() or time.perf_counter() > deadline:
                break
        return []  # collection tasks never end by themselves: they are cancelled

    def cancel(self, request_ids: tuple[int, ...] | None = None) -> list[int]:
        cancelled = [run for run in self._running if request_ids is None or run.request_id in request_ids]
        self._in_flight -= {(run.env_index, run.episode_index) for run in cancelled}
        self._running = [run for run in self._running if run not in cancelled]
        for run in cancelled:
            self.mark_idle(run.slot)
        self._resample_noise()
        return [run.request_id for run in cancelled]

    def close(self) -> None:
        self._stepper.close()
        for env_index, env in self._envs.items():
            if owns_env(self.env_fns[env_index]):  # the agent's own environment stays open
                env.close()
        self._arrays.close()

    # ---------------------------------------------------------------------------------------------- stepping

    def _may_begin(self) -> bool:
        limit = self._in_flight_limit
        return not self.limits_in_flight or limit is None or len(self._in_flight) < limit

    def _begin(self, run: EnvironmentRun) -> None:
        """Begin ``run``'s next episode."""
        run.parked = False
        if self.limits_in_flight:
            self._in_flight.add((run.env_index, run.episode_index))
        try:
            self._reset(run)
        except Exception as exc:
            raise TaskError(run.request_id, run.episode_index) from exc

    def _reset(self, run: EnvironmentRun) -> None:
        seed = collection_seed(self.spec.base_seed, run.env_index, run.episode_index, 0)
        run.rng = np.random.default_rng(collection_seed(self.spec.base_seed, run.env_index, run.episode_index, 1))
        observation, _ = run.env.reset(seed=seed)
        run.begin_episode(observation, self._version_for(run))
        self.mark_started(run.slot, run.episode_index, run.request_id)

    def _policy_for(self, run: EnvironmentRun) -> BasePolicy:
        """:return: The policy that acts for ``run`` (overridden by the lockstep worker)."""
        return self.policy

    def _version_for(self, run: EnvironmentRun) -> int:
        """:return: The weight version that acts for ``run``."""
        return self.version

    def _complete(self, run: EnvironmentRun, packet: EpisodePacket) -> EpisodePacket:
        """:return: The packet of ``run``'s finished episode, as it is sent."""
        return packet

    def _resume_args(self, run: EnvironmentRun) -> tuple[Any, ...] | None:
        """:return: The arguments ``run``'s task resumes with after the episode just completed, should its worker
        die (None: the environment's index and the episodes delivered say where it stopped)."""
        return None

    def _restore(self, run: EnvironmentRun, resumed: tuple[Any, ...]) -> None:
        """Put a resumed task's ``run`` where its resume arguments after the environment's index (none for
        free-running collection) say it stopped."""

    def _active(self) -> list[EnvironmentRun]:
        """:return: The environments with an episode under way (not waiting to begin one)."""
        return [run for run in self._running if not run.parked]

    def _resample_noise(self) -> None:
        active = self._active()
        if self._numpy_sde is not None:
            for run in active:
                run.exploration_matrix = self._numpy_sde.exploration_matrix(run.rng)
            self._steps_since_noise = 0
        elif self.spec.use_sde and active:
            self.policy.reset_noise(len(active))  # type: ignore[operator]
            self._steps_since_noise = 0

    def _step(self) -> bool:
        """One step of every active environment; True when the worker loop should run (an episode ended)."""
        running = self._active()
        if self.spec.use_sde and self.spec.sde_sample_freq > 0 and self._steps_since_noise >= self.spec.sde_sample_freq:
            self._resample_noise()
        self._steps_since_noise += 1
        observations = stack([run.observation for run in running])
        normalization, obs_rms = self.spec.normalization, self.progress.obs_rms
        if normalization is not None and obs_rms is not None:
            observations = normalization.apply(observations, obs_rms)
            if self.spec.on_policy:
                for index, run in enumerate(running):
                    run.acted_observations.append(select(observations, index))
        values: np.ndarray | None = None
        log_probs: np.ndarray | None = None
        if self.spec.on_policy:
            env_actions, buffer_actions, values, log_probs = self._act_on_policy(observations, running)
        else:
            env_actions, buffer_actions = self._act_off_policy(observations, running)
        outcomes = self._stepper.step([run.env for run in running], env_actions)
        ended = False
        for index, (run, outcome) in enumerate(zip(running, outcomes, strict=True)):
            value = None if values is None else float(values[index])
            log_prob = None if log_probs is None else float(log_probs[index])
            ended |= self._record_step(run, outcome, buffer_actions[index], value=value, log_prob=log_prob)
        return ended

    def _record_step(
        self, run: EnvironmentRun, outcome: StepOutcome, action: Any, *, value: float | None, log_prob: float | None
    ) -> bool:
        """
        Record one step of ``run``'s environment and finish the episode if it ended.

        :param run: The environment.
        :param outcome: What its ``env.step`` returned, or the exception it raised (raised as the task's failure).
        :param action: The action as the buffer stores it.
        :param value: On-policy: the value of the observation acted on.
        :param log_prob: On-policy: the action's log-probability.
        :return: Whether the episode ended.
        """
        if isinstance(outcome, Exception):
            raise TaskError(run.request_id, run.episode_index) from outcome
        observation, reward, terminated, truncated, info = outcome
        run.record_step(action, reward, info, observation, value=value, log_prob=log_prob)
        if terminated or truncated:
            self._finish(run, bool(terminated), bool(truncated))
            return True
        return False

    def _act_on_policy(
        self, observations: Observations, running: list[EnvironmentRun]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        policy = self.policy
        assert isinstance(policy, ActorCriticPolicy)
        if self._numpy_acting is not None:
            actions, values, log_probs = self._numpy_acting.act(observations, [run.rng for run in running])
        elif self._numpy_sde is not None:
            acting = self._numpy_sde
            for run in running:
                if run.exploration_matrix is None:
                    run.exploration_matrix = acting.exploration_matrix(run.rng)
            matrices = [run.exploration_matrix for run in running]
            actions, values, log_probs = acting.act(observations, matrices)  # type: ignore[arg-type]
        elif self._draws_from_generators:  # CNN and Dict feature extractors: torch computes, numpy draws
            with th.no_grad():  # observations of the policy's space on the CPU: obs_to_tensor's checks add nothing
                actions, values, log_probs = sample_from_generators(
                    policy, as_tensor(observations), [run.rng for run in running]
                )
        else:  # gSDE, MultiDiscrete and MultiBinary actions, custom forward: the policy's own distributions
            with th.no_grad():
                actions_t, values_t, log_probs_t = sample_on_policy(policy, as_tensor(observations))
            actions, values, log_probs = actions_t.numpy(), values_t.flatten().numpy(), log_probs_t.numpy()
        env_actions = actions
        if isinstance(self.action_space, spaces.Box):
            env_actions = (
                policy.unscale_action(actions)
                if policy.squash_output
                else np.clip(actions, self.action_space.low, self.action_space.high)
            )
        return env_actions, actions, values, log_probs

    def _act_off_policy(
        self, observations: Observations, running: list[EnvironmentRun]
    ) -> tuple[np.ndarray, np.ndarray]:
        spec, space = self.spec, self.action_space
        # Each environment's share of the warm-up, until learning_starts steps were collected or trained on.
        warming = self.progress.num_timesteps < spec.learning_starts and not (spec.use_sde and spec.use_sde_at_warmup)
        warm_up = [warming and run.steps < spec.warm_up_steps for run in running]
        acting = [index for index, warm in enumerate(warm_up) if not warm]
        if len(acting) == len(running):
            actions = self._policy_actions(observations, running)
        else:
            actions = np.zeros((len(running), *(space.shape or ())), dtype=space.dtype)
            if acting:
                chosen = select(observations, np.asarray(acting))
                actions[acting] = self._policy_actions(chosen, [running[index] for index in acting])
        for index, (run, warm) in enumerate(zip(running, warm_up, strict=True)):
            if warm or (spec.epsilon_greedy and run.rng.random() < self.progress.exploration_rate):
                actions[index] = self._random_action(run.rng)
                run.random_steps += 1
        if not isinstance(space, spaces.Box):
            return actions, actions
        scaled = self.policy.scale_action(actions)
        for index, run in enumerate(running):
            if run.noise is not None:
                scaled[index] = np.clip(scaled[index] + run.noise(), -1, 1)
        return self.policy.unscale_action(scaled), scaled

    def _policy_actions(self, observations: Observations, running: list[EnvironmentRun]) -> np.ndarray:
        """:return: The exploring policy's actions (off-policy), before action noise."""
        if self._numpy_actor is not None:  # off the interpreter lock's way, and off torch's global generator
            return self._numpy_actor.predict(observations, [run.rng for run in running])  # type: ignore[arg-type]
        actions, _ = self.policy.predict(observations, deterministic=False)
        return actions

    def _random_action(self, rng: np.random.Generator) -> np.ndarray:
        space = self.action_space
        if isinstance(space, spaces.Box):
            return rng.uniform(space.low, space.high).astype(space.dtype)
        if isinstance(space, spaces.Discrete):
            return np.asarray(space.start + rng.integers(space.n), dtype=space.dtype)
        if isinstance(space, spaces.MultiDiscrete):
            return (space.start + rng.integers(space.nvec)).astype(space.dtype)
        assert isinstance(space, spaces.MultiBinary)
        return rng.integers(0, 2, size=space.shape).astype(space.dtype)

    def _finish(self, run: EnvironmentRun, terminated: bool, truncated: bool) -> None:
        rewards = np.asarray(run.rewards, dtype=np.float32)
        train_rewards = rewards
        terminal_value = 0.0
        truncated = truncated and not terminated
        on_policy = self.spec.on_policy
        if on_policy and truncated:
            last = run.observation
            normalization, obs_rms = self.spec.normalization, self.progress.obs_rms
            if normalization is not None and obs_rms is not None:
                last = normalization.apply(last, obs_rms)
            policy = self._policy_for(run)
            with th.no_grad():
                assert isinstance(policy, ActorCriticPolicy)
                terminal_value = float(policy.predict_values(policy.obs_to_tensor(last)[0])[0])
            train_rewards = rewards.copy()
            train_rewards[-1] += self.spec.gamma * terminal_value
        packet = EpisodePacket(
            env_index=run.env_index,
            episode_index=run.episode_index,
            observations=stack(run.observations),
            acted_observations=stack(run.acted_observations) if run.acted_observations else None,
            actions=np.stack(run.actions),
            rewards=rewards,
            train_rewards=train_rewards,
            terminal_value=terminal_value,
            values=np.asarray(run.values, dtype=np.float32) if on_policy else None,
            log_probs=np.asarray(run.log_probs, dtype=np.float32) if on_policy else None,
            terminated=terminated,
            truncated=truncated,
            infos=run.infos,
            random_steps=run.random_steps,
            first_version=run.first_version,
            last_version=self._version_for(run),
            seconds=time.monotonic() - run.started_at,
        )
        packet = self._complete(run, packet)
        self.emit(run.request_id, run.episode_index, packet, self._resume_args(run))
        run.episode_index += 1
        if self._may_begin():
            self._begin(run)
        else:
            run.parked = True
            self.mark_idle(run.slot)
            self._resample_noise()
