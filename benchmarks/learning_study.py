"""Learning study: many seeds per configuration, one run per process, every run appended to a JSON-lines log.

Each run trains one (task, configuration, seed) on 2 workers until the task's threshold or its step budget and
logs its evaluation curve (env steps, training wall time, mean return of 10 deterministic episodes of the centre
policy, evaluated at round starts and not counted in the wall time), the time spent and the machine's load
average before and after (the machine is shared: wall times are noisy, steps to threshold are not). A run goes on
to at least the task's fixed budget, so the return at that budget is known for every seed.

Subcommands::

    python benchmarks/learning_study.py run --task halfcheetah --config ars --seed 0 --out runs.jsonl
    python benchmarks/learning_study.py queue jobs.txt --out runs.jsonl   # runs "task config seed [budget]" lines
    python benchmarks/learning_study.py report runs.jsonl                 # the README table (markdown)

``queue`` takes the first line of the jobs file, removes it and runs it, until the file is empty, so the queue can
be edited while it runs. Configurations (``--config``): see ``CONFIGS``.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import sb3_contrib
from learning import ARS_PAPER_HALFCHEETAH, ARS_PAPER_SWIMMER, RunResult, Task, ThresholdReachedError, ThresholdWatcher
from sb3_contrib.common.vec_env import AsyncEval as ContribAsyncEval
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize

from lit_sb3 import ARS, CEM, CMAES, ES, AsyncEval
from lit_sb3.evaluation.obs_rms import subtract_running_mean_std
from lit_sb3.vec_env import CandidateEval

N_WORKERS = 2


@dataclass(frozen=True)
class StudyTask:
    """
    :param task: Threshold, budget, normalisation and evaluation interval.
    :param fixed_budget: Env steps a run goes on to even after reaching the threshold.
    :param ars: The ARS paper's hyper-parameters for the task.
    :param clip_obs: ``VecNormalize``'s ``clip_obs``.
    """

    task: Task
    fixed_budget: int
    ars: dict[str, Any]
    clip_obs: float = 10.0


ARS_PAPER_HOPPER = {"n_delta": 8, "n_top": 4, "learning_rate": 0.01, "delta_std": 0.025, "alive_bonus_offset": -1}

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
        Task("hopper", "Hopper-v5", 3120.0, 3_000_000, normalize=True, eval_interval=30_000),
        1_000_000,
        ARS_PAPER_HOPPER,
    ),
}


def make_env(env_id: str, normalize: bool, clip_obs: float = 10.0, training: bool = True) -> VecEnv:
    """:return: The vectorised environment of a task (``VecNormalize(norm_reward=False)`` for ARS V2)."""
    env: VecEnv = DummyVecEnv([lambda: gym.make(env_id)])
    if normalize:
        env = VecNormalize(env, norm_reward=False, training=training, clip_obs=clip_obs)
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
    :param async_eval: ``"lit_sb3"`` or ``"sb3-contrib"``: what evaluates the candidates, on 2 workers.
    :param clip_obs: ``VecNormalize``'s ``clip_obs`` (None: the task's).
    """

    make_model: Callable[[StudyTask, VecEnv, int], BaseAlgorithm]
    async_eval: str = "lit_sb3"
    clip_obs: float | None = None


def ours(**changes: Any) -> Callable[[StudyTask, VecEnv, int], BaseAlgorithm]:
    return lambda task, env, seed: ARS("LinearPolicy", env, seed=seed, **{**task.ars, **changes})


