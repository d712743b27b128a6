"""Async episode collection for gradient agents against plain Stable-Baselines3 and async-gym-agents 0.5.0.

Every configuration trains the same algorithm with the same hyper-parameters, in one process, one after the other
for each seed (so machine load shifts hit all of them alike); the table gives medians over the seeds. Times run
from building the model (``SubprocVecEnv`` starts its processes there, async collection when it first learns) to
the end of ``learn()``. ``lit_sb3 threads`` and ``lit_sb3 processes`` run at default arguments (``use_mp``
aside), on the plain ``DummyVecEnv`` rows' environment (an SB3 user's drop-in; async-gym-agents takes its
``IndexableMultiEnv``); ``lit_sb3 reproducible processes`` is the on-policy mode whose runs are identical for a seed.

- PPO CartPole-v1, 8 envs, 2048 steps per rollout: env steps/s, and the most async collection can give, total steps
  / (plain SB3's time in ``train()`` alone); wall time until the mean return of the last 20 episodes reaches 475.
- PPO on a CartPole that sleeps 2 ms a step (8 envs; at default arguments, and with one worker per env): env
  steps/s against ``SubprocVecEnv``.
- SAC Pendulum-v1, one env, one gradient step per env step: env steps/s and wall time until the mean return of the
  last 10 episodes reaches -250.
- PPO Pendulum-v1 with rl-zoo's settings (4 envs, ``n_steps=1024``, gSDE), 100k steps: env steps/s and wall time
  until the mean return of the last 20 episodes reaches -250.

With a threshold, the env steps to it (the trainer's ``num_timesteps`` then) show what learning costs per step,
whatever the machine's load: weights that act while the trainer moves on (async collection) can take more.

Reference: ``pip install --no-deps async-gym-agents==0.5.0`` in the benchmark's environment (not a dependency of
lit_sb3); without it its rows are left out. Torch keeps its default threads (one per core) in every row but the
plain SB3 ones "torch at 1 thread": lit_sb3's pools of workers (processes or threads) keep the trainer's torch to
the cores their workers leave, so each row is also compared with plain SB3 at one torch thread.

Usage: ``python benchmarks/gradient_agents.py`` (about 95 minutes here; ``--quick`` for one seed and small budgets;
``--only CONFIGURATION ...`` for some rows and their plain SB3 references; ``--cases cartpole sleepy sac
pendulum-gsde`` for some of the row groups).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import version
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium.envs.classic_control import CartPoleEnv
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.cli.bench_results import RESULTS_FOLDER, Column, LoadSampler, Table, new_result, save_result


class SleepyCartPole(CartPoleEnv):
    """CartPole whose every step also waits 2 ms (an environment bound by something else than this CPU)."""

    def step(self, action: Any) -> Any:
        time.sleep(0.002)
        return super().step(action)


def monitored(env_fn: Callable[[], gym.Env]) -> gym.Env:
    """:return: The environment in a ``Monitor`` (a module-level function: the reference pickles factories)."""
    return Monitor(env_fn())


#: rl-baselines3-zoo's hyperparams/ppo.yml entry for Pendulum-v1 (its n_envs is 4, its n_timesteps 1e5).
RL_ZOO_PPO_PENDULUM: dict[str, Any] = {
    "n_steps": 1024,
    "gae_lambda": 0.95,
    "gamma": 0.9,
    "n_epochs": 10,
    "ent_coef": 0.0,
    "learning_rate": 1e-3,
    "clip_range": 0.2,
    "use_sde": True,
    "sde_sample_freq": 4,
}


@dataclass
class Run:
    """What one training run measured."""

    steps: int = 0
    seconds: float = 0.0
    train_seconds: float = 0.0
    seconds_to_threshold: float = float("inf")
    steps_to_threshold: float = float("inf")
    #: Async collection: the fraction of the steps the workers delivered that training never used.
    wasted_fraction: float | None = None

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


class Watch(BaseCallback):
    """Records when the mean of the last ``window`` episode returns first reaches ``threshold`` (and stops training
    there if ``stop``)."""

    def __init__(self, threshold: float, window: int, started: float, run: Run, stop: bool = False) -> None:
        super().__init__()
        self.threshold, self.window, self.started, self.run, self.stop = threshold, window, started, run, stop

    def _on_step(self) -> bool:
        # The mean changes only when an episode ends: checked then, so that a run whose callbacks are called once per
        # transition (an IndexableMultiEnv counts as one environment) pays no more per step than one called per batch.
        if not np.any(self.locals["dones"]):
            return True
        buffer = self.model.ep_info_buffer
        if self.run.seconds_to_threshold == float("inf") and buffer is not None and len(buffer) >= self.window:
            returns = [info["r"] for info in list(buffer)[-self.window :]]
            if np.mean(returns) >= self.threshold:
                self.run.seconds_to_threshold = time.monotonic() - self.started
                self.run.steps_to_threshold = self.model.num_timesteps
                return not self.stop
        return True


def timed_train(model: BaseAlgorithm, run: Run) -> None:
    """Wrap ``model.train`` to add its time to ``run.train_seconds``."""
    train = model.train  # type: ignore[attr-defined]

    def wrapper(*args: Any, **kwargs: Any) -> None:
        started = time.monotonic()
        train(*args, **kwargs)
        run.train_seconds += time.monotonic() - started

    model.train = wrapper  # type: ignore[attr-defined]


@dataclass
class Case:
    """One row group: an algorithm, its environments and the configurations that train it."""

    name: str
    algorithm: type[BaseAlgorithm]
    env_fn: Callable[[], gym.Env]
    n_envs: int
    kwargs: dict[str, Any]
    budget: int
    threshold: float | None
    window: int
    results: dict[str, list[Run]] = field(default_factory=dict)


#: The suffix of a plain SB3 configuration whose torch runs on one thread (lit_sb3 keeps its trainer's torch to the
#: cores its workers leave; plain SB3 keeps torch's default, a thread per core).
ONE_THREAD = ", torch at 1 thread"


def make_model(case: Case, configuration: str, seed: int) -> tuple[BaseAlgorithm, Callable[[], None]]:
    """:return: The model of a configuration and what releases it."""
    fns: list[Callable[[], gym.Env]] = [partial(monitored, case.env_fn) for _ in range(case.n_envs)]
    kwargs = {**case.kwargs, "seed": seed, "verbose": 0}
    # lit_sb3 takes the plain SB3 rows' DummyVecEnv; async-gym-agents takes its IndexableMultiEnv, which counts as one
    # environment: n_steps is the whole rollout.
    multi_env_kwargs = {**kwargs, "n_steps": kwargs["n_steps"] * case.n_envs} if "n_steps" in kwargs else kwargs
    if configuration.removesuffix(ONE_THREAD) == "SB3 DummyVecEnv":
        model = case.algorithm("MlpPolicy", DummyVecEnv(fns), **kwargs)
        return model, model.env.close  # type: ignore[union-attr]
    if configuration.removesuffix(ONE_THREAD) == "SB3 SubprocVecEnv":
        model = case.algorithm("MlpPolicy", SubprocVecEnv(fns, start_method="forkserver"), **kwargs)
        return model, model.env.close  # type: ignore[union-attr]
    backend, use_mp = configuration.split(" ", 1)[0], "processes" in configuration
    n_workers = case.n_envs if configuration.endswith("one worker per env") else None
    if backend == "lit_sb3":
        injected = get_injected_agent(case.algorithm)
        extra = {"n_workers": n_workers} if n_workers is not None else {}
        reproducible = "reproducible" in configuration
        model = injected("MlpPolicy", DummyVecEnv(fns), use_mp=use_mp, reproducible=reproducible, **extra, **kwargs)
        return model, model.shutdown
    from async_gym_agents.agents.async_agent import get_injected_agent as reference_agent
    from async_gym_agents.envs.multi_env import IndexableMultiEnv as ReferenceMultiEnv

    model = reference_agent(case.algorithm)("MlpPolicy", ReferenceMultiEnv(fns), use_mp=use_mp, **multi_env_kwargs)
    return model, model.shutdown


def measure(case: Case, configuration: str, seed: int, stop_at_threshold: bool = False) -> Run:
    run = Run()
    torch_threads = th.get_num_threads()
    if configuration.endswith(ONE_THREAD):
        th.set_num_threads(1)
    started = time.monotonic()  # what a user waits for: building the model (and its processes) and learning
    model, release = make_model(case, configuration, seed)
    timed_train(model, run)
    try:
        threshold = case.threshold if case.threshold is not None else np.inf
        callback = Watch(threshold, case.window, started, run, stop=stop_at_threshold)
        model.learn(case.budget, callback=callback)
        run.seconds = time.monotonic() - started
        run.steps = model.num_timesteps
        if configuration.startswith("lit_sb3"):
            report = model.get_profiler_report()  # type: ignore[attr-defined]
            collected = sum(report["worker"]["steps"])
            run.wasted_fraction = 1 - report["trainer"]["consumed_steps"] / collected
    finally:
        release()
        th.set_num_threads(torch_threads)
    return run


def reference_available() -> bool:
    with contextlib.suppress(ImportError):
        import async_gym_agents  # noqa: F401

        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, small budgets")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--only", nargs="+", metavar="CONFIGURATION", help="these configurations and the plain SB3 ones they are to"
    )
    parser.add_argument("--cases", nargs="+", choices=list(CASE_KEYS), help="some of the row groups")
    parser.add_argument(
        "--results", default=None, help=f"folder of the result file (default: {RESULTS_FOLDER}; partial runs: none)"
    )
    parser.add_argument("--conditions", default="", help="what else the result file should say (what ran beside it)")
    parser.add_argument(
        "--stop-at-threshold", action="store_true", help="end each run at its threshold (steps/s until then)"
    )
    parser.add_argument("--name", default="gradient_agents", help="the result file's name (without .json)")
    args = parser.parse_args()
    load = LoadSampler()
    seeds = [0] if args.quick else list(range(args.seeds))
    scale = 0.2 if args.quick else 1.0
    ppo = {"n_steps": 256, "batch_size": 256, "n_epochs": 10, "gae_lambda": 0.8, "gamma": 0.98, "ent_coef": 0.0}
    cases = [
        Case("PPO CartPole-v1, 8 envs", PPO, partial(gym.make, "CartPole-v1"), 8, ppo, int(150_000 * scale), 475, 20),
        Case("PPO sleepy CartPole (2 ms/step), 8 envs", PPO, SleepyCartPole, 8, ppo, int(20_480 * scale), None, 20),
        Case("SAC Pendulum-v1, 1 env", SAC, partial(gym.make, "Pendulum-v1"), 1,
             {"learning_rate": 1e-3}, int(12_000 * scale), -250, 10),
        Case("PPO Pendulum-v1 gSDE (rl-zoo), 4 envs", PPO, partial(gym.make, "Pendulum-v1"), 4, RL_ZOO_PPO_PENDULUM,
             int(100_000 * scale), -250, 20),
    ]  # fmt: skip
    if args.cases is not None:
        cases = [case for case, key in zip(cases, CASE_KEYS, strict=True) if key in args.cases]
    ours = ["lit_sb3 threads", "lit_sb3 processes"]  # default arguments
    one_per_env = ["lit_sb3 threads, one worker per env", "lit_sb3 processes, one worker per env"]
    reproducible = ["lit_sb3 reproducible processes"]
    reference = ["async-gym-agents threads", "async-gym-agents processes"]
    known = [*ours, *one_per_env, *reproducible, *reference]
    unknown = set(args.only or ()) - set(known)
    if unknown:
        parser.error(f"--only: unknown configurations {sorted(unknown)}; choose from {known}")
    if not reference_available():
        reference = []
    for seed in seeds:
        for case in cases:
            plain = [plain_reference(case)]
            plain.append(plain[0] + ONE_THREAD)
            if case.name.startswith("PPO CartPole"):
                plain.append("SB3 SubprocVecEnv")
            # The reproducible mode refuses gSDE (its noise is drawn per batch, not per episode).
            reproducible_applies = case.algorithm is PPO and not case.kwargs.get("use_sde", False)
            sleepy = case.name.startswith("PPO sleepy")
            compared = [
                *ours,
                *(one_per_env if sleepy else []),
                *(reproducible if reproducible_applies else []),
                *reference,
            ]
            if args.only is not None:
                compared = [configuration for configuration in compared if configuration in args.only]
                if not compared:
                    continue
            for configuration in [*plain, *compared]:
                run = measure(case, configuration, seed, args.stop_at_threshold)
                case.results.setdefault(configuration, []).append(run)
                print(
                    f"seed {seed} | {case.name} | {configuration}: {run.steps_per_second:,.0f} steps/s, "
                    f"to threshold {run.seconds_to_threshold:.1f} s and {run.steps_to_threshold:,.0f} steps, "
                    f"train {run.train_seconds:.1f} s"
                    + (f", wasted {run.wasted_fraction:.1%}" if run.wasted_fraction is not None else ""),
                    flush=True,
                )
    table = result_table(cases, seeds)
    print("\n" + table.markdown())
    if args.results or not (args.quick or args.only or args.cases):
        ran = {configuration for case in cases for configuration in case.results}
        conditions = (
            f"seeds {', '.join(map(str, seeds))}, medians. lit_sb3 threads and lit_sb3 processes run at default "
            "arguments (use_mp aside). "
            + ("The one-worker-per-env rows set n_workers=8. " if ran & set(one_per_env) else "")
            + (f"async-gym-agents {version('async-gym-agents')}. " if ran & set(reference) else "")
            + ("Each run ends at its threshold: steps/s until then. " if args.stop_at_threshold else "")
            + args.conditions
        ).strip()
        result = new_result(
            args.name, {"gradient_agents": table}, load, conditions=conditions, packages=["sb3-contrib"]
        )
        print(f"\nwrote {save_result(result, args.results or RESULTS_FOLDER)}")


def plain_reference(case: Case) -> str:
    """:return: The plain SB3 configuration the case's rows are compared with."""
    return "SB3 SubprocVecEnv" if case.name.startswith("PPO sleepy") else "SB3 DummyVecEnv"


