"""Learning benchmarks: env steps and wall time to a return threshold, median of seeds.

Tasks (``--tasks``):

* ``cartpole``: CartPole-v1, threshold 475; ARS, ES, CEM and CMAES with their default hyper-parameters and a
  ``LinearPolicy``, evaluated in-process, within 100k env steps; then ARS three ways on 2 workers (below).
* ``swimmer``: Swimmer-v5, threshold 325; ARS with the ARS paper's hyper-parameters (V1: n_delta=1, n_top=1,
  learning_rate=0.02, delta_std=0.01, linear policy), three ways on 2 workers.
* ``halfcheetah``: HalfCheetah-v5, threshold 3430; ARS with the paper's hyper-parameters (V2-t: observation
  normalisation, n_delta=32, n_top=4, learning_rate=0.02, delta_std=0.03, linear policy), three ways on 2 workers,
  and CMAES (linear policy from zero, observation normalisation, sigma0=0.1, pop_size=32) on 2 workers.

"Three ways": lit_sb3's ARS with lit_sb3's AsyncEval, sb3-contrib's ARS with lit_sb3's AsyncEval (the drop-in), and
sb3-contrib's ARS with its own AsyncEval; same hyper-parameters and seeds. The last table gives the ratio of the
wall time to threshold of lit_sb3's ARS to sb3-contrib's ARS with its own AsyncEval.

The policy is evaluated at the start of a round (and at the end of training) on 10 deterministic episodes with fixed
reset seeds, in a separate environment normalised with the training statistics; evaluation time is not counted.
Wall time starts when ``learn()`` is called (worker pools are started before). A run stops at the threshold or
the task's budget of env steps.

Run from the repository root, after ``pip install torch==2.13.0 -e ".[test]"``::

    python benchmarks/learning.py --quick            # CartPole only, under a minute
    python benchmarks/learning.py                    # every task: about 2 hours on 2 cores
    python benchmarks/learning.py --tasks swimmer --curves swimmer.csv
"""

from __future__ import annotations

import argparse
import csv
import functools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import sb3_contrib
from sb3_contrib.common.vec_env import AsyncEval as ContribAsyncEval
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize, sync_envs_normalization

from lit_sb3 import ARS, CEM, CMAES, ES, AsyncEval
from lit_sb3.vec_env import InProcessEval

N_EVAL_EPISODES = 10
EVAL_SEED = 10_000
OUR_ARS = "lit_sb3 ARS + lit_sb3 AsyncEval"
THEIR_ARS = "sb3-contrib ARS + its AsyncEval"


@dataclass(frozen=True)
class Task:
    """
    :param name: Name on the command line.
    :param env_id: Gymnasium id.
    :param threshold: Mean evaluation return to reach.
    :param budget: Env steps at most.
    :param normalize: Whether observations are normalised (``VecNormalize``).
    :param eval_interval: Env steps between two evaluations at least (they happen at round starts).
    """

    name: str
    env_id: str
    threshold: float
    budget: int
    normalize: bool
    eval_interval: int


@dataclass(frozen=True)
class Method:
    """
    :param label: Name in the tables.
    :param make_model: Builds the model from the training env and the seed.
    :param async_eval: ``None`` (in-process), ``"lit_sb3"`` or ``"sb3-contrib"``: what evaluates the candidates.
    """

    label: str
    make_model: Callable[[VecEnv, int], BaseAlgorithm]
    async_eval: str | None


@dataclass
class RunResult:
    """One seed's run: the evaluation curve and where it crossed the threshold."""

    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (env steps, wall time, eval return)
    steps_to_threshold: int | None = None
    time_to_threshold: float | None = None

    @property
    def final_return(self) -> float:
        return self.curve[-1][2]

    @property
    def steps_per_second(self) -> float:
        """Env steps per second of training (evaluation excluded), over the whole run."""
        steps, seconds, _ = self.curve[-1]
        return steps / max(seconds, 1e-9)


class ThresholdReachedError(Exception):
    """Stops ``learn()`` at the threshold (sb3-contrib's ARS ignores ``on_step`` returning False)."""


def make_env(env_id: str, normalize: bool, training: bool = True) -> VecEnv:
    """:return: The vectorised environment of a task (``VecNormalize(norm_reward=False)`` for ARS V2)."""
    env: VecEnv = DummyVecEnv([lambda: gym.make(env_id)])
    if normalize:
        env = VecNormalize(env, norm_reward=False, training=training)
    return env


