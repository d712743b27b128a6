"""``lit-sb3 train``: a population method, or a gradient agent with async episode collection, on a gymnasium
environment, with a progress bar, a CSV and a plot."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import pathlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3 import ARS, CEM, CMAES, ES, PGPE, SNES, XNES, AsyncEval
from lit_sb3.cli.common import (
    POPULATION_N_ENVS,
    CliError,
    ExampleFormatter,
    check_env_id,
    check_output_folder,
    make_env,
    require_module,
    seed_value,
)
from lit_sb3.cli.gradient import GRADIENT_ALGORITHMS, injected_class, make_action_noise, make_multi_env
from lit_sb3.cli.hyperparams import Hyperparams, algorithm_arguments, load_hyperparams, tuned_env_ids, tuned_file
from lit_sb3.cli.recording import EpisodeRecorder, ProgressRecorder, TrainingRecorder
from lit_sb3.population import PopulationAlgorithm

ALGORITHMS: dict[str, type[PopulationAlgorithm]] = {
    "ars": ARS,
    "cem": CEM,
    "cmaes": CMAES,
    "es": ES,
    "pgpe": PGPE,
    "snes": SNES,
    "xnes": XNES,
}
POLICIES = ("LinearPolicy", "MlpPolicy")
#: What ``--save PATH`` writes: the model, its progress, its learning curve, a gradient agent's statistics.
OUTPUT_SUFFIXES = (".zip", ".csv", ".png", ".vecnormalize.pkl")
DEFAULT_TIMESTEPS = 100_000

EXAMPLES = """\
examples:
  lit-sb3 train ars CartPole-v1 --total-timesteps 50000 --save runs/ars_cartpole
  lit-sb3 train cmaes Pendulum-v1 --workers 2 --seed 1 --total-timesteps 200000
  lit-sb3 train pgpe Swimmer-v5 --normalize --workers 2 --total-timesteps 500000
  lit-sb3 train ars HalfCheetah-v4 --hyperparams rl-zoo/hyperparams/ars.yml --workers 2
  lit-sb3 train ppo CartPole-v1 --hyperparams rl-zoo/hyperparams/ppo.yml --workers 2 --save runs/ppo_cartpole
  lit-sb3 train sac Pendulum-v1 --workers 0 --total-timesteps 20000

Population methods (ars, es, cem, cmaes, pgpe, snes, xnes): --workers N evaluates the candidates on N local worker
processes, --workers 0 in this process; the seed fixes the run whatever the number of workers. Writes PATH.zip (the
model, with its observation statistics), PATH.csv (one row per round) and PATH.png (mean and best return per round
against env steps).

Gradient agents (a2c, ddpg, dqn, ppo, sac, td3; qrdqn, tqc, trpo with sb3-contrib) train on --n-envs
environments whose episodes are collected asynchronously while the agent trains: --workers N collects them on N
worker processes, --workers 0 on one worker thread of this process. Writes PATH.zip, PATH.csv (one row per
episode), PATH.png (episode returns against env steps) and, with --normalize, PATH.vecnormalize.pkl (the
VecNormalize statistics).
"""


def tuned_entries() -> str:
    """:return: The help's list of the environments that have a tuned entry, per algorithm."""
    lines = [f"  {name:<6} {', '.join(ids)}" for name in sorted(ALGORITHMS) if (ids := tuned_env_ids(name))]
    return (
        "\nTuned hyper-parameters, the learning study's settings (used when --hyperparams is not given; "
        "--no-tuned: the defaults):\n" + "\n".join(lines) + "\n"
    )


def hyperparams_file(args: argparse.Namespace, algo_name: str) -> pathlib.Path | None:
    """:return: The hyper-parameter file of the run: ``--hyperparams``, else the tuned entry's, else none."""
    if args.hyperparams is not None:
        return pathlib.Path(args.hyperparams)
    return None if args.no_tuned else tuned_file(algo_name, args.env_id)


