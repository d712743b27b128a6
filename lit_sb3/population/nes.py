"""Natural evolution strategies: separable (SNES, Schaul et al. 2011), exponential (XNES, Glasmachers et al. 2010)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule

from lit_sb3.checks import check_scale
from lit_sb3.population.base import PopulationAlgorithm, check_interaction_budget, checked_schedule
from lit_sb3.population.distribution import check_budget_bound, check_stdev_init, initial_stdev, population_size
from lit_sb3.population.ranking import Ranking, check_ranking, shape_returns, standard_deviation, unit_scaled


def default_popsize(n_params: int) -> int:
    """:return: The population size of the NES papers, ``4 + floor(3 * log(n_params))``."""
    return 4 + math.floor(3 * math.log(n_params))


class NaturalEvolutionStrategy(PopulationAlgorithm):
    """
    The shared part of :class:`SNES` and :class:`XNES`: a Gaussian search distribution around the policy weights,
    ``popsize`` samples a round (by default ``4 + floor(3 * log(n_params))``), and the NES utilities.

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param popsize: Candidates per round (per batch with ``num_interactions``); None for the papers' default.
    :param pop_size: The same as ``popsize``, as the other lit_sb3 methods name it (give one of the two).
    :param center_learning_rate: Float or schedule for the step size of the mean (the papers' eta_mu).
    :param stdev_learning_rate: Step size of the standard deviation (the papers' eta_sigma); None for its default.
    :param stdev_init: Initial standard deviation, one number or one per parameter (default 0.1 unless
        ``radius_init`` is given).
    :param radius_init: Initial norm of the standard deviation vector, instead of ``stdev_init``.
    :param ranking: Fitness shaping: ``"nes"`` (the papers' utilities), or ``"centered"``, ``"linear"``,
        ``"normalized"`` or ``"raw"``, whose values are then centred and scaled to a sum of absolute values of one.
    :param num_interactions: The env steps a round's candidates must take in total before the update (more batches
        are sampled until they do), or None for rounds of one batch.
    :param popsize_max: The number of candidates at which a round stops growing, or None for no bound.
    :param zero_policy: Whether the policy (the mean) starts from all-zero weights.
    :param alive_bonus_offset: Constant added to the reward at each step, used to cancel out alive bonuses.
    :param n_eval_episodes: Number of episodes to evaluate each candidate.
    :param policy_kwargs: Keyword arguments to pass to the policy on creation.
    :param stats_window_size: How many recent episodes ``rollout/ep_rew_mean`` and ``ep_len_mean`` average.
    :param tensorboard_log: The log location for TensorBoard (if None, no logging).
    :param seed: Random seed for the training.
    :param verbose: Verbosity level: 0 no output, 1 info, 2 debug.
    :param device: Torch device of the policy.
    """

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        *,
        popsize: int | None = None,
        pop_size: int | None = None,
        center_learning_rate: float | Schedule = 1.0,
        stdev_learning_rate: float | None = None,
        stdev_init: float | np.ndarray | None = None,
        radius_init: float | None = None,
        ranking: Ranking | bool = "nes",
        num_interactions: int | None = None,
        popsize_max: int | None = None,
        zero_policy: bool = True,
        alive_bonus_offset: float = 0.0,
        n_eval_episodes: int = 1,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        seed: int | None = None,
        verbose: int = 0,
        device: th.device | str = "cpu",
    ) -> None:
        initial_pop_size = population_size(popsize, pop_size)
        check_interaction_budget(num_interactions, popsize_max)
        if initial_pop_size is not None:  # the default depends on the policy's size
            check_budget_bound(popsize_max, initial_pop_size)
        checked_schedule("center_learning_rate", center_learning_rate, allow_zero=True)
        if stdev_learning_rate is not None:
            check_scale("stdev_learning_rate", stdev_learning_rate, allow_zero=True)
        check_stdev_init(stdev_init, radius_init)
        ranking_name = check_ranking(ranking)
        super().__init__(
            policy,
            env,
            center_learning_rate,
            n_eval_episodes=n_eval_episodes,
            alive_bonus_offset=alive_bonus_offset,
            zero_policy=zero_policy,
            num_interactions=num_interactions,
            popsize_max=popsize_max,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            seed=seed,
            verbose=verbose,
            device=device,
        )
        self.initial_pop_size = initial_pop_size
        self.stdev_learning_rate = stdev_learning_rate
        self.stdev_init = stdev_init
        self.radius_init = radius_init
        self.ranking = ranking_name

    def _setup_model(self) -> None:
        super()._setup_model()
        check_budget_bound(self.popsize_max, self.pop_size)

    @property
    def pop_size(self) -> int:
        """Candidates per round (per batch with ``num_interactions``)."""
        return self.initial_pop_size if self.initial_pop_size is not None else default_popsize(self.n_params)

    @property
    def popsize(self) -> int:
        """``pop_size`` under EvoTorch's name."""
        return self.pop_size

    def _utilities(self, returns: np.ndarray) -> np.ndarray:
        """:return: The weights of the candidates in the gradient: zero-sum, higher for better candidates."""
        shaped = shape_returns(returns, self.ranking)
        if self.ranking == "nes":
            return shaped
        scaled, _ = unit_scaled(shaped)
        centred = scaled - scaled.mean()
        total = np.abs(centred).sum()
        return centred / total if total > 0.0 else centred

    def _center_learning_rate(self) -> float:
        return self._scheduled("center_learning_rate", self.lr_schedule, allow_zero=True)


class SNES(NaturalEvolutionStrategy):
    """
    Separable Natural Evolution Strategies: T. Schaul, T. Glasmachers and J. Schmidhuber, "High Dimensions and Heavy
    Tails for Natural Evolution Strategies", GECCO 2011; the utilities of D. Wierstra et al., "Natural Evolution
    Strategies", JMLR 15, 2014.

    The search distribution is a Gaussian with a per-parameter standard deviation around the policy weights. Each
    round samples ``popsize`` candidates ``mean + stdev * z``, gives them the NES utilities (by rank: the better
    half shares the weight, the utilities sum to zero) and follows the natural gradient: the mean moves by
    ``center_learning_rate * stdev * sum_k u_k z_k`` and each standard deviation is multiplied by
    ``exp(stdev_learning_rate / 2 * sum_k u_k (z_k^2 - 1))``, so it grows along directions where wide samples do
    better and shrinks elsewhere, and stays positive. The defaults are the paper's: ``popsize = 4 + floor(3 log d)``,
    ``center_learning_rate = 1`` and ``stdev_learning_rate = (3 + log d) / (5 sqrt d)`` for ``d`` parameters.
    Linear in the number of parameters per candidate, it scales to large policies. Names as EvoTorch's ``SNES``
    (its ``stdev_learning_rate`` is absolute here: EvoTorch's ``scale_learning_rate=True`` multiplies it by the
    default).

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param popsize: Candidates per round (per batch with ``num_interactions``); None for ``4 + floor(3 log d)``.
    :param pop_size: The same as ``popsize``, as the other lit_sb3 methods name it (give one of the two).
    :param center_learning_rate: Float or schedule for the step size of the mean (eta_mu).
    :param stdev_learning_rate: Step size of the standard deviation (eta_sigma); None for ``(3 + log d) / (5 sqrt d)``.
    :param stdev_init: Initial standard deviation, one number or one per parameter (default 0.1 unless
        ``radius_init`` is given).
    :param radius_init: Initial norm of the standard deviation vector, instead of ``stdev_init``.
    :param ranking: Fitness shaping: ``"nes"`` (the paper's utilities), or ``"centered"``, ``"linear"``,
        ``"normalized"`` or ``"raw"``, whose values are then centred and scaled to a sum of absolute values of one.
    :param num_interactions: The env steps a round's candidates must take in total before the update (more batches
        are sampled until they do), or None for rounds of one batch.
    :param popsize_max: The number of candidates at which a round stops growing, or None for no bound.
    :param zero_policy: Whether the policy (the mean) starts from all-zero weights.
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
        popsize: int | None = None,
        pop_size: int | None = None,
        center_learning_rate: float | Schedule = 1.0,
        stdev_learning_rate: float | None = None,
        stdev_init: float | np.ndarray | None = None,
        radius_init: float | None = None,
        ranking: Ranking | bool = "nes",
        num_interactions: int | None = None,
        popsize_max: int | None = None,
        zero_policy: bool = True,
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
        super().__init__(
            policy,
            env,
            popsize=popsize,
            pop_size=pop_size,
            center_learning_rate=center_learning_rate,
            stdev_learning_rate=stdev_learning_rate,
            stdev_init=stdev_init,
            radius_init=radius_init,
            ranking=ranking,
            num_interactions=num_interactions,
            popsize_max=popsize_max,
            zero_policy=zero_policy,
            alive_bonus_offset=alive_bonus_offset,
            n_eval_episodes=n_eval_episodes,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            seed=seed,
            verbose=verbose,
            device=device,
        )
        #: Standard deviation of every parameter (set by _setup_model unless load() restored it).
        self.stdev: np.ndarray | None = None
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.stdev is None:
            self.stdev = initial_stdev(self.stdev_init, self.radius_init, self.n_params)

    def _stdev_learning_rate(self) -> float:
        if self.stdev_learning_rate is not None:
            return self.stdev_learning_rate
        return (3.0 + math.log(self.n_params)) / (5.0 * math.sqrt(self.n_params))

    def _sample_candidates(self) -> np.ndarray:
        assert self._rng is not None and self.stdev is not None
        # x_k = mean + stdev * z_k,  z_k ~ N(0, I)
        return self._centre() + self.stdev * self._rng.standard_normal((self.pop_size, self.n_params))

    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        stdev = self.stdev
        assert stdev is not None
        mean = self._centre()
        utilities = self._utilities(returns)
        local = (candidates - mean) / stdev  # z_k
        # grad_mean = sum_k u_k z_k,  grad_stdev = sum_k u_k (z_k^2 - 1)
        mean_gradient = utilities @ local
        stdev_gradient = utilities @ (local**2 - 1.0)
        # mean <- mean + eta_mu * stdev * grad_mean
        center_learning_rate = self._center_learning_rate()
        self.policy.load_from_vector(mean + center_learning_rate * stdev * mean_gradient)
        # stdev <- stdev * exp(eta_sigma / 2 * grad_stdev)
        stdev_learning_rate = self._stdev_learning_rate()
        self.stdev = stdev * np.exp(stdev_learning_rate / 2.0 * stdev_gradient)
        return {
            "train/learning_rate": center_learning_rate,
            "train/stdev_learning_rate": stdev_learning_rate,
            "train/stdev": float(self.stdev.mean()),
            "train/pop_size": float(len(candidates)),
            "rollout/return_std": standard_deviation(returns),
        }


class XNES(NaturalEvolutionStrategy):
    """
    Exponential Natural Evolution Strategies: T. Glasmachers, T. Schaul, Y. Sun, D. Wierstra and J. Schmidhuber,
    "Exponential Natural Evolution Strategies", GECCO 2010; the utilities of D. Wierstra et al., "Natural Evolution
    Strategies", JMLR 15, 2014.

    The search distribution is a Gaussian with a full covariance ``A A^T`` around the policy weights, ``A`` being
    the paper's ``sigma * B`` (``sigma = |det A|^(1/d)`` its scale, ``B`` its shape). Each round samples
    ``popsize`` candidates ``mean + A z`` and follows the natural gradient in the local coordinates ``z``, with the
    NES utilities: ``G_delta = sum_k u_k z_k`` moves the mean by ``center_learning_rate * A G_delta``, and
    ``G_M = sum_k u_k (z_k z_k^T - I)``, split into its trace part ``G_sigma = tr(G_M) / d`` (the scale) and the
    rest ``G_B = G_M - G_sigma I`` (the shape), multiplies ``A`` by the matrix exponential
    ``expm(stdev_learning_rate / 2 * G_sigma I + shape_learning_rate / 2 * G_B)``, which keeps the covariance
    positive definite. The defaults are the paper's: ``popsize = 4 + floor(3 log d)``, ``center_learning_rate = 1``
    and ``stdev_learning_rate = shape_learning_rate = 3 (3 + log d) / (5 d sqrt d)`` for ``d`` parameters.

    Learning the full covariance makes XNES invariant to linear transformations of the parameters, which pays
    where they are correlated, at ``O(d^2)`` memory and ``O(d^3)`` time per round (a matrix exponential and a
    solve): fine for linear policies of up to a few hundred parameters; above that, use :class:`SNES` or
    :class:`~lit_sb3.population.CMAES` with ``CMA_diagonal``. Names as EvoTorch's ``XNES`` (with one
    ``stdev_learning_rate`` for the whole of ``G_M`` unless ``shape_learning_rate`` is given; absolute here).

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param popsize: Candidates per round (per batch with ``num_interactions``); None for ``4 + floor(3 log d)``.
    :param pop_size: The same as ``popsize``, as the other lit_sb3 methods name it (give one of the two).
    :param center_learning_rate: Float or schedule for the step size of the mean (eta_mu).
    :param stdev_learning_rate: Step size of the scale (eta_sigma); None for ``3 (3 + log d) / (5 d sqrt d)``.
    :param shape_learning_rate: Step size of the shape (eta_B); None for ``stdev_learning_rate``'s value.
    :param stdev_init: Initial standard deviation, one number or one per parameter (``A`` starts diagonal;
        default 0.1 unless ``radius_init`` is given).
    :param radius_init: Initial norm of the standard deviation vector, instead of ``stdev_init``.
    :param ranking: Fitness shaping: ``"nes"`` (the paper's utilities), or ``"centered"``, ``"linear"``,
        ``"normalized"`` or ``"raw"``, whose values are then centred and scaled to a sum of absolute values of one.
    :param num_interactions: The env steps a round's candidates must take in total before the update (more batches
        are sampled until they do), or None for rounds of one batch.
    :param popsize_max: The number of candidates at which a round stops growing, or None for no bound.
    :param zero_policy: Whether the policy (the mean) starts from all-zero weights.
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
        popsize: int | None = None,
        pop_size: int | None = None,
        center_learning_rate: float | Schedule = 1.0,
        stdev_learning_rate: float | None = None,
        shape_learning_rate: float | None = None,
        stdev_init: float | np.ndarray | None = None,
        radius_init: float | None = None,
        ranking: Ranking | bool = "nes",
        num_interactions: int | None = None,
        popsize_max: int | None = None,
        zero_policy: bool = True,
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
        if shape_learning_rate is not None:
            check_scale("shape_learning_rate", shape_learning_rate, allow_zero=True)
        super().__init__(
            policy,
            env,
            popsize=popsize,
            pop_size=pop_size,
            center_learning_rate=center_learning_rate,
            stdev_learning_rate=stdev_learning_rate,
            stdev_init=stdev_init,
            radius_init=radius_init,
            ranking=ranking,
            num_interactions=num_interactions,
            popsize_max=popsize_max,
            zero_policy=zero_policy,
            alive_bonus_offset=alive_bonus_offset,
            n_eval_episodes=n_eval_episodes,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            seed=seed,
            verbose=verbose,
            device=device,
        )
        self.shape_learning_rate = shape_learning_rate
        #: The factor ``A`` of the covariance ``A A^T`` (set by _setup_model unless load() restored it).
        self.covariance_factor: np.ndarray | None = None
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.covariance_factor is None:
            self.covariance_factor = np.diag(initial_stdev(self.stdev_init, self.radius_init, self.n_params))

    def _learning_rates(self) -> tuple[float, float]:
        """:return: The step sizes of the scale and of the shape (eta_sigma, eta_B)."""
        d = self.n_params
        default = 3.0 * (3.0 + math.log(d)) / (5.0 * d * math.sqrt(d))
        stdev_rate = self.stdev_learning_rate if self.stdev_learning_rate is not None else default
        return stdev_rate, self.shape_learning_rate if self.shape_learning_rate is not None else stdev_rate

    @property
    def scale(self) -> float:
        """The paper's sigma: ``|det A|^(1/d)``, the geometric mean of the standard deviations along the axes."""
        assert self.covariance_factor is not None
        return math.exp(np.linalg.slogdet(self.covariance_factor)[1] / self.n_params)

    def _sample_candidates(self) -> np.ndarray:
        assert self._rng is not None and self.covariance_factor is not None
        # x_k = mean + A z_k,  z_k ~ N(0, I)
        local = self._rng.standard_normal((self.pop_size, self.n_params))
        return self._centre() + local @ self.covariance_factor.T

    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        factor = self.covariance_factor
        assert factor is not None
        d = self.n_params
        mean = self._centre()
        utilities = self._utilities(returns)
        local = np.linalg.solve(factor, (candidates - mean).T).T  # z_k = A^-1 (x_k - mean)
        # G_delta = sum_k u_k z_k,  G_M = sum_k u_k (z_k z_k^T - I)
        delta_gradient = utilities @ local
        m_gradient = (local.T * utilities) @ local - utilities.sum() * np.eye(d)
        # G_sigma = tr(G_M) / d,  G_B = G_M - G_sigma I
        sigma_gradient = np.trace(m_gradient) / d
        b_gradient = m_gradient - sigma_gradient * np.eye(d)
        # mean <- mean + eta_mu * A G_delta  (A = sigma B)
        center_learning_rate = self._center_learning_rate()
        self.policy.load_from_vector(mean + center_learning_rate * (factor @ delta_gradient))
        # A <- A expm(eta_sigma / 2 * G_sigma I + eta_B / 2 * G_B)  (sigma <- sigma exp(eta_sigma / 2 * G_sigma) and
        # B <- B expm(eta_B / 2 * G_B) at once: the identity commutes with G_B)
        stdev_rate, shape_rate = self._learning_rates()
        exponent = stdev_rate / 2.0 * sigma_gradient * np.eye(d) + shape_rate / 2.0 * b_gradient
        exponent = (exponent + exponent.T) / 2.0  # symmetric in exact arithmetic: keep it so in floating point
        self.covariance_factor = factor @ th.linalg.matrix_exp(th.from_numpy(exponent)).numpy()
        return {
            "train/learning_rate": center_learning_rate,
            "train/stdev_learning_rate": stdev_rate,
            "train/stdev": self.scale,
            "train/pop_size": float(len(candidates)),
            "rollout/return_std": standard_deviation(returns),
        }
