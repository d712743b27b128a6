"""What every engine shares: the four parts, the counters, one step of each phase, evaluation and checkpoints."""

from __future__ import annotations

import json
import math
import sys
import threading
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.logger import HumanOutputFormat, Logger, configure
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.save_util import load_from_pkl, save_to_pkl
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3.collection import AsyncCollector, CollectionPlan, Rollout, policy_copy
from lit_sb3.engine.buffer import DataBuffer, ReplayData, RolloutQueue, SampledBatches
from lit_sb3.engine.config import EngineConfig
from lit_sb3.engine.env_group import EnvGroup
from lit_sb3.engine.policy_group import PolicyGroup, WeightsSnapshot, gradient_steps_owed
from lit_sb3.engine.timing import ThreadClock, format_summary, record_summary, timing_summary
from lit_sb3.vec_env.async_eval import AsyncEval

#: Seconds a wait for data or room lasts before its thread checks whether the run goes on.
WAIT_SLICE = 0.05
#: Episode returns kept for ``rollout/ep_rew_mean``.
RETURN_WINDOW = 100
#: Files of a checkpoint folder.
ALGORITHM_FILE, REPLAY_FILE, COUNTERS_FILE = "algorithm.zip", "replay_buffer.pkl", "counters.json"
ROLLOUTS_FILE, NORMALIZE_FILE = "queued_rollouts.pkl", "vecnormalize.pkl"


@dataclass
class Dataset:
    """
    The data of one train step.

    :param data: On-policy: a filled SB3 ``RolloutBuffer``; off-policy: the batches of its gradient steps.
    :param env_steps: The algorithm's ``num_timesteps`` once it trains on it.
    :param rollout: On-policy: the rollout ``data`` is of (a checkpoint keeps it while it is not trained on).
    """

    data: RolloutBuffer | SampledBatches
    env_steps: int
    rollout: Rollout | None = None


