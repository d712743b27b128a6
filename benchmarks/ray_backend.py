"""AsyncEval on Ray actors against local worker processes, side by side in one run, and what a round costs on Ray.

1. Throughput: the same population of the same policy on the same envs with the same seeds, on 2 local worker
   processes and on 2 Ray actors of a local Ray instance, in interleaved rounds; medians.
2. Per-round overhead: rounds of one-step episodes, so that a round is nothing but dispatch: as a function of the
   number of chunks (tasks) a round has, locally and on Ray.
3. The same on a simulated cluster (``ray.cluster_utils.Cluster``) of 1, 2 and 4 worker nodes, one actor each.
4. An extrapolation from 2 and 3: up to how many actors a population keeps the dispatcher below 10% of a round.

    python benchmarks/ray_backend.py            # about 5 minutes on 2 cores
    python benchmarks/ray_backend.py --quick    # fewer rounds
"""

from __future__ import annotations

import argparse
import functools
import math
import pickle
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import ray
from ray.cluster_utils import Cluster
from sb3_contrib.ars.policies import LinearPolicy, MlpPolicy
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.policies import BasePolicy

from lit_sb3 import AsyncEval
from lit_sb3.cli.bench_results import RESULTS_FOLDER, Column, LoadSampler, Table, new_result, save_result
from lit_sb3.vec_env.async_eval import CHUNKS_PER_WORKER
from lit_sb3.vec_env.candidate_eval import CandidateEval
from lit_sb3.workers.choice import BackendName

N_WORKERS = 2
BACKENDS: tuple[Literal["local"] | BackendName, ...] = ("local", "ray")
#: Custom resource of the simulated worker nodes, one per node: each actor gets a node of its own.
WORKER_SLOT = "benchmark_worker_slot"


@dataclass
class Case:
    name: str
    env_fn: Callable[[], Any]
    policy: type[BasePolicy]
    pop_size: int
    target: float | None


def make_policy(case_policy: type[BasePolicy], env_fn: Callable[[], Any]) -> BasePolicy:
    env = env_fn()
    policy = case_policy(env.observation_space, env.action_space)
    env.close()
    return policy


def population(policy: BasePolicy, pop_size: int, round_index: int) -> np.ndarray:
    n_params = sum(parameter.numel() for parameter in policy.parameters())
    return np.random.default_rng(round_index).normal(scale=0.3, size=(pop_size, n_params)).astype(np.float32)


def timed_round(async_eval: CandidateEval, weights: np.ndarray, seed: int) -> tuple[float, int, list]:
    """:return: Seconds of one round, its env steps and its results."""
    async_eval.seed(seed)
    started = time.perf_counter()
    async_eval.send_jobs(weights, len(weights))
    results = async_eval.get_results()
    elapsed = time.perf_counter() - started
    return elapsed, sum(int(np.sum(lengths)) for _, (_, lengths) in results), results


#: The tables of a run, by name, and their columns.
COLUMNS = {
    "throughput": [
        Column("case", "case (2 workers)"),
        Column("local", "local steps/s", ",.0f"),
        Column("ray", "Ray steps/s", ",.0f"),
        Column("ratio", "Ray / local", ".2f"),
        Column("target", "target", "", "-"),
        Column("population_kib", "population a round (KiB)", ",.0f"),
        Column("results_kib", "results a round (KiB)", ",.1f"),
    ],
    "overhead_by_chunks": [
        Column("chunks", "chunks a round (2 workers)"),
        Column("local_ms", "local ms", ".1f"),
        Column("ray_ms", "Ray ms", ".1f"),
    ],
    "overhead_by_nodes": [
        Column("nodes", "simulated worker nodes, one actor each"),
        Column("one_chunk_ms", "1 chunk an actor, ms", ".1f"),
        Column("default_chunks_ms", f"{CHUNKS_PER_WORKER} chunks an actor (the default), ms", ".1f"),
    ],
    "dispatcher": [
        Column("pop_size", "population"),
        Column("most_actors", "most actors with the dispatcher below 10% of a round"),
        Column("population_mib", "population bytes a round (MiB)", ".2f"),
    ],
}


