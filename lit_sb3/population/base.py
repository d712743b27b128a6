"""The shared base of the population methods: ask/tell as the core, Stable-Baselines3's algorithm interface on it."""

from __future__ import annotations

import io
import pathlib
import sys
import time
import warnings
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Set, ValuesView
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback, ProgressBarCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule, TensorDict
from stable_baselines3.common.utils import FloatSchedule, safe_mean
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3.checks import check_finite_number, check_int, check_positive_int, check_scale
from lit_sb3.policies import LinearPolicy, MlpPolicy
from lit_sb3.vec_env.candidate_eval import CandidateEval, InProcessEval

SelfPopulationAlgorithm = TypeVar("SelfPopulationAlgorithm", bound="PopulationAlgorithm")

#: First spawn keys of the seed sequences derived from the algorithm's seed (subclasses use others).
SAMPLING_STREAM, EVALUATION_STREAM = 0, 1


def check_population_size(pop_size: Any, *, even: bool = False, name: str = "pop_size") -> None:
    """
    :param pop_size: Candidates per round: an int of at least 2 (even with ``even``).
    :param even: Whether the population is made of antithetic pairs.
    :param name: The argument's name, for the message.
    :raises TypeError: if ``pop_size`` is not an int.
    :raises ValueError: if it is too small or odd.
    """
    check_int(name, pop_size)
    if pop_size < 2 or (even and pop_size % 2):
        kind = "an even int (antithetic pairs)" if even else "an int"
        raise ValueError(f"{name} must be {kind} >= 2, got {pop_size}")


def check_interaction_budget(num_interactions: Any, popsize_max: Any) -> None:
    """
    :param num_interactions: Env steps a round must reach before its update, or None.
    :param popsize_max: The number of candidates at which a round stops growing, or None (needs
        ``num_interactions``).
    :raises TypeError: if either is neither an int nor None.
    :raises ValueError: if either is below 1, or ``popsize_max`` is given alone.
    """
    if num_interactions is not None:
        check_positive_int("num_interactions", num_interactions)
    if popsize_max is not None:
        check_positive_int("popsize_max", popsize_max)
        if num_interactions is None:
            raise ValueError("popsize_max bounds the population num_interactions grows: set num_interactions too")


def checked_schedule(name: str, value: float | Schedule, *, allow_zero: bool = False) -> Schedule:
    """
    :param name: Argument name for the message.
    :param value: A constant or a schedule of the remaining progress (1 to 0).
    :param allow_zero: Whether zero is a valid value.
    :return: The schedule, whose value at the start of training was checked with :func:`check_scale`.
    """
    if callable(value):
        schedule = FloatSchedule(value)
        check_scale(name, schedule(1.0), allow_zero=allow_zero)
        return schedule
    return FloatSchedule(check_scale(name, value, allow_zero=allow_zero))


def _one_per_candidate(name: str, values: Iterable[float] | np.ndarray | th.Tensor, pop_size: int) -> np.ndarray:
    """:return: ``values`` (an array, a tensor, a sequence or an iterator) as a float64 array, checked to hold one
    number per candidate."""
    if isinstance(values, Mapping | Set):  # a dict's keys, or no order at all
        raise TypeError(f"{name} must be numbers in the order of ask()'s rows, got a {type(values).__name__}")
    if isinstance(values, th.Tensor):
        values = values.detach().cpu()
    elif isinstance(values, Iterator | ValuesView):  # a generator, a dict's values
        values = list(values)
    try:
        array = np.asarray(values)
    except ValueError as error:  # nested sequences of different lengths
        raise ValueError(f"{name} must have one number per candidate, shape ({pop_size},): {error}") from None
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be numbers, one per candidate, got an array of {array.dtype}")
    array = array.astype(np.float64, copy=False)
    if array.shape != (pop_size,):
        raise ValueError(f"{name} must have one value per candidate, shape ({pop_size},), got {array.shape}")
    return array


def _get_obs_rms(vec_normalize: VecNormalize) -> RunningMeanStd:
    # Population methods take flat observations only: the statistics are one RunningMeanStd, never a dict.
    return cast(RunningMeanStd, vec_normalize.obs_rms)


def _set_obs_rms(vec_normalize: VecNormalize, obs_rms: RunningMeanStd) -> None:
    vec_normalize.obs_rms = obs_rms  # type: ignore[assignment]  # typed as the dict variant by Stable-Baselines3