def add_parser(commands: Any) -> None:
    """:param commands: The subparsers of the ``lit-sb3`` parser."""
    parser = commands.add_parser(
        "train",
        help="train ARS, ES, CEM, CMA-ES, PGPE, SNES, XNES or a gradient agent (PPO, SAC...) on a gymnasium "
        "environment",
        description="Train a population method, or a gradient agent with async episode collection, on a gymnasium "
        "environment.",
        epilog=EXAMPLES + tuned_entries(),
        formatter_class=ExampleFormatter,
    )
    parser.add_argument("algo", metavar="ALGO", help=f"one of {', '.join(sorted(ALGORITHMS | GRADIENT_ALGORITHMS))}")
    parser.add_argument("env_id", metavar="ENV_ID", help="gymnasium environment id, e.g. CartPole-v1")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="local worker processes evaluating the candidates (or collecting the episodes); 0 evaluates them in "
        "this process (collects them on one thread) (default: the number of CPUs, %(default)s here)",
    )
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help=f"env steps to train for (default: the file's n_timesteps, else {DEFAULT_TIMESTEPS})",
    )
    parser.add_argument("--seed", type=seed_value, default=0, help="seed of the run (default: %(default)s)")
    parser.add_argument(
        "--n-eval-episodes",
        type=int,
        default=None,
        help="episodes per candidate of a population method (default: the file's, else 1)",
    )
    parser.add_argument(
        "--n-envs",
        type=int,
        default=None,
        help=f"sub-environments per worker of a population method (default: the file's, else {POPULATION_N_ENVS}); "
        "environments of a gradient agent (default: the file's, else one per worker)",
    )
    parser.add_argument(
        "--policy",
        default=None,
        help="policy (default: the file's, else LinearPolicy for population methods and MlpPolicy for gradient "
        f"agents; population methods take {' or '.join(POLICIES)})",
    )
    parser.add_argument(
        "--normalize",
        action="store_true",
        help="normalise with VecNormalize: observations for population methods (ARS V2; saved with the model), "
        "observations and rewards for gradient agents (as rl-zoo's normalize: true; saved in PATH.vecnormalize.pkl)",
    )
    parser.add_argument(
        "--hyperparams",
        metavar="FILE",
        default=None,
        help="YAML hyper-parameters, rl-zoo's layout or one entry (default: lit_sb3's tuned entry for ENV_ID if it "
        "has one, see below)",
    )
    parser.add_argument(
        "--no-tuned", action="store_true", help="the algorithm's own defaults even where lit_sb3 has a tuned entry"
    )
    parser.add_argument(
        "--save",
        metavar="PATH",
        default=None,
        help="where to write PATH.zip, PATH.csv and PATH.png (default: runs/ALGO_ENV_ID)",
    )
    parser.add_argument("--tensorboard-log", metavar="DIR", default=None, help="also log to TensorBoard in DIR")
    parser.add_argument("--no-progress-bar", action="store_true", help="no live progress bar")
    parser.set_defaults(run=run_train)


class Training:
    """
    A model set up by ``lit-sb3 train``, with how it learns, closes and saves.

    :param model: The model.
    :param recorder: The callback that records its progress.
    :param label: The algorithm, as the summary names it.
    :param runs_on: Where its environments run, as the summary says it.
    """

    #: The summary's label of the workers' part.
    runs_on_label = "evaluated on"

    def __init__(self, model: BaseAlgorithm, recorder: ProgressRecorder, label: str, runs_on: str) -> None:
        self.model = model
        self.recorder = recorder
        self.label = label
        self.runs_on = runs_on

    def learn(self, total_timesteps: int) -> None:
        """:param total_timesteps: The budget in environment steps."""
        self.model.learn(total_timesteps, callback=self.recorder)

    def close(self) -> None:
        """Close the environments (and the workers)."""
        assert self.model.env is not None
        self.model.env.close()

    def save(self, stem: pathlib.Path) -> list[tuple[str, pathlib.Path]]:
        """
        :param stem: The outputs' path without suffix.
        :return: What was written, as the summary lists it.
        """
        model_path = output_path(stem, ".zip")
        self.model.save(model_path)
        return [("model", model_path)]