def throughput(case: Case, rounds: int) -> dict[str, Any]:
    policy = make_policy(case.policy, case.env_fn)
    evaluators = {backend: AsyncEval([case.env_fn] * N_WORKERS, policy, backend=backend) for backend in BACKENDS}
    rates: dict[str, list[float]] = {backend: [] for backend in evaluators}
    result_bytes = 0
    try:
        for round_index in range(rounds + 1):  # round 0 warms both up
            weights = population(policy, case.pop_size, round_index)
            outcomes = {backend: timed_round(ae, weights, round_index) for backend, ae in evaluators.items()}
            local_results, ray_results = outcomes["local"][2], outcomes["ray"][2]
            for (_, (local_returns, _)), (_, (ray_returns, _)) in zip(local_results, ray_results, strict=True):
                assert np.array_equal(local_returns, ray_returns), "the backends disagree"
            result_bytes = len(pickle.dumps(ray_results))
            if round_index:
                for backend, (seconds, steps, _) in outcomes.items():
                    rates[backend].append(steps / seconds)
    finally:
        for async_eval in evaluators.values():
            async_eval.close()
    local_rate, ray_rate = (statistics.median(rates[backend]) for backend in ("local", "ray"))
    return {
        "case": case.name,
        "local": local_rate,
        "ray": ray_rate,
        "ratio": ray_rate / local_rate,
        "target": None if case.target is None else f">= {case.target}",
        "population_kib": population(policy, case.pop_size, 0).nbytes / 1024,
        "results_kib": result_bytes / 1024,
    }


def one_step_env() -> Any:
    return make_vec_env("Pendulum-v1", env_kwargs={"max_episode_steps": 1})


def round_overhead(async_eval: CandidateEval, n_chunks: int, rounds: int) -> float:
    """:return: Median seconds of a round of ``n_chunks`` one-step episodes, one a chunk (``chunk_size=1``)."""
    weights = np.zeros((n_chunks, async_eval.n_params), np.float32)
    timed_round(async_eval, weights, 0)  # warm-up
    return statistics.median(timed_round(async_eval, weights, seed)[0] for seed in range(rounds))


def overhead_by_chunks(rounds: int, chunk_counts: tuple[int, ...]) -> dict[str, list[float]]:
    policy = make_policy(LinearPolicy, one_step_env)
    seconds: dict[str, list[float]] = {}
    for backend in BACKENDS:
        evaluator = AsyncEval([one_step_env] * N_WORKERS, policy, chunk_size=1, backend=backend)
        with evaluator as async_eval:
            seconds[backend] = [round_overhead(async_eval, n, rounds) for n in chunk_counts]
    return seconds


def overhead_by_nodes(rounds: int, node_counts: tuple[int, ...]) -> list[tuple[int, float, float]]:
    """:return: For each node count: nodes, median round seconds with 1 chunk per actor and with 8."""
    policy = make_policy(LinearPolicy, one_step_env)
    measured = []
    for n_nodes in node_counts:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        try:
            for _ in range(n_nodes):
                cluster.add_node(num_cpus=1, resources={WORKER_SLOT: 1})
            ray.init(address=cluster.address)
            with AsyncEval(
                [one_step_env] * n_nodes,
                policy,
                chunk_size=1,
                backend="ray",
                worker_resources={"num_cpus": 1, WORKER_SLOT: 1},
            ) as async_eval:
                one = round_overhead(async_eval, n_nodes, rounds)
                eight = round_overhead(async_eval, CHUNKS_PER_WORKER * n_nodes, rounds)
            measured.append((n_nodes, one, eight))
        finally:
            ray.shutdown()
            cluster.shutdown()
    return measured


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """:return: Intercept and slope of the least-squares line."""
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope)


