"""The engines against the algorithm's own ``learn`` and the injected agent: the same SB3 algorithm and
hyper-parameters trained by ``AsyncRLEngine``, ``SyncRLEngine``, ``model.learn`` (``DummyVecEnv`` or
``SubprocVecEnv``) and ``get_injected_agent`` (async collection), one after the other for each seed (so machine load
shifts hit all of them alike); the table gives medians over the seeds.

- PPO CartPole-v1, 8 envs, 2048 steps per rollout: env steps/s, updates/s and wall time until the mean return of the
  last 20 episodes reaches 475.
- PPO on a CartPole that sleeps 2 ms a step (8 envs, one worker process per env, and at the default worker count):
  env steps/s against ``SubprocVecEnv`` (target: the async engine at least 1.6 times as fast).
- SAC Pendulum-v1, one env, one gradient step per env step (worker threads): env steps/s, updates/s and wall time
  until the mean return of the last 10 episodes reaches -250.

Updates are the algorithm's ``_n_updates`` (PPO: epochs of a train step; SAC: gradient steps). Times run from
building the model (and its processes) to the end of training, after one warm-up run has started the fork server of
the worker processes. Torch runs one thread everywhere.

Usage: ``python benchmarks/engine.py`` (about 50 minutes on two cores; ``--quick`` for one seed and a tenth of the
budgets, a check that it runs; ``--cases ppo sleepy sac`` for some of the row groups).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gradient_agents import Run as LearnRun
from gradient_agents import SleepyCartPole, Watch, monitored
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.cli.bench_results import RESULTS_FOLDER, Column, LoadSampler, Table, new_result, save_result
from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup, SyncRLEngine
from lit_sb3.engine.base import BaseEngine
from lit_sb3.envs.multi_env import FactoryVecEnv


@dataclass
class Run:
    """What one training run measured."""

    steps: int
    updates: int
    seconds: float
    seconds_to_threshold: float


@dataclass
class Case:
    """One row group: an algorithm, its environments, the backend of the async rows and the configurations."""

    name: str
    algorithm: type[BaseAlgorithm]
    env_fn: Callable[[], gym.Env]
    n_envs: int
    kwargs: dict[str, Any]
    budget: int
    threshold: float | None
    window: int
    backend: str
    plain: list[str]
    results: dict[str, list[Run]] = field(default_factory=dict)

    @property
    def n_workers(self) -> int | None:
        """One worker per environment for the sleepy environment (it waits rather than computes)."""
        return self.n_envs if self.env_fn is SleepyCartPole else None


#: The suffix of the rows at the engine's default worker count (where the case sets another).
DEFAULT_WORKERS = ", default workers"


def watched(engine_class: type[BaseEngine], threshold: float, window: int, started: float) -> type[BaseEngine]:
    """:return: The engine class, recording when the mean of its last ``window`` returns first reaches ``threshold``."""

    class Watched(engine_class):  # type: ignore[valid-type,misc]
        seconds_to_threshold = float("inf")

        def _train_step(self) -> None:
            super()._train_step()
            if Watched.seconds_to_threshold == float("inf") and self.recent_mean_return(window) >= threshold:
                Watched.seconds_to_threshold = time.monotonic() - started

    return Watched


def measure_engine(case: Case, configuration: str, seed: int) -> Run:
    started = time.monotonic()
    fns: list[Callable[[], gym.Env]] = [case.env_fn] * case.n_envs
    n_workers = None if configuration.endswith(DEFAULT_WORKERS) else case.n_workers
    group = EnvGroup(fns, backend=case.backend, n_workers=n_workers)
    model = case.algorithm("MlpPolicy", group.env, seed=seed, verbose=0, **case.kwargs)
    engine_class = AsyncRLEngine if configuration.startswith("AsyncRLEngine") else SyncRLEngine
    threshold = case.threshold if case.threshold is not None else np.inf
    watched_class = watched(engine_class, threshold, case.window, started)
    config = EngineConfig(total_env_steps=case.budget, seed=seed, verbose=False, log_formats=())
    engine = watched_class(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))
    engine.run()
    seconds = time.monotonic() - started
    return Run(model.num_timesteps, model._n_updates, seconds, watched_class.seconds_to_threshold)  # type: ignore[attr-defined]


def measure_learn(case: Case, configuration: str, seed: int) -> Run:
    run = LearnRun()
    started = time.monotonic()
    fns: list[Callable[[], gym.Env]] = [partial(monitored, case.env_fn) for _ in range(case.n_envs)]
    kwargs = {**case.kwargs, "seed": seed, "verbose": 0}
    release: Callable[[], None]
    if configuration.startswith("injected agent"):
        n_workers = None if configuration.endswith(DEFAULT_WORKERS) else case.n_workers
        model = get_injected_agent(case.algorithm)(
            "MlpPolicy", FactoryVecEnv(fns), use_mp=case.backend == "processes", n_workers=n_workers, **kwargs
        )
        release = model.shutdown
    else:
        env = SubprocVecEnv(fns, start_method="forkserver") if "Subproc" in configuration else DummyVecEnv(fns)
        model = case.algorithm("MlpPolicy", env, **kwargs)
        release = env.close
    try:
        threshold = case.threshold if case.threshold is not None else np.inf
        model.learn(case.budget, callback=Watch(threshold, case.window, started, run))
        seconds = time.monotonic() - started
    finally:
        release()
    return Run(model.num_timesteps, model._n_updates, seconds, run.seconds_to_threshold)


def warm_up_processes() -> None:
    """Start the worker processes' fork server (it imports torch once), so that no configuration pays for it."""
    group = EnvGroup([partial(gym.make, "CartPole-v1")], backend="processes")
    model = PPO("MlpPolicy", group.env, n_steps=64, batch_size=64, n_epochs=1)
    config = EngineConfig(train_epochs=1, verbose=False, log_formats=())
    AsyncRLEngine(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model)).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, a tenth of the budgets")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=["ppo", "sleepy", "sac"], help="some of the row groups")
    parser.add_argument(
        "--results", default=None, help=f"folder of the result file (default: {RESULTS_FOLDER}; partial runs: none)"
    )
    args = parser.parse_args()
    load = LoadSampler()
    torch.set_num_threads(1)
    seeds = [0] if args.quick else list(range(args.seeds))
    scale = 0.1 if args.quick else 1.0
    ppo = {"n_steps": 256, "batch_size": 256, "n_epochs": 10, "gae_lambda": 0.8, "gamma": 0.98, "ent_coef": 0.0}
    sac = {"learning_rate": 1e-3}
    cartpole = partial(gym.make, "CartPole-v1")
    cases = [
        Case("PPO CartPole-v1, 8 envs", PPO, cartpole, 8, ppo, int(150_000 * scale), 475, 20, "processes",
             ["SB3 learn DummyVecEnv", "SB3 learn SubprocVecEnv"]),
        Case("PPO sleepy CartPole (2 ms/step), 8 envs", PPO, SleepyCartPole, 8, ppo, int(20_480 * scale), None, 20,
             "processes", ["SB3 learn SubprocVecEnv"]),
        Case("SAC Pendulum-v1, 1 env", SAC, partial(gym.make, "Pendulum-v1"), 1, sac, int(12_000 * scale), -250, 10,
             "threads", ["SB3 learn DummyVecEnv"]),
    ]  # fmt: skip
    if args.cases is not None:
        cases = [case for case, key in zip(cases, ["ppo", "sleepy", "sac"], strict=True) if key in args.cases]
    warm_up_processes()
    for seed in seeds:
        for case in cases:
            engines = [f"AsyncRLEngine {case.backend}", f"SyncRLEngine {case.backend}"]
            if case.n_workers is not None:  # also at default arguments
                engines.append(f"AsyncRLEngine {case.backend}{DEFAULT_WORKERS}")
            injected = ["injected agent"] + ([f"injected agent{DEFAULT_WORKERS}"] if case.n_workers is not None else [])
            for configuration in [*engines, *case.plain, *injected]:
                measure = measure_engine if configuration in engines else measure_learn
                run = measure(case, configuration, seed)
                case.results.setdefault(configuration, []).append(run)
                print(
                    f"seed {seed} | {case.name} | {configuration}: {run.steps / run.seconds:,.0f} env steps/s, "
                    f"{run.updates / run.seconds:,.1f} updates/s, to threshold {run.seconds_to_threshold:.1f} s",
                    flush=True,
                )
    table = result_table(cases)
    print("\n" + table.markdown())
    if args.results or not (args.quick or args.cases):
        result = new_result("engine", {"engine": table}, load, conditions=f"seeds {', '.join(map(str, seeds))}")
        print(f"\nwrote {save_result(result, args.results or RESULTS_FOLDER)}")


