"""Training on-policy on rollouts that older weights acted: the rollout re-evaluated by the trainer's policy before it
trains.

A rollout collected asynchronously was acted by weights one or two versions behind the trainer's: its values come
from an older critic, and PPO's ratio ``pi_new / pi_old`` starts away from 1 for many samples. The ``"values"``
correction recomputes returns and advantages with the trainer's critic. The ``"decoupled"`` one goes further:
Hilton, Cobbe and Schulman (2022, "Batch size-invariance for policy optimization", NeurIPS) decouple the policy that
acted (behaviour) from the one the step stays near (proximal, the trainer's weights when it takes the rollout)::

    L = E_behaviour[ (pi_prox / pi_behaviour) * min(r * A, clip(r, 1 - eps, 1 + eps) * A) ],   r = pi / pi_prox

The weight ``pi_prox / pi_behaviour`` does not depend on the weights being trained and is positive, so it moves into
the advantage: the rollout's ``log_probs`` become the trainer's, its ``values`` the trainer's critic's (advantages and
returns recomputed from them), and each advantage is multiplied by the weight. PPO, A2C and TRPO then train on it
unchanged. When the weights that acted are the trainer's, nothing changes either way.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.utils import obs_as_tensor

from lit_sb3.collection.rollout import fill_returns_and_advantages

#: How a rollout acted by older weights is corrected before the trainer trains on it: ``"values"`` re-evaluates its
#: values with the trainer's critic (returns and advantages recomputed from them); ``"decoupled"`` also makes its
#: log-probabilities the trainer's policy's and weights each advantage by ``pi_trainer / pi_acting``.
LagCorrection = Literal["values", "decoupled"]
LAG_CORRECTIONS: tuple[LagCorrection, ...] = ("values", "decoupled")
#: Importance weights of the decoupled correction are cut to this (bounded variance). PPO Pendulum-v1 at rl-zoo's gSDE
#: settings, 3 seeds: a median of 51k env steps to -250 with the weights cut to 2 or not cut, 60k cut to 1.
MAX_IMPORTANCE_WEIGHT = 2.0
#: Rows of a rollout the trainer's policy evaluates at once (bounds the memory of image observations).
EVALUATION_BATCH = 512


def check_lag_correction(lag_correction: Any, algorithm_class: type) -> None:
    """
    :param lag_correction: What the user passed.
    :param algorithm_class: The algorithm it is for: off-policy ones take only the default (they learn from a replay
        buffer, not from rollouts).
    :raises ValueError: if ``lag_correction`` is none of :data:`LAG_CORRECTIONS` or None, or not the default for an
        off-policy algorithm.
    """
    if lag_correction is not None and lag_correction not in LAG_CORRECTIONS:
        raise ValueError(f"lag_correction must be one of {LAG_CORRECTIONS} or None, got {lag_correction!r}")
    if lag_correction != "values" and not issubclass(algorithm_class, OnPolicyAlgorithm):
        raise ValueError(
            f"lag_correction is for on-policy algorithms (not {algorithm_class.__name__}), got {lag_correction!r}"
        )


def correct_for_policy_lag(
    policy: ActorCriticPolicy, buffer: RolloutBuffer | DictRolloutBuffer, correction: LagCorrection
) -> np.ndarray | None:
    """
    Re-evaluate a rollout with the trainer's policy. ``"values"``: its values become the trainer's critic's, and
    returns and advantages are recomputed from them. ``"decoupled"``: also its log-probabilities become the trainer's
    policy's, and each advantage is weighted by ``pi_trainer / pi_acting`` (at most :data:`MAX_IMPORTANCE_WEIGHT`).
    A truncated episode's bootstrap (in its last reward) keeps the value the acting worker gave its last observation.
    Call it on the trainer's thread, before training on the buffer.

    Measured (3 seeds each; env steps until the mean return of the last 20 episodes reaches the threshold): PPO
    Pendulum-v1 at rl-zoo's gSDE settings (lag 1.6 versions on average), -250: about 90k uncorrected, 85k with
    ``"values"``, 54k with ``"decoupled"``, 44k for plain Stable-Baselines3; PPO CartPole-v1 at rl-zoo's settings
    with ``max_policy_lag=4`` (lag 3.3), the mean of 10 evaluation episodes after 100k steps: 500 in every run
    uncorrected and with ``"values"``, 354 to 500 with ``"decoupled"``: re-centring PPO's clipping on the trainer's
    policy lets stale samples push it further than clipping around the acting policy does.

    :param policy: The trainer's policy (evaluated in eval mode, without gradients).
    :param buffer: A rollout of complete episodes in one column, as the workers' behaviour filled it.
    :param correction: ``"values"`` or ``"decoupled"``.
    :return: The importance weights of ``"decoupled"``; None for ``"values"``.
    """
    decoupled = correction == "decoupled"
    values, log_probs = _evaluate(policy, buffer, with_log_probs=decoupled)
    buffer.values[:, 0] = values
    fill_returns_and_advantages(buffer)
    if log_probs is None:
        return None
    behaviour_log_probs = buffer.log_probs[:, 0].astype(np.float64)
    buffer.log_probs[:, 0] = log_probs
    weights = np.minimum(np.exp(log_probs - behaviour_log_probs), MAX_IMPORTANCE_WEIGHT)
    buffer.advantages[:, 0] *= weights
    return weights


def _evaluate(
    policy: ActorCriticPolicy, buffer: RolloutBuffer | DictRolloutBuffer, *, with_log_probs: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """:return: The policy's value of every observation of the buffer, and the log-probability of every action
    (None without ``with_log_probs``)."""
    observations = buffer.observations
    length = buffer.buffer_size
    values = np.empty(length, dtype=np.float32)
    log_probs = np.empty(length, dtype=np.float32) if with_log_probs else None
    policy.set_training_mode(False)
    with th.no_grad():
        for start in range(0, length, EVALUATION_BATCH):
            rows = slice(start, start + EVALUATION_BATCH)
            if isinstance(observations, dict):
                batch = obs_as_tensor({key: column[rows, 0] for key, column in observations.items()}, policy.device)
            else:
                batch = obs_as_tensor(observations[rows, 0], policy.device)
            if log_probs is None:
                values[rows] = policy.predict_values(batch).flatten().cpu().numpy()
                continue
            actions = th.as_tensor(buffer.actions[rows, 0], device=policy.device)
            if isinstance(policy.action_space, spaces.Discrete):
                actions = actions.long().flatten()  # as PPO.train and A2C.train give them
            batch_values, batch_log_probs, _ = policy.evaluate_actions(batch, actions)
            values[rows] = batch_values.flatten().cpu().numpy()
            log_probs[rows] = batch_log_probs.cpu().numpy()
    return values, log_probs
