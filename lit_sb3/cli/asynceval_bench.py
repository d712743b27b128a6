"""The measuring core of the AsyncEval benchmark: lit_sb3's AsyncEval against sb3-contrib's, side by side.

Both evaluate the same population of the same policy on the same ``envs_fn`` with the same seeds, in interleaved
rounds; the tables give medians. ``limit`` is ``workers x`` the single-process rate of the same VecEnv stepped with
precomputed random actions, measured in the same run between rounds. Steps count the candidates' episodes only.
Needs sb3-contrib and psutil (``pip install "lit_sb3[bench]"``); ``lit-sb3 bench`` runs the quick case and
``benchmarks/asynceval_vs_sb3contrib.py`` every case.
"""

from __future__ import annotations

import functools
import heapq
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import torch as th
from gymnasium import spaces
from sb3_contrib.ars.policies import LinearPolicy, MlpPolicy
from sb3_contrib.common.vec_env import AsyncEval as ContribAsyncEval
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import DummyVecEnv

from lit_sb3.cli.bench_results import Column, Table
from lit_sb3.vec_env.async_eval import AsyncEval

N_WORKERS = 2


@dataclass
class Case:
    """One line of the table."""

    name: str
    env_fn: Callable[[], Any]
    policy: Callable[[Any, Any], BasePolicy]
    pop_size: int
    n_eval_episodes: int
    targets: tuple[float | None, float | None]
    #: sb3-contrib configurations to try instead of ``env_fn``, by label; the table shows the fastest
    contrib_env_fns: dict[str, Callable[[], Any]] = field(default_factory=dict)


#: The throughput table: one row per case.
THROUGHPUT_COLUMNS = [
    Column("case", "case"),
    Column("ours", "ours steps/s", ",.0f"),
    Column("sb3_contrib", "sb3-contrib steps/s", ",.0f"),
    Column("ratio", "ours / sb3-contrib", ".2f"),
    Column("ratio_target", "target", "", "-"),
    Column("limit", "limit", ",.0f"),
    Column("limit_fraction", "ours / limit", ".2f"),
    Column("limit_target", "target", "", "-"),
]

#: The table of the other measures: what was measured, both values, their ratio and its target.
MEASURE_COLUMNS = [
    Column("measure", "measure"),
    Column("values", "lit_sb3 vs sb3-contrib", "", ""),
    Column("ratio", "ratio", ".2f"),
    Column("target", "target", "", "-"),
    Column("note", "note", "", ""),
]


def at_least(target: float | None) -> str | None:
    """:return: A lower bound written as a target, or None."""
    return None if target is None else f">= {target}"


def spaces_of(env_fn: Callable[[], Any]) -> tuple[spaces.Space, spaces.Space]:
    env = env_fn()
    if isinstance(env, gym.vector.VectorEnv):
        result = env.single_observation_space, env.single_action_space
    else:
        result = env.observation_space, env.action_space
    env.close()
    return result


def n_params(policy: BasePolicy) -> int:
    return sum(parameter.numel() for parameter in policy.parameters())


def population(policy: BasePolicy, pop_size: int, round_index: int, scale: float = 0.3) -> th.Tensor:
    generator = th.Generator().manual_seed(round_index)
    return th.randn(pop_size, n_params(policy), generator=generator) * scale


def round_rate(async_eval: Any, weights: th.Tensor, pop_size: int, seed: int) -> tuple[float, float]:
    """:return: env steps per second of one round (steps of the candidates' episodes only), and its seconds."""
    async_eval.seed(seed)
    started = time.perf_counter()
    async_eval.send_jobs(weights, pop_size)
    results = async_eval.get_results()
    elapsed = time.perf_counter() - started
    steps = sum(int(np.sum(lengths)) for _, (_, lengths) in results)
    return steps / elapsed, elapsed


def limit_rate(env_fn: Callable[[], Any], steps: int = 3000) -> float:
    """Single-process rate of the VecEnv stepped with precomputed random actions (env steps per second)."""
    env = env_fn()
    is_gym_vector = isinstance(env, gym.vector.VectorEnv)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(steps)]
    if is_gym_vector:
        env.reset(seed=0)
    else:
        actions = [np.stack([env.action_space.sample() for _ in range(env.num_envs)]) for _ in range(steps)]
        env.reset()
    started = time.perf_counter()
    for action in actions:
        env.step(action)
    elapsed = time.perf_counter() - started
    env.close()
    return steps * env.num_envs / elapsed


