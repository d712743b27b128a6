"""Policy Gradients with Parameter-based Exploration (Sehnke et al., 2010) with the ClipUp optimiser."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.common.utils import update_learning_rate

from lit_sb3.checks import check_scale, check_settings, check_unit_interval
from lit_sb3.population.base import PopulationAlgorithm, check_interaction_budget, checked_schedule
from lit_sb3.population.distribution import (
    check_budget_bound,
    check_stdev_init,
    initial_stdev,
    population_size,
)
from lit_sb3.population.optimizers import ClipUp, check_optimizer_settings, resolve_optimizer, step_along
from lit_sb3.population.ranking import Ranking, check_ranking, shape_returns, standard_deviation

#: Candidates per round unless ``popsize`` says otherwise.
DEFAULT_POPSIZE = 16
#: EvoTorch's and pgpelib's ``optimizer_config`` keys, by optimiser, and the torch keyword each one sets.
CONFIG_KEYS: dict[type[th.optim.Optimizer], dict[str, str]] = {
    ClipUp: {"max_speed": "max_speed", "momentum": "momentum"},
    th.optim.Adam: {"beta1": "betas", "beta2": "betas", "epsilon": "eps", "amsgrad": "amsgrad"},
    th.optim.SGD: {"momentum": "momentum", "dampening": "dampening", "nesterov": "nesterov"},
}


def optimizer_kwargs(
    optimizer: type[th.optim.Optimizer],
    max_speed: float | None,
    momentum: float | None,
    optimizer_config: dict[str, Any] | None,
) -> dict[str, Any]:
    """
    :param optimizer: The optimiser class.
    :param max_speed: ClipUp's maximum speed, if given.
    :param momentum: The momentum of ClipUp or SGD, if given.
    :param optimizer_config: EvoTorch's or pgpelib's ``optimizer_config``: ``max_speed`` and ``momentum`` (ClipUp),
        ``beta1``, ``beta2``, ``epsilon`` and ``amsgrad`` (Adam), ``momentum``, ``dampening`` and ``nesterov``
        (SGD); for another torch optimiser class, its own keyword arguments.
    :return: The optimiser's keyword arguments, besides the parameters and ``lr``.
    :raises TypeError: if ``optimizer_config`` is not a dict of settings by name.
    :raises ValueError: for a setting given twice, one the optimiser does not take, ``lr`` (the centre's learning
        rate sets it), or ``beta1`` without ``beta2``.
    """
    config = check_settings("optimizer_config", optimizer_config)
    for name, value in (("max_speed", max_speed), ("momentum", momentum)):
        if value is None:
            continue
        if name in config:
            raise ValueError(f"{name} is given twice: as an argument and in optimizer_config")
        config[name] = value
    if "lr" in config:
        raise ValueError("optimizer_config must not set 'lr': use center_learning_rate")
    keys = CONFIG_KEYS.get(optimizer)
    if keys is None:
        return config
    unknown = sorted(set(config) - set(keys))
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a setting of the {optimizer.__name__} "
            f"optimizer (its settings: {', '.join(keys)})"
        )
    kwargs = {keys[name]: value for name, value in config.items() if keys[name] != "betas"}
    if "beta1" in config or "beta2" in config:
        if not ("beta1" in config and "beta2" in config):
            raise ValueError("optimizer_config must give beta1 and beta2 together (Adam's betas)")
        kwargs["betas"] = (config["beta1"], config["beta2"])
    return kwargs


class PGPE(PopulationAlgorithm):
    """
    Policy Gradients with Parameter-based Exploration, the symmetric-sampling variant, with the ClipUp optimiser.

    References: F. Sehnke, C. Osendorfer, T. Rückstiess, A. Graves, J. Peters and J. Schmidhuber, "Parameter-exploring
    policy gradients", Neural Networks 23(4), 2010; N. E. Toklu, P. Liskowski and R. K. Srivastava, "ClipUp: A Simple
    and Powerful Optimizer for Distribution-based Policy Evolution", PPSN 2020 (https://arxiv.org/abs/2008.02387);
    T. Salimans et al., "Evolution Strategies as a Scalable Alternative to Reinforcement Learning", 2017 (centred
    ranks).

    The search distribution is a Gaussian with a per-parameter standard deviation around the policy weights (its
    centre). Each round samples ``popsize / 2`` antithetic pairs, ``centre +- stdev * z``, ranks their returns
    (centred ranks by default), and estimates the gradient of the expected return with respect to the centre and to
    the standard deviation. The optimiser (ClipUp by default; ``"adam"``, ``"sgd"`` or a torch optimiser class) steps
    the centre; the standard deviation follows its own gradient with ``stdev_learning_rate``, each value changing by
    at most ``stdev_max_change`` of itself per round. ClipUp takes normalised steps of length
    ``center_learning_rate``, with momentum, and clips the velocity to ``max_speed``: steps that depend on neither
    the scale of the returns nor the number of parameters. The ClipUp paper's rule of thumb:
    ``center_learning_rate = max_speed / 2`` and ``radius_init = 15 * max_speed``.

    The names are EvoTorch's and pgpelib's: ``popsize``, ``center_learning_rate``, ``stdev_learning_rate``,
    ``stdev_init`` or ``radius_init``, ``stdev_max_change``, ``optimizer``, ``optimizer_config``,
    ``num_interactions``, ``popsize_max``; ``ranking`` is EvoTorch's ``ranking_method`` (True and False, pgpelib's
    ``solution_ranking``, mean ``"centered"`` and ``"raw"``). EvoTorch's Humanoid recipe (its script
    ``examples/scripts/rl_gym.py``), for example::

        PGPE("LinearPolicy", VecNormalize(make_vec_env("Humanoid-v5"), norm_reward=False), popsize=200,
             num_interactions=150_000, popsize_max=3200, center_learning_rate=0.01125, stdev_learning_rate=0.1,
             radius_init=0.27, max_speed=0.015, alive_bonus_offset=-5.0)

    With ``num_interactions``, a round keeps sampling batches of ``popsize`` candidates until they have taken that
    many env steps in total (or number ``popsize_max``): where episodes end early, the gradient is still estimated
    from enough experience (EvoTorch's and pgpelib's adaptive population size).

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param popsize: Candidates per round (per batch with ``num_interactions``), an even number (default 16).
    :param pop_size: The same as ``popsize``, as the other lit_sb3 methods name it (give one of the two).
    :param center_learning_rate: Float or schedule for the optimiser's step size (ClipUp's alpha).
    :param stdev_learning_rate: Step size of the standard deviation along its gradient (0 keeps it fixed).
    :param stdev_init: Initial standard deviation, one number or one per parameter (default 0.1 unless
        ``radius_init`` is given).
    :param radius_init: Initial norm of the standard deviation vector (every parameter gets
        ``radius_init / sqrt(n_params)``), instead of ``stdev_init``.
    :param stdev_max_change: Largest relative change of each standard deviation in one round, in (0, 1); None for
        no bound.
    :param optimizer: ``"clipup"``, ``"adam"``, ``"sgd"`` or a torch optimiser class, for the centre.
    :param max_speed: ClipUp's largest velocity norm; None for twice ``center_learning_rate``.
    :param momentum: Momentum of ClipUp (default 0.9) or SGD (default 0).
    :param optimizer_config: More optimiser settings, EvoTorch's and pgpelib's ``optimizer_config``: ``beta1``,
        ``beta2``, ``epsilon`` and ``amsgrad`` for Adam; ``dampening`` and ``nesterov`` for SGD; ``max_speed`` and
        ``momentum`` may be given here instead.
    :param ranking: Fitness shaping: ``"centered"``, ``"linear"``, ``"nes"``, ``"normalized"`` or ``"raw"``.
    :param num_interactions: The env steps a round's candidates must take in total before the update (more batches
        are sampled until they do), or None for rounds of one batch.
    :param popsize_max: The number of candidates at which a round stops growing, or None for no bound.
    :param zero_policy: Whether the policy (the centre) starts from all-zero weights.
    :param alive_bonus_offset: Constant added to the reward at each step, used to cancel out alive bonuses
        (EvoTorch's ``decrease_rewards_by`` with the opposite sign).
    :param n_eval_episodes: Number of episodes to evaluate each candidate.
    :param policy_kwargs: Keyword arguments to pass to the policy on creation.
    :param stats_window_size: How many recent episodes ``rollout/ep_rew_mean`` and ``ep_len_mean`` average.
    :param tensorboard_log: The log location for TensorBoard (if None, no logging).
    :param seed: Random seed for the training.
    :param verbose: Verbosity level: 0 no output, 1 info, 2 debug.
    :param device: Torch device of the policy.
    :param _init_setup_model: Whether or not to build the network at the creation of the instance.
    """

    optimizer: th.optim.Optimizer

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        *,
        popsize: int | None = None,
        pop_size: int | None = None,
        center_learning_rate: float | Schedule = 0.075,
        stdev_learning_rate: float = 0.1,
        stdev_init: float | np.ndarray | None = None,
        radius_init: float | None = None,
        stdev_max_change: float | None = 0.2,
        optimizer: str | type[th.optim.Optimizer] = "clipup",
        max_speed: float | None = None,
        momentum: float | None = None,
        optimizer_config: dict[str, Any] | None = None,
        ranking: Ranking | bool = "centered",
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
        resolved_pop_size = population_size(popsize, pop_size, even=True) or DEFAULT_POPSIZE
        check_interaction_budget(num_interactions, popsize_max)
        check_budget_bound(popsize_max, resolved_pop_size)
        learning_rate = checked_schedule("center_learning_rate", center_learning_rate, allow_zero=True)
        check_scale("stdev_learning_rate", stdev_learning_rate, allow_zero=True)
        check_stdev_init(stdev_init, radius_init)
        if stdev_max_change is not None:
            check_unit_interval("stdev_max_change", stdev_max_change, open_low=True, open_high=True)
        optimizer_class = resolve_optimizer("optimizer", optimizer)
        if max_speed is not None and optimizer_class is not ClipUp:
            raise ValueError(f"max_speed is a setting of ClipUp, not of {optimizer_class.__name__}")
        kwargs = optimizer_kwargs(optimizer_class, max_speed, momentum, optimizer_config)
        check_optimizer_settings(optimizer_class, {"lr": learning_rate(1.0), **kwargs})
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
        self.pop_size = resolved_pop_size
        self.ranking = ranking_name
        self.stdev_learning_rate = float(stdev_learning_rate)
        self.stdev_init = stdev_init
        self.radius_init = radius_init
        self.stdev_max_change = stdev_max_change
        self.optimizer_class = optimizer_class
        self.optimizer_kwargs = kwargs
        #: Standard deviation of every parameter (set by _setup_model unless load() restored it).
        self.stdev: np.ndarray | None = None
        if _init_setup_model:
            self._setup_model()

    @property
    def popsize(self) -> int:
        """Candidates per round (per batch with ``num_interactions``): ``pop_size`` under EvoTorch's name."""
        return self.pop_size

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.stdev is None:
            self.stdev = initial_stdev(self.stdev_init, self.radius_init, self.n_params)
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self.policy.parameters(), lr=self.lr_schedule(self._current_progress_remaining), **self.optimizer_kwargs
        )

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "optimizer"], []

    def _sample_candidates(self) -> np.ndarray:
        assert self._rng is not None and self.stdev is not None
        # s_i = stdev * z_i with z_i ~ N(0, I); candidates 2i and 2i + 1 are centre + s_i and centre - s_i
        scaled_noise = self.stdev * self._rng.standard_normal((self.pop_size // 2, self.n_params))
        centre = self._centre()
        candidates = np.empty((self.pop_size, self.n_params))
        candidates[0::2] = centre + scaled_noise
        candidates[1::2] = centre - scaled_noise
        return candidates

    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        stdev = self.stdev
        assert stdev is not None
        # The pairs of every batch of the round, (centre + s_i, centre - s_i), and their shaped returns u_i+, u_i-.
        shaped = shape_returns(returns, self.ranking)
        plus_shaped, minus_shaped = shaped[0::2], shaped[1::2]
        scaled_noise = (candidates[0::2] - candidates[1::2]) / 2.0
        n_pairs = len(scaled_noise)
        # grad_centre = 1/P sum_i (u_i+ - u_i-) / 2 * s_i
        centre_gradient = ((plus_shaped - minus_shaped) / 2.0) @ scaled_noise / n_pairs
        # grad_stdev = 1/P sum_i ((u_i+ + u_i-) / 2 - b) * (s_i^2 - stdev^2) / stdev,  b = mean(u)
        baseline = shaped.mean()
        stdev_gradient = ((plus_shaped + minus_shaped) / 2.0 - baseline) @ ((scaled_noise**2 - stdev**2) / stdev)
        stdev_gradient /= n_pairs
        # stdev <- clip(stdev + eta_stdev * grad_stdev, (1 - c) stdev, (1 + c) stdev),  c = stdev_max_change
        new_stdev = stdev + self.stdev_learning_rate * stdev_gradient
        if self.stdev_max_change is not None:
            new_stdev = np.clip(new_stdev, (1.0 - self.stdev_max_change) * stdev, (1.0 + self.stdev_max_change) * stdev)
        elif not np.all(new_stdev > 0.0):  # raised before the centre moves: the round can be told again
            raise ValueError(
                f"the standard deviation of {np.count_nonzero(new_stdev <= 0.0)} parameters reached zero or below: "
                "bound its change with stdev_max_change or lower stdev_learning_rate"
            )
        # centre <- centre + optimizer(grad_centre)  (ClipUp: v <- clip(m v + alpha g / |g|, v_max), centre += v)
        learning_rate = self._scheduled("center_learning_rate", self.lr_schedule, allow_zero=True)
        update_learning_rate(self.optimizer, learning_rate)
        step_along(self.optimizer, self.policy.parameters(), centre_gradient)
        self.stdev = new_stdev
        statistics = {
            "train/learning_rate": learning_rate,
            "train/stdev": float(new_stdev.mean()),
            "train/gradient_norm": float(np.linalg.norm(centre_gradient)),
            "train/pop_size": float(len(candidates)),
            "rollout/return_std": standard_deviation(returns),
        }
        if isinstance(self.optimizer, ClipUp):
            statistics["train/speed"] = self.optimizer.speed()
        return statistics
