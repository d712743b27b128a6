"""The learning study's tasks and configurations: ours, EvoTorch's and sb3-contrib's, and their labels."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import sb3_contrib
from learning import ARS_PAPER_HALFCHEETAH, ARS_PAPER_SWIMMER, Task
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize

from lit_sb3 import ARS, CEM, CMAES, ES, PGPE, SNES, XNES
from lit_sb3.cli.common import POPULATION_N_ENVS
from lit_sb3.vec_env import CandidateEval

N_WORKERS = 2
# Besides CORE_PACKAGES: what a run's exact path depends on.
STUDY_PACKAGES = ("mujoco", "numpy", "cma", "sb3-contrib", "evotorch")

# The ARS paper's table 9 (V2-t, observation normalisation); the shift is code/ars.py's "--shift" (alive bonus).
ARS_PAPER_HOPPER = {"n_delta": 8, "n_top": 4, "learning_rate": 0.01, "delta_std": 0.025, "alive_bonus_offset": -1}
ARS_PAPER_WALKER2D = {"n_delta": 40, "n_top": 30, "learning_rate": 0.03, "delta_std": 0.025, "alive_bonus_offset": -1}
ARS_PAPER_ANT = {"n_delta": 60, "n_top": 20, "learning_rate": 0.015, "delta_std": 0.025, "alive_bonus_offset": -1}
ARS_PAPER_HUMANOID = {
    "n_delta": 230,
    "n_top": 230,
    "learning_rate": 0.02,
    "delta_std": 0.0075,
    "alive_bonus_offset": -5,
}

# rl-baselines3-zoo's hyperparams/ars.yml (github:DLR-RM/rl-baselines3-zoo), its MuJoCo "-v4" entries, applied to
# the "-v5" tasks: policy LinearPolicy, n_envs 1 and normalize "dict(norm_obs=True, norm_reward=False)" (all but
# Swimmer) are what the study's environments already are; n_timesteps is rl-zoo's budget (the study's budgets cap
# it). Walker2d and Ant equal the ARS paper's settings; Humanoid has 256 directions where the paper has 230.
RL_ZOO_ARS: dict[str, dict[str, Any]] = {
    "swimmer": {"n_delta": 1, "n_top": 1, "learning_rate": 0.02, "delta_std": 0.01, "alive_bonus_offset": 0},
    "hopper": {"n_delta": 8, "n_top": 4, "learning_rate": 0.01, "delta_std": 0.025, "alive_bonus_offset": -1},
    "halfcheetah": {"n_delta": 32, "n_top": 4, "learning_rate": 0.02, "delta_std": 0.03, "alive_bonus_offset": 0},
    "walker2d": {"n_delta": 40, "n_top": 30, "learning_rate": 0.03, "delta_std": 0.025, "alive_bonus_offset": -1},
    "ant": {"n_delta": 60, "n_top": 20, "learning_rate": 0.015, "delta_std": 0.025, "alive_bonus_offset": -1},
    "humanoid": {"n_delta": 256, "n_top": 256, "learning_rate": 0.02, "delta_std": 0.0075, "alive_bonus_offset": -5},
}
RL_ZOO_N_TIMESTEPS = {
    "swimmer": 2_000_000,
    "hopper": 7_000_000,
    "halfcheetah": 12_500_000,
    "walker2d": 75_000_000,
    "ant": 75_000_000,
    "humanoid": 250_000_000,
}

# EvoTorch's PGPE + ClipUp recipes for MuJoCo (github:nnaisense/evotorch): Humanoid from examples/scripts/rl_gym.py
# (as the README's, with its max_speed 0.015 where the README's text has 0.15), Walker2d from
# examples/scripts/rl_clipup.py's "walker" configuration (center_learning_rate 0.75 x max_speed, radius_init
# 15 x max_speed, stdev_learning_rate 0.1, stdev_max_change 0.2, momentum 0.9, observation normalisation, alive
# bonus removed). The Walker2d recipe, the only other MuJoCo one, is used for every task but Humanoid.
EVOTORCH_PGPE_WALKER2D: dict[str, Any] = {
    "popsize": 100,
    "center_learning_rate": 0.01125,
    "stdev_learning_rate": 0.1,
    "stdev_max_change": 0.2,
    "radius_init": 0.225,  # earlier runs: 15 * 0.015, one unit in the last place below
    "num_interactions": 75_000,
    "popsize_max": 800,
    "optimizer": "clipup",
    "optimizer_config": {"max_speed": 0.015, "momentum": 0.9},
}
EVOTORCH_PGPE_HUMANOID: dict[str, Any] = {
    **EVOTORCH_PGPE_WALKER2D,
    "popsize": 200,
    "center_learning_rate": 0.01125,
    "radius_init": 0.27,
    "num_interactions": 150_000,
    "popsize_max": 3200,
}


@dataclass(frozen=True)
class StudyTask:
    """
    :param task: Threshold, budget, normalisation and evaluation interval.
    :param fixed_budget: Env steps a run goes on to even after reaching the threshold.
    :param ars: The ARS paper's hyper-parameters for the task.
    :param alive_bonus: The env's reward per step alive (what EvoTorch's ``decrease_rewards_by`` removes).
    :param evotorch_pgpe: EvoTorch's PGPE recipe for the task.
    :param clip_obs: ``VecNormalize``'s ``clip_obs``.
    """

    task: Task
    fixed_budget: int
    ars: dict[str, Any]
    alive_bonus: float = 0.0
    evotorch_pgpe: dict[str, Any] = field(default_factory=lambda: EVOTORCH_PGPE_WALKER2D)
    clip_obs: float = 10.0


TASKS = {
    "halfcheetah": StudyTask(
        Task("halfcheetah", "HalfCheetah-v5", 3430.0, 5_000_000, normalize=True, eval_interval=1),
        1_000_000,
        ARS_PAPER_HALFCHEETAH,
    ),
    "swimmer": StudyTask(
        Task("swimmer", "Swimmer-v5", 325.0, 1_200_000, normalize=False, eval_interval=20_000),
        500_000,
        ARS_PAPER_SWIMMER,
    ),
    "hopper": StudyTask(
        # rl-zoo's ARS budget: seeds that stand still near 3,000 can take millions of steps to cross (runs before
        # 2026-12-02 had 3M).
        Task("hopper", "Hopper-v5", 3120.0, 7_000_000, normalize=True, eval_interval=30_000),
        1_000_000,
        ARS_PAPER_HOPPER,
        alive_bonus=1.0,
    ),
    "walker2d": StudyTask(
        Task("walker2d", "Walker2d-v5", 4390.0, 30_000_000, normalize=True, eval_interval=100_000),
        5_000_000,
        ARS_PAPER_WALKER2D,
        alive_bonus=1.0,
    ),
    "ant": StudyTask(
        Task("ant", "Ant-v5", 3580.0, 30_000_000, normalize=True, eval_interval=100_000),
        5_000_000,
        ARS_PAPER_ANT,
        alive_bonus=1.0,
    ),
    "humanoid": StudyTask(
        Task("humanoid", "Humanoid-v5", 6000.0, 100_000_000, normalize=True, eval_interval=500_000),
        10_000_000,
        ARS_PAPER_HUMANOID,
        alive_bonus=5.0,
        evotorch_pgpe=EVOTORCH_PGPE_HUMANOID,
    ),
}


def make_env(
    env_id: str,
    normalize: bool,
    clip_obs: float = 10.0,
    epsilon: float = 1e-8,
    *,
    n_envs: int = 1,
    training: bool = True,
) -> VecEnv:
    """:return: The vectorised environment of a task (``VecNormalize(norm_reward=False)`` for ARS V2)."""
    env: VecEnv = DummyVecEnv([lambda: gym.make(env_id)] * n_envs)
    if normalize:
        env = VecNormalize(env, norm_reward=False, training=training, clip_obs=clip_obs, epsilon=epsilon)
    return env


class ContribMergeARS(ARS):
    """Our ARS with sb3-contrib's merge of observation statistics (the previously synced ones counted again)."""

    def _merge_observation_statistics(self, evaluator: CandidateEval) -> None:
        if self._vec_normalize_env is None:
            return
        merged = self._vec_normalize_env.obs_rms
        assert isinstance(merged, RunningMeanStd)
        old_count = merged.count
        for worker_obs_rms in evaluator.get_obs_rms():
            merged.combine(worker_obs_rms)
            merged.count -= old_count
        evaluator.sync_obs_rms(merged.copy())


