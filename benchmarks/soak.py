"""Soak: does anything grow over a long run? AsyncEval rounds, create/learn/shutdown cycles of an injected agent
(worker threads, worker processes, Ray actors) and a long ``AsyncRLEngine`` run, sampled at checkpoints.

- ``asynceval``: rounds of ``AsyncEval`` (Pendulum-v1 from ``make_vec_env``, so with SB3's ``Monitor``; a linear
  policy, population 64, 2 workers), one pool for the whole run.
- ``sb3``: the reference for the cycles: ``PPO`` on a ``DummyVecEnv`` built, trained and closed (Stable-Baselines3
  alone, no lit_sb3), to show what torch, SB3 and the allocator do by themselves.
- ``threads``, ``processes``, ``ray``: ``get_injected_agent(PPO)`` on two Pendulum-v1 environments built, trained
  for two rollouts of 64 steps and shut down (``use_mp=False``; ``use_mp=True``; ``use_mp=True, backend="ray"`` on a
  local Ray instance started once for the part).
- ``ray-actors``: the reference for the Ray cycles: two bare Ray actors created, called once and killed (Ray alone).
- ``engine``: one ``AsyncRLEngine`` run of PPO on two Pendulum-v1 environments in worker processes, for a number of
  train steps (rollouts of 128 steps, one epoch).

At each checkpoint the script records the main process's RSS (as it is, then after ``gc.collect()`` and glibc's
``malloc_trim(0)``, which hands back to the system the freed memory the allocator keeps), the RSS of every other
process of the run (workers and the fork server; Ray's own services are left out), the main process's Python
objects, open files and threads, the processes of the run and the shared-memory segments this process created that
are still in ``/dev/shm``. Growth is the least-squares slope over the checkpoints after the warm-up (the first
tenth), per 1,000 rounds, per 100 cycles or per 1,000 train steps; "left" is what remains once the part has closed
everything, against what there was before it.

Usage: ``python benchmarks/soak.py`` (10,000 rounds, 200 cycles of each kind, 2,000 train steps: hours on two
shared cores), ``--quick`` (a tenth of each), ``--parts asynceval threads`` for some of the parts, ``--rounds``,
``--cycles``, ``--ray-cycles``, ``--train-steps`` to set the counts, ``--trace`` to print the largest growths of
Python allocations (``tracemalloc``, main process) after each part.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import itertools
import os
import pathlib
import queue
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass, field, fields
from multiprocessing import shared_memory
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from lit_sb3 import AsyncEval, LinearPolicy, get_injected_agent
from lit_sb3.cli.bench_results import RESULTS_FOLDER, Column, LoadSampler, Table, new_result, save_result
from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup
from lit_sb3.envs.multi_env import IndexableMultiEnv

PARTS = ("asynceval", "sb3", "threads", "processes", "ray", "ray-actors", "engine")
SHM = pathlib.Path("/dev/shm")
MIB = 2**20


def pendulum() -> gym.Env:
    return Monitor(gym.make("Pendulum-v1"))


# ------------------------------------------------------------------------------------------------ sampling


class CreatedSegments:
    """The names of the shared-memory segments this process creates (``SharedMemory(create=True)``)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        original = shared_memory.SharedMemory.__init__

        def recording_init(block: shared_memory.SharedMemory, *args: Any, **kwargs: Any) -> None:
            original(block, *args, **kwargs)
            if kwargs.get("create", args[1] if len(args) > 1 else False):
                self.names.add(block.name)

        shared_memory.SharedMemory.__init__ = recording_init  # type: ignore[method-assign,assignment]

    def alive(self) -> int:
        """:return: How many of them are still in ``/dev/shm``."""
        return sum((SHM / name.lstrip("/")).exists() for name in self.names)


@dataclass
class Sample:
    """What one checkpoint measured."""

    main_rss: float
    main_trimmed_rss: float
    workers_rss: float
    python_objects: int
    open_files: int
    threads: int
    processes: int
    shm_segments: int


