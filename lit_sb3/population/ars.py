"""Augmented Random Search (Mania, Guy and Recht, 2018): https://arxiv.org/abs/1803.07055"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.type_aliases import GymEnv, Schedule

from lit_sb3.checks import check_positive_int, check_scale
from lit_sb3.evaluation.obs_rms import subtract_running_mean_std
from lit_sb3.population.base import PopulationAlgorithm, checked_schedule
from lit_sb3.population.ranking import unit_scaled


class ARS(PopulationAlgorithm):
    """
    Augmented Random Search: https://arxiv.org/abs/1803.07055

    Each round evaluates the policy weights plus and minus ``n_delta`` Gaussian directions, keeps the ``n_top``
    directions whose better return is highest, and steps along them by the return differences, with a step size
    scaled by the standard deviation of the returns used: by default the population standard deviation, as in the
    paper's code; ``return_std_ddof=1`` takes the sample one, as sb3-contrib does (its steps are
    ``sqrt(2 * n_top / (2 * n_top - 1))`` times smaller, 1.41 at ``n_top=1``), so hyper-parameters tuned for
    sb3-contrib's ARS take the same steps.
    ARS V1 as is; V2 (observation normalisation) with the environment wrapped in
    ``VecNormalize(norm_reward=False)``. Hyper-parameter names, order and defaults are those of
    sb3-contrib's ARS, so its code and configurations run unchanged; the options it does not have are keyword-only.

    With V2, the statistics are frozen during a round (as in the paper's code) and by default updated after each
    one. ``normalization_update_interval=k`` updates the normalisation every ``k`` rounds only: the policy then
    adapts to a normalisation that moves in fewer steps. The exact statistics (every observation counted once) are
    kept all along, saved with the model and handed over at each update; the ``VecNormalize`` holds the statistics
    the policy is normalised with, so predictions in it match training. ``normalization_inertia=w`` makes the
    normalisation move more slowly in another way: when a round's observations are added, the statistics in use
    weigh ``w`` times their count (sb3-contrib's ARS, whose merge adds each worker's statistics whole and subtracts
    the count, weighs them about ``n_workers + 1`` times); their count stays the true one.

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param n_delta: How many random perturbations of the policy to try at each update step.
    :param n_top: How many of the top directions to use in each update step; defaults to ``n_delta``.
    :param learning_rate: Float or schedule for the step size.
    :param delta_std: Float or schedule for the exploration noise.
    :param zero_policy: Whether the policy starts from all-zero weights.
    :param alive_bonus_offset: Constant added to the reward at each step, used to cancel out alive bonuses.
    :param n_eval_episodes: Number of episodes to evaluate each candidate.
    :param policy_kwargs: Keyword arguments to pass to the policy on creation.
    :param stats_window_size: How many recent episodes ``rollout/ep_rew_mean`` and ``ep_len_mean`` average.
    :param tensorboard_log: The log location for TensorBoard (if None, no logging).
    :param seed: Random seed for the training.
    :param verbose: Verbosity level: 0 no output, 1 info, 2 debug.
    :param device: Torch device of the policy.
    :param _init_setup_model: Whether or not to build the network at the creation of the instance.
    :param normalization_update_interval: Rounds between two updates of the observation normalisation (V2).
    :param normalization_inertia: How many times their count the statistics in use weigh when a round's
        observations are added to them (V2); 1 keeps them exact. Updates every round only.
    :param return_std_ddof: Delta degrees of freedom of the standard deviation of the returns that scales the step
        (``numpy.std``'s ``ddof``): 0 for the population one (the paper's code), 1 for the sample one (sb3-contrib).
    """

    def __init__(  # noqa: PLR0917 - the positional arguments of sb3-contrib's ARS
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        n_delta: int = 8,
        n_top: int | None = None,
        learning_rate: float | Schedule = 0.02,
        delta_std: float | Schedule = 0.05,
        zero_policy: bool = True,
        alive_bonus_offset: float = 0,
        n_eval_episodes: int = 1,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        seed: int | None = None,
        verbose: int = 0,
        device: th.device | str = "cpu",
        _init_setup_model: bool = True,
        *,
        normalization_update_interval: int = 1,
        normalization_inertia: float = 1.0,
        return_std_ddof: int = 0,
    ) -> None:
        check_positive_int("n_delta", n_delta)
        if n_top is None:
            n_top = n_delta
        check_positive_int("n_top", n_top)
        check_positive_int("normalization_update_interval", normalization_update_interval)
        normalization_inertia = check_scale("normalization_inertia", normalization_inertia)
        if normalization_inertia != 1.0 and normalization_update_interval != 1:
            raise ValueError(
                f"normalization_inertia={normalization_inertia!r} needs normalization_update_interval=1, got "
                f"{normalization_update_interval!r}: the two are ways to slow the normalisation down, use one"
            )
        if return_std_ddof not in (0, 1) or isinstance(return_std_ddof, bool):
            raise ValueError(f"return_std_ddof must be 0 (population std) or 1 (sample std), got {return_std_ddof!r}")
        if n_top > n_delta:
            raise ValueError(
                f"n_top={n_top} is larger than n_delta={n_delta}: the top directions are among the n_delta"
            )
        super().__init__(
            policy,
            env,
            learning_rate,
            n_eval_episodes=n_eval_episodes,
            alive_bonus_offset=alive_bonus_offset,
            zero_policy=zero_policy,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            seed=seed,
            verbose=verbose,
            device=device,
        )
        self.n_delta = n_delta
        self.n_top = n_top
        self.normalization_update_interval = normalization_update_interval
        self.normalization_inertia = normalization_inertia
        self.return_std_ddof = return_std_ddof
        self.pop_size = 2 * n_delta
        self.delta_std = delta_std
        self.delta_std_schedule = checked_schedule("delta_std", delta_std)
        # The directions of the pending population, unscaled, and the noise scale they were sampled with.
        self._deltas: np.ndarray | None = None
        self._pending_delta_std = 0.0
        if _init_setup_model:
            self._setup_model()

    def _sample_candidates(self) -> np.ndarray:
        self._pending_delta_std = self._scheduled("delta_std", self.delta_std_schedule)
        self._deltas, candidates = self._antithetic_population(self.n_delta, self._pending_delta_std)
        return candidates

    def _normalization_statistics(self, exact: RunningMeanStd, in_use: RunningMeanStd) -> RunningMeanStd:
        if self.normalization_inertia != 1.0:
            # The round's observations: what the exact statistics gained since the last round (or since the start).
            previous = self._exact_obs_rms if self._exact_obs_rms is not None else in_use
            new_observations = subtract_running_mean_std(exact, previous)
            weighted = in_use.copy()
            weighted.count *= self.normalization_inertia
            weighted.combine(new_observations)
            weighted.count = in_use.count + new_observations.count
            return weighted
        # Called before tell() counts the round: round r (from 1) updates when r is a multiple of the interval.
        if (self._n_updates + 1) % self.normalization_update_interval == 0:
            return exact
        return in_use

    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        assert self._deltas is not None
        plus_returns, minus_returns = returns[: self.n_delta], returns[self.n_delta :]
        top = np.argsort(-np.maximum(plus_returns, minus_returns), kind="stable")[: self.n_top]
        # The step does not depend on the returns' scale: it is taken on them scaled exactly (no overflow).
        scaled, exponent = unit_scaled(np.concatenate([plus_returns[top], minus_returns[top]]))
        scaled_std = float(np.std(scaled, ddof=self.return_std_ddof))
        learning_rate = self._scheduled("learning_rate", self.lr_schedule, allow_zero=True)
        # Equal returns everywhere give no direction (and a zero std): no step then.
        scaled_step = learning_rate / (self.n_top * scaled_std) if scaled_std > 0.0 else 0.0
        weights = self._centre()
        weights += scaled_step * ((scaled[: self.n_top] - scaled[self.n_top :]) @ self._deltas[top])
        return_std, step_size = float(np.ldexp(scaled_std, exponent)), float(np.ldexp(scaled_step, -exponent))
        self.policy.load_from_vector(weights)
        self._deltas = None
        return {
            "train/learning_rate": learning_rate,
            "train/step_size": step_size,
            "train/delta_std": self._pending_delta_std,
            "rollout/return_std": return_std,
        }