def largest_actor_count(pop_size: int, candidate_seconds: float, fixed: float, per_actor: float) -> int:
    """
    Most actors at which the dispatcher stays below 10% of a round: overhead ``fixed + per_actor * actors`` (with
    the default 8 chunks per actor), round ``pop_size * candidate_seconds / actors`` (perfect balance).
    """
    # per_actor * a^2 + fixed * a - 0.1 * pop_size * candidate_seconds <= 0
    budget = 0.1 * pop_size * candidate_seconds
    if per_actor <= 0:
        return math.floor(budget / fixed) if fixed > 0 else pop_size
    actors = (-fixed + math.sqrt(fixed**2 + 4 * per_actor * budget)) / (2 * per_actor)
    return max(0, min(pop_size, math.floor(actors)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument(
        "--results", default=None, help=f"folder of the result file (default: {RESULTS_FOLDER}; quick runs: none)"
    )
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    cases = [
        Case(
            "Pendulum-v1, n_envs=8, LinearPolicy, pop 64",
            functools.partial(make_vec_env, "Pendulum-v1", n_envs=8),
            LinearPolicy,
            64,
            None,
        ),
        Case(
            "HalfCheetah-v5, n_envs=1, MlpPolicy [64, 64], pop 16",
            functools.partial(make_vec_env, "HalfCheetah-v5"),
            MlpPolicy,
            16,
            0.8,
        ),
    ]
    load = LoadSampler()
    print(f"# AsyncEval on Ray actors vs local processes: {N_WORKERS} workers, medians of {rounds} rounds\n")
    tables = {name: Table(columns) for name, columns in COLUMNS.items()}
    tables["throughput"].rows = [throughput(case, rounds) for case in cases]
    print(tables["throughput"].markdown() + "\n")

    chunk_counts = (2, 8, 32, 128)
    by_chunks = overhead_by_chunks(3 * rounds, chunk_counts)
    print(f"## Per-round overhead (ms): rounds of one-step episodes, {N_WORKERS} workers, by chunks per round\n")
    tables["overhead_by_chunks"].rows = [
        {"chunks": n, "local_ms": 1e3 * local, "ray_ms": 1e3 * on_ray}
        for n, local, on_ray in zip(chunk_counts, by_chunks["local"], by_chunks["ray"], strict=True)
    ]
    print(tables["overhead_by_chunks"].markdown() + "\n")
    chunk_intercept, per_chunk = fit_line([float(n) for n in chunk_counts], by_chunks["ray"])
    print(f"Ray: {1e3 * chunk_intercept:.1f} ms a round + {1e3 * per_chunk:.2f} ms a chunk (least squares)\n")

    node_counts = (1, 2, 4)
    by_nodes = overhead_by_nodes(3 * rounds, node_counts)
    print("## Per-round overhead (ms) on a simulated cluster: one actor per worker node\n")
    tables["overhead_by_nodes"].rows = [
        {"nodes": n, "one_chunk_ms": 1e3 * one, "default_chunks_ms": 1e3 * eight} for n, one, eight in by_nodes
    ]
    print(tables["overhead_by_nodes"].markdown() + "\n")
    fixed, per_actor = fit_line([float(n) for n, _, _ in by_nodes], [eight for _, _, eight in by_nodes])
    print(f"Default chunking: {1e3 * fixed:.1f} ms a round + {1e3 * per_actor:.2f} ms an actor (least squares)\n")

    halfcheetah_rate = tables["throughput"].rows[1]["ray"] / N_WORKERS  # steps/s of one Ray actor
    candidate_seconds = 1000 / halfcheetah_rate
    halfcheetah_params = population(make_policy(MlpPolicy, cases[1].env_fn), 1, 0).size
    print(
        f"## Dispatcher below 10% of a round (HalfCheetah, {1e3 * candidate_seconds:.0f} ms a candidate on one actor, "
        "extrapolated)\n"
    )
    tables["dispatcher"].rows = [
        {
            "pop_size": pop_size,
            "most_actors": largest_actor_count(pop_size, candidate_seconds, max(fixed, 0.0), max(per_actor, 0.0)),
            "population_mib": pop_size * 4 * halfcheetah_params / 2**20,
        }
        for pop_size in (16, 64, 256, 1024, 4096)
    ]
    print(tables["dispatcher"].markdown())
    if args.results or not args.quick:
        result = new_result("ray_backend", tables, load, packages=["ray"])
        print(f"\nwrote {save_result(result, args.results or RESULTS_FOLDER)}")


if __name__ == "__main__":
    main()
