"""The engine's policy: a Stable-Baselines3 algorithm, its train step, and the weights it hands to the workers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit
from torch.nn.utils import parameters_to_vector

from lit_sb3.collection import acting_module, check_supported, flat_weights
from lit_sb3.collection.lag_correction import LagCorrection, check_lag_correction, correct_for_policy_lag


@dataclass(frozen=True)
class WeightsSnapshot:
    """
    The trainer's weights after a train step, copied by the train thread (so no other thread reads them mid-step).

    :param version: Train steps done.
    :param acting: Flat weights of the acting part (what the collection workers load).
    :param policy: Flat weights of the whole policy (what evaluation loads).
    """

    version: int
    acting: np.ndarray
    policy: np.ndarray


#: What :meth:`PolicyGroup.load` restores of an algorithm's saved attributes besides its weights: its counters and
#: schedules' positions (DQN's epsilon and target-update phase).
RESTORED_COUNTERS = (
    "num_timesteps",
    "_n_updates",
    "_episode_num",
    "_n_calls",
    "_current_progress_remaining",
    "exploration_rate",
)


class PolicyGroup:
    """
    A Stable-Baselines3 algorithm (on-policy: PPO, A2C...; off-policy: SAC, TD3, DDPG...) as the engine trains it:
    its policy, one train step on a dataset, and the weights of the latest step.

    :param algorithm: The algorithm, built on the env group's ``env`` (its spaces are the workers' spaces).
    :param lag_correction: On-policy, how each rollout is re-evaluated by the trainer's policy before it trains on it:
        ``"values"`` (its critic's values, returns and advantages), ``"decoupled"`` (also its log-probabilities, the
        advantages weighted by ``pi_trainer / pi_acting``), ``"auto"`` (decoupled where the trainer's policy has
        moved far from the acting one, else values) or None (as the workers acted it); see
        :mod:`lit_sb3.collection.lag_correction`.
    """

    def __init__(self, algorithm: BaseAlgorithm, lag_correction: LagCorrection | None = "auto") -> None:
        if not isinstance(algorithm, OnPolicyAlgorithm | OffPolicyAlgorithm):
            raise TypeError(
                f"algorithm must be a Stable-Baselines3 on- or off-policy algorithm, got {type(algorithm).__name__}"
            )
        check_supported(type(algorithm))
        check_lag_correction(lag_correction, type(algorithm))
        self.algorithm = algorithm
        self.lag_correction = lag_correction
        self.version = 0
        self.latest = self._snapshot()

    @property
    def on_policy(self) -> bool:
        """Whether the algorithm trains on rollouts of its current policy."""
        return isinstance(self.algorithm, OnPolicyAlgorithm)

    @property
    def learning_starts(self) -> int:
        """Off-policy: environment steps of random actions before training starts (0 on-policy)."""
        return int(getattr(self.algorithm, "learning_starts", 0))

    def default_replay_ratio(self) -> float:
        """:return: Off-policy: the algorithm's gradient steps per environment step, as ``learn()`` trains: every
        ``train_freq`` steps of its ``n_envs`` environments (``train_freq * n_envs`` env steps), ``gradient_steps``
        gradient steps (-1: one per env step)."""
        algorithm = self.algorithm
        assert isinstance(algorithm, OffPolicyAlgorithm) and isinstance(algorithm.train_freq, TrainFreq)
        if algorithm.train_freq.unit is not TrainFrequencyUnit.STEP:
            raise ValueError("train_freq in episodes has no fixed replay ratio: give EngineConfig.replay_ratio")
        if algorithm.gradient_steps < 0:
            return 1.0
        if algorithm.gradient_steps == 0:
            raise ValueError(
                "gradient_steps=0 never trains: give the algorithm gradient_steps or EngineConfig.replay_ratio"
            )
        return algorithm.gradient_steps / (algorithm.train_freq.frequency * algorithm.n_envs)

    def advance_to(self, num_timesteps: int) -> None:
        """
        Count the environment steps the next train step trains on, as ``learn()`` does: off-policy, ``_on_step()``
        once per step of its ``n_envs`` environments, i.e. once per ``n_envs`` new env steps (DQN's target-network
        update and epsilon follow it).

        :param num_timesteps: The algorithm's ``num_timesteps`` once it trains on the next dataset.
        """
        algorithm = self.algorithm
        vector_steps = num_timesteps // algorithm.n_envs - algorithm.num_timesteps // algorithm.n_envs
        algorithm.num_timesteps = num_timesteps
        if isinstance(algorithm, OffPolicyAlgorithm):
            for _ in range(vector_steps):
                algorithm._on_step()

    def set_progress(self, remaining: float) -> None:
        """
        :param remaining: Fraction of the run still to go, from 1 to 0 (drives learning-rate and clip schedules).
        """
        self.algorithm._current_progress_remaining = min(1.0, max(0.0, remaining))

    def train_step(self, dataset: Any, batch_size: int | None) -> None:
        """
        One train step of the algorithm, then a snapshot of its weights.

        :param dataset: On-policy: a filled SB3 ``RolloutBuffer``; off-policy: a
            :class:`~lit_sb3.engine.buffer.SampledBatches` (one batch per gradient step).
        :param batch_size: Minibatch size; None keeps the algorithm's.
        """
        algorithm: Any = self.algorithm
        if self.on_policy:
            assert isinstance(dataset, RolloutBuffer)
            if batch_size is not None:
                algorithm.batch_size = batch_size
            if self.lag_correction is not None:
                correct_for_policy_lag(algorithm.policy, dataset, self.lag_correction)
            algorithm.rollout_buffer = dataset
            algorithm.train()
        else:
            replay_buffer = algorithm.replay_buffer
            algorithm.replay_buffer = dataset  # train() samples from it: the batches the dataset thread drew
            try:
                algorithm.train(gradient_steps=len(dataset), batch_size=dataset.batch_size)
            finally:
                algorithm.replay_buffer = replay_buffer
        self.version += 1
        self.latest = self._snapshot()

    def save(self, path: Path) -> None:
        """
        :param path: Zip file of the algorithm (policy, optimisers, counters), as ``BaseAlgorithm.save`` writes it.
        """
        self.algorithm.save(path)

    def load(self, path: Path, version: int) -> None:
        """
        Load what :meth:`save` wrote into this algorithm, as ``BaseAlgorithm.load`` does.

        :param path: The zip file.
        :param version: Train steps done when it was saved.
        """
        algorithm: Any = self.algorithm
        data, params, pytorch_variables = load_from_zip_file(path, device=algorithm.device)
        algorithm.set_parameters(params, exact_match=True, device=algorithm.device)
        for name, variable in (pytorch_variables or {}).items():
            if variable is not None:  # SAC's log_ent_coef, if the entropy coefficient is learned
                getattr(algorithm, name).data = variable.data
        assert data is not None
        for name in RESTORED_COUNTERS:
            if name in data:
                setattr(algorithm, name, data[name])
        self.version = version
        self.latest = self._snapshot()

    def _snapshot(self) -> WeightsSnapshot:
        policy = self.algorithm.policy
        whole = parameters_to_vector(policy.parameters()).detach().cpu().numpy().astype(np.float32)
        return WeightsSnapshot(self.version, flat_weights(acting_module(policy)), whole)


def gradient_steps_owed(collected_steps: int, learning_starts: int, replay_ratio: float, done: int) -> int:
    """
    :param collected_steps: Environment steps in the replay buffer so far.
    :param learning_starts: Steps collected before training starts.
    :param replay_ratio: Gradient steps per environment step.
    :param done: Gradient steps done so far.
    :return: Gradient steps due now.
    """
    return max(0, math.floor(max(0, collected_steps - learning_starts) * replay_ratio) - done)
