"""The evaluation interface shared by :class:`~lit_sb3.vec_env.AsyncEval` and :class:`InProcessEval`: input
checks, seeding, reset options, rounds and observation statistics."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any

import cloudpickle
import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv

from lit_sb3.checks import check_non_negative_int, check_positive_int
from lit_sb3.evaluation.evaluator import CandidateEvaluator, RoundSpec
from lit_sb3.evaluation.obs_rms import ObsRms, check_same_statistics, combine_obs_rms, copy_obs_rms
from lit_sb3.evaluation.policy_kernels import cpu_copy
from lit_sb3.workers.app import TaskError
from lit_sb3.workers.errors import PoolClosedError

Options = dict[str, Any] | list[dict[str, Any]] | None
#: What a round returns: ``(candidate_index, (episode_rewards, episode_lengths))`` per candidate.
Results = list[tuple[int, tuple[np.ndarray, np.ndarray]]]
#: What an evaluator returns for a block of candidates: first index, returns and lengths of each, and the statistics
#: of the observations of each episode (candidate by candidate, then episode by episode; None without VecNormalize).
ChunkResult = tuple[int, np.ndarray, np.ndarray, list[ObsRms] | None]


class CandidateEval(ABC):
    """
    Evaluates populations of flat policy weight vectors, one round at a time (``send_jobs`` then
    ``get_results``), with the episode seeding of :class:`~lit_sb3.evaluation.evaluator.CandidateEvaluator`.

    :param train_policy: The policy whose flat weight vectors the candidates are.
    :param n_eval_episodes: Episodes per candidate.
    :param n_workers: How many evaluators (workers) there are.
    """

    def __init__(self, train_policy: BasePolicy, n_eval_episodes: int, n_workers: int) -> None:
        if not isinstance(train_policy, BasePolicy):
            raise TypeError(f"train_policy must be a Stable-Baselines3 BasePolicy, got {type(train_policy)!r}")
        check_positive_int("n_eval_episodes", n_eval_episodes)
        self.n_params = sum(parameter.numel() for parameter in train_policy.parameters())
        self.n_eval_episodes = n_eval_episodes
        self._n_workers = n_workers
        self._base_seed: int | None = None
        self._round_index = 0
        self._round_serial = 0
        self._options: Options = None
        self._synced_obs_rms: list[Any] = []
        self._new_obs_rms: list[ObsRms] = []  # of every episode since the last sync, in candidate order

    @property
    def n_workers(self) -> int:
        """Number of workers."""
        return self._n_workers

    @property
    def pending_round(self) -> int | None:
        """The serial number of the round sent and not yet collected (a Ctrl-C in :meth:`get_results` leaves it
        running: ``get_results()`` waits for it again), or None."""
        return self._round_serial - 1 if self._round_pending else None

    # ------------------------------------------------------------------------------------ to implement

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""

    @property
    @abstractmethod
    def _round_pending(self) -> bool:
        """Whether a round was started and its results not yet collected (nor lost to a failure)."""

    @abstractmethod
    def _start_round(self, weights: np.ndarray, spec_fields: dict[str, Any], pop_size: int) -> None:
        """Start evaluating ``weights`` (already checked) with the round's seeding and options."""

    @abstractmethod
    def _finish_round(self) -> list[ChunkResult]:
        """Wait for the round started last; once it returns or fails (but for a ``KeyboardInterrupt``), no round
        is pending."""

    @abstractmethod
    def _worker_obs_rms(self) -> list[Any]:
        """Each worker's full observation statistics."""

    @abstractmethod
    def _sync_workers(self, obs_rms: Any) -> None:
        """Replace every worker's observation statistics."""

    @abstractmethod
    def _close(self) -> None:
        """Release everything."""

    # ---------------------------------------------------------------------------------- sb3-contrib's API

    def send_jobs(self, candidate_weights: th.Tensor | np.ndarray, pop_size: int) -> None:
        """
        Send jobs to the workers to evaluate new candidates.

        :param candidate_weights: The weights to be evaluated, shape ``(rows >= pop_size, n_params)``.
        :param pop_size: The number of candidate (size of the population); rows ``0..pop_size-1`` are evaluated.
        """
        self._check_open()
        if self._round_pending:
            raise ValueError("send_jobs() was called again before get_results() collected the previous round")
        weights = _weights_matrix(candidate_weights, pop_size, self.n_params)
        if self._base_seed is None:
            self._base_seed = int(np.random.randint(0, 2**31 - 1))
        spec_fields = {
            "serial": self._round_serial,
            "round_index": self._round_index,
            "base_seed": self._base_seed,
            "options": self._options,
        }
        self._round_serial += 1  # before anything can fail: a serial is never reused
        self._start_round(weights, spec_fields, pop_size)
        self._round_index += 1

    def seed(self, seed: int | None = None) -> list[int | None]:
        """
        Seed the environments.

        Episode ``e`` of candidate ``c`` in the ``g``-th round sent after this call is reset with a seed derived from
        ``(seed, g, c, e)``, whatever worker runs it. With ``seed=None`` (or without any call), the seed is drawn from
        numpy's global generator when the next round is sent, so runs seeded the Stable-Baselines3 way stay
        reproducible.

        :param seed: The seed for the pseudo-random generators.
        :return: The seed each worker's episodes derive from.
        """
        self._check_open()
        if seed is not None:
            check_non_negative_int("seed", seed)
        self._base_seed = None if seed is None else int(seed)
        self._round_index = 0
        return [self._base_seed] * self.n_workers

    def set_options(self, options: list[dict] | dict | None = None) -> list[int | None]:
        """
        Set environment options for all environments.

        If a dict is passed instead of a list, the same options will be used for all environments.
        The options are passed to every reset from the next round sent on (``None`` removes them).
        Per-worker options make a candidate's result depend on which worker ran it.

        :param options: A dictionary of environment options to pass to each environment at the next reset.
        :return: One ``None`` per worker.
        """
        self._check_open()
        if isinstance(options, list):
            if len(options) != self.n_workers:
                raise ValueError(f"options has {len(options)} entries but there are {self.n_workers} workers")
            if not all(isinstance(entry, dict) for entry in options):
                raise TypeError("options must be a dict, a list of dicts (one per worker) or None")
        elif options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict, a list of dicts (one per worker) or None, got {type(options)!r}")
        try:
            options = cloudpickle.loads(cloudpickle.dumps(options))  # a copy, as the workers will receive it
        except Exception as error:
            raise TypeError(f"options cannot be sent to the workers: {error}") from error
        self._options = options
        return [None] * self.n_workers

    def get_results(self) -> Results:
        """
        Retreive episode rewards and lengths from each worker
        for all candidates (there might be multiple candidates per worker).

        :return: A list of tuples containing each candidate index and its
            result (episodic reward and episode length), ordered by candidate index.
        """
        self._check_open()
        if not self._round_pending:
            raise ValueError("get_results() was called with no round pending: call send_jobs() first")
        chunks = self._finish_round()  # a KeyboardInterrupt leaves the round pending: get_results() can wait again
        chunks = sorted(chunks, key=lambda chunk: chunk[0])
        for *_, episode_obs_rms in chunks:
            if episode_obs_rms is not None:
                self._new_obs_rms.extend(episode_obs_rms)
        return [
            (first + row, (episode_returns[row], episode_lengths[row]))
            for first, episode_returns, episode_lengths, _ in chunks
            for row in range(len(episode_returns))
        ]

    def get_obs_rms(self) -> list[RunningMeanStd]:
        """
        Retrieve the observation filters (observation running mean std)
        of each process, they will be combined in the main process.
        Synchronisation is done afterward using ``sync_obs_rms()``.
        Use :meth:`merge_obs_rms` to combine them without counting the last synced statistics again.

        :return: A list of ``RunningMeanStd`` objects (one per process; None for workers without ``VecNormalize``)
        """
        self._check_idle("get_obs_rms")
        return self._worker_obs_rms()

    def sync_obs_rms(self, obs_rms: RunningMeanStd) -> None:
        """
        Synchronise (and update) the observation filters
        (observation running mean std).

        :param obs_rms: The updated ``RunningMeanStd`` to be used
            by workers for normalizing observations.
        """
        self._check_idle("sync_obs_rms")
        if all(synced is None for synced in self._synced_obs_rms):
            raise ValueError("sync_obs_rms: the workers' environments have no VecNormalize (nothing to synchronise)")
        reference = next(synced for synced in self._synced_obs_rms if synced is not None)
        check_same_statistics(obs_rms, reference)
        self._sync_workers(obs_rms)
        self._synced_obs_rms = [copy_obs_rms(obs_rms) for _ in range(self.n_workers)]
        self._new_obs_rms = []

    def close(self) -> None:
        """
        Close the processes: cancels a pending round, stops every worker, frees shared memory. Idempotent.
        """
        self._close()

    # ------------------------------------------------------------------------------------------- extras

    @property
    def synced_obs_rms(self) -> list[Any]:
        """Each worker's observation statistics right after the last ``sync_obs_rms`` (or at its start)."""
        return list(self._synced_obs_rms)

    def merge_obs_rms(self, base: ObsRms | None = None) -> ObsRms:
        """
        Merge what the candidates observed since the last sync, counting every observation once: the statistics of
        each episode, added in candidate order (then episode order), so the result is the same bit for bit whatever
        worker ran which candidate (see :mod:`lit_sb3.evaluation.obs_rms`).

        :param base: Statistics to add the new observations to; by default the last synced ones.
        :return: The merged statistics, ready for :meth:`sync_obs_rms`.
        """
        self._check_idle("merge_obs_rms")
        if any(rms is None for rms in self._synced_obs_rms):
            raise ValueError("merge_obs_rms: some workers' environments have no VecNormalize")
        return combine_obs_rms(self._synced_obs_rms[0] if base is None else base, self._new_obs_rms)

    def __enter__(self) -> CandidateEval:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise PoolClosedError(f"this {type(self).__name__} is closed")

    def _check_idle(self, method: str) -> None:
        self._check_open()
        if self._round_pending:
            raise ValueError(f"{method}() was called while a round is pending: call get_results() first")