class PopulationTraining(Training):
    """
    A population method, its candidates evaluated in this process or on the worker pool.

    :param model: The model.
    :param recorder: The callback that records its progress.
    :param env_fn: Builds a worker's environment.
    :param workers: Local worker processes (0: this process).
    """

    def __init__(self, model: PopulationAlgorithm, recorder: TrainingRecorder, env_fn: Any, workers: int) -> None:
        n_envs = model.n_envs  # the model's env is env_fn's, as each worker's
        where = "this process" if workers == 0 else f"{workers} local worker process{'es' if workers > 1 else ''}"
        where += f", {n_envs} sub-environment{'s' if n_envs > 1 else ''}" + (" each" if workers > 1 else "")
        super().__init__(model, recorder, type(model).__name__, where)
        self.population_model = model
        self.env_fn = env_fn
        self.workers = workers

    def learn(self, total_timesteps: int) -> None:
        """:param total_timesteps: The budget in environment steps."""
        model = self.population_model
        if self.workers == 0:
            model.learn(total_timesteps, callback=self.recorder)
            return
        with AsyncEval([self.env_fn] * self.workers, model.policy, n_eval_episodes=model.n_eval_episodes) as pool:
            model.learn(total_timesteps, callback=self.recorder, async_eval=pool)


class GradientTraining(Training):
    """A gradient agent whose episodes are collected asynchronously."""

    runs_on_label = "episodes collected on"

    def close(self) -> None:
        """Stop the collection workers, close the environments."""
        self.model.shutdown()  # type: ignore[attr-defined]
        super().close()

    def save(self, stem: pathlib.Path) -> list[tuple[str, pathlib.Path]]:
        """
        :param stem: The outputs' path without suffix.
        :return: What was written: the model and, with normalisation, the ``VecNormalize`` statistics
            (``VecNormalize.load`` reads them; Stable-Baselines3 keeps them out of the model file).
        """
        outputs = super().save(stem)
        if isinstance(self.model.env, VecNormalize):
            statistics_path = output_path(stem, ".vecnormalize.pkl")
            self.model.env.save(str(statistics_path))
            outputs.append(("normalisation statistics", statistics_path))
        return outputs


def output_path(stem: pathlib.Path, suffix: str) -> pathlib.Path:
    """:return: ``stem`` with ``suffix`` added (``runs/ppo.v2`` and ``.zip``: ``runs/ppo.v2.zip``, not ``ppo.zip``)."""
    return stem.with_name(stem.name + suffix)


def output_stem(save: str | None, algo: str, env_id: str) -> pathlib.Path:
    """
    :return: The path of the outputs without suffix (``PATH`` of ``PATH.zip``, ``PATH.csv``, ``PATH.png``).
    :raises CliError: if ``save`` names a folder rather than a file's path, or an output would land on a folder.
    """
    if save is not None and (save.endswith(("/", os.sep)) or pathlib.Path(save).name in ("", ".", "..")):
        raise CliError(f"--save takes the outputs' path without suffix (PATH of PATH.zip), not a folder: {save!r}")
    path = pathlib.Path(save) if save is not None else pathlib.Path("runs") / f"{algo}_{env_id.replace('/', '_')}"
    stem = path.with_suffix("") if path.suffix == ".zip" else path
    for suffix in OUTPUT_SUFFIXES:
        if (output := output_path(stem, suffix)).is_dir():
            raise CliError(f"--save: {str(output)!r} is a folder, where the {suffix[1:]} file would go")
    return stem