def compare(case: Case, rounds: int) -> dict[str, Any]:
    """:return: The throughput row of ``case``, medians of ``rounds`` interleaved rounds after one warm-up."""
    policy = case.policy(*spaces_of(case.env_fn))
    ours = AsyncEval([case.env_fn] * N_WORKERS, policy, n_eval_episodes=case.n_eval_episodes)
    contrib_env_fns = case.contrib_env_fns or {"": case.env_fn}
    theirs = [
        ContribAsyncEval([env_fn] * N_WORKERS, policy, n_eval_episodes=case.n_eval_episodes)
        for env_fn in contrib_env_fns.values()
    ]
    our_rates: list[float] = []
    their_rates: list[list[float]] = [[] for _ in theirs]
    limits: list[float] = []
    try:
        for round_index in range(rounds + 1):  # round 0 warms up both
            weights = population(policy, case.pop_size, round_index)
            rate, _ = round_rate(ours, weights, case.pop_size, round_index)
            for contrib, rates in zip(theirs, their_rates, strict=True):
                their_rate, _ = round_rate(contrib, weights, case.pop_size, round_index)
                if round_index:
                    rates.append(their_rate)
            if round_index:
                our_rates.append(rate)
                limits.append(N_WORKERS * limit_rate(case.env_fn))
    finally:
        ours.close()
        for contrib in theirs:
            contrib.close()
    best = max(range(len(theirs)), key=lambda index: statistics.median(their_rates[index]))
    labels = list(contrib_env_fns)
    ours_rate, their_rate, limit = (
        statistics.median(our_rates),
        statistics.median(their_rates[best]),
        statistics.median(limits),
    )
    target_ratio, target_fraction = case.targets
    case_name = case.name if len(theirs) == 1 else f"{case.name} ({', '.join(labels)}: {labels[best]})"
    return {
        "case": case_name,
        "ours": ours_rate,
        "sb3_contrib": their_rate,
        "ratio": ours_rate / their_rate,
        "ratio_target": at_least(target_ratio),
        "limit": limit,
        "limit_fraction": ours_rate / limit,
        "limit_target": at_least(target_fraction),
    }


# ---------------------------------------------------------------------------------------------- other measures


class VariableLengthEnv(gym.Env):
    """Episodes of 1 to 1000 steps (drawn from the reset seed), each step a fixed amount of work."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(1, 1001))
        return np.zeros(4, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        deadline = time.perf_counter() + 20e-6
        while time.perf_counter() < deadline:
            pass
        self._left -= 1
        return np.zeros(4, np.float32), 0.0, False, self._left <= 0, {}


def variable_length_env() -> DummyVecEnv:
    return DummyVecEnv([VariableLengthEnv])


def list_schedule(lengths: np.ndarray, n_workers: int) -> float:
    """Makespan of the best an online scheduler can do: each candidate, in order, to the first worker free."""
    free_at = [0.0] * n_workers
    for length in lengths:
        heapq.heappush(free_at, heapq.heappop(free_at) + float(length))
    return max(free_at)


def makespan_row(rounds: int) -> dict[str, Any]:
    """Dynamic chunks against a static split of 16 candidates with episode lengths 1-1000."""
    pop_size = 16
    env_fn = variable_length_env
    policy = LinearPolicy(*spaces_of(env_fn))
    dynamic = AsyncEval([env_fn] * N_WORKERS, policy)
    static = AsyncEval([env_fn] * N_WORKERS, policy, chunk_size=pop_size // N_WORKERS)
    measured, online, ideal = [], [], []
    try:
        for round_index in range(rounds + 1):
            weights = population(policy, pop_size, round_index)
            _, dynamic_time = round_rate(dynamic, weights, pop_size, round_index)
            _, static_time = round_rate(static, weights, pop_size, round_index)
            static.seed(round_index)
            static.send_jobs(weights, pop_size)
            lengths = np.array([int(lengths[0]) for _, (_, lengths) in static.get_results()])
            split = max(lengths[: pop_size // 2].sum(), lengths[pop_size // 2 :].sum())
            if round_index:
                measured.append(dynamic_time / static_time)
                online.append(list_schedule(lengths, N_WORKERS) / split)
                ideal.append(lengths.sum() / N_WORKERS / split)
    finally:
        dynamic.close()
        static.close()
    return {
        "measure": "synthetic env, episodes of 1-1000 steps, pop 16: makespan of dynamic chunks / static split",
        "ratio": statistics.median(measured),
        "target": "<= 0.9",
        "note": f"same episode lengths: first-free-worker schedule {statistics.median(online):.2f}, "
        f"perfectly divisible work {statistics.median(ideal):.2f}",
    }


START_SCRIPT = """
import sys, time
started = time.perf_counter()
import numpy as np
from sb3_contrib.ars.policies import LinearPolicy
from stable_baselines3.common.env_util import make_vec_env
from sb3_contrib.common.vec_env import AsyncEval as ContribAsyncEval
from lit_sb3 import AsyncEval