@dataclass
class ToldBatch:
    """
    A batch of a round that an interaction budget (``num_interactions``) keeps growing: told, not yet used.

    :param candidates: Its candidates (float64), as :meth:`PopulationAlgorithm._sample_candidates` returned them.
    :param returns: One return per candidate.
    :param interactions: The env steps its candidates took, in total.
    :param episodes: Its episodes, as :class:`EvaluatedRound` lists them (none when told through ``tell()``).
    """

    candidates: np.ndarray
    returns: np.ndarray
    interactions: int
    episodes: list[tuple[int, int, float, int]]


@dataclass
class EvaluatedRound:
    """
    The results of an evaluated population, kept until it is told: the model's callbacks see its episodes one at a
    time, and a callback may stop training (or save the model) between two of them.

    :param candidate_returns: One return per candidate of the last batch, as :meth:`PopulationAlgorithm.tell`
        takes them.
    :param episodes: ``(candidate_index, episode_index, episode_return, episode_length)`` of every episode of the
        round (candidate indices count from the round's first batch).
    :param n_reported: How many of ``episodes`` the callbacks have seen.
    :param candidate_interactions: The env steps of each candidate of the last batch, told with the returns when
        the round has an interaction budget.
    """

    candidate_returns: np.ndarray
    episodes: list[tuple[int, int, float, int]]
    n_reported: int = 0
    candidate_interactions: np.ndarray | None = None


class EnvStepProgressBar(ProgressBarCallback):
    """Progress bar counting environment steps: ``on_step`` runs once per finished episode here."""

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self._counted_timesteps = self.model.num_timesteps

    def _on_step(self) -> bool:
        self.pbar.update(self.model.num_timesteps - self._counted_timesteps)
        self._counted_timesteps = self.model.num_timesteps
        return True


