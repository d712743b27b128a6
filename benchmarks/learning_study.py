"""Learning study: many seeds per configuration, one run per process, every run appended to a JSON-lines log.

Each run trains one (task, configuration, seed) on 2 workers (or, as rl-zoo runs sb3-contrib's ARS with its
``n_envs: 1``, in its own process: ``contrib-ars-zoo-in-process``) until the task's threshold or its step budget and
logs its evaluation curve: env steps, training wall time, mean return of 10 deterministic episodes of the centre
policy, and training CPU-seconds. The centre is evaluated at round starts (at least ``eval_interval`` env steps
apart) on the same 10 reset seeds every time; neither its wall time nor its CPU time is counted. A run also logs the
machine's load average before and after (the machine is shared: wall times are noisy, steps to threshold are not).
A run goes on to at least the task's fixed budget, so the return at that budget is known for every seed. A seed
run again (a queue line with a larger budget: it goes on from the last run's checkpoint, or, our runs being
deterministic, repeats the old run up to its budget) replaces its earlier record in the report and the figures.
Deterministic means on one machine with one set of packages: a record names both (``machine``: CPU, Python and the
versions of the packages that decide a run's path). Elsewhere a seed takes another path: Swimmer SNES
(``snes-stdev-1``) seed 1 reached the threshold at 144k steps in its study record (commit 4e58036) and at 168k when
run again on another machine at the same commit.

Env steps count every step of every candidate's episode (ARS's ``num_timesteps``); centre evaluations are not
counted. CPU-seconds are those of the run's process tree, read with ``psutil``: the main process plus every process
below it (worker pools, sb3-contrib's workers, Ray's actors and the Ray services ``ray.init`` starts), each counted
up to the last time the study saw it alive (at each evaluation); the main process's CPU time during evaluations is
taken off. Wall and CPU clocks start after the worker pool (or Ray's actors) is up, when training starts.

Tasks and thresholds are the ARS paper's (Mania et al. 2018, table 1); the ARS settings per task are the paper's
(its table 9, and github:modestyachts/ARS ``code/ars.py`` for the alive-bonus shift).

EvoTorch configurations (``evotorch-*``) run EvoTorch's own ``GymNE`` with 2 Ray actors (``num_actors=2``) and a
linear policy with bias (``"Linear(obs_length, act_length)"``). They need::

    pip install torch==2.13.0 evotorch==0.6.1   # torch first: a bare torch pulls a CUDA build

EvoTorch's counter ``GymNE.interaction_count`` (``status["total_interaction_count"]``) counts every env step of
every solution's episode during training evaluations (those that update the observation statistics), summed over
the actors: the study's env steps. Its centre (``status["center"]``) is evaluated as ours is: the policy
``problem.to_policy(center)`` (EvoTorch's observation normalisation and action clipping), 10 episodes on the
study's reset seeds, in the main process, with raw rewards (no alive-bonus decrease). EvoTorch runs are not
reproducible from their seed (Ray actors seed their environments themselves).

Subcommands::

    python benchmarks/learning_study.py run --task halfcheetah --config ars --seed 0 --out runs.jsonl
    python benchmarks/learning_study.py queue jobs.txt --out runs.jsonl   # runs "task config seed [budget]" lines
    python benchmarks/learning_study.py report runs.jsonl                 # the table (markdown; --results: a file)
    python benchmarks/learning_study.py figures runs.jsonl figures/       # learning curves: per task, and suite.png
    python benchmarks/learning_study.py update-cost --task humanoid --config xnes  # ask/tell alone, no env steps
    python benchmarks/learning_study.py throughput --task hopper --config ars --steps 1000000 --out rates.jsonl
    python benchmarks/learning_study.py env-rate --task hopper --out env_rates.jsonl  # env.step alone, one core

``throughput`` measures a configuration's training rate alone (``report --throughput`` divides each seed's env steps
to the threshold by the median of its measurements); ``env-rate`` the environment's own, with no policy, no
normalisation and no workers: the most env steps a second any library gets out of one core.

``queue`` takes the first line of the jobs file off it and runs it, until the file is empty, so the queue can be
edited while it runs. The job being run is kept in ``JOBS.running``; a queue started later puts the jobs of a queue
that was killed back at the head of the jobs file. A run that fails is appended to ``JOBS.failed``. Every run saves
a checkpoint (its model or EvoTorch searcher, curve and clocks) between two rounds every ``CHECKPOINT_INTERVAL``
seconds, in ``OUT.checkpoints/``, and a run that finds its checkpoint goes on from it (its record counts the
``resumes``): a run may span sessions that end their processes. The checkpoint of a finished run is kept
(``OUT.checkpoints/TASK-CONFIG-SEED``), so a run of the seed with a larger budget goes on from where the last one
ended instead of repeating it. ``Checkpoint`` says what a resumed run repeats exactly.
Configurations (``--config``): see ``CONFIGS`` and ``EVOTORCH_CONFIGS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import functools
import itertools
import json
import os
import pickle
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import gymnasium as gym
import numpy as np
import psutil
import sb3_contrib
import torch
from learning import ARS_PAPER_HALFCHEETAH, ARS_PAPER_SWIMMER, EVAL_SEED, N_EVAL_EPISODES, Task, ThresholdReachedError
from sb3_contrib.common.vec_env import AsyncEval as ContribAsyncEval
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize, sync_envs_normalization

from lit_sb3 import ARS, CEM, CMAES, ES, PGPE, SNES, XNES, AsyncEval
from lit_sb3.cli.bench_results import (
    CORE_PACKAGES,
    Column,
    LoadSampler,
    Table,
    machine_description,
    new_result,
    save_result,
)
from lit_sb3.cli.common import POPULATION_N_ENVS
from lit_sb3.evaluation.obs_rms import subtract_running_mean_std
from lit_sb3.evaluation.seeding import episode_seed
from lit_sb3.vec_env import CandidateEval, InProcessEval

N_WORKERS = 2
# Besides CORE_PACKAGES: what a run's exact path depends on.
STUDY_PACKAGES = ("mujoco", "numpy", "cma", "sb3-contrib", "evotorch")
CPU_MEASURE = "psutil: main process + every descendant process (user + system), told apart by pid and start since boot"

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


class InertialARS(ARS):
    """
    Our ARS whose normalisation weighs the statistics merged so far ``inertia`` times their count when a round's
    observations are added (about what sb3-contrib's merge does with ``inertia - 1`` workers); exact ones kept.
    """

    inertia = 3.0

    def _normalization_statistics(self, exact: RunningMeanStd, in_use: RunningMeanStd) -> RunningMeanStd:
        previous = self._exact_obs_rms if self._exact_obs_rms is not None else in_use
        new_data = subtract_running_mean_std(exact, previous)
        weighted = in_use.copy()
        weighted.count *= self.inertia
        weighted.combine(new_data)
        weighted.count = in_use.count + new_data.count
        return weighted


def inertial(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return InertialARS("LinearPolicy", env, seed=seed, **task.ars)


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
    "ars-inertia-3": Config(inertial),
    "cmaes": Config(cmaes),
    "es": Config(es),
    "cem": Config(cem),
    "pgpe": Config(pgpe, normalize=True),
    "pgpe-variance-floor": Config(pgpe, normalize=True, clip_obs=1e6, obs_epsilon=1e-2),
    "pgpe-speed-2x": Config(functools.partial(pgpe, speed_factor=2.0), normalize=True),
    "pgpe-speed-3x": Config(functools.partial(pgpe, speed_factor=3.0), normalize=True),
    "snes": Config(snes),
    "snes-stdev-1": Config(functools.partial(snes, stdev_init=1.0)),
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


def evotorch_snes(task: StudyTask, problem: Any, zeros: Any, stdev_init: float = 0.1) -> Any:
    """SNES from zero, ``stdev_init=0.1``, EvoTorch's default population size and learning rates."""
    from evotorch import algorithms

    return algorithms.SNES(problem, stdev_init=stdev_init, center_init=zeros)


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
    "evotorch-xnes-no-alive-bonus": EvoTorchConfig(evotorch_xnes, remove_alive_bonus=True),
}