#: ``--cases`` names of the row groups, in their order.
CASE_KEYS = ("cartpole", "sleepy", "sac", "pendulum-gsde")

#: The result table: one row per case and configuration, medians over the seeds.
COLUMNS = [
    Column("case", "case"),
    Column("configuration", "configuration"),
    Column("seeds", "seeds"),
    Column("steps_per_second", "env steps/s", ",.0f"),
    Column("ratio", "/ plain SB3", ".2f"),
    Column("ratio_one_thread", "/ plain SB3, torch at 1 thread", ".2f"),
    Column("seconds_to_threshold", "time to threshold (s)", ".0f", "-"),
    Column("steps_to_threshold", "env steps to threshold", ",.0f", "-"),
    Column("reached", "reached", "", "-"),
    Column("limit", "train-only limit steps/s", ",.0f", "-"),
    Column("limit_fraction", "/ limit", ".2f", "-"),
    Column("wasted_fraction", "wasted steps", ".1%", "-"),
]


def result_table(cases: list[Case], seeds: list[int]) -> Table:
    """:return: The medians of every case and configuration measured (the ratios against the case's plain SB3)."""
    table = Table(COLUMNS)
    for case in [case for case in cases if case.results]:
        plain_name = plain_reference(case)
        plain = statistics.median(run.steps_per_second for run in case.results[plain_name])
        plain_one_thread = statistics.median(run.steps_per_second for run in case.results[plain_name + ONE_THREAD])
        limit = statistics.median(run.steps / run.train_seconds for run in case.results[plain_name])
        for configuration, runs in case.results.items():
            speed = statistics.median(run.steps_per_second for run in runs)
            to_threshold = statistics.median(run.seconds_to_threshold for run in runs)
            steps_to_threshold = statistics.median(run.steps_to_threshold for run in runs)
            reached = sum(run.seconds_to_threshold < float("inf") for run in runs)
            row: dict[str, Any] = {
                "case": case.name,
                "configuration": configuration,
                "seeds": ",".join(str(seed) for seed in seeds),
                "steps_per_second": speed,
                "ratio": speed / plain,
                "ratio_one_thread": speed / plain_one_thread,
            }
            if case.threshold is not None:
                row["seconds_to_threshold"] = to_threshold if to_threshold < float("inf") else "n/r"
                row["steps_to_threshold"] = steps_to_threshold if steps_to_threshold < float("inf") else "n/r"
                row["reached"] = f"{reached}/{len(runs)}"
            if case.name.startswith("PPO CartPole"):
                row |= {"limit": limit, "limit_fraction": speed / limit}
            wasted = [run.wasted_fraction for run in runs if run.wasted_fraction is not None]
            if wasted:
                row["wasted_fraction"] = statistics.median(wasted)
            table.rows.append(row)
    return table


if __name__ == "__main__":
    main()