@dataclass(frozen=True)
class Config:
    """
    :param make_model: Builds the model from the task, the training env and the seed.
    :param async_eval: ``"lit_sb3"`` or ``"sb3-contrib"``: what evaluates the candidates, on 2 workers; ``"none"``:
        the training process evaluates them itself, one after the other (rl-zoo's ``n_envs: 1``).
    :param clip_obs: ``VecNormalize``'s ``clip_obs`` (None: the task's).
    :param normalize: Whether observations are normalised (``VecNormalize``; None: as the task says).
    :param obs_epsilon: ``VecNormalize``'s ``epsilon``, added to the variance before its square root.
    :param n_envs: Sub-environments per worker: ``lit-sb3 train``'s default, and 1 for sb3-contrib's ARS and for
        rl-zoo's settings (as rl-zoo gives each of its workers). Results do not depend on it (an episode's seed does
        not depend on the slot that runs it), only the speed.
    """

    make_model: Callable[[StudyTask, VecEnv, int], BaseAlgorithm]
    async_eval: str = "lit_sb3"
    clip_obs: float | None = None
    normalize: bool | None = None
    obs_epsilon: float = 1e-8
    n_envs: int = POPULATION_N_ENVS

    def env_maker(self, study_task: StudyTask) -> functools.partial[VecEnv]:
        """:return: Builds the task's environment for this configuration (``training=False``: to evaluate)."""
        task = study_task.task
        normalize = task.normalize if self.normalize is None else self.normalize
        clip_obs = study_task.clip_obs if self.clip_obs is None else self.clip_obs
        return functools.partial(make_env, task.env_id, normalize, clip_obs, self.obs_epsilon, n_envs=self.n_envs)