class BaseEngine(ABC):
    """
    An engine trains a policy group on the data its env group collects, through a buffer; subclasses decide how the
    phases (rollout, dataset, train, weight sync, evaluation) are arranged.

    :param config: What the run does.
    :param env_group: The collection (and evaluation) environments.
    :param policy_group: The algorithm being trained.
    :param buffer: A :class:`~lit_sb3.engine.buffer.RolloutQueue` on-policy, a
        :class:`~lit_sb3.engine.buffer.ReplayData` off-policy (``DataBuffer.for_algorithm`` picks it).

    The algorithm may train on ``VecNormalize(env_group.env)``: its statistics are updated with the episodes taken
    into the buffer, the workers normalise observations with them, evaluations use them frozen, and checkpoints
    keep them.
    """

    def __init__(
        self, config: EngineConfig, env_group: EnvGroup, policy_group: PolicyGroup, buffer: DataBuffer
    ) -> None:
        for name, value, kind in (
            ("config", config, EngineConfig),
            ("env_group", env_group, EnvGroup),
            ("policy_group", policy_group, PolicyGroup),
            ("buffer", buffer, DataBuffer),
        ):
            if not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
        expected = RolloutQueue if policy_group.on_policy else ReplayData
        if not isinstance(buffer, expected):
            raise TypeError(
                f"buffer must be a {expected.__name__} for {type(policy_group.algorithm).__name__}, "
                f"got {type(buffer).__name__} (DataBuffer.for_algorithm(algorithm) builds the right one)"
            )
        algorithm = policy_group.algorithm
        env = env_group.env
        if (algorithm.observation_space, algorithm.action_space) != (env.observation_space, env.action_space):
            raise ValueError(
                f"the env group's spaces (observation {env.observation_space}, action {env.action_space}) differ from "
                f"the algorithm's (observation {algorithm.observation_space}, action {algorithm.action_space})"
            )
        self.vec_normalize = algorithm.get_vec_normalize_env()
        if self.vec_normalize is not None and self.vec_normalize.venv is not env:
            raise ValueError(
                "the algorithm's VecNormalize must wrap the env group's env itself, as in "
                "PPO(policy, VecNormalize(env_group.env)); it wraps "
                f"{type(self.vec_normalize.venv).__name__}"
            )
        self.config = config
        self.env_group = env_group
        self.policy_group = policy_group
        self.buffer = buffer
        if config.log_folder is None:  # stdout at most (the config checked it): no folder to create
            self.logger = Logger(None, [HumanOutputFormat(sys.stdout)] if "stdout" in config.log_formats else [])
        else:
            self.logger = configure(str(config.log_folder), list(config.log_formats))
        algorithm.set_logger(self.logger)
        if config.checkpoint_folder is not None:  # created now, as the log folder: a bad path fails before the run
            try:
                Path(config.checkpoint_folder).mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise ValueError(
                    f"checkpoint_folder {str(config.checkpoint_folder)!r} cannot be created: {error}"
                ) from None
        self.replay_ratio = (
            None if policy_group.on_policy else config.replay_ratio or policy_group.default_replay_ratio()
        )
        self.batch_size: int = config.batch_size or getattr(algorithm, "batch_size")  # noqa: B009 - both kinds have it
        self.seed = config.seed if config.seed is not None else int(np.random.randint(0, 2**31 - 1))
        self.collected_steps = 0
        self.gradient_steps = 0
        self.evaluations: list[dict[str, float]] = []
        self._evaluations_logged = 0
        self.last_summary: dict[str, Any] | None = None
        self._next_evaluation = config.eval_interval
        self._returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self._returns_lock = threading.Lock()
        self._dataset: Dataset | None = None
        # Held while data moves between the collection, the buffer, the dataset and the counters, so that a
        # checkpoint sees every step collected in exactly one place.
        self._data_lock = threading.Lock()
        self._collector: AsyncCollector | None = None
        self._plan: CollectionPlan | None = None
        self._evaluator: AsyncEval | None = None
        self._clocks: dict[str, ThreadClock] = {}

    # ----------------------------------------------------------------------------------------- RLightning's API

    @abstractmethod
    def rollout(self) -> None:
        """Collect experience from the environments into the buffer."""

    @abstractmethod
    def update_dataset(self) -> None:
        """Prepare the dataset of the next train step from the buffer."""

    @abstractmethod
    def train(self) -> None:
        """Train the policy on the prepared dataset."""

    @abstractmethod
    def evaluate(self) -> None:
        """Evaluate the current weights on the evaluation environments (results in :attr:`evaluations`)."""

    @abstractmethod
    def run(self) -> dict[str, Any]:
        """
        Train until the configured budget is spent.

        :return: The timing summary (also logged and, with ``verbose``, printed).
        """

    def warm_up(self) -> None:
        """
        Init and dummy run for constructing the data flow: starts the workers, collects one rollout (on-policy) or
        episode (off-policy) and, once there is enough data, trains one step and publishes it. The data and the
        step are real: they count in the run.
        """
        self._open()
        self._rollout_step()
        if self._wait_for_data(timeout=0):
            self._prepare_dataset()
            self._train_step()
            self._publish()

    # ------------------------------------------------------------------------------------------------- counters

    @property
    def train_steps(self) -> int:
        """Train steps done (across resumed runs)."""
        return self.policy_group.version

    @property
    def num_timesteps(self) -> int:
        """Environment steps the policy was trained on (the algorithm's ``num_timesteps``)."""
        return self.policy_group.algorithm.num_timesteps

    def finished(self) -> bool:
        """:return: Whether the configured budget is spent."""
        config = self.config
        if config.total_env_steps is not None:
            return self.num_timesteps >= config.total_env_steps
        assert config.train_epochs is not None
        return self.train_steps >= config.train_epochs

    def close(self) -> None:
        """Stop the collection and evaluation workers. Idempotent; the next :meth:`run` starts them again."""
        collector, evaluator = self._collector, self._evaluator
        self._collector = self._evaluator = None
        try:
            if evaluator is not None:
                evaluator.close()
        finally:
            if collector is not None:
                collector.close()

    # ------------------------------------------------------------------------------------- one step of each phase

    @property
    def synced_version(self) -> int:
        """The last weight version the collection was told of (its episodes' lags count from it)."""
        return self.collector.version

    @property
    def collector(self) -> AsyncCollector:
        """The running collection (started by :meth:`warm_up` or :meth:`run`)."""
        if self._collector is None:
            raise RuntimeError("the engine's collection is not running: call warm_up() or run()")
        return self._collector

    def _lockstep(self) -> bool:
        """:return: Whether rollouts are collected in lockstep (reproducibly)."""
        return False

    def _open(self) -> None:
        if self._collector is not None:
            return
        policy_group = self.policy_group
        # Episode seeds restart from index 0 in every collection: a resumed run derives them from where it resumes.
        base_seed = int(np.random.SeedSequence([self.seed, self.collected_steps]).generate_state(1)[0])
        self._plan = plan = CollectionPlan.for_algorithm(policy_group.algorithm, base_seed, lockstep=self._lockstep())
        self._collector = self.env_group.start_collector(
            policy_copy(policy_group.algorithm.policy),  # no train step runs yet: its weights are the latest's
            plan,
            plan.progress(self.collected_steps),
            max_policy_lag=self.config.max_policy_lag,
            weight_sync_interval=self.config.weight_sync_interval,
            initial_version=policy_group.version,
            vec_normalize=self.vec_normalize,
        )
        if self.config.eval_interval is not None:
            try:
                self._evaluator = self.env_group.start_evaluator(
                    policy_group.algorithm.policy, self.config.eval_episodes, self.vec_normalize
                )
                self._evaluator.seed(self.seed)
            except BaseException:
                self.close()
                raise

    def _rollout_step(self) -> None:
        """Take the next rollout (on-policy) or episode (off-policy) of the collection into the buffer."""
        collector = self.collector
        buffer = self.buffer
        if isinstance(buffer, RolloutQueue):
            rollout = collector.next_rollout()
            with self._data_lock:
                buffer.put(rollout)
                self.collected_steps += rollout.length
            episodes = rollout.episodes
        else:
            assert isinstance(buffer, ReplayData)
            collector.wait_for_episode()  # not holding the lock: the trainer takes its data meanwhile
            with self._data_lock:  # the episode enters the statistics, the buffer and the counter at once
                episode = collector.next_episode()
                buffer.add_episode(episode, collector.started_at)
                self.collected_steps += episode.length
            episodes = [episode]
        with self._returns_lock:
            self._returns.extend(episode.episode_return for episode in episodes)

    def _steps_for_next_gradient_step(self) -> int:
        assert self.replay_ratio is not None
        learning_starts = self.policy_group.learning_starts
        steps = learning_starts + math.ceil((self.gradient_steps + 1) / self.replay_ratio)
        while gradient_steps_owed(steps, learning_starts, self.replay_ratio, self.gradient_steps) < 1:
            steps += 1  # floating-point rounding
        return steps

    def _wait_for_data(self, timeout: float) -> bool:
        """:return: Whether the buffer holds the data of a train step (waits up to ``timeout`` seconds)."""
        buffer = self.buffer
        if isinstance(buffer, RolloutQueue):
            return buffer.wait_for_rollout(timeout)
        assert isinstance(buffer, ReplayData)
        return buffer.wait_for_steps(self._steps_for_next_gradient_step(), timeout)

    def _prepare_dataset(self) -> None:
        """Prepare the next train step's data (after :meth:`_wait_for_data` said it is there)."""
        buffer = self.buffer
        with self._data_lock:
            if isinstance(buffer, RolloutQueue):
                rollout = buffer.take()
                self._dataset = Dataset(rollout.buffer, self.num_timesteps + rollout.length, rollout)
                return
            assert isinstance(buffer, ReplayData) and self.replay_ratio is not None
            collected = buffer.collected_steps
            learning_starts = self.policy_group.learning_starts
            owed = gradient_steps_owed(collected, learning_starts, self.replay_ratio, self.gradient_steps)
            batches = buffer.draw(owed, self.batch_size, env=self.vec_normalize)
            self.gradient_steps += owed
            self._dataset = Dataset(batches, collected)

    def _return_prepared_dataset(self) -> None:
        """
        Give back the dataset prepared for a train step that did not happen (the run stopped first): its rollout
        goes back to the head of the buffer, its drawn gradient steps are no longer counted (they are drawn again).
        """
        with self._data_lock:
            dataset, self._dataset = self._dataset, None
            if dataset is None:
                return
            if isinstance(dataset.data, SampledBatches):
                self.gradient_steps -= len(dataset.data)
            elif dataset.rollout is not None:
                assert isinstance(self.buffer, RolloutQueue)
                self.buffer.restore([dataset.rollout])

    def _train_step(self) -> None:
        """Train on the prepared dataset; log and checkpoint when due."""
        with self._data_lock:
            dataset, self._dataset = self._dataset, None
        assert dataset is not None
        policy_group = self.policy_group
        config = self.config
        if config.total_env_steps is not None:
            policy_group.set_progress(1.0 - dataset.env_steps / config.total_env_steps)
        else:
            assert config.train_epochs is not None
            policy_group.set_progress(1.0 - self.train_steps / config.train_epochs)
        policy_group.advance_to(dataset.env_steps)
        policy_group.train_step(dataset.data, config.batch_size)
        if self.train_steps % config.log_interval == 0:
            self._dump_logs()
        if config.checkpoint_interval is not None and self.train_steps % config.checkpoint_interval == 0:
            assert config.checkpoint_folder is not None
            self.save_checkpoint(Path(config.checkpoint_folder) / f"train_step_{self.train_steps}")

    def _publish(self) -> bool:
        """
        Publish the latest weights to the workers (within the configured interval, once they read the last ones).

        :return: Whether the workers were sent the latest weights.
        """
        snapshot = self.policy_group.latest
        collector = self.collector
        assert self._plan is not None  # built with the collector
        collector.sync(snapshot.version, lambda: snapshot.acting, self._plan.progress(self.collected_steps))
        return collector.board.version >= snapshot.version

    def _evaluation_due(self) -> bool:
        return self._next_evaluation is not None and self.collected_steps >= self._next_evaluation

    def _evaluate(self, snapshot: WeightsSnapshot) -> None:
        """Evaluate the weights of ``snapshot`` through AsyncEval; the mean and spread of the returns go in
        :attr:`evaluations` (and, on the next dump, the logger)."""
        evaluator = self._evaluator
        interval = self.config.eval_interval
        assert evaluator is not None and interval is not None and self._next_evaluation is not None
        at_steps = self.collected_steps
        if self.vec_normalize is not None and self.vec_normalize.norm_obs:
            assert self._collector is not None and self._collector.statistics is not None
            obs_rms = self._collector.statistics.observation_statistics()
            assert isinstance(obs_rms, RunningMeanStd)  # the evaluation's policies take flat observations
            evaluator.sync_obs_rms(obs_rms)
        evaluator.send_jobs(snapshot.policy[None], 1)
        ((_, (returns, _lengths)),) = evaluator.get_results()
        returns = np.atleast_1d(np.asarray(returns, dtype=float))
        self.evaluations.append(
            {
                "env_steps": at_steps,
                "train_steps": snapshot.version,
                "mean_return": float(returns.mean()),
                "std_return": float(returns.std()),
            }
        )
        while self._next_evaluation <= at_steps:
            self._next_evaluation += interval

    def _dump_logs(self) -> None:
        logger = self.logger
        logger.record("time/train_steps", self.train_steps)
        logger.record("time/collected_steps", self.collected_steps)
        with self._returns_lock:
            returns = list(self._returns)
        if returns:
            logger.record("rollout/ep_rew_mean", float(np.mean(returns)))
        self._record_new_evaluation()
        logger.dump(self.num_timesteps)

    def _record_new_evaluation(self) -> None:
        """Put the newest evaluation done since the last dump in the logger: each is logged once."""
        evaluations = self.evaluations
        if len(evaluations) > self._evaluations_logged:
            self.logger.record("eval/mean_reward", evaluations[-1]["mean_return"])
            self.logger.record("eval/std_reward", evaluations[-1]["std_return"])
            self._evaluations_logged = len(evaluations)

    def recent_mean_return(self, window: int = RETURN_WINDOW) -> float:
        """
        :param window: How many of the last episodes (at most ``RETURN_WINDOW``).
        :return: Mean return of the last ``window`` episodes collected (NaN before there are as many).
        """
        with self._returns_lock:
            returns = list(self._returns)[-window:]
        return float(np.mean(returns)) if len(returns) == window else float("nan")

    def _summarise(self, title: str, wall_seconds: float, collected_steps: int, train_steps: int) -> dict[str, Any]:
        summary = timing_summary(wall_seconds, self._clocks, collected_steps, train_steps, self.collector.profile())
        self._record_new_evaluation()  # the run's last evaluation, if no dump followed it
        record_summary(self.logger, summary, self.num_timesteps)
        if self.config.verbose:
            print(format_summary(title, summary))
        self.last_summary = summary
        return summary

    # ------------------------------------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, folder: Path) -> Path:
        """
        Save the algorithm (policy, optimisers), the replay buffer (off-policy), the rollouts collected and not yet
        trained on (on-policy: queued, or prepared for the next train step), the ``VecNormalize`` statistics and
        the engine's counters. Off-policy, batches drawn for a train step not yet done are drawn again on resume.

        :param folder: The checkpoint's folder (created).
        :return: ``folder``.
        """
        folder.mkdir(parents=True, exist_ok=True)
        self.policy_group.save(folder / ALGORITHM_FILE)
        with self._data_lock:
            pending = self._dataset
            gradient_steps = self.gradient_steps
            if isinstance(self.buffer, ReplayData):
                self.buffer.save(folder / REPLAY_FILE)
                if pending is not None:
                    gradient_steps -= len(pending.data)  # type: ignore[arg-type]  # SampledBatches off-policy
            else:
                assert isinstance(self.buffer, RolloutQueue)
                untrained = [pending.rollout] if pending is not None and pending.rollout is not None else []
                save_to_pkl(folder / ROLLOUTS_FILE, untrained + self.buffer.queued())
            if self.vec_normalize is not None:
                self.vec_normalize.save(str(folder / NORMALIZE_FILE))
            counters = {
                "train_steps": self.train_steps,
                "num_timesteps": self.num_timesteps,
                "collected_steps": self.collected_steps,
                "gradient_steps": gradient_steps,
                "next_evaluation": self._next_evaluation,
                "seed": self.seed,
            }
        (folder / COUNTERS_FILE).write_text(json.dumps(counters))
        return folder

    def load_checkpoint(self, folder: str | Path) -> None:
        """
        Continue from a checkpoint of :meth:`save_checkpoint` (before :meth:`run`; the collection restarts).

        :param folder: The checkpoint's folder.
        """
        folder = Path(folder)
        counters_file = folder / COUNTERS_FILE
        if not counters_file.is_file():
            raise FileNotFoundError(f"folder {folder} is not a checkpoint: it has no {COUNTERS_FILE}")
        if self._collector is not None:
            raise RuntimeError("load_checkpoint() must come before warm_up() or run()")
        counters = json.loads(counters_file.read_text())
        normalize_file = folder / NORMALIZE_FILE
        if normalize_file.is_file() != (self.vec_normalize is not None):
            raise ValueError(
                f"checkpoint {folder} was saved {'with' if normalize_file.is_file() else 'without'} VecNormalize "
                f"statistics, and this engine's algorithm trains {'without' if self.vec_normalize is None else 'with'}"
                " them"
            )
        self.policy_group.load(folder / ALGORITHM_FILE, counters["train_steps"])
        if isinstance(self.buffer, ReplayData):
            self.buffer.load(folder / REPLAY_FILE, counters["collected_steps"])
        else:
            assert isinstance(self.buffer, RolloutQueue)
            rollouts_file = folder / ROLLOUTS_FILE
            self.buffer.restore(load_from_pkl(rollouts_file) if rollouts_file.is_file() else [])
        if self.vec_normalize is not None:
            saved = VecNormalize.load(str(normalize_file), self.env_group.env)
            self.vec_normalize.obs_rms, self.vec_normalize.ret_rms = saved.obs_rms, saved.ret_rms
        self.policy_group.algorithm.num_timesteps = counters["num_timesteps"]
        self.collected_steps = counters["collected_steps"]
        self.gradient_steps = counters["gradient_steps"]
        self._next_evaluation = self._resumed_next_evaluation(counters["next_evaluation"])
        self.seed = counters["seed"]

    def _resumed_next_evaluation(self, saved: int | None) -> int | None:
        """:param saved: The step count of the next evaluation when the checkpoint was saved (None: it had none).
        :return: That of the resumed run: by this config's ``eval_interval`` (None: it evaluates nothing); the saved
            one if the checkpoint's run evaluated at the same interval."""
        interval = self.config.eval_interval
        if interval is None:
            return None
        following = (self.collected_steps // interval + 1) * interval
        if saved is None or saved % interval or saved > following:
            return following  # the checkpoint's run evaluated at another interval, or not at all
        return saved

    def _clock(self, phase: str) -> ThreadClock:
        return self._clocks.setdefault(phase, ThreadClock())