#: The result table: one row per case and configuration, medians over the seeds.
COLUMNS = [
    Column("case", "case"),
    Column("configuration", "configuration"),
    Column("steps_per_second", "env steps/s", ",.0f"),
    Column("updates_per_second", "updates/s", ",.1f"),
    Column("seconds_to_threshold", "time to threshold (s)", ".1f", "-"),
    Column("reached", "reached", "", "-"),
    Column("ratio_learn", "/ SB3 learn", ".2f"),
    Column("ratio_injected", "/ injected agent", ".2f"),
]


def result_table(cases: list[Case]) -> Table:
    """:return: The medians of every case and configuration (against its first SB3 row and the injected agent)."""
    table = Table(COLUMNS)
    for case in cases:
        plain = statistics.median(run.steps / run.seconds for run in case.results[case.plain[0]])
        injected = statistics.median(run.steps / run.seconds for run in case.results["injected agent"])
        for configuration, runs in case.results.items():
            speed = statistics.median(run.steps / run.seconds for run in runs)
            to_threshold = statistics.median(run.seconds_to_threshold for run in runs)
            reached = sum(run.seconds_to_threshold < float("inf") for run in runs)
            row: dict[str, Any] = {
                "case": case.name,
                "configuration": configuration,
                "steps_per_second": speed,
                "updates_per_second": statistics.median(run.updates / run.seconds for run in runs),
                "ratio_learn": speed / plain,
                "ratio_injected": speed / injected,
            }
            if case.threshold is not None:
                row["seconds_to_threshold"] = to_threshold if to_threshold < float("inf") else "n/r"
                row["reached"] = f"{reached}/{len(runs)}"
            table.rows.append(row)
    return table


if __name__ == "__main__":
    main()
