"""What a collection worker sends for each finished episode, and how it must act (what it shares with the trainer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.running_mean_std import RunningMeanStd

from lit_sb3.collection.observations import Observations

#: ``VecNormalize``'s observation statistics: one, or one per normalised key of a Dict observation space.
ObservationStatistics = RunningMeanStd | dict[str, RunningMeanStd]


@dataclass(frozen=True)
class ObservationNormalization:
    """
    ``VecNormalize``'s observation normalisation, applied by workers with the statistics the trainer publishes.

    :param clip_obs: Normalised observations are clipped to ``[-clip_obs, clip_obs]``.
    :param epsilon: Added to the variance.
    """

    clip_obs: float
    epsilon: float

    def apply(self, observations: Observations, obs_rms: ObservationStatistics) -> Observations:
        """
        :param observations: Raw observations.
        :param obs_rms: The statistics (per key for Dict observations: the keys ``VecNormalize`` normalises).
        :return: The observations as ``VecNormalize`` normalises them.
        """
        if isinstance(observations, dict):
            assert isinstance(obs_rms, dict)
            return {**observations, **{key: self._scaled(observations[key], obs_rms[key]) for key in obs_rms}}
        assert isinstance(obs_rms, RunningMeanStd)
        return self._scaled(observations, obs_rms)

    def _scaled(self, observations: np.ndarray, obs_rms: RunningMeanStd) -> np.ndarray:
        scaled = (observations - obs_rms.mean) / np.sqrt(obs_rms.var + self.epsilon)
        return np.clip(scaled, -self.clip_obs, self.clip_obs).astype(np.float32)


@dataclass(frozen=True)
class ActingSpec:
    """
    How a worker acts, as the algorithm's own ``collect_rollouts`` would.

    :param on_policy: Actions, values and log-probabilities from ``policy(obs)`` (on-policy algorithms); otherwise
        ``policy.predict`` with the off-policy exploration (warm-up, epsilon, action noise).
    :param gamma: Discount, for the time-limit bootstrap of on-policy rewards.
    :param learning_starts: Random actions while :class:`Progress`'s ``num_timesteps`` is below it (off-policy) and
        the environment has taken fewer than ``warm_up_steps`` steps.
    :param warm_up_steps: Each environment's share of the warm-up, ``ceil(learning_starts / n_envs)``: its first steps
        are random, as Stable-Baselines3's vectorised steps are while ``num_timesteps < learning_starts`` (so the
        warm-up is ``learning_starts`` steps in all, not the whole episodes that run until the trainer counts them).
    :param use_sde: Whether the policy uses generalised state-dependent exploration.
    :param sde_sample_freq: Resample the gSDE noise every this many steps (-1: only at the start of a batch).
    :param use_sde_at_warmup: Use gSDE instead of uniform random actions during the warm-up.
    :param action_noise: Noise added to the scaled actions (a copy per environment, reset at its episode ends).
    :param epsilon_greedy: Random actions with probability ``exploration_rate`` (DQN, QR-DQN).
    :param base_seed: Seed of the episodes' resets and of the workers' random actions.
    :param normalization: How the trainer's ``VecNormalize`` normalises observations, if it does.
    :param lockstep_steps: Reproducible on-policy collection (see :mod:`lit_sb3.collection.lockstep`): each
        environment's share of a rollout (``n_steps``); None for free-running collection.
    """

    on_policy: bool
    gamma: float
    learning_starts: int = 0
    warm_up_steps: int = 0
    use_sde: bool = False
    sde_sample_freq: int = -1
    use_sde_at_warmup: bool = False
    action_noise: ActionNoise | None = None
    epsilon_greedy: bool = False
    base_seed: int = 0
    normalization: ObservationNormalization | None = None
    lockstep_steps: int | None = None


@dataclass(frozen=True)
class Progress:
    """
    What workers learn of the trainer besides its weights.

    :param num_timesteps: Steps collected so far (the trainer's ``num_timesteps``, or the steps the collector
        received if more): the warm-up ends when it reaches ``learning_starts``.
    :param exploration_rate: Epsilon of epsilon-greedy exploration.
    :param obs_rms: The observation statistics of the trainer's ``VecNormalize``, if it normalises observations.
    """

    num_timesteps: int
    exploration_rate: float = 0.0
    obs_rms: ObservationStatistics | None = None


@dataclass(frozen=True)
class EpisodePacket:
    """
    One complete episode of one environment.

    :param env_index: Index of the environment among those the workers step.
    :param episode_index: Index of the episode among that environment's episodes.
    :param observations: ``T + 1`` raw observations: before each step, then the last one (terminal or truncated);
        one array per key for Dict observations.
    :param acted_observations: The ``T`` observations as the policy saw them, when the worker normalised them.
    :param actions: The ``T`` actions as the buffer stores them (on-policy: sampled; off-policy: scaled).
    :param rewards: The ``T`` environment rewards.
    :param train_rewards: On-policy: the rewards with the time-limit bootstrap ``gamma * V(last observation)``
        added to the last one when the episode was truncated; off-policy: the rewards.
    :param terminal_value: On-policy: ``V(last observation)`` of a truncated episode, else 0 (a trainer that
        normalises rewards adds ``gamma * terminal_value`` to the normalised last reward).
    :param values: On-policy: the value of each observation; None otherwise.
    :param log_probs: On-policy: log-probability of each action; None otherwise.
    :param terminated: Whether the episode ended in a terminal state.
    :param truncated: Whether it was cut by a time limit (and did not terminate).
    :param infos: The info dict of each step.
    :param random_steps: Steps whose action was drawn at random (off-policy warm-up, epsilon-greedy).
    :param first_version: Weight version that acted at the first step.
    :param last_version: Weight version that acted at the last step.
    :param seconds: Wall time the episode took in the worker.
    :param rollout_index: In lockstep (reproducible) collection: the rollout the episode belongs to; else -1.
    :param closes_rollout: In lockstep collection: whether it is its environment's last episode of the rollout.
    """

    env_index: int
    episode_index: int
    observations: Observations
    acted_observations: Observations | None
    actions: np.ndarray
    rewards: np.ndarray
    train_rewards: np.ndarray
    terminal_value: float
    values: np.ndarray | None
    log_probs: np.ndarray | None
    terminated: bool
    truncated: bool
    infos: list[dict[str, Any]]
    random_steps: int
    first_version: int
    last_version: int
    seconds: float
    rollout_index: int = -1
    closes_rollout: bool = False

    @property
    def length(self) -> int:
        """Number of steps."""
        return len(self.rewards)

    @property
    def episode_return(self) -> float:
        """Sum of the environment rewards."""
        return float(self.rewards.sum())


def collection_seed(base_seed: int, env_index: int, episode_index: int, stream: int) -> int:
    """
    A seed that depends only on the episode: the same whichever worker runs it.

    :param base_seed: The agent's seed.
    :param env_index: Index of the environment.
    :param episode_index: Index of the episode among the environment's episodes.
    :param stream: What the seed is for (0: the reset, 1: the random actions).
    :return: A 32-bit seed.
    """
    sequence = np.random.SeedSequence(base_seed, spawn_key=(env_index, episode_index, stream))
    return int(sequence.generate_state(1)[0])