class InProcessEval(CandidateEval):
    """
    Evaluates candidates in this process, on an environment the caller owns: same seeding and same results as
    :class:`~lit_sb3.vec_env.AsyncEval` with any number of workers.

    :param env: The vectorised environment (not closed by :meth:`close`).
    :param train_policy: The policy whose flat weight vectors the candidates are.
    :param n_eval_episodes: Episodes per candidate.
    """

    def __init__(self, env: VecEnv, train_policy: BasePolicy, n_eval_episodes: int = 1) -> None:
        super().__init__(train_policy, n_eval_episodes, n_workers=1)
        self._evaluator = CandidateEvaluator(_returning(env), cpu_copy(train_policy), n_eval_episodes)
        self._synced_obs_rms = [self._evaluator.get_obs_rms()]
        self._is_closed = False

    @property
    def closed(self) -> bool:
        return self._is_closed

    @property
    def _round_pending(self) -> bool:
        return self._evaluator.busy

    def _start_round(self, weights: np.ndarray, spec_fields: dict[str, Any], pop_size: int) -> None:
        population = np.array(weights, np.float32)  # a copy: the caller may change its array before get_results()
        self._evaluator.submit(0, "evaluate", (RoundSpec(population=population, **spec_fields), 0, pop_size))

    def _finish_round(self) -> list[ChunkResult]:
        try:
            while self._evaluator.busy:
                for _, result in self._evaluator.advance():
                    return [result]
        except KeyboardInterrupt:
            raise  # the round stays where it was: get_results() goes on with it
        except TaskError as error:
            self._evaluator.cancel(None)
            if error.__cause__ is None:
                raise
            raise error.__cause__ from None
        except BaseException:
            self._evaluator.cancel(None)
            raise
        raise RuntimeError("the round was lost: the evaluator has nothing left to run")

    def _worker_obs_rms(self) -> list[Any]:
        return [self._evaluator.get_obs_rms()]

    def _sync_workers(self, obs_rms: Any) -> None:
        self._evaluator.sync_obs_rms(obs_rms)

    def _close(self) -> None:
        self._is_closed = True