class PopulationAlgorithm(BaseAlgorithm):
    """
    A population method with the interface of a Stable-Baselines3 algorithm.

    The core is ask/tell: :meth:`ask` returns the candidate weight matrix (one flat policy parameter vector per
    row) and :meth:`tell` takes one return per candidate and updates the search distribution and the policy, which
    always holds its centre. :meth:`learn` loops ask -> evaluate -> tell, evaluating in this process on the
    model's environment or through an :class:`~lit_sb3.vec_env.AsyncEval`. Without ``learn()``::

        model = CEM("LinearPolicy", "CartPole-v1", seed=0)
        for _ in range(20):
            candidate_weights = model.ask()
            model.tell([my_return(weights) for weights in candidate_weights])

    With an interaction budget (``num_interactions``, for the methods that take one), a round is made of batches:
    after each batch is evaluated, another is sampled from the same distribution while the round's candidates have
    taken fewer than ``num_interactions`` env steps in total and are fewer than ``popsize_max``; the update then
    uses them all. With ask/tell, pass each batch's env steps: ``tell(returns, interactions)`` returns an empty
    dict while the round goes on, and the next ``ask()`` gives the next batch.

    Schedules (learning rate, noise) follow the progress of ``learn()``; with ask/tell alone they keep the value of
    the progress of the last ``learn()`` (1 before any). :meth:`set_parameters` with other weights drops a pending
    population.

    A candidate's return is the mean over its ``n_eval_episodes`` episodes of the episode return plus
    ``alive_bonus_offset`` per step. Episodes are reset with seeds derived from the seed and the round index, so a
    seeded run is the same in-process and with any number of workers, and ``load()`` then ``learn()`` continues it
    exactly. Observations are normalised when the environment is wrapped in ``VecNormalize`` (ARS V2): statistics
    are frozen during a round and merged after it; ``save()`` stores them with the model.

    Callbacks see real episodes: after each round is evaluated, ``on_step`` runs once per episode with
    ``num_timesteps`` advanced by its length and ``self.locals`` holding ``episode_return``, ``episode_length``,
    ``candidate_index``, ``episode_index``, ``candidate_weights``, ``dones`` and ``infos`` (with a Monitor-style
    ``infos[0]["episode"]``). Frequencies of ``EvalCallback`` or ``CheckpointCallback`` therefore count episodes
    (wrap them in ``EveryNTimesteps`` to count steps). A callback returning False stops training at once: the
    round is not told, the policy stays the one the callback judged, and the next ``learn()`` (also after
    ``save()`` and ``load()``) goes on with the round's remaining episodes, then tells it, as an uninterrupted run
    would.

    :param policy: The policy model to use ("LinearPolicy", "MlpPolicy" or a policy class).
    :param env: The environment to learn from (if registered in Gymnasium, can be str).
    :param learning_rate: Float or schedule for the algorithm's step size (unused by methods without one).
    :param n_eval_episodes: Episodes evaluated per candidate.
    :param alive_bonus_offset: Constant added to the reward of every step, to cancel out alive bonuses.
    :param zero_policy: Whether the policy starts from all-zero weights.
    :param num_interactions: The env steps a round's candidates must take in total before the update (more batches
        are sampled until they do), or None for rounds of one batch.
    :param popsize_max: The number of candidates at which a round stops growing, or None for no bound.
    :param policy_kwargs: Keyword arguments passed to the policy on creation.
    :param stats_window_size: How many recent episodes ``rollout/ep_rew_mean`` and ``ep_len_mean`` average.
    :param tensorboard_log: The log location for TensorBoard (if None, no logging).
    :param seed: Seed for the pseudo random generators.
    :param verbose: Verbosity level: 0 no output, 1 info, 2 debug.
    :param device: Torch device of the policy.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {"LinearPolicy": LinearPolicy, "MlpPolicy": MlpPolicy}
    policy: BasePolicy

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        learning_rate: float | Schedule,
        *,
        n_eval_episodes: int = 1,
        alive_bonus_offset: float = 0.0,
        zero_policy: bool = False,
        num_interactions: int | None = None,
        popsize_max: int | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        seed: int | None = None,
        verbose: int = 0,
        device: th.device | str = "cpu",
    ) -> None:
        check_positive_int("n_eval_episodes", n_eval_episodes)
        reward_offset = check_finite_number("alive_bonus_offset", alive_bonus_offset)
        check_interaction_budget(num_interactions, popsize_max)
        checked_schedule("learning_rate", learning_rate, allow_zero=True)
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
        )
        if self.env is not None:
            self._check_spaces(self.observation_space, self.action_space)
        self.n_eval_episodes = n_eval_episodes
        self.alive_bonus_offset = reward_offset
        self.zero_policy = zero_policy
        self.num_interactions = num_interactions
        self.popsize_max = popsize_max
        # Set by _setup_model() unless load() restored them.
        self._seed_entropy: int | None = None
        self._rng: np.random.Generator | None = None
        self._pending_candidates: np.ndarray | None = None
        self._pending_centre: np.ndarray | None = None  # the policy weights the pending population was sampled around
        self._evaluated_round: EvaluatedRound | None = None
        # (evaluator id, round serial) of a batch sent and not collected (a Ctrl-C in get_results): resumed.
        self._awaited_round: tuple[int, int | None] | None = None
        self._told_batches: list[ToldBatch] = []  # the round's earlier batches, under an interaction budget
        self._saved_obs_rms: RunningMeanStd | None = None
        # Every observation counted once, when the statistics the policy is normalised with lag behind them (see
        # _normalization_statistics); None when those are the exact ones.
        self._exact_obs_rms: RunningMeanStd | None = None

    # --------------------------------------------------------------------------------- to implement

    @abstractmethod
    def _sample_candidates(self) -> np.ndarray:
        """:return: The next population, shape ``(pop_size, n_params)`` (float64)."""

    @abstractmethod
    def _update(self, candidates: np.ndarray, returns: np.ndarray) -> dict[str, float]:
        """
        Update the search distribution and load its centre into the policy.

        :param candidates: The population :meth:`_sample_candidates` returned.
        :param returns: One finite return per candidate.
        :return: Statistics to log, by logger key.
        """

    # ---------------------------------------------------------------------------------------- model

    def _setup_model(self) -> None:
        if getattr(self, "observation_space", None) is None:  # load() sets the spaces of the saved model
            raise ValueError(
                "env is None: the policy is built for the environment's observation and action spaces; give the "
                "environment (or its Gymnasium id), also for ask/tell"
            )
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = self.policy_class(self.observation_space, self.action_space, **self.policy_kwargs)
        self.policy = self.policy.to(self.device)
        if self.zero_policy:
            self.policy.load_from_vector(np.zeros(self.n_params, dtype=np.float32))
        if self._seed_entropy is None:
            # Unseeded, draw from numpy's global generator: runs seeded the Stable-Baselines3 way stay reproducible.
            self._seed_entropy = self.seed if self.seed is not None else int(np.random.randint(2**31 - 1))
            self._rng = np.random.default_rng(self._seed_sequence(SAMPLING_STREAM))
        self._restore_obs_rms()

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """
        Set the environment to learn from. If it is wrapped in ``VecNormalize``, the model's observation statistics
        (those of its current environment, or those ``load()`` restored) are copied into it: the policy was trained
        on observations normalised with them.

        :param env: The environment for learning a policy.
        :param force_reset: Force call to ``reset()`` before training.
        """
        self._store_obs_rms()
        super().set_env(env, force_reset)
        self._restore_obs_rms()

    def _restore_obs_rms(self) -> None:
        """Copy the kept observation statistics into the environment's ``VecNormalize``, if both exist."""
        if self._saved_obs_rms is not None and self._obs_normalize_env is not None:
            _set_obs_rms(self._obs_normalize_env, self._saved_obs_rms.copy())

    def _store_obs_rms(self) -> None:
        """Keep a copy of the model's observation statistics, if its environment has them."""
        if self._obs_normalize_env is not None:
            self._saved_obs_rms = _get_obs_rms(self._obs_normalize_env).copy()

    def set_parameters(
        self,
        load_path_or_dict: str | TensorDict,
        exact_match: bool = True,
        device: th.device | str = "auto",
    ) -> None:
        """
        Load parameters into the policy. A pending population (or round) sampled around other weights is dropped.

        :param load_path_or_dict: Location of the saved model, or a dict of state dicts, as Stable-Baselines3 takes.
        :param exact_match: Whether every parameter must be given.
        :param device: Device on which the parameters are loaded.
        """
        super().set_parameters(load_path_or_dict, exact_match, device)
        centre = self._pending_centre
        if centre is not None and not np.array_equal(self.policy.parameters_to_vector(), centre):
            self._pending_candidates = self._pending_centre = self._evaluated_round = None
            self._told_batches = []
        self._parameters_set()

    def _parameters_set(self) -> None:
        """Called after :meth:`set_parameters` (also by ``load()``): a method whose state is more than the policy
        weights follows them here."""

    @property
    def _obs_normalize_env(self) -> VecNormalize | None:
        """The env's ``VecNormalize`` if it normalises observations (its statistics are the model's), else None."""
        vec_normalize = self._vec_normalize_env
        return vec_normalize if vec_normalize is not None and vec_normalize.norm_obs else None

    @property
    def exact_obs_rms(self) -> RunningMeanStd | None:
        """
        The observation statistics of every evaluated observation, each counted once: those of the ``VecNormalize``,
        unless the normalisation differs from them (ARS's ``normalization_update_interval`` or
        ``normalization_inertia``). None without one.
        """
        if self._exact_obs_rms is not None:
            return self._exact_obs_rms
        return None if self._obs_normalize_env is None else _get_obs_rms(self._obs_normalize_env)

    @property
    def n_params(self) -> int:
        """Number of policy parameters: the dimension of the search space."""
        return sum(parameter.numel() for parameter in self.policy.parameters())

    def _centre(self) -> np.ndarray:
        """:return: The policy weights (float64): the centre of the search distribution."""
        return self.policy.parameters_to_vector().astype(np.float64)

    def _scheduled(self, name: str, schedule: Schedule, *, allow_zero: bool = False) -> float:
        """:return: The value of ``schedule`` at the current progress, checked with :func:`check_scale`."""
        return check_scale(name, schedule(self._current_progress_remaining), allow_zero=allow_zero)

    def _antithetic_population(self, n_pairs: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """
        :param n_pairs: Number of antithetic pairs.
        :param scale: Standard deviation of the perturbations.
        :return: The unscaled noise, shape ``(n_pairs, n_params)``, and the population: the centre plus each
            scaled noise row, then the centre minus each.
        """
        assert self._rng is not None
        noise = self._rng.standard_normal((n_pairs, self.n_params))
        centre = self._centre()
        perturbations = scale * noise
        return noise, np.concatenate([centre + perturbations, centre - perturbations])

    def _seed_sequence(self, *spawn_key: int) -> np.random.SeedSequence:
        """:return: A seed sequence derived from the algorithm's seed and ``spawn_key`` only."""
        return np.random.SeedSequence(self._seed_entropy, spawn_key=spawn_key)

    def _get_policy_from_name(self, policy_name: str) -> type[BasePolicy]:
        if policy_name not in self.policy_aliases:
            raise ValueError(
                f"policy={policy_name!r} is unknown to {type(self).__name__}: "
                f"use one of {sorted(self.policy_aliases)} or a policy class"
            )
        return self.policy_aliases[policy_name]

    def _check_spaces(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        name = type(self).__name__
        if not isinstance(action_space, spaces.Box | spaces.Discrete):
            raise ValueError(f"env: {name} supports Box or Discrete action spaces only, got {action_space}")
        if isinstance(observation_space, spaces.Dict | spaces.Tuple):
            raise ValueError(
                f"env: {name} needs flat observations, got {observation_space} "
                "(wrap the environment in gymnasium.wrappers.FlattenObservation)"
            )

    # -------------------------------------------------------------------------------------- ask/tell

    def ask(self) -> np.ndarray:
        """
        The candidates to evaluate next. Calling ``ask()`` again before :meth:`tell` returns the same candidates.

        :return: The candidate weight matrix, shape ``(pop_size, n_params)``, float32: one flat parameter vector
            per row, as ``policy.load_from_vector`` takes it (a copy).
        """
        if self._pending_candidates is None:
            self._pending_centre = self.policy.parameters_to_vector()
            self._pending_candidates = self._sample_candidates()
        return self._pending_candidates.astype(np.float32)

    def tell(
        self,
        returns: Iterable[float] | np.ndarray | th.Tensor,
        interactions: Iterable[int] | np.ndarray | None = None,
    ) -> dict[str, float]:
        """
        Update from the returns of the candidates of the last :meth:`ask`; the policy then holds the new centre.
        Under an interaction budget, the round instead grows by a batch while it is short of its budget: then
        nothing is updated, an empty dict is returned and the next :meth:`ask` gives the next batch.

        :param returns: One return per candidate (higher is better), in the order of :meth:`ask`'s rows.
        :param interactions: The env steps each candidate took (all its episodes): needed with ``num_interactions``,
            refused without.
        :return: The update's statistics, by logger key (what ``learn()`` logs); empty while a round grows.
        :raises TypeError: if ``returns`` or ``interactions`` are not numbers.
        :raises ValueError: if no population is pending, or ``returns`` or ``interactions`` has the wrong shape or
            bad values, or ``interactions`` is missing or not expected.
        """
        if self._pending_candidates is None:
            raise ValueError("tell() was called with no population pending: call ask() first")
        pop_size = len(self._pending_candidates)
        values = _one_per_candidate("returns", returns, pop_size)
        not_finite = np.flatnonzero(~np.isfinite(values))
        if not_finite.size:
            raise ValueError(f"returns has NaN or infinite values for candidates {not_finite.tolist()}")
        steps = 0
        if self.num_interactions is None:
            if interactions is not None:
                raise ValueError("interactions are only counted with num_interactions set: leave them out")
        elif interactions is None:
            raise ValueError(
                f"tell() needs the env steps of each candidate (interactions): num_interactions={self.num_interactions}"
            )
        else:
            counts = _one_per_candidate("interactions", interactions, pop_size)
            if not (np.all(np.isfinite(counts) & (counts >= 0)) and np.array_equal(counts, np.round(counts))):
                raise ValueError(f"interactions must be non-negative whole numbers, got {counts.tolist()}")
            steps = int(counts.sum())
            if steps == 0:  # a round told batches of no env steps would grow for ever
                raise ValueError("interactions are all zero: a batch's candidates take one env step at least")
        return self._tell(values, steps, [])

    def _tell(
        self, returns: np.ndarray, interactions: int, episodes: list[tuple[int, int, float, int]]
    ) -> dict[str, float]:
        """Tell the pending batch (checked): keep it if the round must grow, else update from the whole round."""
        candidates = self._pending_candidates
        assert candidates is not None
        if not self._round_complete(extra_candidates=len(candidates), extra_interactions=interactions):
            self._told_batches.append(ToldBatch(candidates, returns, interactions, episodes))
            self._pending_candidates = self._evaluated_round = None
            return {}
        if self._told_batches:
            candidates = np.concatenate([*(batch.candidates for batch in self._told_batches), candidates])
            returns = np.concatenate([*(batch.returns for batch in self._told_batches), returns])
        statistics = self._update(candidates, returns)
        self._pending_candidates = self._pending_centre = self._evaluated_round = None
        self._told_batches = []
        self._n_updates += 1
        return statistics

    def _round_complete(self, *, extra_candidates: int = 0, extra_interactions: int = 0) -> bool:
        """:return: Whether the round's told batches (and the ``extra`` ones) meet its interaction budget."""
        if self.num_interactions is None:
            return True
        n_candidates = extra_candidates + sum(len(batch.candidates) for batch in self._told_batches)
        if self.popsize_max is not None and n_candidates >= self.popsize_max:
            return True
        return extra_interactions + sum(batch.interactions for batch in self._told_batches) >= self.num_interactions

    # ---------------------------------------------------------------------------------------- learn

    def learn(  # type: ignore[override]  # noqa: PLR0917 - sb3-contrib's ARS.learn(): async_eval before progress_bar
        self: SelfPopulationAlgorithm,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int | None = 1,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        async_eval: CandidateEval | None = None,
        progress_bar: bool = False,
    ) -> SelfPopulationAlgorithm:
        """
        Return a trained model.

        :param total_timesteps: The total number of samples (env steps) to train on; a round always completes.
        :param callback: Callback(s) called once per evaluated episode with the state of the algorithm.
        :param log_interval: Rounds between two logger dumps (None or 0: no dumps).
        :param tb_log_name: The name of the run for TensorBoard logging; defaults to the algorithm's name.
        :param reset_num_timesteps: Whether or not to reset the current timestep number (used in logging).
        :param async_eval: Evaluates the candidates in worker processes; by default they run in this process, on
            the model's environment. It is not closed here: reuse it across ``learn()`` calls, close it when done.
            It comes before ``progress_bar``, as in sb3-contrib's ``ARS.learn()``.
        :param progress_bar: Display a progress bar of env steps using tqdm and rich.
        :return: The trained model.
        """
        if not isinstance(progress_bar, bool):
            raise TypeError(f"progress_bar must be a bool, got {type(progress_bar).__name__}")
        if self.env is None:
            raise ValueError("learn() needs an environment: pass env to the constructor, to load() or to set_env()")
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name or type(self).__name__, progress_bar
        )
        evaluator = self._make_evaluator(async_eval)
        try:
            self._sync_observation_statistics(evaluator)
            callback.on_training_start(locals(), globals())
            if self._evaluated_round is not None:
                callback.on_rollout_start()  # a round a callback stopped goes on
            while self.num_timesteps < total_timesteps:
                if not self._run_round(evaluator, callback, total_timesteps):
                    break
                if log_interval and self._n_updates % log_interval == 0:
                    self.dump_logs()
        finally:
            if evaluator is not async_eval:
                evaluator.close()
        callback.on_training_end()
        return self

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        # The environment reset done here yields an observation no population method uses: keep it out of the
        # normalisation statistics, so that a run does not depend on how many learn() calls it took.
        if self._vec_normalize_env is not None and self._vec_normalize_env.norm_reward:
            warnings.warn(
                "the env's VecNormalize has norm_reward=True, which population methods do not use: candidates are "
                "ranked by their raw episode returns (VecNormalize(env, norm_reward=False) says so)",
                UserWarning,
                stacklevel=3,
            )
        vec_normalize = self._obs_normalize_env
        if vec_normalize is None:
            return super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)
        obs_rms = _get_obs_rms(vec_normalize).copy()
        result = super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)
        _set_obs_rms(vec_normalize, obs_rms)
        return result

    def _init_callback(self, callback: MaybeCallback, progress_bar: bool = False) -> BaseCallback:
        if not progress_bar:
            return super()._init_callback(callback)
        callbacks = callback if isinstance(callback, list) else [callback]
        converted = [item if isinstance(item, BaseCallback) else ConvertCallback(item) for item in callbacks]
        return super()._init_callback([*converted, EnvStepProgressBar()])

    def _make_evaluator(self, async_eval: CandidateEval | None) -> CandidateEval:
        if async_eval is None:
            assert self.env is not None
            return InProcessEval(self.env, self.policy, self.n_eval_episodes)
        if not isinstance(async_eval, CandidateEval):
            raise TypeError(
                f"async_eval must be a lit_sb3 AsyncEval, got {type(async_eval)!r}: build "
                "lit_sb3.AsyncEval(envs_fn, model.policy) with the arguments of sb3-contrib's AsyncEval"
            )
        if async_eval.n_params != self.n_params:
            raise ValueError(
                f"async_eval was built for a policy with {async_eval.n_params} parameters, "
                f"the model's has {self.n_params}: build it with train_policy=model.policy"
            )
        if async_eval.n_eval_episodes != self.n_eval_episodes:
            raise ValueError(
                f"async_eval runs n_eval_episodes={async_eval.n_eval_episodes} per candidate but the model was "
                f"created with n_eval_episodes={self.n_eval_episodes}"
            )
        return async_eval

    def _resumes_round(self, evaluator: CandidateEval) -> bool:
        """:return: Whether ``evaluator`` still runs the batch this model sent it (a Ctrl-C stopped the wait)."""
        return evaluator.pending_round is not None and self._awaited_round == (id(evaluator), evaluator.pending_round)

    def _sync_observation_statistics(self, evaluator: CandidateEval) -> None:
        if self._resumes_round(evaluator):
            return  # the workers run the batch with the statistics it was sent with, the model's since then
        workers_normalize = any(obs_rms is not None for obs_rms in evaluator.synced_obs_rms)
        if self._obs_normalize_env is None:
            if workers_normalize:
                raise ValueError(
                    "async_eval's environments are wrapped in VecNormalize but the model's env is not: "
                    "wrap both, or neither"
                )
            return
        if not workers_normalize:
            raise ValueError(
                "the model's env is wrapped in VecNormalize but async_eval's environments are not: "
                "wrap both, or neither"
            )
        evaluator.sync_obs_rms(_get_obs_rms(self._obs_normalize_env))

    def _merge_observation_statistics(self, evaluator: CandidateEval) -> None:
        if self._obs_normalize_env is None:
            return
        # Based on the exact statistics, or by default the last synced ones (never on the env's: in-process, the
        # evaluator updated those in place, so basing on them would count the round twice).
        exact = cast(RunningMeanStd, evaluator.merge_obs_rms(self._exact_obs_rms))
        in_use = self._normalization_statistics(exact, cast(RunningMeanStd, evaluator.synced_obs_rms[0]))
        self._exact_obs_rms = None if in_use is exact else exact
        evaluator.sync_obs_rms(in_use)
        _set_obs_rms(self._obs_normalize_env, in_use)

    def _normalization_statistics(self, exact: RunningMeanStd, in_use: RunningMeanStd) -> RunningMeanStd:
        """
        The statistics to normalise observations with from the next round on (a hook: by default the exact ones).

        :param exact: The statistics of every observation so far, each counted once (including the round's).
        :param in_use: The statistics the round was normalised with (a copy).
        :return: ``exact`` itself, or other statistics (then ``exact`` is kept, saved, and merged into next).
        """
        return exact

    def _batch_seed(self) -> int:
        """:return: The seed of the episodes of the next batch: of the round, and of the batch within it."""
        batch_index = len(self._told_batches)
        spawn_key = (self._n_updates, batch_index) if batch_index else (self._n_updates,)
        return int(self._seed_sequence(EVALUATION_STREAM, *spawn_key).generate_state(1)[0])

    def _run_round(self, evaluator: CandidateEval, callback: BaseCallback, total_timesteps: int) -> bool:
        """
        Ask and evaluate (unless a stopped round is pending), report the episodes to the callback, tell.

        :param evaluator: Evaluates the population.
        :param callback: Sees every episode.
        :param total_timesteps: The training budget, for the schedules' progress (taken at the round's start).
        :return: False if the callback asked to stop training (the round is then not told).
        """
        if self._evaluated_round is None:
            self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
            callback.on_rollout_start()
            self._evaluated_round = self._evaluate_round(evaluator)
        evaluated = self._evaluated_round
        candidate_weights = np.concatenate(
            [*(batch.candidates.astype(np.float32) for batch in self._told_batches), self.ask()]
        )
        dones = np.ones(1, dtype=bool)
        while evaluated.n_reported < len(evaluated.episodes):
            candidate_index, episode_index, episode_return, episode_length = evaluated.episodes[evaluated.n_reported]
            evaluated.n_reported += 1
            self.num_timesteps += episode_length
            elapsed = (time.time_ns() - self.start_time) / 1e9
            infos = [{"episode": {"r": episode_return, "l": episode_length, "t": round(elapsed, 6)}}]
            self._update_info_buffer(infos, dones)
            callback.update_locals(
                {
                    "candidate_index": candidate_index,
                    "episode_index": episode_index,
                    "episode_return": episode_return,
                    "episode_length": episode_length,
                    "candidate_weights": candidate_weights[candidate_index],
                    "dones": dones,
                    "infos": infos,
                }
            )
            if not callback.on_step():
                return False
        callback.on_rollout_end()

        assert self.ep_info_buffer is not None  # set up by learn()
        self.logger.record("rollout/ep_rew_mean", safe_mean([info["r"] for info in self.ep_info_buffer]))
        self.logger.record("rollout/ep_len_mean", safe_mean([info["l"] for info in self.ep_info_buffer]))
        interactions = evaluated.candidate_interactions
        for key, value in self.tell(evaluated.candidate_returns, interactions).items():
            self.logger.record(key, value)
        return True

    def _evaluate_round(self, evaluator: CandidateEval) -> EvaluatedRound:
        """
        Evaluate the population of :meth:`ask`, and under an interaction budget the further batches the round
        needs (telling each but the last); the round's observations are then merged into the model's.

        :return: The results of the last batch, and the episodes of the whole round.
        """
        episodes = [episode for batch in self._told_batches for episode in batch.episodes]
        while True:
            candidate_returns, candidate_interactions, batch_episodes = self._evaluate_batch(evaluator)
            episodes.extend(batch_episodes)
            steps = int(candidate_interactions.sum())
            if self._round_complete(extra_candidates=len(candidate_returns), extra_interactions=steps):
                break
            # An earlier batch of the round (under an interaction budget): kept, no update yet.
            self._tell(candidate_returns, steps, batch_episodes)
        # The normalisation stayed frozen over all the round's batches (workers only change it when synced).
        self._merge_observation_statistics(evaluator)
        interactions = None if self.num_interactions is None else candidate_interactions
        return EvaluatedRound(candidate_returns, episodes, candidate_interactions=interactions)

    def _evaluate_batch(
        self, evaluator: CandidateEval
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, float, int]]]:
        """
        :return: The return and the env steps of each candidate of :meth:`ask`, and their episodes (numbered from
            the round's first candidate).
        """
        candidate_weights = self.ask()
        pop_size = len(candidate_weights)
        first_index = sum(len(batch.candidates) for batch in self._told_batches)
        if not self._resumes_round(evaluator):
            evaluator.seed(self._batch_seed())
            evaluator.send_jobs(candidate_weights, pop_size)
            self._awaited_round = (id(evaluator), evaluator.pending_round)
        results = evaluator.get_results()  # a Ctrl-C leaves the batch running: the next learn() collects it
        self._awaited_round = None
        candidate_returns = np.empty(pop_size, dtype=np.float64)
        candidate_interactions = np.empty(pop_size, dtype=np.int64)
        episodes: list[tuple[int, int, float, int]] = []
        for candidate_index, (episode_returns, episode_lengths) in results:
            candidate_returns[candidate_index] = np.mean(episode_returns + self.alive_bonus_offset * episode_lengths)
            candidate_interactions[candidate_index] = int(episode_lengths.sum())
            episodes.extend(
                (first_index + candidate_index, episode_index, episode_return, episode_length)
                for episode_index, (episode_return, episode_length) in enumerate(
                    zip(episode_returns.tolist(), episode_lengths.astype(int).tolist(), strict=True)
                )
            )
        not_finite = np.flatnonzero(~np.isfinite(candidate_returns))
        if not_finite.size:  # raised before any count or callback moves: a later learn() evaluates the batch again
            raise ValueError(
                f"the episodes of candidates {(first_index + not_finite).tolist()} have NaN or infinite returns: "
                "the env's rewards must be finite"
            )
        return candidate_returns, candidate_interactions, episodes

    def dump_logs(self) -> None:
        """Write the round's statistics to the logger."""
        time_elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        fps = int((self.num_timesteps - self._num_timesteps_at_start) / time_elapsed)
        self.logger.record("train/iterations", self._n_updates, exclude="tensorboard")
        self.logger.record("time/fps", fps)
        self.logger.record("time/time_elapsed", int(time_elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(step=self.num_timesteps)

    # ----------------------------------------------------------------------------------------- save

    def save(
        self,
        path: str | pathlib.Path | io.BufferedIOBase,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
    ) -> None:
        """
        Save the model, its search state (distribution, optimiser and random generator states, a pending
        population) and the ``VecNormalize`` observation statistics: ``load()`` then ``learn()`` continues exactly.

        :param path: Path to the file where the model should be saved.
        :param exclude: Names of parameters that should be excluded in addition to the default ones.
        :param include: Names of parameters that might be excluded but should be included anyway.
        """
        self._store_obs_rms()
        super().save(path, exclude, include)