def policy_return(model: BaseAlgorithm, eval_env: VecEnv, evaluator: InProcessEval) -> float:
    """
    :param eval_env: The environment ``evaluator`` runs, given the training environment's normalisation statistics.
    :return: The mean return of the model's policy over the evaluator's episodes, on the same reset seeds every time.
    """
    training_env = model.get_env()
    assert training_env is not None
    sync_envs_normalization(training_env, eval_env)
    evaluator.seed(EVAL_SEED)
    evaluator.send_jobs(model.policy.parameters_to_vector()[None], 1)
    ((_, (episode_returns, _)),) = evaluator.get_results()
    return float(np.mean(episode_returns))


class ThresholdWatcher(BaseCallback):
    """
    Evaluates the policy at round starts (and at the end), excluding that time from the wall time.

    :param task: The task.
    :param eval_env: The evaluation environment.
    """

    def __init__(self, task: Task, eval_env: VecEnv) -> None:
        super().__init__()
        self.task = task
        self.eval_env = eval_env
        self.result = RunResult()
        self._evaluator: InProcessEval | None = None
        self._started_at = 0.0
        self._eval_time = 0.0
        self._last_eval_steps = -task.eval_interval

    def _on_training_start(self) -> None:
        self._evaluator = InProcessEval(self.eval_env, self.model.policy, N_EVAL_EPISODES)
        self._started_at = time.perf_counter()

    def _on_rollout_start(self) -> None:
        if self.num_timesteps - self._last_eval_steps >= self.task.eval_interval:
            self.evaluate()

    def _on_step(self) -> bool:
        return True

    def evaluate(self) -> None:
        """Evaluate the current policy; raise :class:`ThresholdReachedError` at the threshold."""
        assert self._evaluator is not None
        now = time.perf_counter()
        wall_time = now - self._started_at - self._eval_time
        mean_return = policy_return(self.model, self.eval_env, self._evaluator)
        self._eval_time += time.perf_counter() - now
        self._last_eval_steps = self.num_timesteps
        self.result.curve.append((self.num_timesteps, wall_time, mean_return))
        if mean_return >= self.task.threshold:
            self.result.steps_to_threshold, self.result.time_to_threshold = self.num_timesteps, wall_time
            raise ThresholdReachedError


def run(task: Task, method: Method, seed: int, n_workers: int) -> RunResult:
    """Train one seed until the threshold or the budget."""
    model = method.make_model(make_env(task.env_id, task.normalize), seed)
    watcher = ThresholdWatcher(task, make_env(task.env_id, task.normalize, training=False))
    env_fns: list[Callable[[], VecEnv]] = [functools.partial(make_env, task.env_id, task.normalize)] * n_workers
    async_eval: Any = None
    if method.async_eval == "lit_sb3":
        async_eval = AsyncEval(env_fns, model.policy)
    elif method.async_eval == "sb3-contrib":
        async_eval = ContribAsyncEval(env_fns, model.policy)
    try:
        learn_kwargs = {} if async_eval is None else {"async_eval": async_eval}
        model.learn(task.budget, callback=watcher, **learn_kwargs)
        watcher.evaluate()
    except ThresholdReachedError:
        pass
    finally:
        if async_eval is not None:
            async_eval.close()
    return watcher.result


def ars_three_ways(hyper_parameters: dict[str, Any]) -> list[Method]:
    """ARS with the given hyper-parameters: lit_sb3's and sb3-contrib's, on 2 workers."""

    def ours(env: VecEnv, seed: int) -> BaseAlgorithm:
        return ARS("LinearPolicy", env, seed=seed, **hyper_parameters)

    def contrib(env: VecEnv, seed: int) -> BaseAlgorithm:
        return sb3_contrib.ARS("LinearPolicy", env, seed=seed, **hyper_parameters)

    return [
        Method(OUR_ARS, ours, "lit_sb3"),
        Method("sb3-contrib ARS + lit_sb3 AsyncEval", contrib, "lit_sb3"),
        Method(THEIR_ARS, contrib, "sb3-contrib"),
    ]


def defaults(algorithm: Callable[..., BaseAlgorithm]) -> Callable[[VecEnv, int], BaseAlgorithm]:
    return lambda env, seed: algorithm("LinearPolicy", env, seed=seed)


CARTPOLE = Task("cartpole", "CartPole-v1", 475.0, 100_000, normalize=False, eval_interval=1)
SWIMMER = Task("swimmer", "Swimmer-v5", 325.0, 2_000_000, normalize=False, eval_interval=10_000)
HALFCHEETAH = Task("halfcheetah", "HalfCheetah-v5", 3430.0, 20_000_000, normalize=True, eval_interval=1)
ARS_PAPER_SWIMMER = {"n_delta": 1, "n_top": 1, "learning_rate": 0.02, "delta_std": 0.01}
ARS_PAPER_HALFCHEETAH = {"n_delta": 32, "n_top": 4, "learning_rate": 0.02, "delta_std": 0.03}