def uptime_load() -> float:
    """:return: The 1-minute load average."""
    return os.getloadavg()[0]


@dataclass
class Record:
    """
    One run, as logged. ``curve`` points are (env steps, wall time, return, CPU-seconds); records written before
    CPU time was measured have (env steps, wall time, return) points and no CPU fields.
    """

    task: str
    config: str
    seed: int
    budget: int
    curve: list[tuple[int, float, float, float]] = field(default_factory=list)
    steps_to_threshold: int | None = None
    time_to_threshold: float | None = None
    cpu_to_threshold: float | None = None
    cpu_measure: str = CPU_MEASURE
    resumes: int = 0
    commit: str = ""
    load_before: float = 0.0
    load_after: float = 0.0
    started: str = ""
    seconds: float = 0.0
    machine: str = ""


class ProcessTreeCpu:
    """
    CPU-seconds (user + system) of this process and its descendants, each as last seen alive: a thread looks every
    ``interval`` seconds, so a process that ends (a pool closed by ``learn()``) loses at most that much.

    :param interval: Seconds between two looks.
    """

    def __init__(self, interval: float = 1.0) -> None:
        self._process = psutil.Process()
        self._descendants: dict[tuple[int, float], float] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(interval,), daemon=True)
        self._thread.start()

    def _watch(self, interval: float) -> None:
        while not self._stopped.wait(interval):
            self.seconds()

    def seconds(self) -> float:
        with self._lock:
            for child in self._process.children(recursive=True):
                try:
                    with child.oneshot():
                        times = child.cpu_times()
                        # Its start in seconds since boot: create_time() follows the wall clock, and a step of that
                        # clock would make every descendant look new and count it twice.
                        started = round(child.create_time() - psutil.boot_time(), 2)
                        self._descendants[child.pid, started] = times.user + times.system
                except psutil.NoSuchProcess:
                    pass
            own = self._process.cpu_times()
            return own.user + own.system + sum(self._descendants.values())

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


