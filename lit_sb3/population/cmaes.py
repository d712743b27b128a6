"""CMA-ES through pycma's ``cma.CMAEvolutionStrategy`` (Hansen and Ostermeier, 2001)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv

from lit_sb3.checks import check_finite_number, check_non_negative_int, check_scale, check_settings
from lit_sb3.population.base import PopulationAlgorithm, check_population_size
from lit_sb3.population.ranking import standard_deviation

with warnings.catch_warnings():
    # cma warns at import when matplotlib is missing; its plots are not used here.
    warnings.filterwarnings("ignore", message="Could not import matplotlib")
    import cma

#: Spawn key of the random stream cma samples from (after the base class's streams).
STRATEGY_STREAM = 2
#: cma options set from the constructor's arguments, not through ``cma_options``.
RESERVED_OPTIONS = {"popsize": "pop_size", "popsize_factor": "pop_size", "randn": "seed", "seed": "seed"}


class GeneratorNormal:
    """
    ``randn(*shape)`` as cma calls it, drawn from a numpy ``Generator``. The generator lives in the strategy's
    options, so it is pickled with the strategy and sampling does not touch numpy's global random state.

    :param generator: The generator to draw from.
    """

    def __init__(self, generator: np.random.Generator) -> None:
        self.generator = generator

    def __call__(self, *shape: int) -> np.ndarray:
        return self.generator.standard_normal(shape)


class CMAES(PopulationAlgorithm):
    """
    Covariance Matrix Adaptation Evolution Strategy, run by ``cma.CMAEvolutionStrategy`` (ask/tell on the negated
    returns). The policy holds the distribution mean (cma's ``result.xfavorite``: the mean in the space of the
    parameters, also with cma's bounds or variable transformations). Setting other parameters
    (``set_parameters``) starts a new strategy around them, with ``sigma0`` and the current population size.

    The full covariance matrix costs ``O(n_params**2)`` memory and time per round; for large policies use the
    separable (diagonal) variant: ``cma_options={"CMA_diagonal": True}``. When cma reports that the strategy
    stopped (its termination criteria, such as a flat fitness or a tiny step size), and ``restarts`` are left, a
    new strategy starts with ``sigma0`` and the population size multiplied by ``incpopsize`` (rounded), as in
    IPOP-CMA-ES (Auger and Hansen, 2005), but from the current mean where ``cma.fmin`` restarts from ``x0``. The
    strategy is saved with the model through pickling, which cma supports.

    :param policy: The policy to train: "LinearPolicy", "MlpPolicy" or a policy class.
    :param env: The environment to train on (if registered in Gymnasium, can be str).
    :param sigma0: Initial step size (standard deviation of every parameter).
    :param pop_size: Candidates per round (at least 2); None for cma's default, ``4 + 3 * log(n_params)``.
    :param restarts: How many times a stopped strategy may be restarted with a larger population.
    :param incpopsize: Factor of the population size at each restart.
    :param cma_options: More options of ``cma.CMAEvolutionStrategy`` (see ``cma.CMAOptions()``).
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
        sigma0: float = 0.5,
        pop_size: int | None = 16,
        restarts: int = 0,
        incpopsize: float = 2.0,
        cma_options: dict[str, Any] | None = None,
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
        check_scale("sigma0", sigma0)
        if pop_size is not None:
            check_population_size(pop_size)
        check_non_negative_int("restarts", restarts)
        if not check_finite_number("incpopsize", incpopsize) >= 1.0:
            raise ValueError(f"incpopsize must be finite and >= 1, got {incpopsize}")
        options = check_settings("cma_options", cma_options)
        for option, argument in RESERVED_OPTIONS.items():
            if option in options:
                raise ValueError(f"cma_options must not set {option!r}: use the {argument} argument")
        super().__init__(
            policy,
            env,
            learning_rate=0.0,  # CMA-ES adapts its own step size
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
        self.sigma0 = sigma0
        self.initial_pop_size = pop_size
        self.restarts = restarts
        self.incpopsize = incpopsize
        self.cma_options = options
        self.n_restarts = 0
        #: The cma strategy (set by _setup_model unless load() restored it).
        self.strategy: cma.CMAEvolutionStrategy | None = None
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.strategy is None:
            randn = GeneratorNormal(np.random.default_rng(self._seed_sequence(STRATEGY_STREAM)))
            self.strategy = self._new_strategy(self.policy.parameters_to_vector(), self.initial_pop_size, randn)

    def _new_strategy(self, mean: np.ndarray, pop_size: int | None, randn: GeneratorNormal) -> cma.CMAEvolutionStrategy:
        options = {
            "verbose": -9,  # cma's own output is off unless cma_options turn it on
            "verb_disp": 0,
            "verb_log": 0,
            "verb_time": False,
            "signals_filename": "",  # no signals file is read each round
            **self.cma_options,
            "randn": randn,
            "seed": np.nan,  # sampling goes through randn: leave numpy's global random state alone
        }
        if pop_size is not None:
            options["popsize"] = pop_size
        with warnings.catch_warnings():
            # cma only warns about an option it cannot evaluate and runs with the string until a round fails on it.
            warnings.filterwarnings("error", message=".*is not a safe string", category=UserWarning)
            try:
                return cma.CMAEvolutionStrategy(mean.astype(np.float64), self.sigma0, options)
            except UserWarning as error:
                raise ValueError(f"cma_options: {error}") from None

    def _parameters_set(self) -> None:
        # Other weights than the strategy's mean: a new strategy starts there.
        strategy = self.strategy
        weights = self.policy.parameters_to_vector()
        if strategy is not None and not np.array_equal(weights, self._strategy_mean(strategy).astype(np.float32)):
            self.strategy = self._new_strategy(weights, strategy.popsize, strategy.opts["randn"])

    @staticmethod
    def _strategy_mean(strategy: cma.CMAEvolutionStrategy) -> np.ndarray:
        """:return: The mean of ``strategy`` in parameter space."""
        return np.asarray(strategy.result.xfavorite, dtype=np.float64)

    @property
    def pop_size(self) -> int:
        """Candidates per round of the current strategy (grows with restarts)."""
        assert self.strategy is not None
        return int(self.strategy.popsize)

    def _sample_candidates(self) -> np.ndarray:
        assert self.strategy is not None
        return np.array(self.strategy.ask(), dtype=np.float64)

    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        strategy = self.strategy
        assert strategy is not None
        strategy.tell(list(candidates), (-returns).tolist())  # cma minimises
        randn = strategy.opts["randn"]
        if getattr(strategy.sm, "randn", randn) is not randn:
            # When CMA_diagonal runs out, cma replaces its sampler with one drawing from numpy's global generator.
            strategy.sm.randn = randn
        stop_reasons = sorted(strategy.stop())
        if stop_reasons and self.n_restarts < self.restarts:
            self.n_restarts += 1
            pop_size = round(strategy.popsize * self.incpopsize)
            mean = self._strategy_mean(strategy)
            strategy = self.strategy = self._new_strategy(mean, pop_size, strategy.opts["randn"])
            stop_reasons = []
        elif stop_reasons:
            warnings.warn(
                f"cma's termination criteria {', '.join(stop_reasons)} are met and no restart is left "
                f"(restarts={self.restarts}): the strategy keeps going; more restarts (or other cma_options) "
                "would start a new one",
                UserWarning,
                stacklevel=3,
            )
        self.policy.load_from_vector(self._strategy_mean(strategy))
        return {  # the strategy of the next round
            "train/stopped": float(bool(stop_reasons)),
            "train/sigma": float(strategy.sigma),
            "train/pop_size": float(strategy.popsize),
            "train/restarts": float(self.n_restarts),
            "train/best_return": float(returns.max()),
            "rollout/return_std": standard_deviation(returns),
        }