def cmaes_halfcheetah(env: VecEnv, seed: int) -> BaseAlgorithm:
    return CMAES("LinearPolicy", env, seed=seed, zero_policy=True, sigma0=0.1, pop_size=32)


BENCHMARKS: dict[str, tuple[Task, list[Method]]] = {
    "cartpole": (
        CARTPOLE,
        [
            Method(f"lit_sb3 {algorithm.__name__} (defaults)", defaults(algorithm), None)
            for algorithm in (ARS, ES, CEM, CMAES)
        ]
        + ars_three_ways({}),
    ),
    "swimmer": (SWIMMER, ars_three_ways(ARS_PAPER_SWIMMER)),
    "halfcheetah": (
        HALFCHEETAH,
        [
            *ars_three_ways(ARS_PAPER_HALFCHEETAH),
            Method("lit_sb3 CMAES + lit_sb3 AsyncEval", cmaes_halfcheetah, "lit_sb3"),
        ],
    ),
}


def median_or_none(values: list[float | None]) -> float | None:
    """:return: The median, counting runs that never reached the threshold as infinitely long; None if that is."""
    median = statistics.median([np.inf if value is None else value for value in values])
    return None if np.isinf(median) else float(median)


def format_value(value: float | None, pattern: str) -> str:
    return "not reached" if value is None else pattern.format(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="CartPole only (same as --tasks cartpole)")
    parser.add_argument("--tasks", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2, help="AsyncEval workers of the ARS comparisons")
    parser.add_argument("--curves", help="write every evaluation (task, method, seed, steps, time, return) to a CSV")
    args = parser.parse_args()
    tasks = ["cartpole"] if args.quick else args.tasks

    print(f"python {sys.version.split()[0]}, {len(args.seeds)} seeds {args.seeds}, {args.workers} workers")
    header = (
        f"{'task':<12} {'method':<38} {'reached':>7} {'steps to threshold':>19} {'time to threshold':>18} "
        f"{'train steps/s':>13} {'final return':>13}"
    )
    rows = [header, "-" * len(header)]
    curves: list[tuple[str, str, int, int, float, float]] = []
    ratios: list[str] = []
    for task_name in tasks:
        task, methods = BENCHMARKS[task_name]
        median_times: dict[str, float | None] = {}
        for method in methods:
            results = []
            for seed in args.seeds:
                result = run(task, method, seed, args.workers)
                results.append(result)
                steps, seconds, last_return = result.curve[-1]
                print(
                    f"  {task.name} / {method.label} / seed {seed}: {last_return:.1f} after {steps:,} steps, "
                    f"{seconds:.1f} s ({'threshold reached' if result.steps_to_threshold else 'budget spent'})",
                    file=sys.stderr,
                    flush=True,
                )
            for seed, result in zip(args.seeds, results, strict=True):
                curves.extend((task.name, method.label, seed, *point) for point in result.curve)
            reached = sum(result.steps_to_threshold is not None for result in results)
            median_steps = median_or_none([result.steps_to_threshold for result in results])
            median_seconds = median_or_none([result.time_to_threshold for result in results])
            final = statistics.median(result.final_return for result in results)
            throughput = statistics.median(result.steps_per_second for result in results)
            median_times[method.label] = median_seconds
            row = (
                f"{task.name:<12} {method.label:<38} {reached:>3}/{len(results):<3} "
                f"{format_value(median_steps, '{:,.0f}'):>19} {format_value(median_seconds, '{:.2f} s'):>18} "
                f"{throughput:>13,.0f} {final:>13.1f}"
            )
            rows.append(row)
            print(row, flush=True)
        ours, theirs = median_times[OUR_ARS], median_times[THEIR_ARS]
        ratio = "n/a (threshold not reached)" if ours is None or theirs is None else f"{ours / theirs:.2f}"
        ratios.append(f"{task.name:<12} {OUR_ARS} / {THEIR_ARS}: {ratio} (target <= 0.65)")
    print("\n".join(["", *rows, "", "Wall time to threshold, median of seeds:", *ratios]))
    if args.curves:
        with open(args.curves, "w", newline="") as curve_file:
            writer = csv.writer(curve_file)
            writer.writerow(["task", "method", "seed", "env_steps", "wall_time_s", "eval_return"])
            writer.writerows(curves)


if __name__ == "__main__":
    main()
