"""OpenAI Evolution Strategies (Salimans et al., 2017): https://arxiv.org/abs/1703.03864"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.common.utils import update_learning_rate

from lit_sb3.checks import check_scale, check_settings
from lit_sb3.population.base import PopulationAlgorithm, check_population_size, checked_schedule
from lit_sb3.population.optimizers import ClipUp, check_optimizer_settings, resolve_optimizer, step_along
from lit_sb3.population.ranking import centered_ranks, standard_deviation

__all__ = ["ES", "centered_ranks"]


class ES(PopulationAlgorithm):
    """
    OpenAI Evolution Strategies: https://arxiv.org/abs/1703.03864

    Each round evaluates ``pop_size / 2`` antithetic pairs of Gaussian perturbations of the policy weights,
    ``weights +- sigma * noise``. The returns are replaced by their centred ranks, the gradient of the smoothed
    objective is estimated from them, and a torch optimiser (Adam by default; ``th.optim.SGD`` with
    ``optimizer_kwargs={"momentum": 0.9}`` for plain SGD with momentum; ``"clipup"`` for
    :class:`~lit_sb3.population.optimizers.ClipUp`) steps the policy parameters along it, with L2 weight decay.
    Ranks make the update independent of the scale of the returns; Adam makes the step length mostly independent
    of ``sigma`` and of the number of parameters; ClipUp adds ``learning_rate`` times the normalised gradient to
    a velocity with momentum and steps by the velocity, whose norm it bounds by ``max_speed``
    (``optimizer_kwargs={"max_speed": ...}``, by default twice the learning rate).

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param pop_size: Candidates per round (an even number: antithetic pairs).
    :param sigma: Float or schedule for the standard deviation of the perturbations.
    :param learning_rate: Float or schedule for the optimiser's learning rate.
    :param weight_decay: L2 penalty coefficient, passed to the optimiser: it adds ``weight_decay * weights`` to the
        paper's gradient estimate, which is divided by ``sigma``. OpenAI's code leaves that division out, so its
        ``l2coeff`` is ``weight_decay * sigma`` here (its 0.005 at ``sigma=0.02`` is ``weight_decay=0.25``).
    :param optimizer_class: The torch optimiser class, or its name: ``"adam"``, ``"sgd"`` or ``"clipup"``.
    :param optimizer_kwargs: More keyword arguments for the optimiser; by default ``betas=(0.5, 0.999)`` for Adam
        (``momentum`` and ``max_speed`` for ClipUp, whose defaults are 0.9 and twice the learning rate).
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

    optimizer: th.optim.Optimizer

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        *,
        pop_size: int = 16,
        sigma: float | Schedule = 0.1,
        learning_rate: float | Schedule = 0.1,
        weight_decay: float = 0.005,
        optimizer_class: type[th.optim.Optimizer] | str = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
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
        check_population_size(pop_size, even=True)
        sigma_schedule = checked_schedule("sigma", sigma)
        learning_rate_schedule = checked_schedule("learning_rate", learning_rate, allow_zero=True)
        optimizer_class = resolve_optimizer("optimizer_class", optimizer_class)
        check_scale("weight_decay", weight_decay, allow_zero=True)
        settings = check_settings("optimizer_kwargs", optimizer_kwargs)
        for key, argument in (("lr", "learning_rate"), ("weight_decay", "weight_decay")):
            if key in settings:
                raise ValueError(f"optimizer_kwargs must not set {key!r}: use the {argument} argument")
        if optimizer_kwargs is None:
            # A population gradient estimate is already an average: Adam needs only a short first-moment memory.
            settings = {"betas": (0.5, 0.999)} if optimizer_class is th.optim.Adam else {}
        check_optimizer_settings(
            optimizer_class, {"lr": learning_rate_schedule(1.0), "weight_decay": weight_decay, **settings}
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
        self.pop_size = pop_size
        self.sigma = sigma
        self.sigma_schedule = sigma_schedule
        self.weight_decay = weight_decay
        self.optimizer_class = optimizer_class
        self.optimizer_kwargs = settings
        # The noise of the pending population's pairs, and the sigma it was scaled by.
        self._noise: np.ndarray | None = None
        self._pending_sigma = 0.0
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self.policy.parameters(),
            lr=self.lr_schedule(self._current_progress_remaining),
            weight_decay=self.weight_decay,
            **self.optimizer_kwargs,
        )

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "optimizer"], []

    def _sample_candidates(self) -> np.ndarray:
        self._pending_sigma = self._scheduled("sigma", self.sigma_schedule)
        self._noise, candidates = self._antithetic_population(self.pop_size // 2, self._pending_sigma)
        return candidates

    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        assert self._noise is not None
        shaped = centered_ranks(returns)
        n_pairs = self.pop_size // 2
        gradient = (shaped[:n_pairs] - shaped[n_pairs:]) @ self._noise / (self.pop_size * self._pending_sigma)
        learning_rate = self._scheduled("learning_rate", self.lr_schedule, allow_zero=True)
        update_learning_rate(self.optimizer, learning_rate)
        step_along(self.optimizer, self.policy.parameters(), gradient)
        self._noise = None
        statistics = {
            "train/learning_rate": learning_rate,
            "train/sigma": self._pending_sigma,
            "train/gradient_norm": float(np.linalg.norm(gradient)),
            "rollout/return_std": standard_deviation(returns),
        }
        if isinstance(self.optimizer, ClipUp):
            statistics["train/speed"] = self.optimizer.speed()
        return statistics
