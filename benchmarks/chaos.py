"""Chaos: workers killed at random while ARS, an injected PPO and the async engine train, locally and on Ray.

A killer thread SIGKILLs a random running worker process (on Ray: ``ray.kill`` of a random worker actor) every few
seconds (uniformly between half and one and a half times ``--interval``) until the run ends. Each case:

1. ``ARS.learn`` on an AsyncEval of 2 workers (Pendulum-v1 in VecNormalize): the final weights and observation
   statistics must be bit-identical to those of an undisturbed run with the same seed.
2. ``PPO.learn`` of an injected agent (``get_injected_agent(PPO)``, CartPole-v1, 2 worker processes or actors):
   training must complete; the restarts, resumed, interrupted and dropped episodes are reported.
3. ``PPO.learn`` of an injected agent in reproducible mode (``reproducible=True``, 3 CartPole-v1 on 2 worker
   processes or actors): every parameter must be bit-identical to that of an undisturbed run with the same seed.
4. ``AsyncRLEngine.run`` (PPO, CartPole-v1, 2 workers): training must complete, as in 2.
5. Each of the four with ``max_restarts=2`` and a kill every 0.3 s: the run must fail with
   :class:`~lit_sb3.workers.WorkerDiedError` naming ``max_restarts`` within seconds of the fatal kill.

    python benchmarks/chaos.py --backends local   # a minute of training per case, about 8 minutes on 2 cores
    python benchmarks/chaos.py --backends ray --quick --seconds 6 --results benchmarks/results
                                                  # Ray: each replaced actor takes seconds to start (15 minutes)
    python benchmarks/chaos.py --quick            # about 8 s of training per case, both backends
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch as th
from sb3_contrib.ars.policies import LinearPolicy
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from lit_sb3 import ARS, AsyncEval, WorkerDiedError
from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.cli.bench_results import RESULTS_FOLDER, Column, LoadSampler, Table, new_result, save_result
from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup
from lit_sb3.envs.multi_env import IndexableMultiEnv
from lit_sb3.workers.pool import WorkerPool

#: Where the workers run: local processes, or Ray actors of a local Ray instance.
ChaosBackend = Literal["local", "ray"]
N_WORKERS = 2
#: Restarts allowed in the runs that must survive every kill.
GENEROUS_RESTARTS = 10_000
#: Steps of the undisturbed runs that measure how many steps the PPO and engine cases take in their seconds (the
#: rate of CartPole's first 2,000 steps, with their short episodes and the workers' start, was a quarter to a third of
#: the run's).
CALIBRATION_STEPS = 10_000
#: Restarts allowed in the runs that must fail, and the seconds between their kills.
TIGHT_RESTARTS = 2
TIGHT_INTERVAL = 0.3
#: Seconds a run past its restart budget may take to raise.
FAILURE_DEADLINE = 10.0


@dataclass
class Kill:
    """One fault injected: when (seconds after the killer started), which worker and what it was."""

    seconds: float
    worker_index: int
    target: str


@dataclass
class WorkerKiller:
    """
    Kills a random running worker of a pool every ``interval`` seconds (on average) in a thread of its own.

    :param pool_of: Returns the pool to pick from (None while there is none, e.g. before ``learn`` started it).
    :param interval: Mean seconds between two kills; each wait is uniform in ``[interval / 2, 3 * interval / 2]``.
    :param seed: Seeds the waits and the choice of workers.
    :param max_kills: Most workers killed; None for no limit.
    """

    pool_of: Callable[[], WorkerPool | None]
    interval: float
    seed: int = 0
    max_kills: int | None = None
    kills: list[Kill] = field(default_factory=list)
    seconds: float = 0.0  # how long it ran

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._stop = threading.Event()
        self._killed: set[Any] = set()  # processes and actors killed (a dead one is not picked again)
        self._thread = threading.Thread(target=self._run, name="chaos-killer", daemon=True)

    @contextmanager
    def running(self) -> Iterator[WorkerKiller]:
        """Kill workers while the block runs."""
        started = time.monotonic()
        self._started = started
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.seconds = time.monotonic() - started

    def _run(self) -> None:
        while not self._stop.wait(self._random.uniform(0.5, 1.5) * self.interval):
            if self.max_kills is not None and len(self.kills) >= self.max_kills:
                return
            pool = self.pool_of()
            if pool is None or pool.closed:
                continue
            # Only workers that are running: killing replacements while they start, faster than they start (a Ray
            # actor takes seconds on a busy machine), would stall the run rather than test its recovery.
            running = [(index, slot.handle) for index, slot in enumerate(pool._slots) if slot.ready]
            try:
                live = [(index, handle) for index, handle in running if _identity(handle) not in self._killed]
            except ValueError:  # a handle released meanwhile
                continue
            if not live:
                continue
            index, handle = self._random.choice(live)
            try:
                identity = _identity(handle)
                target = _kill(handle)
            except ValueError:  # the pool released the handle meanwhile (its process object is closed)
                continue
            if target is not None:
                self._killed.add(identity)
                self.kills.append(Kill(time.monotonic() - self._started, index, target))


def _identity(handle: Any) -> Any:
    """:return: What tells this worker from its replacements: its process id, or its Ray actor."""
    if handle is None:
        return None
    actor = getattr(handle, "actor", None)
    return actor if actor is not None else getattr(handle, "pid", None)


def _kill(handle: Any) -> str | None:
    """Kill a worker the way the operating system or a cluster would. :return: What was killed, None if nothing."""
    actor = getattr(handle, "actor", None)
    if actor is not None:
        import ray

        ray.kill(actor, no_restart=True)
        return "ray actor"
    try:
        os.kill(handle.pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return "SIGKILL"


# ------------------------------------------------------------------------------------------------------- cases


@dataclass
class Outcome:
    """What a case measured: the faults, what the run counted, and whether it ended as it must."""

    case: str
    backend: ChaosBackend
    kills: int
    seconds: float
    restarts: int
    resumed: int | None
    interrupted: int | None
    dropped: int | None
    result: str
    passed: bool
    kill_log: list[Kill] = field(default_factory=list)
    detail: str = ""

    def row(self) -> dict[str, Any]:
        """:return: The outcome as a result table's row."""
        return {key: value for key, value in self.__dict__.items() if key not in ("kill_log", "detail")}


