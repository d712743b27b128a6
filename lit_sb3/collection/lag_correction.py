"""Training on-policy on rollouts that older weights acted: the rollout re-evaluated by the trainer's policy before it
trains.

A rollout collected asynchronously was acted by weights behind the trainer's (one or two versions when it holds an
episode or more; as many as an episode has rollouts when it is much shorter, since episodes arrive whole): its values
come from an older critic, and PPO's ratio ``pi_new / pi_old`` starts away from 1 for many samples. The ``"values"``
correction recomputes returns and advantages with the trainer's critic. The ``"decoupled"`` one goes further:
Hilton, Cobbe and Schulman (2022, "Batch size-invariance for policy optimization", NeurIPS) decouple the policy that
acted (behaviour) from the one the step stays near (proximal, the trainer's weights when it takes the rollout)::

    L = E_behaviour[ (pi_prox / pi_behaviour) * min(r * A, clip(r, 1 - eps, 1 + eps) * A) ],   r = pi / pi_prox

The weight ``pi_prox / pi_behaviour`` does not depend on the weights being trained and is positive, so it moves into
the advantage: the rollout's ``log_probs`` become the trainer's, its ``values`` the trainer's critic's (advantages and
returns recomputed from them), and each advantage is multiplied by the weight. PPO, A2C and TRPO then train on it
unchanged. When the weights that acted are the trainer's, nothing changes either way.

Neither is best everywhere. ``"auto"`` (the default) decouples the rollouts of continuous actions (a ``Box``
action space: Gaussian policies) whose share of stale samples is above :data:`DECOUPLE_ABOVE`: samples whose ratio
``pi_trainer / pi_acting`` is already outside PPO's default clip range ``[0.8, 1.2]``, which clipping around the
acting policy starts out ignoring. A Gaussian's density ratio swings with its mean's move measured in standard
deviations, so a policy that barely moved leaves many samples stale; the other rollouts get ``"values"``, and so do
discrete actions, where re-centring let stale samples push the policy too far. Measured with worker threads at
default arguments (env steps until the mean return of the last 20 episodes reaches the threshold, medians):

- PPO Pendulum-v1 at rl-zoo's settings with gSDE (seeds 0-4; stale share 0.20 / 0.24 / 0.32, quartiles of seed
  0's rollouts), -250: 88k with ``"values"``, 53k decoupling the rollouts whose stale share is above 0.2 (88% of
  them), 52k with ``"decoupled"`` (seeds 0-2), 46k for plain Stable-Baselines3 (seeds 0-2). Without gSDE (seeds
  0-2): 91k with ``"values"``, 65k with ``"decoupled"``.
- PPO CartPole-v1, 8 envs (stale share 0.04 / 0.09 / 0.15), 475: 57k with ``"values"``, 127k with ``"decoupled"``
  (seeds 0-2); decoupling above a stale share of 0.2 gave 43k but one seed of five took 98k. On a two-bit cue task
  with ``MultiDiscrete`` actions and ``Dict`` observations (4,000 steps, seeds 0-5), the same rule left 3 of 6 seeds
  at a mean reward of 0.63-0.76 where ``"values"`` reached 0.94-1.0 with all six.
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
#: log-probabilities the trainer's policy's and weights each advantage by ``pi_trainer / pi_acting``; ``"auto"``
#: chooses one of the two per rollout.
LagCorrection = Literal["auto", "values", "decoupled"]
LAG_CORRECTIONS: tuple[LagCorrection, ...] = ("auto", "values", "decoupled")
#: A sample is stale when ``pi_trainer / pi_acting`` is outside ``[1 - STALE_RATIO, 1 + STALE_RATIO]`` (PPO's default
#: clip range: the samples that PPO's clipping around the acting policy starts out ignoring).
STALE_RATIO = 0.2
#: ``"auto"`` decouples a rollout of continuous actions when more than this share of its samples are stale.
DECOUPLE_ABOVE = 0.2
#: Importance weights of the decoupled correction are cut to this (bounded variance). PPO Pendulum-v1 at rl-zoo's gSDE
#: settings, 3 seeds: a median of 51k env steps to -250 with the weights cut to 2 or not cut, 60k cut to 1.
MAX_IMPORTANCE_WEIGHT = 2.0
#: Rows of a rollout the trainer's policy evaluates at once (bounds the memory of image observations).
EVALUATION_BATCH = 512


def check_lag_correction(lag_correction: Any, algorithm_class: type) -> None:
    """
    :param lag_correction: What the user passed.
    :param algorithm_class: The algorithm it is for: off-policy ones learn from a replay buffer, not from rollouts,
        and take only the default, ``"auto"``, or ``"values"`` (the default before ``"auto"``): both leave them as
        they are.
    :raises ValueError: if ``lag_correction`` is none of :data:`LAG_CORRECTIONS` or None, or neither of those two
        for an off-policy algorithm.
    """
    if lag_correction is not None and lag_correction not in LAG_CORRECTIONS:
        raise ValueError(f"lag_correction must be one of {LAG_CORRECTIONS} or None, got {lag_correction!r}")
    if lag_correction not in ("auto", "values") and not issubclass(algorithm_class, OnPolicyAlgorithm):
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
    ``"auto"``: ``"decoupled"`` if the actions are continuous and more than :data:`DECOUPLE_ABOVE` of the samples
    are stale (see :data:`STALE_RATIO`), else ``"values"``. A truncated episode's bootstrap (in its last reward)
    keeps the value the acting worker gave its last observation. Call it on the trainer's thread, before training on
    the buffer.

    Measured (3 seeds each; env steps until the mean return of the last 20 episodes reaches the threshold): PPO
    Pendulum-v1 at rl-zoo's gSDE settings (lag 1.6 versions on average), -250: about 90k uncorrected, 85k with
    ``"values"``, 54k with ``"decoupled"``, 44k for plain Stable-Baselines3; PPO CartPole-v1 at rl-zoo's settings
    with ``max_policy_lag=4`` (lag 3.3), the mean of 10 evaluation episodes after 100k steps: 500 in every run
    uncorrected and with ``"values"``, 354 to 500 with ``"decoupled"``: re-centring PPO's clipping on the trainer's
    policy lets stale samples push it further than clipping around the acting policy does.

    :param policy: The trainer's policy (evaluated in eval mode, without gradients).
    :param buffer: A rollout of complete episodes in one column, as the workers' behaviour filled it.
    :param correction: ``"auto"``, ``"values"`` or ``"decoupled"``.
    :return: The importance weights if the rollout was decoupled; None if it got ``"values"``.
    """
    if correction == "auto" and not isinstance(policy.action_space, spaces.Box):
        correction = "values"
    values, log_probs = _evaluate(policy, buffer, with_log_probs=correction != "values")
    buffer.values[:, 0] = values
    fill_returns_and_advantages(buffer)
    if log_probs is None:
        return None
    ratios = np.exp(log_probs - buffer.log_probs[:, 0].astype(np.float64))
    if correction == "auto" and np.mean(np.abs(ratios - 1.0) > STALE_RATIO) <= DECOUPLE_ABOVE:
        return None
    buffer.log_probs[:, 0] = log_probs
    weights = np.minimum(ratios, MAX_IMPORTANCE_WEIGHT)
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