class StudyCurve:
    """
    One run's evaluation curve, clocks that leave evaluations out, and the first crossing of the threshold.

    :param study_task: The task.
    """

    def __init__(self, study_task: StudyTask) -> None:
        self.study_task = study_task
        self.curve: list[tuple[int, float, float, float]] = []
        self.at_threshold: tuple[int, float, float] | None = None  # env steps, wall time, CPU-seconds
        self._cpu = ProcessTreeCpu()
        self._started_at = self._cpu_at_start = 0.0
        self._eval_time = self._eval_cpu = 0.0
        self._last_steps: int | None = None
        self._elapsed_before = (0.0, 0.0)  # wall time and CPU-seconds of the sessions before a resume
        self.resumes = 0  # how many times the run went on from a checkpoint

    def start(self) -> None:
        wall_before, cpu_before = self._elapsed_before
        self._started_at = time.perf_counter() - wall_before
        self._cpu_at_start = self._cpu.seconds() - cpu_before

    def elapsed(self) -> tuple[float, float]:
        """:return: Training wall time and CPU-seconds so far."""
        wall = time.perf_counter() - self._started_at - self._eval_time
        return wall, self._cpu.seconds() - self._cpu_at_start - self._eval_cpu

    @contextmanager
    def excluded(self) -> Iterator[None]:
        """Leave the wall time and the main process's CPU time of the block out of the clocks."""
        began, cpu_began = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self._eval_time += time.perf_counter() - began
            self._eval_cpu += time.process_time() - cpu_began

    def state(self) -> dict[str, Any]:
        """:return: What :meth:`restore` needs to go on after a checkpoint (JSON-serialisable)."""
        return {
            "curve": self.curve,
            "at_threshold": self.at_threshold,
            "elapsed": self.elapsed(),
            "last_steps": self._last_steps,
            "resumes": self.resumes,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Go on from :meth:`state` (call before :meth:`start`)."""
        self.curve = [(int(steps), wall, value, cpu) for steps, wall, value, cpu in state["curve"]]
        if state["at_threshold"] is not None:
            steps, wall, cpu = state["at_threshold"]
            self.at_threshold = int(steps), wall, cpu
        wall_before, cpu_before = state["elapsed"]
        self._elapsed_before = wall_before, cpu_before
        self._last_steps = state["last_steps"]
        self.resumes = state["resumes"] + 1

    def due(self, steps: int) -> bool:
        """:return: Whether an evaluation is due at ``steps`` env steps."""
        return self._last_steps is None or steps - self._last_steps >= self.study_task.task.eval_interval

    def add(self, steps: int, evaluate: Callable[[], float]) -> bool:
        """
        Evaluate the centre now (its time not counted).

        :param steps: Env steps so far.
        :param evaluate: Returns the centre's mean return.
        :return: Whether the run is done: threshold reached and fixed budget spent.
        """
        wall, cpu = self.elapsed()
        with self.excluded():
            mean_return = evaluate()
        self._last_steps = steps
        self.curve.append((steps, wall, mean_return, cpu))
        if self.at_threshold is None and mean_return >= self.study_task.task.threshold:
            self.at_threshold = steps, wall, cpu
        return self.at_threshold is not None and steps >= self.study_task.fixed_budget

    def fill(self, record: Record) -> None:
        self._cpu.stop()
        record.curve, record.resumes = self.curve, self.resumes
        if self.at_threshold is not None:
            record.steps_to_threshold, record.time_to_threshold, record.cpu_to_threshold = self.at_threshold


class StudyWatcher(BaseCallback):
    """
    Evaluates the centre policy at round starts in a separate environment normalised with the training statistics;
    stops training once the threshold is reached and the fixed budget spent.
    """

    def __init__(self, study_task: StudyTask, eval_env: VecEnv, checkpoint: Checkpoint | None) -> None:
        super().__init__()
        self.eval_env = eval_env
        self.study_curve = StudyCurve(study_task)
        self.checkpoint = checkpoint
        self._evaluator: InProcessEval | None = None
        self._last_checkpoint = time.perf_counter()

    def _on_training_start(self) -> None:
        self._evaluator = InProcessEval(self.eval_env, self.model.policy, N_EVAL_EPISODES)
        self.study_curve.start()

    def _on_rollout_start(self) -> None:
        if self.study_curve.due(self.num_timesteps):
            self.evaluate()
        if self.checkpoint is not None and time.perf_counter() - self._last_checkpoint >= CHECKPOINT_INTERVAL:
            with self.study_curve.excluded():
                self.checkpoint.save(self.model, self.study_curve.state())
            self._last_checkpoint = time.perf_counter()

    def _on_step(self) -> bool:
        return True

    def evaluate(self) -> None:
        """Evaluate the centre; raise :class:`ThresholdReachedError` when the run is done."""
        if self.study_curve.add(self.num_timesteps, self._centre_return):
            raise ThresholdReachedError

    def _centre_return(self) -> float:
        assert self._evaluator is not None
        training_env = self.model.get_env()
        assert training_env is not None
        sync_envs_normalization(training_env, self.eval_env)
        self._evaluator.seed(EVAL_SEED)
        self._evaluator.send_jobs(self.model.policy.parameters_to_vector()[None], 1)
        ((_, (episode_returns, _)),) = self._evaluator.get_results()
        return float(np.mean(episode_returns))


CHECKPOINT_INTERVAL = 600.0  # seconds


@dataclass(frozen=True)
class Checkpoint:
    """
    Where a run saves itself between two rounds, so that a run killed with its session goes on from there in the
    next one: a Stable-Baselines3 model with ``save()`` (and its ``VecNormalize`` statistics), an EvoTorch searcher
    pickled (its problem with it: observation statistics and counters, not its Ray actors, which its next step
    starts again); then the global random generators' states, and last the curve and clocks (``state.json``: a
    checkpoint is whole once that file is there). A resumed run of ours repeats the uninterrupted one; those of
    sb3-contrib and EvoTorch go on from the same state but not on the same episodes (their workers' environments
    start their random streams again).

    :param folder: The run's checkpoint folder.
    """

    folder: Path

    @property
    def state_file(self) -> Path:
        return self.folder / "state.json"

    @property
    def random_state_file(self) -> Path:
        return self.folder / "random_state.pkl"

    @property
    def searcher_file(self) -> Path:
        return self.folder / "searcher.pkl"

    def save(self, model: BaseAlgorithm, curve_state: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        model.save(self.folder / "model-new.zip")
        os.replace(self.folder / "model-new.zip", self.folder / "model.zip")
        vec_normalize = model.get_vec_normalize_env()
        if vec_normalize is not None:
            vec_normalize.save(str(self.folder / "vec_normalize-new.pkl"))
            os.replace(self.folder / "vec_normalize-new.pkl", self.folder / "vec_normalize.pkl")
        self._save_random_states_and_curve(curve_state)

    def save_searcher(self, searcher: Any, curve_state: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_replacing(self.searcher_file, pickle.dumps(searcher))
        self._save_random_states_and_curve(curve_state)

    def _save_random_states_and_curve(self, curve_state: dict[str, Any]) -> None:
        states = random.getstate(), np.random.get_state(), torch.get_rng_state()
        write_replacing(self.random_state_file, pickle.dumps(states))
        write_replacing(self.state_file, json.dumps(curve_state).encode())

    def load(self, model: BaseAlgorithm, env: VecEnv) -> tuple[BaseAlgorithm, dict[str, Any]]:
        """:return: The model (of ``model``'s class) and the curve state saved last."""
        if isinstance(env, VecNormalize):
            env = VecNormalize.load(str(self.folder / "vec_normalize.pkl"), env.venv)
        loaded = type(model).load(self.folder / "model.zip", env=env)
        return loaded, self._load_random_states_and_curve()

    def load_searcher(self) -> tuple[Any, dict[str, Any]]:
        """:return: The EvoTorch searcher and the curve state saved last."""
        searcher = pickle.loads(self.searcher_file.read_bytes())
        return searcher, self._load_random_states_and_curve()

    def _load_random_states_and_curve(self) -> dict[str, Any]:
        if self.random_state_file.exists():  # checkpoints saved before 2026-12-04 have none
            python_state, numpy_state, torch_state = pickle.loads(self.random_state_file.read_bytes())
            random.setstate(python_state)
            np.random.set_state(numpy_state)
            torch.set_rng_state(torch_state)
        return json.loads(self.state_file.read_text())


def write_replacing(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a new file that replaces it whole (a kill leaves the old one)."""
    new = path.with_name(f"{path.name}.new")
    new.write_bytes(data)
    os.replace(new, path)


def append_json_line(path: str, data: dict[str, Any]) -> None:
    """Append ``data`` to a JSON-lines log (the runs', the rates')."""
    with open(path, "a") as file:
        file.write(json.dumps(data) + "\n")


def source_commit() -> str:
    """
    :return: The git commit of the code the run uses (``+changes`` if the work tree differs from it outside
        ``benchmarks/study_runs``, the study's records).
    """

    def git(*arguments: str) -> str:
        folder = Path(__file__).resolve().parent
        return subprocess.run(["git", *arguments], check=True, cwd=folder, capture_output=True, text=True).stdout

    commit = git("rev-parse", "HEAD").strip()
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ":(top,exclude)benchmarks/study_runs")
    return f"{commit}+changes" if changed.strip() else commit


def with_budget(study_task: StudyTask, budget: int | None) -> StudyTask:
    """:return: The task with another step budget (None: unchanged)."""
    if budget is None:
        return study_task
    return dataclasses.replace(study_task, task=dataclasses.replace(study_task.task, budget=budget))


def run(task_name: str, config_name: str, seed: int, budget: int | None, checkpoints: Path | None = None) -> Record:
    """
    Train one seed on 2 workers until the threshold (and the fixed budget) or the budget.

    :param checkpoints: Folder of the runs' checkpoints: a run saves itself there every ``CHECKPOINT_INTERVAL``
        seconds and goes on from its checkpoint if it finds one (None: no checkpoints).
    """
    study_task = with_budget(TASKS[task_name], budget)
    task = study_task.task
    record = Record(
        task_name,
        config_name,
        seed,
        task.budget,
        commit=source_commit(),
        started=time.strftime("%H:%M:%S"),
        machine=machine_description((*CORE_PACKAGES, *STUDY_PACKAGES)),
    )
    record.load_before = uptime_load()
    began = time.perf_counter()
    checkpoint = None if checkpoints is None else Checkpoint(checkpoints / f"{task_name}-{config_name}-{seed}")
    if config_name in EVOTORCH_CONFIGS:
        run_evotorch(study_task, EVOTORCH_CONFIGS[config_name], seed, checkpoint).fill(record)
    else:
        run_sb3(study_task, CONFIGS[config_name], seed, checkpoint).fill(record)
    record.load_after = uptime_load()
    record.seconds = time.perf_counter() - began
    return record


@contextmanager
def candidate_evaluator(config: Config, env_maker: Callable[[], VecEnv], policy: Any) -> Iterator[Any]:
    """:return: The configuration's evaluator of candidates on :data:`N_WORKERS` workers, closed on exit; None where
    the training process evaluates them itself."""
    if config.async_eval == "none":
        yield None
        return
    async_eval = (AsyncEval if config.async_eval == "lit_sb3" else ContribAsyncEval)([env_maker] * N_WORKERS, policy)
    try:
        yield async_eval
    finally:
        async_eval.close()


def run_sb3(study_task: StudyTask, config: Config, seed: int, checkpoint: Checkpoint | None) -> StudyCurve:
    """Train a Stable-Baselines3 population algorithm with ``learn(async_eval=...)`` (from its checkpoint if any)."""
    task = study_task.task
    env_maker = config.env_maker(study_task)
    env = env_maker()
    model = config.make_model(study_task, env, seed)
    watcher = StudyWatcher(study_task, env_maker(training=False), checkpoint)
    if checkpoint is not None and checkpoint.state_file.exists():
        model, state = checkpoint.load(model, env)
        watcher.study_curve.restore(state)
    with candidate_evaluator(config, env_maker, model.policy) as async_eval:
        vec_normalize = model.get_vec_normalize_env()
        if async_eval is not None and vec_normalize is not None and watcher.study_curve.resumes:
            # A new pool's workers start from the model's statistics, as after every round: sb3-contrib's ARS takes
            # the count it synced last (old_count, saved with the model) off each worker's count when it merges them.
            async_eval.sync_obs_rms(vec_normalize.obs_rms.copy())
        try:
            remaining = task.budget - model.num_timesteps
            model.learn(remaining, callback=watcher, reset_num_timesteps=False, async_eval=async_eval)  # type: ignore[call-arg]
            watcher.evaluate()
        except ThresholdReachedError:
            pass
    if checkpoint is not None:
        checkpoint.save(model, watcher.study_curve.state())
    return watcher.study_curve


def seed_evotorch(seed: int) -> None:
    """Seed what EvoTorch draws from, give torch one thread, and start a Ray cluster of this process's own (EvoTorch
    would join one started by ``ray start``)."""
    import ray

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    ray.init(address="local")


def evotorch_searcher(study_task: StudyTask, config: EvoTorchConfig) -> Any:
    """:return: A new searcher of ``config`` on a ``GymNE`` problem of the task with :data:`N_WORKERS` actors."""
    from evotorch.neuroevolution import GymNE

    task = study_task.task
    normalize = task.normalize if config.observation_normalization is None else config.observation_normalization
    problem = GymNE(
        env=task.env_id,
        network="Linear(obs_length, act_length)",
        observation_normalization=normalize,
        decrease_rewards_by=study_task.alive_bonus if config.remove_alive_bonus else None,
        num_actors=N_WORKERS,
    )
    return config.make_searcher(study_task, problem, torch.zeros(problem.solution_length))


def start_actors(problem: Any) -> None:
    """Bring a ``GymNE`` problem's actors up before the clocks start, as the worker pools of the other runs are."""
    import ray

    problem._parallelize()
    ray.get([actor.get.remote("solution_length") for actor in problem._actors])


def run_evotorch(study_task: StudyTask, config: EvoTorchConfig, seed: int, checkpoint: Checkpoint | None) -> StudyCurve:
    """Train with EvoTorch's ``GymNE`` on 2 Ray actors, one ``searcher.step()`` a round (from its checkpoint if
    any)."""
    import ray

    task = study_task.task
    seed_evotorch(seed)
    study_curve = StudyCurve(study_task)
    if checkpoint is not None and checkpoint.state_file.exists():
        searcher, curve_state = checkpoint.load_searcher()
        study_curve.restore(curve_state)
    else:
        searcher = evotorch_searcher(study_task, config)
    problem = searcher.problem
    eval_env = gym.make(task.env_id)

    def centre_return() -> float:
        policy = problem.to_policy(searcher.status["center"])
        returns = []
        with torch.no_grad():
            for episode in range(N_EVAL_EPISODES):
                observation, _ = eval_env.reset(seed=episode_seed(EVAL_SEED, 0, 0, episode))
                episode_return, done = 0.0, False
                while not done:
                    action = policy(torch.as_tensor(observation, dtype=torch.float32)).numpy()
                    observation, reward, terminated, truncated, _ = eval_env.step(action)
                    episode_return += float(reward)
                    done = terminated or truncated
                returns.append(episode_return)
        return float(np.mean(returns))

    start_actors(problem)
    try:
        study_curve.start()
        last_checkpoint = time.perf_counter()
        while True:
            steps = problem.interaction_count
            finished = steps >= task.budget
            if (finished or study_curve.due(steps)) and study_curve.add(steps, centre_return):
                break
            if finished:
                break
            searcher.step()
            if checkpoint is not None and time.perf_counter() - last_checkpoint >= CHECKPOINT_INTERVAL:
                with study_curve.excluded():
                    checkpoint.save_searcher(searcher, study_curve.state())
                last_checkpoint = time.perf_counter()
        if checkpoint is not None:
            checkpoint.save_searcher(searcher, study_curve.state())
    finally:
        problem.kill_actors()
        ray.shutdown()
        eval_env.close()
    return study_curve


def throughput(task_name: str, config_name: str, steps: int) -> dict[str, Any]:
    """
    Training env steps per second and CPU-seconds on :data:`N_WORKERS` workers (EvoTorch's: actors; in the training
    process where the configuration says so), without evaluations, from the start of training (pool or actors up) to
    ``steps`` env steps, seed 0.
    """
    study_task = TASKS[task_name]
    cpu = ProcessTreeCpu()
    load_before = uptime_load()
    if config_name in EVOTORCH_CONFIGS:
        import ray

        seed_evotorch(0)
        searcher = evotorch_searcher(study_task, EVOTORCH_CONFIGS[config_name])
        try:
            start_actors(searcher.problem)
            began, cpu_began = time.perf_counter(), cpu.seconds()
            while searcher.problem.interaction_count < steps:
                searcher.step()
            seconds, cpu_seconds = time.perf_counter() - began, cpu.seconds() - cpu_began
            done = searcher.problem.interaction_count
        finally:
            searcher.problem.kill_actors()
            ray.shutdown()
    else:
        config = CONFIGS[config_name]
        env_maker = config.env_maker(study_task)
        model = config.make_model(study_task, env_maker(), 0)
        with candidate_evaluator(config, env_maker, model.policy) as async_eval:
            began, cpu_began = time.perf_counter(), cpu.seconds()
            model.learn(steps, async_eval=async_eval)  # type: ignore[call-arg]
            seconds, cpu_seconds = time.perf_counter() - began, cpu.seconds() - cpu_began
            done = model.num_timesteps
    cpu.stop()
    return {
        "task": task_name,
        "config": config_name,
        "steps": done,
        "seconds": seconds,
        "steps_per_second": done / seconds,
        "cpu_seconds": cpu_seconds,
        "commit": source_commit(),
        "load_before": load_before,
        "load_after": uptime_load(),
        "started": time.strftime("%H:%M:%S"),
    }


def env_rate(task_name: str, steps: int) -> dict[str, Any]:
    """
    Env steps per second of the task's environment stepped alone in this process, with actions drawn uniformly
    from its action space ahead of time (resets counted as part of the steps' time).
    """
    env = gym.make(TASKS[task_name].task.env_id)
    space = env.action_space
    assert isinstance(space, gym.spaces.Box)  # the study's tasks are MuJoCo's
    actions = np.random.default_rng(0).uniform(space.low, space.high, (1000, *space.shape))
    env.reset(seed=0)
    load_before = uptime_load()
    began, cpu_began = time.perf_counter(), time.process_time()
    for step in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[step % len(actions)])
        if terminated or truncated:
            env.reset()
    seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu_began
    env.close()
    return {
        "task": task_name,
        "steps": steps,
        "seconds": seconds,
        "steps_per_second": steps / seconds,
        "steps_per_cpu_second": steps / cpu_seconds,
        "load_before": load_before,
        "load_after": uptime_load(),
        "started": time.strftime("%H:%M:%S"),
    }


@contextmanager
def locked(path: str) -> Iterator[IO[str]]:
    """:return: The file opened for update (created if missing) under an exclusive lock."""
    with open(path, "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        yield file


def job_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def rewrite(file: IO[str], lines: list[str]) -> None:
    file.seek(0)
    file.truncate()
    file.write("".join(f"{line}\n" for line in lines))


def take_job(jobs_file: str, running_file: str) -> list[str] | None:
    """Move the first job of the jobs file to the running file (with this process's id); None when none is left."""
    with locked(jobs_file) as file:  # several queues may share the file
        lines = job_lines(file.read())
        if not lines:
            return None
        rewrite(file, lines[1:])
    with locked(running_file) as running:
        running.write(f"{os.getpid()} {lines[0]}\n")
    return lines[0].split()


def finish_job(running_file: str, job: list[str]) -> None:
    with locked(running_file) as running:
        lines = running.read().splitlines()
        lines.remove(f"{os.getpid()} {' '.join(job)}")
        rewrite(running, lines)


def requeue_interrupted(jobs_file: str, running_file: str) -> None:
    """Put the jobs of queues that are no longer alive back at the head of the jobs file."""
    with locked(running_file) as running:
        lines = running.read().splitlines()
        alive = [line for line in lines if psutil.pid_exists(int(line.split()[0]))]
        interrupted = [line.split(maxsplit=1)[1] for line in lines if line not in alive]
        rewrite(running, alive)
    if interrupted:
        with locked(jobs_file) as file:
            rest = file.read().splitlines()
            rewrite(file, interrupted + rest)
        print(time.strftime("%H:%M:%S"), "requeued", interrupted, flush=True)


def queue(jobs_file: str, out: str) -> None:
    """Run the jobs file's lines one at a time (each in a fresh process), taking each off the file first."""
    running_file, failed_file = f"{jobs_file}.running", f"{jobs_file}.failed"
    requeue_interrupted(jobs_file, running_file)
    while (job := take_job(jobs_file, running_file)) is not None:
        task, config, seed = job[:3]
        command = [sys.executable, __file__, "run", "--task", task, "--config", config, "--seed", seed, "--out", out]
        if len(job) > 3:
            command += ["--budget", job[3]]
        print(time.strftime("%H:%M:%S"), " ".join(job), flush=True)
        returncode = subprocess.run(command, check=False).returncode
        if returncode != 0:
            print(time.strftime("%H:%M:%S"), f"exit code {returncode}:", " ".join(job), flush=True)
            with locked(failed_file) as failed:
                failed.read()
                failed.write(f"{' '.join(job)}  # exit code {returncode} at {time.strftime('%Y-%m-%d %H:%M')}\n")
        finish_job(running_file, job)


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """
    :return: The 25th, 50th and 75th percentiles (linear interpolation), runs that never reached the threshold
        counting as infinite: a percentile that interpolates towards one of them is infinite too.
    """
    array = np.asarray(values, dtype=np.float64)
    largest = float(array[np.isfinite(array)].max(initial=0.0))
    sentinel = 2.0 * largest + 1.0
    quartiles = np.percentile(np.where(np.isfinite(array), array, sentinel), [25, 50, 75])
    q25, q50, q75 = (np.inf if value > largest else float(value) for value in quartiles)
    return q25, q50, q75


def quartile_figures(values: list[float], digits: int = 0) -> list[float | str] | None:
    """:return: ``[median, 25th, 75th percentile]`` (rounded; "n/r" where infinite), None without values."""
    if not values:
        return None
    q25, q50, q75 = percentiles(values)
    return [round(value, digits) if np.isfinite(value) else "n/r" for value in (q50, q25, q75)]


def return_at(curve: list[list[float]], steps: int) -> float | None:
    """:return: The last evaluation at or before ``steps`` env steps, if the run got there."""
    if curve[-1][0] < steps and curve[-1][0] < 0.99 * steps:
        return None
    before = [point for point in curve if point[0] <= steps]
    return before[-1][2] if before else None


LABELS = {
    "ars": "lit_sb3 ARS",
    "contrib-ars-lit": "sb3-contrib ARS + lit_sb3 AsyncEval",
    "contrib-ars-own": "sb3-contrib ARS + its AsyncEval",
    "contrib-ars-zoo": "sb3-contrib ARS, rl-zoo's ars.yml, + lit_sb3 AsyncEval",
    "contrib-ars-zoo-own": "sb3-contrib ARS, rl-zoo's ars.yml, + its AsyncEval",
    "contrib-ars-zoo-in-process": "sb3-contrib ARS, rl-zoo's ars.yml, in one process (as rl-zoo runs it)",
    "ars-zoo": "lit_sb3 ARS, rl-zoo's ars.yml",
    "ars-contrib-merge": "lit_sb3 ARS, sb3-contrib's merge",
    "ars-inertia-3": "lit_sb3 ARS, merged statistics weigh 3x",
    "ars-update-every-3": "lit_sb3 ARS, normalization_update_interval=3",
    "ars-update-every-10": "lit_sb3 ARS, normalization_update_interval=10",
    "ars-sample-std": "lit_sb3 ARS, sample std",
    "ars-no-clip": "lit_sb3 ARS, clip_obs=1e6",
    "cmaes": "lit_sb3 CMAES",
    "es": "lit_sb3 ES",
    "cem": "lit_sb3 CEM",
    "pgpe": "lit_sb3 PGPE + ClipUp (EvoTorch's MuJoCo recipe)",
    "pgpe-variance-floor": "lit_sb3 PGPE + ClipUp, observations normalised with variance + 0.01, no clip",
    "pgpe-speed-2x": "lit_sb3 PGPE + ClipUp, twice the recipe's max_speed and centre learning rate",
    "pgpe-speed-3x": "lit_sb3 PGPE + ClipUp, three times the recipe's max_speed and centre learning rate",
    "snes": "lit_sb3 SNES",
    "snes-stdev-1": "lit_sb3 SNES, stdev_init 1.0",
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
        "EvoTorch 0.6.1 PGPE + ClipUp, three times the recipe's max_speed and centre learning rate, GymNE 2 actors"
    ),
    "evotorch-cmaes": "EvoTorch 0.6.1 CMA-ES, GymNE 2 actors",
    "evotorch-snes": "EvoTorch 0.6.1 SNES, GymNE 2 actors",
    "evotorch-snes-stdev-1": "EvoTorch 0.6.1 SNES, stdev_init 1.0, GymNE 2 actors",
    "evotorch-xnes-no-alive-bonus": "EvoTorch 0.6.1 XNES, alive bonus removed, GymNE 2 actors",
}


def read_records(runs_file: str) -> list[dict[str, Any]]:
    with open(runs_file) as file:
        return [json.loads(line) for line in file if line.strip()]


def group_records(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """:return: The records by (task, configuration), in the order of ``TASKS`` and ``LABELS``; of two records of
    the same seed, the later one (a run again with a larger budget)."""
    latest = {(record["task"], record["config"], record["seed"]): record for record in records}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in latest.values():
        groups.setdefault((record["task"], record["config"]), []).append(record)
    tasks, configs = list(TASKS), list(LABELS)
    return dict(sorted(groups.items(), key=lambda item: (tasks.index(item[0][0]), configs.index(item[0][1]))))


STUDY_COLUMNS = [
    Column("task", "task"),
    Column("configuration", "configuration"),
    Column("seeds", "seeds"),
    Column("reached", "reached"),
    Column("budget", "run budget"),
    Column("steps_to_threshold", "env steps to threshold: median (IQR)", ",.0f"),
    Column("wall_to_threshold", "wall time to threshold in the study (s): median (IQR)", ".0f"),
    Column("cpu_to_threshold", "CPU-seconds to threshold: median (IQR)", ".0f"),
    Column("return_at_budget", "return at fixed budget (median)", ".0f"),
    Column("fixed_budget", "fixed budget"),
    Column("final_return", "return at the end of the run (median)", ".0f"),
    Column("train_rate_alone", "train steps/s alone", ",.0f"),
    Column("wall_at_rate", "wall time to threshold at that rate (s): median (IQR)", ".0f"),
]


def study_table(records: list[dict[str, Any]], rates: dict[tuple[str, str], float]) -> Table:
    """
    :param records: The runs.
    :param rates: Training steps per second measured alone (the median of the measurements), by (task,
        configuration).
    :return: One row per (task, configuration): seeds that reached the threshold, the quartiles of their env steps,
        wall time and CPU-seconds to it (runs without a CPU measure left out of that column), the median return at
        the task's fixed budget and at the end of the runs, and the wall time the steps would take at the
        configuration's rate. Rows also hold, not shown, the medians over seeds of the env steps and the wall time
        in the study to the threshold or, where it was not reached, to the end of the run (``steps_at_least``,
        ``wall_at_least``: lower bounds of the medians to the threshold).
    """
    table = Table(STUDY_COLUMNS)
    for (task_name, config_name), group in group_records(records).items():
        fixed = TASKS[task_name].fixed_budget
        steps = [np.inf if r["steps_to_threshold"] is None else r["steps_to_threshold"] for r in group]
        times = [np.inf if r["time_to_threshold"] is None else r["time_to_threshold"] for r in group]
        cpu = [
            np.inf if r["cpu_to_threshold"] is None else r["cpu_to_threshold"] for r in group if "cpu_to_threshold" in r
        ]
        fixed_returns = [value for r in group if (value := return_at(r["curve"], fixed)) is not None]
        ends = [r["curve"][-1] for r in group]
        steps_at_least = [min(value, end[0]) for value, end in zip(steps, ends, strict=True)]
        wall_at_least = [min(value, end[1]) for value, end in zip(times, ends, strict=True)]
        rate = rates.get((task_name, config_name))
        table.rows.append(
            {
                "task": task_name,
                "configuration": LABELS[config_name],
                "seeds": len(group),
                "reached": f"{sum(r['steps_to_threshold'] is not None for r in group)}/{len(group)}",
                "budget": f"{max(r['budget'] for r in group) / 1e6:g}M",
                "steps_to_threshold": quartile_figures(steps),
                "wall_to_threshold": quartile_figures(times),
                "cpu_to_threshold": quartile_figures(cpu),
                "return_at_budget": round(statistics.median(fixed_returns)) if fixed_returns else None,
                "fixed_budget": f"{fixed / 1e6:g}M",
                "final_return": round(statistics.median(r["curve"][-1][2] for r in group)),
                "train_rate_alone": rate,
                "wall_at_rate": None if rate is None else quartile_figures([value / rate for value in steps]),
                "steps_at_least": statistics.median(steps_at_least),
                "wall_at_least": round(statistics.median(wall_at_least)),
            }
        )
    return table


def without_double_counts(record: dict[str, Any], cpus: int) -> tuple[dict[str, Any], int]:
    """
    Take out of a run's CPU-seconds what runs measured before :class:`ProcessTreeCpu` told processes apart by their
    start since boot counted twice: a step of the wall clock made every descendant process look new, and the clock
    jumped by their CPU-seconds so far. Where CPU-seconds rose between two points of the curve faster than ``cpus``
    cores can (with 10% and 30 s to spare), the rise becomes the run's rate elsewhere times the wall time.

    :param record: A run, as logged.
    :param cpus: The cores of the machine the run ran on.
    :return: The record with its CPU-seconds (curve and threshold) corrected, and how many rises were replaced.
    """
    curve = record["curve"]
    if len(curve[0]) < 4:
        return record, 0
    rises = [(after[1] - before[1], after[3] - before[3]) for before, after in itertools.pairwise(curve)]
    doubled = [cpu > 1.1 * cpus * wall + 30.0 for wall, cpu in rises]
    if not any(doubled):
        return record, 0
    kept = [rise for rise, bad in zip(rises, doubled, strict=True) if not bad]
    kept_wall = sum(wall for wall, _ in kept)
    rate = sum(cpu for _, cpu in kept) / kept_wall if kept_wall > 0 else float(cpus)
    corrected = [list(curve[0])]
    for point, (wall, cpu), bad in zip(curve[1:], rises, doubled, strict=True):
        corrected.append([*point[:3], corrected[-1][3] + (rate * wall if bad else cpu)])
    fixed = {**record, "curve": corrected}
    if record.get("cpu_to_threshold") is not None:
        at = max(index for index, point in enumerate(curve) if point[0] <= record["steps_to_threshold"])
        fixed["cpu_to_threshold"] = record["cpu_to_threshold"] + corrected[at][3] - curve[at][3]
    return fixed, sum(doubled)


def latest_measurements(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:return: Of the ``throughput`` measurements of each (task, configuration), those made at the commit of its
    last one (the code measured before is not the code of the rate; records without a commit count as one)."""
    last_commit = {(measured["task"], measured["config"]): measured.get("commit") for measured in measurements}
    return [m for m in measurements if m.get("commit") == last_commit[m["task"], m["config"]]]


def report(runs_file: str, throughput_file: str | None, results_folder: str | None, name: str) -> None:
    """
    Print the table of every (task, configuration) in the log (see :func:`study_table`), CPU-seconds without double
    counts (:func:`without_double_counts`); with ``results_folder``, also write it as the result file ``name``.
    """
    cpus = os.cpu_count() or 1
    checked = [without_double_counts(record, cpus) for record in read_records(runs_file)]
    records = [record for record, _ in checked]
    corrections = [count for _, count in checked if count]
    measurements = latest_measurements(read_records(throughput_file) if throughput_file is not None else [])
    measured_rates: dict[tuple[str, str], list[float]] = {}
    for measured in measurements:
        measured_rates.setdefault((measured["task"], measured["config"]), []).append(measured["steps_per_second"])
    rates = {key: statistics.median(values) for key, values in measured_rates.items()}
    table = study_table(records, rates)
    loads = [value for r in records for value in (r["load_before"], r["load_after"])]
    latest = [record for group in group_records(records).values() for record in group]
    wall_hours, cpu_hours = (sum(record["curve"][-1][index] for record in latest) / 3600 for index in (1, 3))
    summary = (
        f"{len(records)} runs of {runs_file}, one at a time; load average {min(loads):.1f}-{max(loads):.1f} "
        f"(median {statistics.median(loads):.1f}) at the runs' starts and ends. The {len(latest)} runs in the table "
        f"trained for {wall_hours:.1f} hours of wall time and {cpu_hours:.1f} CPU-hours in all (start-up and "
        "evaluations of the centre left out). Median (interquartile range) over seeds; n/r: not reached within the "
        "budget, counted as infinitely long."
    )
    if measurements:
        counts = [len(values) for values in measured_rates.values()]
        runs = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
        rate_loads = [value for measured in measurements for value in (measured["load_before"], measured["load_after"])]
        summary += (
            " The last two columns: each configuration's training rate measured alone (the `throughput` command, seed "
            f"0, the median of {runs} runs at the commit of its last one; load average {min(rate_loads):.1f}-"
            f"{max(rate_loads):.1f}) and the wall time of the env steps to the threshold at that rate."
        )
    if corrections:
        summary += (
            f" The CPU-seconds of {len(corrections)} runs rose faster than {cpus} cores can between "
            f"{sum(corrections)} pairs of evaluations (a step of the wall clock counted their processes twice): "
            "those rises are replaced by each run's rate elsewhere."
        )
    print(table.markdown(), f"\n{summary}", sep="\n")
    if results_folder is not None:
        load = LoadSampler()
        load.samples = [round(min(loads), 1), round(max(loads), 1)]
        result = new_result(name, {"learning_study": table}, load, conditions=summary, packages=STUDY_PACKAGES)
        print(f"\nwrote {save_result(result, results_folder)}")


def seeds_on_grid(group: list[dict[str, Any]], grid: np.ndarray) -> np.ndarray:
    """
    :return: Each seed's return at each grid point (its last evaluation at or before it), NaN past the seed's
        last evaluation; one row per seed.
    """
    returns = np.full((len(group), len(grid)), np.nan)
    for row, record in enumerate(group):
        steps = np.array([point[0] for point in record["curve"]], dtype=np.float64)
        values = np.array([point[2] for point in record["curve"]], dtype=np.float64)
        index = np.searchsorted(steps, grid, side="right") - 1
        inside = (index >= 0) & (grid <= steps[-1])
        returns[row, inside] = values[index[inside]]
    return returns


def plot_configuration(axes: Any, group: list[dict[str, Any]], grid: np.ndarray, label: str) -> None:
    """Plot the median return over the seeds still running at each env step (line), their interquartile range
    (dark band) and their range (light band)."""
    returns = seeds_on_grid(group, grid)
    present = np.isfinite(returns).any(axis=0)
    with np.errstate(all="ignore"):
        low, q25, median, q75, high = np.nanpercentile(returns[:, present], [0, 25, 50, 75, 100], axis=0)
    seeds = f"{len(group)} seed{'s' if len(group) > 1 else ''}"
    (line,) = axes.plot(grid[present], median, label=f"{label} ({seeds})")
    axes.fill_between(grid[present], q25, q75, color=line.get_color(), alpha=0.3, linewidth=0)
    axes.fill_between(grid[present], low, high, color=line.get_color(), alpha=0.1, linewidth=0)


def plot_task(axes: Any, task_name: str, groups: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> None:
    """Plot the configurations ``groups`` of a task, with its threshold.

    :param labels: Each configuration's label in the legend.
    """
    task = TASKS[task_name].task
    largest = max(record["curve"][-1][0] for group in groups.values() for record in group)
    grid = np.linspace(0, largest, 400)
    for config_name, group in groups.items():
        plot_configuration(axes, group, grid, labels[config_name])
    axes.axhline(task.threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {task.threshold:g}")
    axes.set_xlabel("env steps")
    axes.grid(alpha=0.3)


def figures(runs_file: str, folder: str) -> None:
    """
    Write one learning-curve figure per task (``TASK.png``, every configuration) and one of the suite
    (``suite.png``: per task, lit_sb3's choice, EvoTorch's best configuration and sb3-contrib's ARS, ranked as
    ``render_results.py`` ranks them): per configuration, the median return over the seeds still running at each env
    step, their interquartile range and their range.
    """
    import matplotlib
    from render_results import RIVALS, families

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler

    Path(folder).mkdir(parents=True, exist_ok=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    records = read_records(runs_file)
    by_task: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (task_name, config_name), group in group_records(records).items():
        by_task.setdefault(task_name, {})[config_name] = group
    for task_name, configs in by_task.items():
        figure, axes = plt.subplots(figsize=(8, 5 + 0.2 * len(configs)))  # the legend goes below the curves
        axes.set_prop_cycle(cycler(linestyle=["-", "--", ":"]) * cycler(color=colours))  # past 10 colours, dashed
        plot_task(axes, task_name, configs, LABELS)
        axes.set_ylabel(f"mean return of the centre, {N_EVAL_EPISODES} episodes")
        axes.set_title(f"{TASKS[task_name].task.env_id}: median over seeds, IQR and range")
        axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12))
        figure.tight_layout()
        figure.savefig(Path(folder) / f"{task_name}.png", dpi=120)
        plt.close(figure)
        print(Path(folder) / f"{task_name}.png")
    config_names = {label: name for name, label in LABELS.items()}
    rows = study_table(records, {}).rows
    best = [families(rows, prefix) for prefix in ("lit_sb3", *(prefix for prefix, _ in RIVALS.values()))]
    figure, all_axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for axes, task_name in zip(all_axes.flat, by_task, strict=False):
        present = [index for index, family in enumerate(best) if task_name in family]
        shown = [config_names[best[index][task_name][0]["configuration"]] for index in present]
        axes.set_prop_cycle(color=[colours[index] for index in present])  # one colour per family in every panel
        plot_task(axes, task_name, {name: by_task[task_name][name] for name in shown}, LABELS)
        axes.set_title(TASKS[task_name].task.env_id)
        axes.legend(fontsize="x-small")
    for axes in all_axes.flat[len(by_task) :]:
        axes.set_axis_off()
    figure.suptitle("lit_sb3's choice, EvoTorch's best and sb3-contrib's ARS: median over seeds, IQR and range")
    figure.tight_layout()
    figure.savefig(Path(folder) / "suite.png", dpi=90)
    plt.close(figure)
    print(Path(folder) / "suite.png")


def update_cost(task_name: str, config_name: str, rounds: int) -> dict[str, Any]:
    """
    Time the optimiser alone, without the environment: ``ask()`` and ``tell()`` with random returns, the median of
    ``rounds`` rounds (under an interaction budget, each candidate counts enough env steps to end the round).
    """
    study_task, config = TASKS[task_name], CONFIGS[config_name]
    model = config.make_model(study_task, config.env_maker(study_task)(), 0)
    rng = np.random.default_rng(0)
    ask_seconds, tell_seconds = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        candidates = model.ask()  # type: ignore[attr-defined]
        asked = time.perf_counter()
        budget = getattr(model, "num_interactions", None)
        interactions = None if budget is None else np.full(len(candidates), max(1_000, budget // len(candidates)))
        model.tell(rng.normal(size=len(candidates)), interactions)  # type: ignore[attr-defined]
        ask_seconds.append(asked - began)
        tell_seconds.append(time.perf_counter() - asked)
    return {
        "task": task_name,
        "config": config_name,
        "n_params": model.n_params,  # type: ignore[attr-defined]
        "candidates": len(candidates),
        "ask_seconds": statistics.median(ask_seconds),
        "tell_seconds": statistics.median(tell_seconds),
        "load": uptime_load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("--task", choices=list(TASKS), required=True)
    run_parser.add_argument("--config", choices=[*CONFIGS, *EVOTORCH_CONFIGS], required=True)
    run_parser.add_argument("--seed", type=int, required=True)
    run_parser.add_argument("--budget", type=int, help="env steps at most (default: the task's)")
    run_parser.add_argument("--out", required=True, help="JSON-lines log the run is appended to")
    run_parser.add_argument(
        "--checkpoints", help="folder of checkpoints of runs that go on after a kill (default: OUT.checkpoints)"
    )
    queue_parser = commands.add_parser("queue")
    queue_parser.add_argument("jobs")
    queue_parser.add_argument("--out", required=True)
    throughput_parser = commands.add_parser("throughput")
    throughput_parser.add_argument("--task", choices=list(TASKS), required=True)
    throughput_parser.add_argument("--config", choices=[*CONFIGS, *EVOTORCH_CONFIGS], required=True)
    throughput_parser.add_argument("--steps", type=int, required=True)
    throughput_parser.add_argument("--out", required=True)
    env_rate_parser = commands.add_parser("env-rate")
    env_rate_parser.add_argument("--task", choices=list(TASKS), required=True)
    env_rate_parser.add_argument("--steps", type=int, default=100_000)
    env_rate_parser.add_argument("--out", help="JSON-lines log the measurement is appended to too")
    report_parser = commands.add_parser("report")
    report_parser.add_argument("runs")
    report_parser.add_argument(
        "--throughput",
        help="JSON-lines log of throughput runs (a configuration's rate: the median of its runs at its last commit)",
    )
    report_parser.add_argument("--results", help="write the table as a result file into this folder too")
    report_parser.add_argument("--name", default="learning_study", help="the result file's name (without .json)")
    cost_parser = commands.add_parser("update-cost")
    cost_parser.add_argument("--task", choices=list(TASKS), required=True)
    cost_parser.add_argument("--config", choices=list(CONFIGS), required=True)
    cost_parser.add_argument("--rounds", type=int, default=3)
    figures_parser = commands.add_parser("figures")
    figures_parser.add_argument("runs")
    figures_parser.add_argument("folder", help="where the PNGs are written (created if missing)")
    args = parser.parse_args()
    if args.command == "run":
        checkpoints = Path(args.checkpoints or f"{args.out}.checkpoints")
        record = run(args.task, args.config, args.seed, args.budget, checkpoints)
        append_json_line(args.out, dataclasses.asdict(record))
        print(
            f"{record.task} {record.config} seed {record.seed}: threshold at {record.steps_to_threshold} steps, "
            f"{record.time_to_threshold} s, {record.cpu_to_threshold} CPU-s; final {record.curve[-1]}; "
            f"load {record.load_before}-{record.load_after}",
            flush=True,
        )
    elif args.command == "throughput":
        measured = throughput(args.task, args.config, args.steps)
        append_json_line(args.out, measured)
        print(measured, flush=True)
    elif args.command == "env-rate":
        measured = env_rate(args.task, args.steps)
        if args.out is not None:
            append_json_line(args.out, measured)
        print(measured, flush=True)
    elif args.command == "queue":
        queue(args.jobs, args.out)
    elif args.command == "figures":
        figures(args.runs, args.folder)
    elif args.command == "update-cost":
        print(update_cost(args.task, args.config, args.rounds), flush=True)
    else:
        report(args.runs, args.throughput, args.results, args.name)


if __name__ == "__main__":
    main()