def trim_heap() -> None:
    """Give the memory glibc's allocator holds freed back to the system (nothing elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def is_ray_service(process: psutil.Process) -> bool:
    command = " ".join(process.cmdline())
    return "/ray/" in command and "ray::" not in command


class Sampler:
    """Samples the run's processes; one instance for the whole soak."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.segments = CreatedSegments()

    def sample(self) -> Sample:
        raw = self.process.memory_info().rss / MIB
        gc.collect()
        trim_heap()
        descendants = self.process.children(recursive=True)
        workers = 0.0
        for child in descendants:
            try:
                if not is_ray_service(child):
                    workers += child.memory_info().rss / MIB
            except psutil.Error:
                continue  # ended meanwhile
        return Sample(
            main_rss=raw,
            main_trimmed_rss=self.process.memory_info().rss / MIB,
            workers_rss=workers,
            python_objects=len(gc.get_objects()),
            open_files=self.process.num_fds(),
            threads=self.process.num_threads(),
            processes=len(descendants),
            shm_segments=self.segments.alive(),
        )


#: The figures of a sample, in the order of :class:`Sample`'s fields.
FIELDS = [sample_field.name for sample_field in fields(Sample)]


@dataclass
class Part:
    """
    One part of the soak: what there was before and after it, and its checkpoints, kept in preallocated arrays
    (a list of samples would add Python objects of its own at every checkpoint).
    """

    name: str
    iterations: int
    unit: int
    unit_name: str
    before: Sample
    capacity: int
    after: Sample | None = None
    seconds: float = 0.0
    count: int = 0
    done: np.ndarray = field(init=False)
    values: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.done = np.zeros(self.capacity)
        self.values = np.zeros((self.capacity, len(FIELDS)))

    def record(self, done: int, sample: Sample) -> None:
        self.done[self.count] = done
        self.values[self.count] = astuple(sample)
        self.count += 1

    @property
    def warm_up(self) -> int:
        return max(1, self.iterations // 10)

    def growth(self, key: str) -> float:
        """:return: The least-squares slope of ``key`` over the checkpoints after the warm-up, per unit."""
        warmed = self.done[: self.count] >= self.warm_up
        if warmed.sum() < 2:
            return float("nan")
        x, y = self.done[: self.count][warmed], self.values[: self.count, FIELDS.index(key)][warmed]
        return float(np.polyfit(x, y, 1)[0] * self.unit)

    def row(self) -> dict[str, Any]:
        assert self.after is not None
        first = int(np.argmax(self.done[: self.count] >= self.warm_up))
        warmed, last = (Sample(*self.values[index]) for index in (first, self.count - 1))
        left = {
            key: getattr(self.after, key) - getattr(self.before, key)
            for key in ("threads", "processes", "shm_segments", "open_files")
        }
        return {
            "part": self.name,
            "iterations": f"{self.iterations:,} {self.unit_name.split()[-1]}",
            "per": self.unit_name,
            "seconds": self.seconds,
            "main_rss": f"{warmed.main_trimmed_rss:.1f} → {last.main_trimmed_rss:.1f}",
            "main_growth": self.growth("main_rss"),
            "main_trimmed_growth": self.growth("main_trimmed_rss"),
            "workers_rss": f"{warmed.workers_rss:.1f} → {last.workers_rss:.1f}",
            "workers_growth": self.growth("workers_rss"),
            "objects_growth": self.growth("python_objects"),
            "files_growth": self.growth("open_files"),
            "threads_growth": self.growth("threads"),
            "processes_growth": self.growth("processes"),
            "shm_growth": self.growth("shm_segments"),
            "left": ", ".join(f"{value:+d} {key.replace('_', ' ')}" for key, value in left.items() if value)
            or "nothing",
        }


class Soak:
    """Runs the parts, printing each checkpoint."""

    def __init__(self, sampler: Sampler, n_checkpoints: int, trace: bool) -> None:
        self.sampler = sampler
        self.n_checkpoints = n_checkpoints
        self.trace = trace
        self.parts: list[Part] = []

    def run(self, name: str, iterations: int, unit: int, unit_name: str, body: Callable[[], Iterator[int]]) -> None:
        """
        :param body: Runs the part, yielding the number of iterations done after each one; closes everything when
            exhausted.
        """
        every = max(1, iterations // self.n_checkpoints)
        part = Part(name, iterations, unit, unit_name, self.sampler.sample(), capacity=iterations // every + 1)
        started = time.monotonic()
        snapshot = None
        for done in body():
            if done % every == 0 or done == iterations:
                self.checkpoint(part, done)
            if self.trace and done == part.warm_up:
                tracemalloc.start(20)
                snapshot = tracemalloc.take_snapshot()
        part.seconds = time.monotonic() - started
        if snapshot is not None:
            print_growth(snapshot, tracemalloc.take_snapshot())
            tracemalloc.stop()
        gc.collect()
        part.after = self.sampler.sample()
        self.parts.append(part)

    def checkpoint(self, part: Part, done: int) -> None:
        sample = self.sampler.sample()
        part.record(done, sample)
        print(
            f"{part.name} {done:>6,}: main {sample.main_rss:.1f} MiB ({sample.main_trimmed_rss:.1f} trimmed), "
            f"others {sample.workers_rss:.1f} MiB, {sample.python_objects:,} objects, {sample.open_files} files, "
            f"{sample.threads} threads, {sample.processes} processes, {sample.shm_segments} shm",
            flush=True,
        )


def print_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int = 8) -> None:
    for statistic in after.compare_to(before, "traceback")[:top]:
        print(f"  {statistic}")
        for line in statistic.traceback.format()[-6:]:
            print(f"    {line}")


# ------------------------------------------------------------------------------------------------ the parts


def async_eval_rounds(rounds: int) -> Iterator[int]:
    env_fn = functools.partial(make_vec_env, "Pendulum-v1")
    env = env_fn()
    policy = LinearPolicy(env.observation_space, env.action_space)
    env.close()
    n_params = sum(parameter.numel() for parameter in policy.parameters())
    weights = np.random.default_rng(0).normal(size=(64, n_params)).astype(np.float32)
    with AsyncEval([env_fn] * 2, policy) as async_eval:
        async_eval.seed(0)
        for done in range(1, rounds + 1):
            async_eval.send_jobs(weights, pop_size=64)
            async_eval.get_results()
            yield done


def sb3_cycles(cycles: int) -> Iterator[int]:
    for done in range(1, cycles + 1):
        env = DummyVecEnv([pendulum, pendulum])
        model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=done)
        model.learn(128)
        env.close()
        del model, env
        yield done


def agent_cycles(cycles: int, **agent_kwargs: Any) -> Iterator[int]:
    agent_class = get_injected_agent(PPO)
    for done in range(1, cycles + 1):
        model = agent_class(
            "MlpPolicy", IndexableMultiEnv([pendulum, pendulum]), n_steps=64, batch_size=64, n_epochs=1, seed=done,
            **agent_kwargs,
        )  # fmt: skip
        try:
            model.learn(128)
        finally:
            model.shutdown()
        del model
        yield done


def ray_cycles(cycles: int) -> Iterator[int]:
    import ray

    ray.init(address="local", include_dashboard=False)
    try:
        yield from agent_cycles(cycles, use_mp=True, backend="ray")
    finally:
        ray.shutdown()


class Echo:
    """A bare Ray actor."""

    def echo(self, value: Any) -> Any:
        return value


def ray_actor_cycles(cycles: int) -> Iterator[int]:
    import ray

    echo_actor = ray.remote(Echo)
    ray.init(address="local", include_dashboard=False)
    try:
        for done in range(1, cycles + 1):
            actors: list[Any] = [echo_actor.options(max_restarts=0).remote() for _ in range(2)]
            ray.get([actor.echo.remote(np.zeros(100)) for actor in actors])
            for actor in actors:
                ray.kill(actor)
            del actors
            yield done
    finally:
        ray.shutdown()


def engine_run(train_steps: int) -> Iterator[int]:
    steps: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # train steps done; None once the run ended
    resume: queue.SimpleQueue[None] = queue.SimpleQueue()  # the checkpoint of a step is taken: train on

    counter = itertools.count(1)

    class Counted(AsyncRLEngine):
        def _train_step(self) -> None:
            super()._train_step()
            steps.put(next(counter))
            resume.get()  # the engine waits while a checkpoint samples it

    group = EnvGroup([pendulum, pendulum], backend="processes")
    model = PPO("MlpPolicy", group.env, n_steps=64, batch_size=64, n_epochs=1, seed=0)
    config = EngineConfig(train_epochs=train_steps, seed=0, verbose=False, log_formats=())
    engine = Counted(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            engine.run()
        except BaseException as exc:
            failure.append(exc)
        steps.put(None)

    runner = threading.Thread(target=run, name="soak-engine")
    runner.start()
    while (done := steps.get()) is not None:
        yield done
        resume.put(None)
    runner.join()
    if failure:
        raise failure[0]


# --------------------------------------------------------------------------------------------------- main

COLUMNS = [
    Column("part", "part"),
    Column("iterations", "run"),
    Column("per", "growth per"),
    Column("seconds", "seconds", ",.0f"),
    Column("main_rss", "main RSS after warm-up (MiB, trimmed)"),
    Column("main_growth", "Δ main RSS (MiB)", "+.2f"),
    Column("main_trimmed_growth", "Δ main RSS trimmed", "+.2f"),
    Column("workers_rss", "others' RSS after warm-up (MiB)"),
    Column("workers_growth", "Δ others' RSS", "+.2f"),
    Column("objects_growth", "Δ Python objects", "+,.0f"),
    Column("files_growth", "Δ open files", "+.1f"),
    Column("threads_growth", "Δ threads", "+.1f"),
    Column("processes_growth", "Δ processes", "+.1f"),
    Column("shm_growth", "Δ shm segments", "+.1f"),
    Column("left", "left after close"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of every count")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--rounds", type=int, help="AsyncEval rounds (default 10,000)")
    parser.add_argument("--cycles", type=int, help="create/learn/shutdown cycles of each kind (default 200)")
    parser.add_argument("--ray-cycles", type=int, help="cycles on Ray (default: as many as --cycles)")
    parser.add_argument("--train-steps", type=int, help="train steps of the engine run (default 2,000)")
    parser.add_argument("--checkpoints", type=int, default=20, help="checkpoints per part")
    parser.add_argument("--trace", action="store_true", help="print tracemalloc's largest growths after each part")
    parser.add_argument(
        "--results", default=None, help=f"folder of the result file (default: {RESULTS_FOLDER}; partial runs: none)"
    )
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    rounds = args.rounds or int(10_000 * scale)
    cycles = args.cycles or int(200 * scale)
    ray_cycles_count = args.ray_cycles or cycles
    train_steps = args.train_steps or int(2_000 * scale)
    torch.set_num_threads(1)
    load = LoadSampler()
    soak = Soak(Sampler(), args.checkpoints, args.trace)
    parts: dict[str, tuple[int, int, str, Callable[[int], Iterator[int]]]] = {
        "asynceval": (rounds, 1_000, "1,000 rounds", async_eval_rounds),
        "sb3": (cycles, 100, "100 cycles", sb3_cycles),
        "threads": (cycles, 100, "100 cycles", functools.partial(agent_cycles, use_mp=False)),
        "processes": (cycles, 100, "100 cycles", functools.partial(agent_cycles, use_mp=True)),
        "ray": (ray_cycles_count, 100, "100 cycles", ray_cycles),
        "ray-actors": (ray_cycles_count, 100, "100 cycles", ray_actor_cycles),
        "engine": (train_steps, 1_000, "1,000 train steps", engine_run),
    }
    for name in args.parts:
        iterations, unit, unit_name, body = parts[name]
        soak.run(name, iterations, unit, unit_name, functools.partial(body, iterations))
        load.sample()
    table = Table(COLUMNS, [part.row() for part in soak.parts])
    print("\n" + table.markdown())
    counts_given = any(count is not None for count in (args.rounds, args.cycles, args.ray_cycles, args.train_steps))
    full = not args.quick and not counts_given and args.parts == list(PARTS)
    if args.results or full:
        conditions = (
            f"{os.cpu_count()} cores shared with other jobs; growth is the least-squares slope over the checkpoints "
            "after the first tenth of each part; trimmed: after gc.collect() and malloc_trim(0)"
        )
        result = new_result("soak", {"soak": table}, load, conditions=conditions, packages=("ray",))
        print(f"\nwrote {save_result(result, args.results or RESULTS_FOLDER)}")


if __name__ == "__main__":
    main()