def counted_every_kill(restarts: int, killer: WorkerKiller) -> bool:
    """:return: Whether the pool replaced every worker killed (one killed in the run's last second may be noticed
    after the count was read, or after the run closed its pool)."""
    settled = [kill for kill in killer.kills if kill.seconds < killer.seconds - 1.0]
    return len(settled) <= restarts <= len(killer.kills)


def normalized_pendulum(n_envs: int = 4) -> VecEnv:
    """:return: Pendulum-v1 in VecNormalize (observations only), as ARS trains it."""
    return VecNormalize(make_vec_env("Pendulum-v1", n_envs=n_envs), norm_reward=False)


def ars_weights(backend: ChaosBackend, budget: int, seed: int, killer: WorkerKiller | None) -> tuple[np.ndarray, ...]:
    """:return: The weights and observation statistics of ARS after ``budget`` steps on AsyncEval, with the count of
    the statistics and the pool's restarts (the seconds ``learn`` took when no killer is given)."""
    model = ARS(LinearPolicy, normalized_pendulum(1), n_delta=8, seed=seed)
    async_eval = AsyncEval(
        [normalized_pendulum] * N_WORKERS, model.policy, backend=backend, max_restarts=GENEROUS_RESTARTS
    )
    try:
        if killer is None:
            started = time.monotonic()
            model.learn(budget, async_eval=async_eval)
            restarts_or_seconds = time.monotonic() - started
        else:
            killer.pool_of = lambda: async_eval._pool
            with killer.running():
                model.learn(budget, async_eval=async_eval)
            restarts_or_seconds = async_eval._pool.restarts
    finally:
        async_eval.close()
    assert model._vec_normalize_env is not None
    obs_rms = model._vec_normalize_env.obs_rms
    assert isinstance(obs_rms, RunningMeanStd)
    weights = th.nn.utils.parameters_to_vector(model.policy.parameters()).detach().numpy()
    return weights, obs_rms.mean, obs_rms.var, np.array([obs_rms.count, restarts_or_seconds])


def ars_case(
    backend: ChaosBackend,
    seconds: float,
    interval: float,
    seed: int,
    *,
    rounds: int | None = None,
    max_kills: int | None = None,
) -> Outcome:
    """ARS under fire ends with the weights of an undisturbed run (of ``rounds`` rounds, by default as many as an
    undisturbed run does in ``seconds``; ``max_kills`` bounds the kills)."""
    steps_per_round = 2 * 8 * 200  # two candidates per direction, Pendulum's 200 steps
    if rounds is None:
        rounds = max(20, int(seconds / (ars_weights(backend, 20 * steps_per_round, seed, None)[3][1] / 20)))
    budget = rounds * steps_per_round
    expected = ars_weights(backend, budget, seed, None)
    killer = WorkerKiller(lambda: None, interval, seed, max_kills)
    started = time.monotonic()
    got = ars_weights(backend, budget, seed, killer)
    elapsed = time.monotonic() - started
    identical = all(np.array_equal(a, b) for a, b in zip(expected[:3], got[:3], strict=True))
    identical = identical and expected[3][0] == got[3][0]
    result = f"{budget // steps_per_round} rounds, weights and obs_rms " + ("bit-identical" if identical else "DIFFER")
    return Outcome(
        "ARS.learn on AsyncEval",
        backend,
        len(killer.kills),
        elapsed,
        int(got[3][1]),
        None,
        None,
        None,
        result,
        identical and counted_every_kill(int(got[3][1]), killer),
        killer.kills,
    )