def _returning(env: VecEnv) -> Callable[[], VecEnv]:
    return lambda: env


def _weights_matrix(candidate_weights: th.Tensor | np.ndarray, pop_size: int, n_params: int) -> np.ndarray:
    if isinstance(candidate_weights, th.Tensor):
        tensor = candidate_weights.detach().cpu()
        if tensor.is_complex():
            raise TypeError(f"candidate_weights must be real, got a tensor of dtype {tensor.dtype}")
        # numpy has no bfloat16 (nor float8): such tensors are read as the float32 the workers evaluate anyway.
        weights = (tensor.float() if tensor.is_floating_point() else tensor).numpy()
    elif isinstance(candidate_weights, np.ndarray):
        weights = candidate_weights
    else:
        raise TypeError(f"candidate_weights must be a torch.Tensor or a numpy array, got {type(candidate_weights)!r}")
    if weights.ndim != 2:
        raise ValueError(
            f"candidate_weights must have shape (rows, n_params) = (rows, {n_params}), got shape {weights.shape}"
        )
    if weights.shape[1] != n_params:
        raise ValueError(
            f"candidate_weights rows have {weights.shape[1]} values but the policy has {n_params} parameters"
        )
    check_positive_int("pop_size", pop_size)
    if pop_size > weights.shape[0]:
        raise ValueError(f"pop_size={pop_size} exceeds the {weights.shape[0]} rows of candidate_weights")
    weights = weights[:pop_size]
    if not np.issubdtype(weights.dtype, np.number):
        raise TypeError(f"candidate_weights must be numeric, got dtype {weights.dtype}")
    if np.issubdtype(weights.dtype, np.complexfloating):
        raise TypeError(f"candidate_weights must be real, got dtype {weights.dtype}")
    with np.errstate(over="ignore"):  # a value beyond float32's range becomes inf, refused below
        weights = weights.astype(np.float32, copy=False)
    finite = np.isfinite(weights).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ValueError(f"candidate_weights has NaN or inf values in candidates {bad[:10].tolist()} (as float32)")
    return weights