def run_train(args: argparse.Namespace) -> None:
    """
    Train, save the model, write the CSV (one row per round or per episode) and the learning curve, print a
    summary.

    :param args: Parsed ``train`` arguments.
    """
    algo_name = args.algo.lower()
    if algo_name not in ALGORITHMS and algo_name not in GRADIENT_ALGORITHMS:
        raise CliError(
            f"unknown algorithm {args.algo!r} (choose from {', '.join(sorted(ALGORITHMS))}, or the gradient agents "
            f"{', '.join(sorted(GRADIENT_ALGORITHMS))})"
        )
    check_env_id(args.env_id)
    for name in ("total_timesteps", "n_eval_episodes", "n_envs"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise CliError(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        raise CliError("--workers must be 0 (this process) or more")
    if args.tensorboard_log is not None:
        require_module("tensorboard", "--tensorboard-log", "tensorboard")
    source = hyperparams_file(args, algo_name)
    stem = output_stem(args.save, algo_name, args.env_id)
    check_output_folder(stem.parent, "--save")
    if args.tensorboard_log is not None:
        check_output_folder(pathlib.Path(args.tensorboard_log), "--tensorboard-log")
    if algo_name in GRADIENT_ALGORITHMS:
        training, total_timesteps = _gradient_training(args, algo_name, source)
    else:
        training, total_timesteps = _population_training(args, algo_name, source)

    interrupted = False
    try:
        training.learn(total_timesteps)
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        with held_interrupts():
            training.close()
        raise
    with held_interrupts() as presses:
        if interrupted:
            training.recorder.close()
            print(f"lit-sb3 train: interrupted after {training.model.num_timesteps} env steps; saving", file=sys.stderr)
        training.close()
        outputs = _write_outputs(training, stem, args)
    _print_summary(training, args, source, outputs, interrupted)
    if interrupted or presses:
        raise SystemExit(130)


@contextlib.contextmanager
def held_interrupts() -> Iterator[list[int]]:
    """
    Hold Ctrl-C while the workers close and the outputs are written: the first press waits for them, a second one
    quits without them.

    :return: The presses held.
    """
    presses: list[int] = []

    def hold(signum: int, _frame: Any) -> None:
        presses.append(signum)
        if len(presses) > 1:
            raise KeyboardInterrupt
        print("lit-sb3 train: closing and saving first; Ctrl-C again quits without saving", file=sys.stderr)

    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:  # a run in the background of a shell, or under nohup: Ctrl-C stays ignored
        yield presses
        return
    signal.signal(signal.SIGINT, hold)
    try:
        yield presses
    finally:
        signal.signal(signal.SIGINT, previous)


def _write_outputs(training: Training, stem: pathlib.Path, args: argparse.Namespace) -> list[tuple[str, pathlib.Path]]:
    """:return: What was written (the model, the CSV, the learning curve...), as the summary lists it."""
    outputs = training.save(stem)
    recorder = training.recorder
    csv_path, png_path = output_path(stem, ".csv"), output_path(stem, ".png")
    recorder.write_csv(csv_path)
    outputs.append((f"{recorder.unit} (CSV)", csv_path))
    try:
        require_module("matplotlib", "the learning curve", '"lit_sb3[plot]"')
    except CliError as error:
        print(f"lit-sb3 train: no learning curve drawn: {error}", file=sys.stderr)
    else:
        if recorder.records:
            recorder.plot(png_path, f"{training.label} on {args.env_id}, seed {args.seed}")
            outputs.append(("learning curve", png_path))
    return outputs


def _population_training(args: argparse.Namespace, algo_name: str, source: pathlib.Path | None) -> tuple[Training, int]:
    algo_class = ALGORITHMS[algo_name]
    if args.policy is not None and args.policy not in POLICIES:
        raise CliError(f"--policy must be {' or '.join(POLICIES)} for {algo_class.__name__}, got {args.policy!r}")
    hyperparams = load_hyperparams(source, args.env_id, algo_class) if source else Hyperparams()
    algo_kwargs = dict(hyperparams.algo_kwargs)
    if args.n_eval_episodes is not None:
        algo_kwargs["n_eval_episodes"] = args.n_eval_episodes
    normalize_kwargs = hyperparams.normalize_kwargs
    if args.normalize and normalize_kwargs is None:
        normalize_kwargs = {"norm_obs": True, "norm_reward": False}
    policy = args.policy or hyperparams.policy or "LinearPolicy"
    total_timesteps = args.total_timesteps or hyperparams.n_timesteps or DEFAULT_TIMESTEPS
    n_envs = args.n_envs or hyperparams.n_envs or POPULATION_N_ENVS
    env_fn = functools.partial(make_env, args.env_id, n_envs=n_envs, normalize_kwargs=normalize_kwargs)
    model = _build_model(algo_class, policy, env_fn(), args, algo_kwargs)
    assert isinstance(model, PopulationAlgorithm)
    recorder = TrainingRecorder(total_timesteps, progress_bar=not args.no_progress_bar)
    return PopulationTraining(model, recorder, env_fn, args.workers), total_timesteps


def _gradient_training(args: argparse.Namespace, algo_name: str, source: pathlib.Path | None) -> tuple[Training, int]:
    if args.n_eval_episodes is not None:
        raise CliError(f"--n-eval-episodes is for the population methods ({', '.join(sorted(ALGORITHMS))})")
    algo_class = injected_class(algo_name)
    if args.policy is not None and args.policy not in algo_class.policy_aliases:
        raise CliError(
            f"--policy must be {' or '.join(algo_class.policy_aliases)} for {algo_class.__name__}, got {args.policy!r}"
        )
    hyperparams = (
        load_hyperparams(source, args.env_id, algo_class, reward_normalization=True) if source else Hyperparams()
    )
    normalize_kwargs = hyperparams.normalize_kwargs
    if args.normalize and normalize_kwargs is None:
        normalize_kwargs = {"norm_obs": True, "norm_reward": True}
    total_timesteps = args.total_timesteps or hyperparams.n_timesteps or DEFAULT_TIMESTEPS
    n_envs = args.n_envs or hyperparams.n_envs or max(args.workers, 1)
    # Each environment runs in one worker: more workers than environments would idle.
    n_workers = min(args.workers, n_envs) or 1
    env = make_multi_env(args.env_id, n_envs, normalize_kwargs)
    algo_kwargs = {**hyperparams.algo_kwargs, "use_mp": args.workers > 0, "n_workers": n_workers}
    if hyperparams.action_noise is not None:
        try:
            algo_kwargs["action_noise"] = make_action_noise(
                hyperparams.action_noise, env.action_space, args.hyperparams
            )
        except CliError:
            env.close()
            raise
    model = _build_model(algo_class, args.policy or hyperparams.policy or "MlpPolicy", env, args, algo_kwargs)
    if args.workers == 0:
        runs_on = "one worker thread of this process"
    else:
        runs_on = f"{n_workers} worker process{'es' if n_workers > 1 else ''}"
    recorder = EpisodeRecorder(total_timesteps, progress_bar=not args.no_progress_bar)
    label = f"{GRADIENT_ALGORITHMS[algo_name][1]} (async collection)"
    return GradientTraining(model, recorder, label, runs_on), total_timesteps


def _build_model(
    algo_class: type[BaseAlgorithm], policy: str, env: Any, args: argparse.Namespace, algo_kwargs: dict[str, Any]
) -> BaseAlgorithm:
    try:
        return algo_class(policy, env, seed=args.seed, tensorboard_log=args.tensorboard_log, **algo_kwargs)
    except TypeError as error:
        env.close()
        # Only a keyword the algorithm does not take needs the list of those it does (not a value of the wrong type,
        # nor a keyword of the policy's or the optimiser's, which the error names).
        unknown = f"{algo_class.__name__}.__init__() got an unexpected keyword argument" in str(error)
        known = f" (known: {', '.join(algorithm_arguments(algo_class))})" if unknown else ""
        raise CliError(f"bad hyper-parameters for {algo_class.__name__}: {error}{known}") from None
    except (ValueError, RuntimeError) as error:  # RuntimeError: torch's, e.g. a layer of negative size
        env.close()
        raise CliError(f"bad hyper-parameters for {algo_class.__name__}: {error}") from None
    except AssertionError as error:
        # Stable-Baselines3 checks the spaces an algorithm supports, and some settings, with assertions.
        env.close()
        raise CliError(f"{algo_class.__name__} cannot train on {args.env_id}: {' '.join(str(error).split())}") from None


def _print_summary(
    training: Training,
    args: argparse.Namespace,
    source: pathlib.Path | None,
    outputs: list[tuple[str, pathlib.Path]],
    interrupted: bool,
) -> None:
    model, recorder = training.model, training.recorder
    wall_time = recorder.wall_time_s
    rows = [
        ["algorithm", training.label + (" (interrupted)" if interrupted else "")],
        ["environment", args.env_id],
        ["hyper-parameters", "the algorithm's defaults" if source is None else str(source)],
        [training.runs_on_label, training.runs_on],
        ["env steps", f"{model.num_timesteps:,}"],
        ["wall time", f"{wall_time:.1f} s"],
        ["env steps/s", f"{model.num_timesteps / max(wall_time, 1e-9):,.0f}"],
        *recorder.summary_rows(),
        *([label, str(path)] for label, path in outputs),
    ]
    width = max(len(label) for label, _ in rows)
    print()
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print(f"\nevaluate it with: lit-sb3 evaluate {outputs[0][1]} {args.env_id} --episodes 10")