def cartpoles() -> IndexableMultiEnv:
    return IndexableMultiEnv([functools.partial(gym.make, "CartPole-v1") for _ in range(2 * N_WORKERS)])


def injected_ppo(backend: ChaosBackend, max_restarts: int, seed: int) -> Any:
    """:return: An injected PPO collecting on worker processes (or Ray actors) of CartPole-v1."""
    return get_injected_agent(PPO)(
        "MlpPolicy",
        cartpoles(),
        use_mp=True,
        backend="ray" if backend == "ray" else None,
        n_workers=N_WORKERS,
        max_restarts=max_restarts,
        n_steps=64,
        batch_size=128,
        n_epochs=2,
        seed=seed,
    )


def ppo_case(backend: ChaosBackend, seconds: float, interval: float, seed: int, budget: int | None = None) -> Outcome:
    """An injected PPO under fire completes its training (of ``budget`` steps, by default as many as an undisturbed
    run does in ``seconds``)."""
    model = injected_ppo(backend, GENEROUS_RESTARTS, seed)
    try:
        if budget is None:
            model.learn(2000)  # starts the workers
            started = time.monotonic()
            model.learn(CALIBRATION_STEPS, reset_num_timesteps=False)
            budget = max(4000, int(CALIBRATION_STEPS / (time.monotonic() - started) * seconds))
        killer = WorkerKiller(lambda: model._collector.pool if model._collector is not None else None, interval, seed)
        started = time.monotonic()
        with killer.running():
            model.learn(budget)
        elapsed = time.monotonic() - started
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    worker, buffer = report["worker"], report["buffer"]
    completed = model.num_timesteps >= budget
    return Outcome(
        "PPO.learn, injected agent",
        backend,
        len(killer.kills),
        elapsed,
        worker["restarts"],
        worker["episodes_resumed"],
        worker["episodes_interrupted"],
        buffer["episodes_dropped"],
        f"{budget:,} steps: " + ("completed" if completed else f"stopped at {model.num_timesteps:,}"),
        completed and counted_every_kill(worker["restarts"], killer),
        killer.kills,
    )


def reproducible_ppo(backend: ChaosBackend, max_restarts: int, seed: int) -> Any:
    """:return: An injected PPO in reproducible mode on worker processes (or Ray actors): 3 CartPole-v1 on 2
    workers, so that the environments of a dead worker resume on its replacement and on the other worker."""
    return get_injected_agent(PPO)(
        "MlpPolicy",
        IndexableMultiEnv([functools.partial(gym.make, "CartPole-v1") for _ in range(3)]),
        use_mp=True,
        backend="ray" if backend == "ray" else None,
        n_workers=N_WORKERS,
        max_restarts=max_restarts,
        reproducible=True,
        n_steps=96,
        batch_size=96,
        n_epochs=2,
        seed=seed,
    )


def reproducible_ppo_run(
    backend: ChaosBackend, budget: int, seed: int, killer: WorkerKiller | None
) -> tuple[list[th.Tensor], dict[str, Any], float]:
    """:return: A reproducible PPO's parameters after ``budget`` steps (under ``killer``'s fire, if given), its
    profiler's worker section and the seconds ``learn`` took."""
    model = reproducible_ppo(backend, GENEROUS_RESTARTS, seed)
    try:
        started = time.monotonic()
        if killer is None:
            model.learn(budget)
        else:
            killer.pool_of = lambda: model._collector.pool if model._collector is not None else None
            with killer.running():
                model.learn(budget)
        seconds = time.monotonic() - started
        worker = model.get_profiler_report()["worker"]
    finally:
        model.shutdown()
    return list(model.policy.parameters()), worker, seconds


