"""One run of the learning study: training to the threshold with its clocks and checkpoints, and the rates of a
configuration and of an environment alone."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import math
import os
import pickle
import random
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import torch
from learning import EVAL_SEED, N_EVAL_EPISODES, ThresholdReachedError, policy_return
from sb3_contrib.common.vec_env import AsyncEval as ContribAsyncEval
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from study_setup import CONFIGS, EVOTORCH_CONFIGS, N_WORKERS, STUDY_PACKAGES, TASKS, Config, EvoTorchConfig, StudyTask

from lit_sb3 import AsyncEval
from lit_sb3.cli.bench_results import CORE_PACKAGES, machine_description
from lit_sb3.evaluation.seeding import episode_seed
from lit_sb3.vec_env import InProcessEval

CPU_MEASURE = "psutil: main process + every descendant process (user + system), told apart by pid and start since boot"


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
    date: str = ""
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
        self._elapsed_before = (0.0, 0.0)  # wall time and CPU-seconds of the process runs before a resume
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
            "curve": list(self.curve),
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
        return policy_return(self.model, self.eval_env, self._evaluator)


CHECKPOINT_INTERVAL = 600.0  # seconds


@dataclass(frozen=True)
class Checkpoint:
    """
    Where a run saves itself between two rounds, so that a run whose processes are killed goes on from there when
    started again: a Stable-Baselines3 model with ``save()`` (and its ``VecNormalize`` statistics), an EvoTorch searcher
    pickled (its problem with it: observation statistics and counters, not its Ray actors, which its next step
    starts again; a Gaussian searcher without its last population, see :func:`without_last_population`); then the
    global random generators' states, and last the curve and clocks (``state.json``: a checkpoint is whole once that
    file is there). A resumed run of ours repeats the uninterrupted one; those of sb3-contrib and EvoTorch go on from
    the same state but not on the same episodes (their workers' environments start their random streams again).

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

    def save_searcher(self, searcher: Any, study_curve: StudyCurve, before_step: StateBeforeStep | None) -> None:
        """
        Save the searcher, without its last population where it keeps one (:func:`without_last_population`) and then
        with the curve and clocks from before that population's evaluation.

        :param before_step: The run before the searcher's last ``step()`` (None: no step yet).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        with without_last_population(searcher, before_step) as left_out:
            write_replacing(self.searcher_file, pickle.dumps(searcher))
        if left_out and before_step is not None:
            self._save_random_states_and_curve(before_step.curve_state)
        else:
            self._save_random_states_and_curve(study_curve.state())

    def _save_random_states_and_curve(self, curve_state: dict[str, Any]) -> None:
        states = random.getstate(), np.random.get_state(), torch.get_rng_state()
        write_replacing(self.random_state_file, pickle.dumps(states))
        write_replacing(self.state_file, json.dumps(curve_state).encode())

    def load(self, model: BaseAlgorithm, env: VecEnv) -> tuple[BaseAlgorithm, dict[str, Any]]:
        """:return: The model (of ``model``'s class) and the curve state saved last."""
        if isinstance(env, VecNormalize):
            env = VecNormalize.load(str(self.folder / "vec_normalize.pkl"), env.venv)
        loaded = type(model).load(self.folder / "model.zip", env=env)
        for name in inspect.signature(type(model)).parameters:  # a checkpoint saved before an option existed
            configured, saved = getattr(model, name, None), getattr(loaded, name, None)
            if isinstance(configured, float) and isinstance(saved, float) and math.isclose(configured, saved):
                continue
            if isinstance(configured, int | float | str) and configured != saved:
                raise ValueError(
                    f"{self.folder}: the checkpoint has {name}={saved!r}, the configuration {configured!r}"
                )
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


#: What a ``GymNE`` problem's evaluation changes, besides its actors: env steps, episodes, the status of the last
#: evaluation (which a Gaussian searcher's adaptive population size counts from) and the observation statistics.
EVALUATED_PROBLEM_STATE = ("_interaction_count", "_episode_count", "_after_eval_status", "_obs_stats")


@dataclass(frozen=True)
class StateBeforeStep:
    """
    An EvoTorch run as it was when its searcher's last ``step()`` began.

    :param curve_state: :meth:`StudyCurve.state`.
    :param searcher_steps: The searcher's ``step()`` count.
    :param problem_state: The ``GymNE`` problem's :data:`EVALUATED_PROBLEM_STATE` (copies).
    :param actor_counters: Each of its actors' env steps and episodes (None: no actors), which a pickle of the problem
        keeps for the actors it starts again, whose sum its count is from its next evaluation on.
    """

    curve_state: dict[str, Any]
    searcher_steps: int
    problem_state: dict[str, Any]
    actor_counters: list[dict[str, int]] | None

    @classmethod
    def now(cls, study_curve: StudyCurve, searcher: Any) -> StateBeforeStep:
        """:return: The run's state now, before ``searcher.step()``."""
        import ray

        problem = searcher.problem
        actor_counters = None
        if problem._actors is not None:
            actor_counters = ray.get(
                [actor.call.remote("_make_pickle_data_for_main", [], {}) for actor in problem._actors]
            )
        problem_state = {name: copy.copy(getattr(problem, name)) for name in EVALUATED_PROBLEM_STATE}
        return cls(study_curve.state(), searcher.step_count, problem_state, actor_counters)


@contextmanager
def without_last_population(searcher: Any, before_step: StateBeforeStep | None) -> Iterator[bool]:
    """
    For the block (a pickle), take a Gaussian searcher's last population off it and its problem back to
    ``before_step``: it is then the searcher before that population's evaluation, which samples and evaluates a new
    one from the same distribution at its next step. EvoTorch's PGPE, SNES and XNES keep the population they
    evaluated last until their next ``step()`` computes the gradient from it (up to ``popsize_max`` solutions: 66 MB
    on Humanoid, where the rest of the searcher is a few hundred kB). Left as they are: the problem's best and worst
    solutions so far (which may come from that population). Other searchers (CMA-ES) use their population within
    their step and keep it.

    :param before_step: The run before the searcher's last step (None: no step yet).
    :return: Whether a population was taken off (the block's value).
    """
    from evotorch.algorithms.distributed import GaussianSearchAlgorithm

    if not isinstance(searcher, GaussianSearchAlgorithm) or searcher.population is None or before_step is None:
        yield False
        return
    problem = searcher.problem
    kept_searcher = searcher._population, searcher._first_iter, searcher._steps_count
    kept_problem = {name: getattr(problem, name) for name in (*EVALUATED_PROBLEM_STATE, "_actors", "_remote_states")}
    try:
        searcher._population, searcher._first_iter, searcher._steps_count = None, True, before_step.searcher_steps
        for name, value in before_step.problem_state.items():
            setattr(problem, name, value)
        # Without actors to ask, the pickle keeps these counters for the actors it starts again.
        problem._actors, problem._remote_states = None, before_step.actor_counters
        yield True
    finally:
        searcher._population, searcher._first_iter, searcher._steps_count = kept_searcher
        for name, value in kept_problem.items():
            setattr(problem, name, value)


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
        date=time.strftime("%Y-%m-%d"),
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
        before_step = None
        while True:
            steps = problem.interaction_count
            finished = steps >= task.budget
            if (finished or study_curve.due(steps)) and study_curve.add(steps, centre_return):
                break
            if finished:
                break
            with study_curve.excluded():  # the study's bookkeeping
                before_step = StateBeforeStep.now(study_curve, searcher)
            searcher.step()
            if checkpoint is not None and time.perf_counter() - last_checkpoint >= CHECKPOINT_INTERVAL:
                with study_curve.excluded():
                    checkpoint.save_searcher(searcher, study_curve, before_step)
                last_checkpoint = time.perf_counter()
        if checkpoint is not None:
            checkpoint.save_searcher(searcher, study_curve, before_step)
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
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_description((*CORE_PACKAGES, *STUDY_PACKAGES)),
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
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_description((*CORE_PACKAGES, *STUDY_PACKAGES)),
    }


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
