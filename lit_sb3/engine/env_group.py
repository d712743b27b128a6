"""The engine's environments: the worker pool that collects episodes, and the evaluation workers."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import gymnasium as gym
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize

from lit_sb3.checks import check_non_negative_int, check_positive_int
from lit_sb3.collection import AsyncCollector, CollectionPlan, Progress
from lit_sb3.collection.collector import check_worker_count
from lit_sb3.envs.multi_env import FactoryVecEnv
from lit_sb3.vec_env.async_eval import AsyncEval
from lit_sb3.workers.choice import BackendChoice


class EnvGroup:
    """
    The environments of an engine, run by a pool of episode workers (the collector of the gradient agents).

    :param env_fns: One factory per environment, each returning a gymnasium ``Env`` (picklable by cloudpickle).
    :param backend: ``"processes"`` (local worker processes), ``"threads"`` (worker threads of this process) or
        ``"ray"`` (one Ray actor per worker, on the Ray instance this process is connected to, else a local one;
        ``pip install lit_sb3[ray]``).
    :param n_workers: Number of collection workers, at most one per environment; by default one process (or actor)
        per core but one, which the trainer keeps, or one thread.
    :param max_episodes_in_buffer: Most finished episodes buffered at once across the workers.
    :param max_restarts: Dead workers replaced before the run fails.
    :param eval_env_fn: Factory of the evaluation environment; by default ``env_fns[0]``.
    :param n_eval_workers: Number of evaluation workers.
    :param ray_address: With ``backend="ray"``: the cluster to connect to (e.g. ``"auto"``); by default the Ray
        connection this process has, else a new local Ray instance.
    :param worker_resources: With ``backend="ray"``: the resources of each worker's actor, collection and evaluation
        alike (``num_cpus`` is 1 by default).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        backend: str = "processes",
        n_workers: int | None = None,
        max_episodes_in_buffer: int = 8,
        max_restarts: int = 3,
        eval_env_fn: Callable[[], gym.Env] | None = None,
        n_eval_workers: int = 1,
        ray_address: str | None = None,
        worker_resources: Mapping[str, float] | None = None,
    ) -> None:
        self.env = FactoryVecEnv(env_fns)  # checks env_fns; num_envs is len(env_fns), as the algorithm counts
        self.workers = BackendChoice.parse(backend, ray_address=ray_address, worker_resources=worker_resources)
        if n_workers is not None:
            check_positive_int("n_workers", n_workers)
            check_worker_count(n_workers, len(self.env.env_fns))
        check_positive_int("max_episodes_in_buffer", max_episodes_in_buffer)
        check_positive_int("n_eval_workers", n_eval_workers)
        check_non_negative_int("max_restarts", max_restarts)
        if eval_env_fn is not None and not callable(eval_env_fn):
            raise TypeError(f"eval_env_fn must be callable (returning a gymnasium Env), got {type(eval_env_fn)!r}")
        self.backend = backend
        self.n_workers = n_workers or self.workers.default_workers(len(self.env.env_fns))
        self.max_episodes_in_buffer = max_episodes_in_buffer
        self.max_restarts = max_restarts
        self.eval_env_fn = eval_env_fn or self.env.env_fns[0]
        self.n_eval_workers = n_eval_workers

    @property
    def num_envs(self) -> int:
        """Number of collection environments."""
        return len(self.env.env_fns)

    def start_collector(
        self,
        policy: BasePolicy,
        plan: CollectionPlan,
        progress: Progress,
        *,
        max_policy_lag: int | None,
        weight_sync_interval: float,
        initial_version: int,
        vec_normalize: VecNormalize | None = None,
    ) -> AsyncCollector:
        """
        :param policy: A copy of the trainer's policy (copied to the workers; its weights act until the first
            publication).
        :param plan: How the algorithm's episodes are collected.
        :param progress: The trainer's progress now.
        :param max_policy_lag: Episodes older than this many versions when assembled are dropped; None for no bound.
        :param weight_sync_interval: Least seconds between two weight publications.
        :param initial_version: The version of ``policy``'s weights.
        :param vec_normalize: The algorithm's ``VecNormalize`` around :attr:`env`, if any.
        :return: The started collection.
        """
        return AsyncCollector(
            self.env,
            self.env.env_fns,
            policy,
            plan.acting,
            progress,
            rollout=plan.rollout,
            backend=self.workers,
            n_workers=self.n_workers,
            max_episodes_in_buffer=self.max_episodes_in_buffer,
            queue_put_timeout=None,
            weight_sync_interval=weight_sync_interval,
            max_policy_lag=max_policy_lag,
            max_restarts=self.max_restarts,
            initial_version=initial_version,
            vec_normalize=vec_normalize,
        )

    def start_evaluator(
        self, policy: BasePolicy, n_episodes: int, vec_normalize: VecNormalize | None = None
    ) -> AsyncEval:
        """
        :param policy: The policy whose flat weight vectors are evaluated.
        :param n_episodes: Episodes per evaluation.
        :param vec_normalize: The algorithm's ``VecNormalize``, if any: with normalised observations, the evaluation
            environments normalise them too, with statistics the engine syncs and never updates, and raw rewards.
        :return: Evaluation workers of the same backend as the collection.
        """
        normalize = None
        if vec_normalize is not None and vec_normalize.norm_obs:
            normalize = (vec_normalize.clip_obs, vec_normalize.epsilon)
        envs_fn: list[Callable[[], VecEnv]] = [
            functools.partial(_vec_env, self.eval_env_fn, normalize)
        ] * self.n_eval_workers
        # On Ray, the collection's connection (started first) is the evaluation's too: no address again.
        return AsyncEval(
            envs_fn,
            policy,
            n_eval_episodes=n_episodes,
            backend=self.workers.backend,
            worker_resources=self.workers.worker_resources,
        )


def _vec_env(env_fn: Callable[[], gym.Env], normalize: tuple[float, float] | None) -> VecEnv:
    """:param normalize: ``VecNormalize``'s ``clip_obs`` and ``epsilon``, or None for raw observations."""
    env = DummyVecEnv([env_fn])
    if normalize is None:
        return env
    clip_obs, epsilon = normalize
    return VecNormalize(env, training=False, norm_reward=False, clip_obs=clip_obs, epsilon=epsilon)
