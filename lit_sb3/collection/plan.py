"""What collection needs to know of a Stable-Baselines3 algorithm, worked out in one place for the injected agents
and the engines: whether it can be collected for, how workers act, how rollouts are built and what workers learn of
the trainer's progress."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3.collection.episodes import ActingSpec, ObservationNormalization, Progress
from lit_sb3.collection.rollout import RolloutSpec

#: Algorithms whose collection needs more than observations and actions (recurrent states, action masks).
UNSUPPORTED = {
    "RecurrentPPO": "its LSTM states would have to travel with every episode and be replayed in training",
    "MaskablePPO": "its action masks come from the environment at every step and are not collected",
}


def check_supported(algorithm_class: type) -> None:
    """
    :param algorithm_class: A Stable-Baselines3 (or sb3-contrib) algorithm class.
    :raises TypeError: if it is neither an on-policy nor an off-policy algorithm.
    :raises ValueError: if its collection needs more than observations and actions (see :data:`UNSUPPORTED`).
    """
    if not (isinstance(algorithm_class, type) and issubclass(algorithm_class, BaseAlgorithm)):
        raise TypeError(f"async collection needs a Stable-Baselines3 algorithm class, got {algorithm_class!r}")
    for base in algorithm_class.__mro__:
        if base.__name__ in UNSUPPORTED:
            raise ValueError(f"{base.__name__} is not supported by async collection: {UNSUPPORTED[base.__name__]}")
    if not issubclass(algorithm_class, OnPolicyAlgorithm | OffPolicyAlgorithm):
        raise TypeError(f"{algorithm_class.__name__} is neither an on-policy nor an off-policy algorithm")


@dataclass(frozen=True)
class CollectionPlan:
    """
    How an algorithm's episodes are collected. Build it with :meth:`for_algorithm`.

    :param algorithm: The algorithm (its exploration schedule is read at every :meth:`progress`).
    :param acting: How workers act, as the algorithm's own ``collect_rollouts`` would.
    :param rollout: On-policy: how rollouts are built; None off-policy.
    """

    algorithm: BaseAlgorithm
    acting: ActingSpec
    rollout: RolloutSpec | None

    @classmethod
    def for_algorithm(
        cls,
        algorithm: BaseAlgorithm,
        base_seed: int,
        *,
        lockstep: bool = False,
        n_collection_envs: int | None = None,
        split_episodes: bool = False,
    ) -> CollectionPlan:
        """
        :param algorithm: The SB3 algorithm whose collection is planned (with its env set).
        :param base_seed: Seed of the episodes' resets and of the workers' random draws.
        :param lockstep: On-policy: reproducible collection, each environment its share of the rollout's
            ``n_steps * n_envs`` steps (see :mod:`lit_sb3.collection.lockstep`).
        :param n_collection_envs: Environments the workers step; by default the algorithm's ``n_envs`` (an
            ``IndexableMultiEnv`` counts as one environment for the algorithm but holds several).
        :param split_episodes: On-policy, free-running: rollouts of exactly ``n_steps * n_envs`` steps, the episode
            that crosses that cut there (Stable-Baselines3's rollout size); False: whole episodes.
        :return: The plan.
        """
        check_supported(type(algorithm))
        settings: Any = algorithm
        normalize = algorithm.get_vec_normalize_env()
        normalization = (
            ObservationNormalization(normalize.clip_obs, normalize.epsilon)
            if isinstance(normalize, VecNormalize) and normalize.norm_obs
            else None
        )
        shared = {
            "gamma": settings.gamma,
            "use_sde": settings.use_sde,
            "sde_sample_freq": settings.sde_sample_freq,
            "base_seed": base_seed,
            "normalization": normalization,
        }
        if isinstance(algorithm, OnPolicyAlgorithm):
            target_steps = algorithm.n_steps * algorithm.n_envs
            steps_per_env = -(-target_steps // (n_collection_envs or algorithm.n_envs))
            acting = ActingSpec(on_policy=True, lockstep_steps=steps_per_env if lockstep else None, **shared)
            rollout = RolloutSpec(
                target_steps,
                algorithm.gamma,
                algorithm.gae_lambda,
                algorithm.device,
                split_episodes=split_episodes and not lockstep,
            )
            return cls(algorithm, acting, rollout)
        if lockstep:
            raise ValueError("lockstep (reproducible) collection is for on-policy algorithms")
        acting = ActingSpec(
            on_policy=False,
            learning_starts=settings.learning_starts,
            warm_up_steps=-(-settings.learning_starts // (n_collection_envs or algorithm.n_envs)),
            use_sde_at_warmup=settings.use_sde_at_warmup,
            action_noise=settings.action_noise,
            epsilon_greedy=hasattr(algorithm, "exploration_rate"),
            **shared,
        )
        return cls(algorithm, acting, None)

    def progress(self, num_timesteps: int) -> Progress:
        """
        :param num_timesteps: Environment steps collected or trained on so far.
        :return: What the workers learn of the trainer besides its weights. DQN's epsilon comes from its schedule,
            not ``exploration_rate``, which stays 0 until the first ``_on_step()``.
        """
        schedule = getattr(self.algorithm, "exploration_schedule", None)
        rate = schedule(self.algorithm._current_progress_remaining) if schedule is not None else 0.0
        return Progress(num_timesteps, float(rate))