def ours(**changes: Any) -> Callable[[StudyTask, VecEnv, int], BaseAlgorithm]:
    return lambda task, env, seed: ARS("LinearPolicy", env, seed=seed, **{**task.ars, **changes})


def contrib_merge(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return ContribMergeARS("LinearPolicy", env, seed=seed, **task.ars)


def contrib(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return sb3_contrib.ARS("LinearPolicy", env, seed=seed, **task.ars)


def contrib_zoo(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return sb3_contrib.ARS("LinearPolicy", env, seed=seed, **RL_ZOO_ARS[task.task.name])


def ours_zoo(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    """Our ARS at rl-zoo's ``ars.yml`` settings (as ``contrib-ars-zoo``)."""
    return ARS("LinearPolicy", env, seed=seed, **RL_ZOO_ARS[task.task.name])


def pgpe_recipe(task: StudyTask, speed_factor: float) -> dict[str, Any]:
    """:return: The task's EvoTorch PGPE recipe with ClipUp's ``max_speed`` and the centre's learning rate scaled."""
    recipe = task.evotorch_pgpe
    return {
        **recipe,
        "center_learning_rate": speed_factor * recipe["center_learning_rate"],
        "optimizer_config": {
            **recipe["optimizer_config"],
            "max_speed": speed_factor * recipe["optimizer_config"]["max_speed"],
        },
    }


def pgpe(task: StudyTask, env: VecEnv, seed: int, speed_factor: float = 1.0) -> BaseAlgorithm:
    """
    PGPE + ClipUp at EvoTorch's recipe (``evotorch-pgpe``), on the same linear policy with bias.

    :param speed_factor: Multiplies ClipUp's ``max_speed`` and the centre's learning rate (1: the recipe's).
    """
    return PGPE(
        "LinearPolicy",
        env,
        seed=seed,
        alive_bonus_offset=-task.alive_bonus,
        policy_kwargs={"with_bias": True},
        **pgpe_recipe(task, speed_factor),
    )


def snes(task: StudyTask, env: VecEnv, seed: int, **changes: Any) -> BaseAlgorithm:
    """SNES from zero, ``stdev_init=0.1``, the paper's population size and learning rates (as ``evotorch-snes``)."""
    return SNES("LinearPolicy", env, seed=seed, **{"stdev_init": 0.1, **changes})


def xnes(task: StudyTask, env: VecEnv, seed: int, **changes: Any) -> BaseAlgorithm:
    """XNES from zero, ``stdev_init=0.1`` unless changed, the paper's population size and learning rates."""
    return XNES("LinearPolicy", env, seed=seed, **{"stdev_init": 0.1, **changes})


#: XNES on a linear policy with a bias (EvoTorch's ``Linear`` has one).
xnes_with_bias = functools.partial(xnes, policy_kwargs={"with_bias": True})


def cmaes(task: StudyTask, env: VecEnv, seed: int, **changes: Any) -> BaseAlgorithm:
    return CMAES("LinearPolicy", env, seed=seed, zero_policy=True, sigma0=0.1, pop_size=32, **changes)


def without_alive_bonus(
    make_model: Callable[..., BaseAlgorithm],
) -> Callable[[StudyTask, VecEnv, int], BaseAlgorithm]:
    """:return: The configuration with the task's alive bonus taken off every reward (as ARS's shift does)."""
    return lambda task, env, seed: make_model(task, env, seed, alive_bonus_offset=-task.alive_bonus)


def es(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return ES("LinearPolicy", env, seed=seed, pop_size=32, sigma=0.03, learning_rate=0.02)


def cem(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return CEM("LinearPolicy", env, seed=seed, zero_policy=True, pop_size=32, initial_std=0.1)


#: EvoTorch's way to normalise observations, near enough: 0.01 added to the variance (it floors it at 0.01), no clip.
VARIANCE_FLOOR: dict[str, Any] = {"clip_obs": 1e6, "obs_epsilon": 1e-2}

CONFIGS: dict[str, Config] = {
    "ars": Config(ours()),
    "contrib-ars-lit": Config(contrib, n_envs=1),
    "contrib-ars-own": Config(contrib, async_eval="sb3-contrib", n_envs=1),
    "contrib-ars-zoo": Config(contrib_zoo, n_envs=1),
    "contrib-ars-zoo-own": Config(contrib_zoo, async_eval="sb3-contrib", n_envs=1),
    "contrib-ars-zoo-in-process": Config(contrib_zoo, async_eval="none", n_envs=1),
    "ars-zoo": Config(ours_zoo, n_envs=1),
    "ars-contrib-merge": Config(contrib_merge),
    "ars-sample-std": Config(ours(return_std_ddof=1)),
    "ars-no-clip": Config(ours(), clip_obs=1e6),
    "ars-update-every-3": Config(ours(normalization_update_interval=3)),
    "ars-update-every-10": Config(ours(normalization_update_interval=10)),
    "ars-inertia-3": Config(ours(normalization_inertia=3.0)),
    "cmaes": Config(cmaes),
    "es": Config(es),
    "cem": Config(cem),
    "pgpe": Config(pgpe, normalize=True),
    "pgpe-variance-floor": Config(pgpe, normalize=True, **VARIANCE_FLOOR),
    "pgpe-speed-2x": Config(functools.partial(pgpe, speed_factor=2.0), normalize=True),
    "pgpe-speed-3x": Config(functools.partial(pgpe, speed_factor=3.0), normalize=True),
    "pgpe-speed-4x": Config(functools.partial(pgpe, speed_factor=4.0), normalize=True),
    "pgpe-speed-3x-variance-floor": Config(functools.partial(pgpe, speed_factor=3.0), normalize=True, **VARIANCE_FLOOR),
    "snes": Config(snes),
    "snes-stdev-1": Config(functools.partial(snes, stdev_init=1.0)),
    "snes-stdev-1-popsize-6": Config(functools.partial(snes, stdev_init=1.0, popsize=6)),
    "xnes": Config(xnes),
    "snes-no-alive-bonus": Config(without_alive_bonus(snes)),
    "xnes-no-alive-bonus": Config(without_alive_bonus(xnes)),
    "xnes-bias-no-alive-bonus": Config(without_alive_bonus(xnes_with_bias)),
    "xnes-bias-stdev-0.05-no-alive-bonus": Config(
        without_alive_bonus(functools.partial(xnes_with_bias, stdev_init=0.05))
    ),
    "cmaes-no-alive-bonus": Config(without_alive_bonus(cmaes)),
    "cmaes-separable": Config(functools.partial(cmaes, cma_options={"CMA_diagonal": True})),
}


@dataclass(frozen=True)
class EvoTorchConfig:
    """
    :param make_searcher: Builds the searcher from the task, the ``GymNE`` problem and the initial centre.
    :param observation_normalization: ``GymNE``'s ``observation_normalization`` (None: the task's).
    :param remove_alive_bonus: Whether ``GymNE`` decreases every reward by the task's alive bonus.
    """

    make_searcher: Callable[[StudyTask, Any, Any], Any]
    observation_normalization: bool | None = None
    remove_alive_bonus: bool = False


def evotorch_pgpe(task: StudyTask, problem: Any, zeros: Any, speed_factor: float = 1.0) -> Any:
    """EvoTorch's PGPE + ClipUp at its recipe, ``max_speed`` and the centre's learning rate times ``speed_factor``."""
    from evotorch.algorithms import PGPE

    return PGPE(problem, **pgpe_recipe(task, speed_factor))


def evotorch_cmaes(task: StudyTask, problem: Any, zeros: Any) -> Any:
    """CMA-ES from zero as our ``cmaes`` configuration (``sigma0=0.1, pop_size=32``)."""
    from evotorch import algorithms

    return algorithms.CMAES(problem, stdev_init=0.1, popsize=32, center_init=zeros)


def evotorch_snes(
    task: StudyTask, problem: Any, zeros: Any, stdev_init: float = 0.1, popsize: int | None = None
) -> Any:
    """SNES from zero, ``stdev_init=0.1``, EvoTorch's default population size (None) and learning rates."""
    from evotorch import algorithms

    return algorithms.SNES(problem, stdev_init=stdev_init, popsize=popsize, center_init=zeros)


def evotorch_xnes(task: StudyTask, problem: Any, zeros: Any) -> Any:
    """XNES from zero, ``stdev_init=0.1``, EvoTorch's default population size and learning rates."""
    from evotorch import algorithms

    return algorithms.XNES(problem, stdev_init=0.1, center_init=zeros)


EVOTORCH_CONFIGS: dict[str, EvoTorchConfig] = {
    "evotorch-pgpe": EvoTorchConfig(evotorch_pgpe, observation_normalization=True, remove_alive_bonus=True),
    "evotorch-pgpe-speed-3x": EvoTorchConfig(
        functools.partial(evotorch_pgpe, speed_factor=3.0), observation_normalization=True, remove_alive_bonus=True
    ),
    "evotorch-cmaes": EvoTorchConfig(evotorch_cmaes),
    "evotorch-snes": EvoTorchConfig(evotorch_snes),
    "evotorch-snes-stdev-1": EvoTorchConfig(functools.partial(evotorch_snes, stdev_init=1.0)),
    "evotorch-snes-stdev-1-popsize-6": EvoTorchConfig(functools.partial(evotorch_snes, stdev_init=1.0, popsize=6)),
    "evotorch-xnes-no-alive-bonus": EvoTorchConfig(evotorch_xnes, remove_alive_bonus=True),
}


LABELS = {
    "ars": "lit_sb3 ARS",
    "contrib-ars-lit": "sb3-contrib ARS + lit_sb3 AsyncEval",
    "contrib-ars-own": "sb3-contrib ARS + its AsyncEval",
    "contrib-ars-zoo": "sb3-contrib ARS, rl-zoo's ars.yml, + lit_sb3 AsyncEval",
    "contrib-ars-zoo-own": "sb3-contrib ARS, rl-zoo's ars.yml, + its AsyncEval",
    "contrib-ars-zoo-in-process": "sb3-contrib ARS, rl-zoo's ars.yml, in one process (as rl-zoo runs it)",
    "ars-zoo": "lit_sb3 ARS, rl-zoo's ars.yml",
    "ars-contrib-merge": "lit_sb3 ARS, sb3-contrib's merge",
    "ars-inertia-3": "lit_sb3 ARS, normalization_inertia=3",
    "ars-update-every-3": "lit_sb3 ARS, normalization_update_interval=3",
    "ars-update-every-10": "lit_sb3 ARS, normalization_update_interval=10",
    "ars-sample-std": "lit_sb3 ARS, sample std",
    "ars-no-clip": "lit_sb3 ARS, clip_obs=1e6",
    "cmaes": "lit_sb3 CMAES",
    "es": "lit_sb3 ES",
    "cem": "lit_sb3 CEM",
    "pgpe": "lit_sb3 PGPE + ClipUp (EvoTorch's MuJoCo recipe)",
    "pgpe-variance-floor": "lit_sb3 PGPE + ClipUp, observations normalised with variance + 0.01, no clip",
    "pgpe-speed-2x": "lit_sb3 PGPE + ClipUp, 2x the recipe's ClipUp speed (max_speed, centre learning rate)",
    "pgpe-speed-3x": "lit_sb3 PGPE + ClipUp, 3x the recipe's ClipUp speed (max_speed, centre learning rate)",
    "pgpe-speed-4x": "lit_sb3 PGPE + ClipUp, 4x the recipe's ClipUp speed (max_speed, centre learning rate)",
    "pgpe-speed-3x-variance-floor": (
        "lit_sb3 PGPE + ClipUp, 3x the recipe's ClipUp speed, observations normalised with variance + 0.01, no clip"
    ),
    "snes": "lit_sb3 SNES",
    "snes-stdev-1": "lit_sb3 SNES, stdev_init 1.0",
    "snes-stdev-1-popsize-6": "lit_sb3 SNES, stdev_init 1.0, popsize 6",
    "xnes": "lit_sb3 XNES",
    "snes-no-alive-bonus": "lit_sb3 SNES, alive bonus removed",
    "xnes-no-alive-bonus": "lit_sb3 XNES, alive bonus removed",
    "xnes-bias-no-alive-bonus": "lit_sb3 XNES, linear policy with bias (as EvoTorch's), alive bonus removed",
    "xnes-bias-stdev-0.05-no-alive-bonus": (
        "lit_sb3 XNES, linear policy with bias, stdev_init 0.05, alive bonus removed"
    ),
    "cmaes-no-alive-bonus": "lit_sb3 CMAES, alive bonus removed",
    "cmaes-separable": "lit_sb3 CMAES, separable (diagonal covariance)",
    "evotorch-pgpe": "EvoTorch 0.6.1 PGPE + ClipUp (its MuJoCo recipe), GymNE 2 actors",
    "evotorch-pgpe-speed-3x": (
        "EvoTorch 0.6.1 PGPE + ClipUp, 3x the recipe's ClipUp speed (max_speed, centre learning rate), GymNE 2 actors"
    ),
    "evotorch-cmaes": "EvoTorch 0.6.1 CMA-ES, GymNE 2 actors",
    "evotorch-snes": "EvoTorch 0.6.1 SNES, GymNE 2 actors",
    "evotorch-snes-stdev-1": "EvoTorch 0.6.1 SNES, stdev_init 1.0, GymNE 2 actors",
    "evotorch-snes-stdev-1-popsize-6": "EvoTorch 0.6.1 SNES, stdev_init 1.0, popsize 6, GymNE 2 actors",
    "evotorch-xnes-no-alive-bonus": "EvoTorch 0.6.1 XNES, alive bonus removed, GymNE 2 actors",
}