def reproducible_ppo_case(
    backend: ChaosBackend, seconds: float, interval: float, seed: int, budget: int | None = None
) -> Outcome:
    """A reproducible PPO under fire ends with the parameters of an undisturbed run (of ``budget`` steps, by default
    as many as an undisturbed run does in ``seconds`` after its workers started)."""
    if budget is None:
        warm_up = reproducible_ppo_run(backend, 96, seed, None)[2]  # mostly the workers' start
        longer = reproducible_ppo_run(backend, 96 * 11, seed, None)[2]
        budget = max(96 * 20, int(96 * 10 / max(longer - warm_up, 0.1) * seconds) // 96 * 96)
    expected, _, _ = reproducible_ppo_run(backend, budget, seed, None)
    killer = WorkerKiller(lambda: None, interval, seed)
    got, worker, elapsed = reproducible_ppo_run(backend, budget, seed, killer)
    identical = all(th.equal(a, b) for a, b in zip(expected, got, strict=True))
    return Outcome(
        "PPO.learn, injected agent, reproducible=True",
        backend,
        len(killer.kills),
        elapsed,
        worker["restarts"],
        worker["episodes_resumed"],
        worker["episodes_interrupted"],
        None,
        f"{budget:,} steps, parameters " + ("bit-identical" if identical else "DIFFER"),
        identical and counted_every_kill(worker["restarts"], killer),
        killer.kills,
    )


def ppo_engine(backend: ChaosBackend, max_restarts: int, total_env_steps: int, seed: int) -> AsyncRLEngine:
    """:return: An async engine training PPO on CartPole-v1 collected by worker processes (or Ray actors)."""
    group = EnvGroup(
        [functools.partial(gym.make, "CartPole-v1") for _ in range(2 * N_WORKERS)],
        backend="ray" if backend == "ray" else "processes",
        n_workers=N_WORKERS,
        max_restarts=max_restarts,
    )
    model = PPO("MlpPolicy", group.env, seed=seed, n_steps=64, batch_size=128, n_epochs=2)
    config = EngineConfig(total_env_steps=total_env_steps, seed=seed, verbose=False, log_formats=())
    return AsyncRLEngine(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))


def engine_pool(engine: AsyncRLEngine) -> WorkerPool | None:
    collector = engine._collector
    return collector.pool if collector is not None else None


def engine_case(
    backend: ChaosBackend, seconds: float, interval: float, seed: int, budget: int | None = None
) -> Outcome:
    """The async engine under fire completes its run (of ``budget`` steps, by default as many as an undisturbed run
    does in ``seconds``)."""
    if budget is None:  # the rate of a longer run past a shorter one's: the workers' start left out
        durations = []
        for steps in (2000, 2000 + CALIBRATION_STEPS):
            started = time.monotonic()
            ppo_engine(backend, GENEROUS_RESTARTS, steps, seed).run()
            durations.append(time.monotonic() - started)
        budget = max(4000, int(CALIBRATION_STEPS / max(durations[1] - durations[0], 0.1) * seconds))
    engine = ppo_engine(backend, GENEROUS_RESTARTS, budget, seed)
    killer = WorkerKiller(functools.partial(engine_pool, engine), interval, seed)
    started = time.monotonic()
    with killer.running():
        summary = engine.run()
    elapsed = time.monotonic() - started
    completed = engine.num_timesteps >= budget
    return Outcome(
        "AsyncRLEngine.run",
        backend,
        len(killer.kills),
        elapsed,
        summary["worker_restarts"],
        summary["episodes_resumed"],
        summary["episodes_interrupted"],
        summary["episodes_dropped"],
        f"{budget:,} steps: " + ("completed" if completed else f"stopped at {engine.num_timesteps:,}"),
        completed and counted_every_kill(summary["worker_restarts"], killer),
        killer.kills,
    )