def make_env():
    return make_vec_env("CartPole-v1")

if __name__ == "__main__":
    cls = AsyncEval if sys.argv[1] == "ours" else ContribAsyncEval
    env = make_env()
    policy = LinearPolicy(env.observation_space, env.action_space)
    weights = np.zeros((2, 8), np.float32) if cls is AsyncEval else __import__("torch").zeros(2, 8)
    times = []
    for _ in range(2):
        started = time.perf_counter()
        pool = cls([make_env, make_env], policy)
        pool.send_jobs(weights, 2)
        pool.get_results()
        times.append(time.perf_counter() - started)
        pool.close()
    print(*times)
"""


def start_rows(repeats: int) -> list[dict[str, Any]]:
    """Pool start to first result, 2 workers, each implementation in fresh processes."""
    measured: dict[str, list[list[float]]] = {"ours": [], "theirs": []}
    for _ in range(repeats):
        for name, times in measured.items():
            output = subprocess.run(
                [sys.executable, "-c", START_SCRIPT, name], capture_output=True, text=True, check=True
            ).stdout
            times.append([float(value) for value in output.split()])
    rows = []
    for index, label in enumerate(["first pool in a fresh process", "second pool in the same process"]):
        ours = statistics.median(times[index] for times in measured["ours"])
        theirs = statistics.median(times[index] for times in measured["theirs"])
        rows.append(
            {
                "measure": f"pool start to first result, {label}",
                "values": f"{ours:.2f} s vs {theirs:.2f} s",
                "ratio": ours / theirs,
                "target": "<= 0.5",
            }
        )
    return rows


def memory_row() -> dict[str, Any]:
    """Proportional set size (shared pages split between processes) and RSS of the two workers."""
    env_fn = functools.partial(make_vec_env, "Pendulum-v1")
    policy = MlpPolicy(*spaces_of(env_fn), net_arch=[64, 64])
    cells = []
    for cls, pids_of in [
        (AsyncEval, lambda pool: [handle.pid for handle in pool.remotes]),
        (ContribAsyncEval, lambda pool: [process.pid for process in pool.processes]),
    ]:
        pool = cls([env_fn] * N_WORKERS, policy)
        round_rate(pool, population(policy, 64, 0), 64, 0)
        infos = [psutil.Process(pid).memory_full_info() for pid in pids_of(pool)]
        pool.close()
        cells.append((sum(info.pss for info in infos) / 2**20, sum(info.rss for info in infos) / 2**20))
    (our_pss, our_rss), (their_pss, their_rss) = cells
    return {
        "measure": "worker memory, 2 workers (PSS / RSS)",
        "values": f"{our_pss:.0f} / {our_rss:.0f} MiB vs {their_pss:.0f} / {their_rss:.0f} MiB",
        "ratio": our_pss / their_pss,
        "note": "ratio of PSS",
    }


def big_population_row(rounds: int) -> dict[str, Any]:
    """64 candidates of about 1,000,000 parameters: round time, and main + worker memory growth."""
    env_fn = functools.partial(make_vec_env, "Pendulum-v1", env_kwargs={"max_episode_steps": 5})
    policy = MlpPolicy(*spaces_of(env_fn), net_arch=[1000, 1000])
    pop_size = 64
    cells = []
    for cls, pids_of in [
        (AsyncEval, lambda pool: [handle.pid for handle in pool.remotes]),
        (ContribAsyncEval, lambda pool: [process.pid for process in pool.processes]),
    ]:
        pool = cls([env_fn] * N_WORKERS, policy)
        times = []
        for round_index in range(rounds + 1):
            _, elapsed = round_rate(pool, population(policy, pop_size, round_index), pop_size, round_index)
            if round_index:
                times.append(elapsed)
        pss = sum(psutil.Process(pid).memory_full_info().pss for pid in pids_of(pool)) / 2**20
        pool.close()
        cells.append((statistics.median(times), pss))
    (our_time, our_pss), (their_time, their_pss) = cells
    return {
        "measure": f"64 x {n_params(policy):,} parameters, 5-step episodes: round time (worker PSS)",
        "values": f"{our_time:.2f} s ({our_pss:.0f} MiB) vs {their_time:.2f} s ({their_pss:.0f} MiB)",
        "ratio": our_time / their_time,
    }


def cases(quick: bool) -> list[Case]:
    """:return: The throughput cases (``quick``: without the MuJoCo case)."""
    pendulum = functools.partial(make_vec_env, "Pendulum-v1")
    cartpole = functools.partial(make_vec_env, "CartPole-v1")
    mlp = functools.partial(MlpPolicy, net_arch=[64, 64])
    listing = [
        Case("Pendulum-v1, n_envs=1, LinearPolicy, pop 64", pendulum, LinearPolicy, 64, 1, (3.0, 0.70)),
        Case("Pendulum-v1, n_envs=1, MlpPolicy [64, 64], pop 64", pendulum, mlp, 64, 1, (3.0, 0.60)),
        Case("CartPole-v1, n_envs=1, LinearPolicy, pop 64, 5 episodes", cartpole, LinearPolicy, 64, 5, (3.0, 0.60)),
        Case(
            "Pendulum-v1, n_envs=8, LinearPolicy, pop 64",
            functools.partial(make_vec_env, "Pendulum-v1", n_envs=8),
            LinearPolicy,
            64,
            1,
            (1.2, 0.80),
        ),
    ]
    if not quick:
        listing.append(
            Case(
                "HalfCheetah-v5, n_envs=1, MlpPolicy [64, 64], pop 16",
                functools.partial(make_vec_env, "HalfCheetah-v5"),
                mlp,
                16,
                1,
                (1.5, 0.80),
            )
        )
    listing.append(
        Case(
            "CartPole-v1 vector-entry-point env (64 sub-envs), LinearPolicy, pop 256, vs sb3-contrib's best CartPole",
            functools.partial(gym.make_vec, "CartPole-v1", num_envs=64, vectorization_mode="vector_entry_point"),
            LinearPolicy,
            256,
            1,
            (10.0, None),
            contrib_env_fns={
                f"n_envs={n}": functools.partial(make_vec_env, "CartPole-v1", n_envs=n) for n in (1, 4, 16)
            },
        )
    )
    return listing


def default_rounds(quick: bool) -> int:
    """:return: The measured rounds per case of a quick or a full run."""
    return 3 if quick else 7


def measure(quick: bool, rounds: int | None = None, report: Callable[[str], None] = print) -> dict[str, Table]:
    """
    Run the benchmark.

    :param quick: Fewer rounds and pool starts, no MuJoCo case, no large population.
    :param rounds: Measured rounds per case (default 3 quick, else 7).
    :param report: Called with each finished line, as it comes.
    :return: The ``throughput`` and ``measures`` tables.
    """
    rounds = rounds or default_rounds(quick)
    report(f"AsyncEval, lit_sb3 vs sb3-contrib: {N_WORKERS} workers, medians of {rounds} interleaved rounds")
    throughput = Table(THROUGHPUT_COLUMNS)
    for case in cases(quick):
        throughput.rows.append(compare(case, rounds))
        report(f"  {case.name}: {throughput.rows[-1]['ratio']:.2f}x sb3-contrib")
    measures = Table(MEASURE_COLUMNS, [makespan_row(rounds), *start_rows(1 if quick else 3), memory_row()])
    if not quick:
        measures.rows.append(big_population_row(2))
    return {"throughput": throughput, "measures": measures}