def contrib_merge(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return ContribMergeARS("LinearPolicy", env, seed=seed, **task.ars)


def contrib(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return sb3_contrib.ARS("LinearPolicy", env, seed=seed, **task.ars)


def cmaes(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return CMAES("LinearPolicy", env, seed=seed, zero_policy=True, sigma0=0.1, pop_size=32)


def es(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return ES("LinearPolicy", env, seed=seed, pop_size=32, sigma=0.03, learning_rate=0.02)


def cem(task: StudyTask, env: VecEnv, seed: int) -> BaseAlgorithm:
    return CEM("LinearPolicy", env, seed=seed, zero_policy=True, pop_size=32, initial_std=0.1)


CONFIGS: dict[str, Config] = {
    "ars": Config(ours()),
    "contrib-ars-lit": Config(contrib),
    "contrib-ars-own": Config(contrib, async_eval="sb3-contrib"),
    "ars-contrib-merge": Config(contrib_merge),
    "ars-sample-std": Config(ours(return_std_ddof=1)),
    "ars-no-clip": Config(ours(), clip_obs=1e6),
    "ars-update-every-3": Config(ours(normalization_update_interval=3)),
    "ars-update-every-10": Config(ours(normalization_update_interval=10)),
    "ars-inertia-3": Config(inertial),
    "cmaes": Config(cmaes),
    "es": Config(es),
    "cem": Config(cem),
}


def uptime_load() -> float:
    """:return: The 1-minute load average."""
    return os.getloadavg()[0]


@dataclass
class Record:
    """One run, as logged."""

    task: str
    config: str
    seed: int
    budget: int
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    steps_to_threshold: int | None = None
    time_to_threshold: float | None = None
    load_before: float = 0.0
    load_after: float = 0.0
    started: str = ""
    seconds: float = 0.0


class StudyWatcher(ThresholdWatcher):
    """Goes on past the threshold until the fixed budget; records the first crossing."""

    def __init__(self, study_task: StudyTask, eval_env: VecEnv) -> None:
        super().__init__(study_task.task, eval_env)
        self.fixed_budget = study_task.fixed_budget

    def evaluate(self) -> None:
        first = self.result.steps_to_threshold, self.result.time_to_threshold
        try:
            super().evaluate()
        except ThresholdReachedError:
            if first[0] is not None:  # keep the first crossing
                self.result.steps_to_threshold, self.result.time_to_threshold = first
        if self.result.steps_to_threshold is not None and self.num_timesteps >= self.fixed_budget:
            raise ThresholdReachedError


def run(task_name: str, config_name: str, seed: int, budget: int | None) -> Record:
    """Train one seed on 2 workers until the threshold (and the fixed budget) or the budget."""
    study_task, config = TASKS[task_name], CONFIGS[config_name]
    task = study_task.task
    if budget is not None:
        task = Task(task.name, task.env_id, task.threshold, budget, task.normalize, task.eval_interval)
        study_task = StudyTask(task, study_task.fixed_budget, study_task.ars, study_task.clip_obs)
    clip_obs = study_task.clip_obs if config.clip_obs is None else config.clip_obs
    record = Record(task_name, config_name, seed, task.budget, started=time.strftime("%H:%M:%S"))
    record.load_before = uptime_load()
    began = time.perf_counter()
    model = config.make_model(study_task, make_env(task.env_id, task.normalize, clip_obs), seed)
    watcher = StudyWatcher(study_task, make_env(task.env_id, task.normalize, clip_obs, training=False))
    env_fns: list[Callable[[], VecEnv]] = [
        functools.partial(make_env, task.env_id, task.normalize, clip_obs)
    ] * N_WORKERS
    async_eval: Any = (AsyncEval if config.async_eval == "lit_sb3" else ContribAsyncEval)(env_fns, model.policy)
    try:
        model.learn(task.budget, callback=watcher, async_eval=async_eval)  # type: ignore[call-arg]
        watcher.evaluate()
    except ThresholdReachedError:
        pass
    finally:
        async_eval.close()
    result: RunResult = watcher.result
    record.curve = result.curve
    record.steps_to_threshold, record.time_to_threshold = result.steps_to_threshold, result.time_to_threshold
    record.load_after = uptime_load()
    record.seconds = time.perf_counter() - began
    return record


def throughput(task_name: str, config_name: str, steps: int) -> dict[str, Any]:
    """Training env steps per second on 2 workers, without evaluations, from the start of ``learn()``."""
    study_task, config = TASKS[task_name], CONFIGS[config_name]
    task = study_task.task
    clip_obs = study_task.clip_obs if config.clip_obs is None else config.clip_obs
    model = config.make_model(study_task, make_env(task.env_id, task.normalize, clip_obs), 0)
    env_fns: list[Callable[[], VecEnv]] = [
        functools.partial(make_env, task.env_id, task.normalize, clip_obs)
    ] * N_WORKERS
    async_eval: Any = (AsyncEval if config.async_eval == "lit_sb3" else ContribAsyncEval)(env_fns, model.policy)
    load_before = uptime_load()
    try:
        began = time.perf_counter()
        model.learn(steps, async_eval=async_eval)  # type: ignore[call-arg]
        seconds = time.perf_counter() - began
    finally:
        async_eval.close()
    return {
        "task": task_name,
        "config": config_name,
        "steps": model.num_timesteps,
        "seconds": seconds,
        "steps_per_second": model.num_timesteps / seconds,
        "load_before": load_before,
        "load_after": uptime_load(),
        "started": time.strftime("%H:%M:%S"),
    }


def queue(jobs_file: str, out: str) -> None:
    """Run the jobs file's lines one at a time (each in a fresh process), taking each off the file first."""
    while True:
        with open(jobs_file, "r+") as file:
            fcntl.flock(file, fcntl.LOCK_EX)  # several queues may share the file
            lines = [line for line in file.read().splitlines() if line.strip() and not line.startswith("#")]
            if not lines:
                return
            job, rest = lines[0].split(), lines[1:]
            file.seek(0)
            file.truncate()
            file.write("".join(f"{line}\n" for line in rest))
        task, config, seed = job[:3]
        command = [sys.executable, __file__, "run", "--task", task, "--config", config, "--seed", seed, "--out", out]
        if len(job) > 3:
            command += ["--budget", job[3]]
        print(time.strftime("%H:%M:%S"), " ".join(job), flush=True)
        subprocess.run(command, check=False)


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


def format_quartiles(values: list[float], pattern: str) -> str:
    if not values:
        return ""
    q25, q50, q75 = percentiles(values)

    def show(value: float) -> str:
        return "n/r" if not np.isfinite(value) else pattern.format(value)

    return f"{show(q50)} ({show(q25)} to {show(q75)})"


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
    "ars-contrib-merge": "lit_sb3 ARS, sb3-contrib's merge",
    "ars-inertia-3": "lit_sb3 ARS, merged statistics weigh 3x",
    "ars-update-every-3": "lit_sb3 ARS, normalization_update_interval=3",
    "ars-update-every-10": "lit_sb3 ARS, normalization_update_interval=10",
    "ars-sample-std": "lit_sb3 ARS, sample std",
    "ars-no-clip": "lit_sb3 ARS, clip_obs=1e6",
    "cmaes": "lit_sb3 CMAES",
    "es": "lit_sb3 ES",
    "cem": "lit_sb3 CEM",
}


def report(runs_file: str, throughput_file: str | None) -> None:
    """
    Print the markdown table of every (task, configuration) in the log. With measured throughputs, the last column
    is the median of each seed's steps to threshold divided by its configuration's training steps per second.
    """
    with open(runs_file) as file:
        records = [json.loads(line) for line in file if line.strip()]
    rates: dict[tuple[str, str], float] = {}
    if throughput_file is not None:
        with open(throughput_file) as file:
            for line in file:
                if line.strip():
                    measured = json.loads(line)
                    rates[measured["task"], measured["config"]] = measured["steps_per_second"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["task"], record["config"]), []).append(record)
    print(
        "| task | configuration | seeds | reached (budget) | env steps to threshold: median (IQR) "
        "| wall time to threshold in the study: median (IQR) | return at fixed budget (median) "
        "| train steps/s alone | wall time to threshold at that rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    order = list(LABELS)
    for (task_name, config_name), group in sorted(
        groups.items(), key=lambda item: (item[0][0], order.index(item[0][1]))
    ):
        fixed = TASKS[task_name].fixed_budget
        steps = [np.inf if r["steps_to_threshold"] is None else r["steps_to_threshold"] for r in group]
        times = [np.inf if r["time_to_threshold"] is None else r["time_to_threshold"] for r in group]
        fixed_returns = [value for r in group if (value := return_at(r["curve"], fixed)) is not None]
        reached = sum(r["steps_to_threshold"] is not None for r in group)
        budget = max(r["budget"] for r in group)
        fixed_text = f"{statistics.median(fixed_returns):.0f} at {fixed / 1e6:g}M" if fixed_returns else ""
        rate = rates.get((task_name, config_name))
        rate_text = "" if rate is None else f"{rate:,.0f}"
        derived = "" if rate is None else format_quartiles([value / rate for value in steps], "{:.0f} s")
        print(
            f"| {task_name} | {LABELS[config_name]} | {len(group)} | {reached}/{len(group)} ({budget / 1e6:g}M) "
            f"| {format_quartiles(steps, '{:,.0f}')} | {format_quartiles(times, '{:.0f} s')} | {fixed_text} "
            f"| {rate_text} | {derived} |"
        )
    loads = [value for r in records for value in (r["load_before"], r["load_after"])]
    print(
        f"\n{len(records)} runs, load average {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("--task", choices=list(TASKS), required=True)
    run_parser.add_argument("--config", choices=list(CONFIGS), required=True)
    run_parser.add_argument("--seed", type=int, required=True)
    run_parser.add_argument("--budget", type=int, help="env steps at most (default: the task's)")
    run_parser.add_argument("--out", required=True, help="JSON-lines log the run is appended to")
    queue_parser = commands.add_parser("queue")
    queue_parser.add_argument("jobs")
    queue_parser.add_argument("--out", required=True)
    throughput_parser = commands.add_parser("throughput")
    throughput_parser.add_argument("--task", choices=list(TASKS), required=True)
    throughput_parser.add_argument("--config", choices=list(CONFIGS), required=True)
    throughput_parser.add_argument("--steps", type=int, required=True)
    throughput_parser.add_argument("--out", required=True)
    report_parser = commands.add_parser("report")
    report_parser.add_argument("runs")
    report_parser.add_argument("--throughput", help="JSON-lines log of throughput runs")
    args = parser.parse_args()
    if args.command == "run":
        record = run(args.task, args.config, args.seed, args.budget)
        with open(args.out, "a") as file:
            file.write(json.dumps(record.__dict__) + "\n")
        print(
            f"{record.task} {record.config} seed {record.seed}: threshold at {record.steps_to_threshold} steps, "
            f"{record.time_to_threshold} s; final {record.curve[-1]}; load {record.load_before}-{record.load_after}",
            flush=True,
        )
    elif args.command == "throughput":
        measured = throughput(args.task, args.config, args.steps)
        with open(args.out, "a") as file:
            file.write(json.dumps(measured) + "\n")
        print(measured, flush=True)
    elif args.command == "queue":
        queue(args.jobs, args.out)
    else:
        report(args.runs, args.throughput)


if __name__ == "__main__":
    main()