def exhausted_case(kind: str, backend: ChaosBackend, seed: int) -> Outcome:
    """A run killed past its restart budget fails with a clear error within seconds."""
    killer = WorkerKiller(lambda: None, TIGHT_INTERVAL, seed)
    run: Callable[[], Any]
    cleanup: Callable[[], Any]
    if kind == "ars":
        model = ARS(LinearPolicy, normalized_pendulum(1), n_delta=8, seed=seed)
        async_eval = AsyncEval(
            [normalized_pendulum] * N_WORKERS, model.policy, backend=backend, max_restarts=TIGHT_RESTARTS
        )
        killer.pool_of = lambda: async_eval._pool
        run, cleanup = functools.partial(model.learn, 10**9, async_eval=async_eval), async_eval.close
        case = "ARS.learn on AsyncEval"
    elif kind in ("ppo", "reproducible"):
        agent = (injected_ppo if kind == "ppo" else reproducible_ppo)(backend, TIGHT_RESTARTS, seed)
        killer.pool_of = lambda: agent._collector.pool if agent._collector is not None else None
        run, cleanup = functools.partial(agent.learn, 10**9), agent.shutdown
        case = "PPO.learn, injected agent" + (", reproducible=True" if kind == "reproducible" else "")
    else:
        engine = ppo_engine(backend, TIGHT_RESTARTS, 10**9, seed)
        killer.pool_of = functools.partial(engine_pool, engine)
        run, cleanup = engine.run, engine.close
        case = "AsyncRLEngine.run"
    error: BaseException | None = None
    try:
        with killer.running():
            try:
                run()
            except Exception as raised:  # anything but the clear error fails the case
                error = raised
            raised_at = time.monotonic() - killer._started
    finally:
        cleanup()
    fatal = killer.kills[TIGHT_RESTARTS].seconds if len(killer.kills) > TIGHT_RESTARTS else float("nan")
    delay = raised_at - fatal
    clear = isinstance(error, WorkerDiedError) and f"max_restarts={TIGHT_RESTARTS}" in str(error)
    passed = clear and delay < FAILURE_DEADLINE
    message = str(error).splitlines()[0] if error is not None else "no error"
    return Outcome(
        f"{case}, max_restarts={TIGHT_RESTARTS}",
        backend,
        len(killer.kills),
        delay,
        TIGHT_RESTARTS,
        None,
        None,
        None,
        f"{type(error).__name__} {delay:.2f} s after kill {TIGHT_RESTARTS + 1}" if error else "no error",
        passed,
        killer.kills,
        f" ({message})",
    )


COLUMNS = [
    Column("case", "case"),
    Column("backend", "backend"),
    Column("kills", "workers killed"),
    Column("seconds", "seconds (of the run; of the fatal kill to the error)", ".2f"),
    Column("restarts", "restarts"),
    Column("resumed", "episodes resumed", missing="-"),
    Column("interrupted", "episodes interrupted", missing="-"),
    Column("dropped", "episodes dropped", missing="-"),
    Column("result", "outcome"),
]


def run_cases(backends: list[ChaosBackend], seconds: float, interval: float, seed: int) -> list[Outcome]:
    """:return: The outcome of every case on every backend (Ray is started for the Ray cases and shut down)."""
    outcomes = []
    for backend in backends:
        if backend == "ray":
            import ray

            ray.init(address="local", num_cpus=N_WORKERS, include_dashboard=False, log_to_driver=False)
        try:
            for survive in (ars_case, ppo_case, reproducible_ppo_case, engine_case):
                outcomes.append(survive(backend, seconds, interval, seed))
                print(_line(outcomes[-1]), flush=True)
            for kind in ("ars", "ppo", "reproducible", "engine"):
                outcomes.append(exhausted_case(kind, backend, seed))
                print(_line(outcomes[-1]), flush=True)
        finally:
            if backend == "ray":
                ray.shutdown()
    return outcomes


def _line(outcome: Outcome) -> str:
    verdict = "ok" if outcome.passed else "FAILED"
    return f"[{verdict}] {outcome.case} ({outcome.backend}): {outcome.kills} kills, {outcome.result}{outcome.detail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="about 8 s of kills per case")
    parser.add_argument("--seconds", type=float, default=None, help="seconds of kills per case (60, quick 8)")
    parser.add_argument("--interval", type=float, default=None, help="mean seconds between kills (3, quick 1)")
    parser.add_argument("--backends", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--results", default=None, help=f"folder of the result file (default: {RESULTS_FOLDER}; quick runs: none)"
    )
    args = parser.parse_args()
    seconds = args.seconds or (8.0 if args.quick else 60.0)
    interval = args.interval or (1.0 if args.quick else 3.0)
    load = LoadSampler()
    print(f"# Chaos: a worker killed every {interval:g} s (on average) for about {seconds:g} s per case\n")
    outcomes = run_cases(args.backends, seconds, interval, args.seed)
    table = Table(COLUMNS, [outcome.row() for outcome in outcomes])
    print("\n" + table.markdown())
    low, high = load.span()
    print(f"\nload average (1 min) during the run: {low} to {high}")
    if args.results or not args.quick:
        name = "chaos_" + "_".join(args.backends)
        conditions = f"a worker killed every {interval:g} s on average, for about {seconds:g} s of training per case"
        result = new_result(name, {"chaos": table}, load, conditions, packages=["ray"])
        print(f"\nwrote {save_result(result, args.results or RESULTS_FOLDER)}")
    failed = [outcome for outcome in outcomes if not outcome.passed]
    if failed:
        raise SystemExit(f"{len(failed)} case(s) failed: " + "; ".join(_line(outcome) for outcome in failed))


if __name__ == "__main__":
    main()
