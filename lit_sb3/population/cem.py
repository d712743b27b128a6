"""The cross-entropy method with a diagonal Gaussian and extra noise (Szita and Lorincz, 2006)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule

from lit_sb3.checks import check_scale, check_unit_interval
from lit_sb3.population.base import PopulationAlgorithm, check_population_size, checked_schedule
from lit_sb3.population.ranking import standard_deviation


class CEM(PopulationAlgorithm):
    """
    The cross-entropy method, with the extra noise of Szita and Lorincz, "Learning Tetris Using the Noisy
    Cross-Entropy Method" (Neural Computation, 2006).

    Each round samples ``pop_size`` weight vectors from a diagonal Gaussian around the policy weights, and refits
    the Gaussian to the best ``elite_fraction`` of them: the mean becomes the elites' mean (and the policy), the
    variance the elites' variance plus ``extra_noise``, which keeps the distribution from collapsing before the
    policy is good (the noisy CEM of Szita and Lorincz).

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param pop_size: Candidates per round (at least 2).
    :param elite_fraction: Fraction of the candidates the distribution is refitted to (at least one).
    :param initial_std: Initial standard deviation of every parameter.
    :param extra_noise: Float or schedule (of the remaining progress, 1 to 0) for the variance added to every
        parameter after each refit.
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
    """

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        *,
        pop_size: int = 16,
        elite_fraction: float = 0.25,
        initial_std: float = 0.5,
        extra_noise: float | Schedule = 0.01,
        zero_policy: bool = False,
        alive_bonus_offset: float = 0.0,
        n_eval_episodes: int = 1,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        seed: int | None = None,
        verbose: int = 0,
        device: th.device | str = "cpu",
        _init_setup_model: bool = True,
    ) -> None:
        check_population_size(pop_size)
        check_unit_interval("elite_fraction", elite_fraction, open_low=True)
        check_scale("initial_std", initial_std)
        super().__init__(
            policy,
            env,
            learning_rate=0.0,  # the cross-entropy method has no step size
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
        self.pop_size = pop_size
        self.elite_fraction = elite_fraction
        self.n_elite = max(1, round(elite_fraction * pop_size))
        self.initial_std = initial_std
        self.extra_noise = extra_noise
        self.extra_noise_schedule = checked_schedule("extra_noise", extra_noise, allow_zero=True)
        #: Standard deviation of every parameter (set by _setup_model unless load() restored it).
        self.std: np.ndarray | None = None
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.std is None:
            self.std = np.full(self.n_params, self.initial_std, dtype=np.float64)

    def _sample_candidates(self) -> np.ndarray:
        assert self._rng is not None and self.std is not None
        return self._centre() + self.std * self._rng.standard_normal((self.pop_size, self.n_params))

    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        elite = np.argsort(-returns, kind="stable")[: self.n_elite]
        extra_noise = self._scheduled("extra_noise", self.extra_noise_schedule, allow_zero=True)
        self.policy.load_from_vector(candidates[elite].mean(axis=0))
        self.std = np.sqrt(candidates[elite].var(axis=0) + extra_noise)
        return {
            "train/elite_return": float(returns[elite].mean()),
            "train/std": float(self.std.mean()),
            "train/extra_noise": extra_noise,
            "rollout/return_std": standard_deviation(returns),
        }
