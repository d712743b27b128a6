"""``lit-sb3 train``: a population method on a gymnasium environment, with a progress bar, a CSV and a plot."""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import sys
from typing import Any

from lit_sb3 import ARS, CEM, CMAES, ES, AsyncEval
from lit_sb3.cli.common import CliError, ExampleFormatter, check_env_id, make_env, require_module
from lit_sb3.cli.hyperparams import Hyperparams, algorithm_arguments, load_hyperparams
from lit_sb3.cli.recording import TrainingRecorder, plot_learning_curve, write_rounds_csv
from lit_sb3.population import PopulationAlgorithm

ALGORITHMS: dict[str, type[PopulationAlgorithm]] = {"ars": ARS, "cem": CEM, "cmaes": CMAES, "es": ES}
POLICIES = ("LinearPolicy", "MlpPolicy")
DEFAULT_TIMESTEPS = 100_000

EXAMPLES = """\
examples:
  lit-sb3 train ars CartPole-v1 --total-timesteps 50000 --save runs/ars_cartpole
  lit-sb3 train cmaes Pendulum-v1 --workers 2 --seed 1 --total-timesteps 200000
  lit-sb3 train ars HalfCheetah-v4 --hyperparams rl-zoo/hyperparams/ars.yml --workers 2

--workers N evaluates the candidates on N local worker processes; --workers 0 evaluates them in this process.
The seed fixes the run whatever the number of workers. Writes PATH.zip (the model, with its observation
statistics), PATH.csv (one row per round) and PATH.png (mean and best return per round against env steps).
"""


def add_parser(commands: Any) -> None:
    """:param commands: The subparsers of the ``lit-sb3`` parser."""
    parser = commands.add_parser(
        "train",
        help="train ARS, ES, CEM or CMA-ES on a gymnasium environment",
        description="Train a population method on a gymnasium environment.",
        epilog=EXAMPLES,
        formatter_class=ExampleFormatter,
    )
    parser.add_argument("algo", metavar="ALGO", help=f"one of {', '.join(sorted(ALGORITHMS))}")
    parser.add_argument("env_id", metavar="ENV_ID", help="gymnasium environment id, e.g. CartPole-v1")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="local worker processes evaluating the candidates; 0 evaluates them in this process "
        "(default: the number of CPUs, %(default)s here)",
    )
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help=f"env steps to train for (default: the file's n_timesteps, else {DEFAULT_TIMESTEPS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the run (default: %(default)s)")
    parser.add_argument(
        "--n-eval-episodes", type=int, default=None, help="episodes per candidate (default: the file's, else 1)"
    )
    parser.add_argument(
        "--n-envs", type=int, default=None, help="sub-environments per worker (default: the file's, else 1)"
    )
    parser.add_argument(
        "--policy", choices=POLICIES, default=None, help="policy (default: the file's, else LinearPolicy)"
    )
    parser.add_argument(
        "--normalize",
        action="store_true",
        help="normalise observations with VecNormalize (ARS V2); saved with the model",
    )
    parser.add_argument(
        "--hyperparams", metavar="FILE", default=None, help="YAML hyper-parameters, rl-zoo's layout or one entry"
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


def output_stem(save: str | None, algo: str, env_id: str) -> pathlib.Path:
    """:return: The path of the outputs without suffix (``PATH`` of ``PATH.zip``, ``PATH.csv``, ``PATH.png``)."""
    path = pathlib.Path(save) if save is not None else pathlib.Path("runs") / f"{algo}_{env_id.replace('/', '_')}"
    return path.with_suffix("") if path.suffix == ".zip" else path


def run_train(args: argparse.Namespace) -> None:
    """
    Train, save the model, write the per-round CSV and the learning curve, print a summary.

    :param args: Parsed ``train`` arguments.
    """
    algo_name = args.algo.lower()
    if algo_name not in ALGORITHMS:
        raise CliError(f"unknown algorithm {args.algo!r} (choose from {', '.join(sorted(ALGORITHMS))})")
    algo_class = ALGORITHMS[algo_name]
    check_env_id(args.env_id)
    for name in ("total_timesteps", "n_eval_episodes", "n_envs"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise CliError(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        raise CliError("--workers must be 0 (this process) or more")
    if args.tensorboard_log is not None:
        require_module("tensorboard", "--tensorboard-log", "tensorboard")
    hyperparams = load_hyperparams(args.hyperparams, args.env_id, algo_class) if args.hyperparams else Hyperparams()
    algo_kwargs = dict(hyperparams.algo_kwargs)
    if args.n_eval_episodes is not None:
        algo_kwargs["n_eval_episodes"] = args.n_eval_episodes
    normalize_kwargs = hyperparams.normalize_kwargs
    if args.normalize and normalize_kwargs is None:
        normalize_kwargs = {"norm_obs": True, "norm_reward": False}
    policy = args.policy or hyperparams.policy or "LinearPolicy"
    total_timesteps = args.total_timesteps or hyperparams.n_timesteps or DEFAULT_TIMESTEPS
    n_envs = args.n_envs or hyperparams.n_envs or 1
    stem = output_stem(args.save, algo_name, args.env_id)

    env_fn = functools.partial(make_env, args.env_id, n_envs=n_envs, normalize_kwargs=normalize_kwargs)
    model = _build_model(algo_class, policy, env_fn(), args, algo_kwargs)
    recorder = TrainingRecorder(total_timesteps, progress_bar=not args.no_progress_bar)
    interrupted = False
    try:
        if args.workers == 0:
            model.learn(total_timesteps, callback=recorder)
        else:
            with AsyncEval([env_fn] * args.workers, model.policy, n_eval_episodes=model.n_eval_episodes) as async_eval:
                model.learn(total_timesteps, callback=recorder, async_eval=async_eval)
    except KeyboardInterrupt:
        interrupted = True
        recorder.close()
        print(f"lit-sb3 train: interrupted after {model.num_timesteps} env steps; saving", file=sys.stderr)
    finally:
        assert model.env is not None
        model.env.close()

    stem.parent.mkdir(parents=True, exist_ok=True)
    model_path, csv_path, png_path = (stem.with_name(stem.name + suffix) for suffix in (".zip", ".csv", ".png"))
    model.save(model_path)
    write_rounds_csv(recorder.rounds, csv_path)
    title = f"{algo_class.__name__} on {args.env_id}, seed {args.seed}"
    outputs = [("model", model_path), ("rounds (CSV)", csv_path)]
    try:
        require_module("matplotlib", "the learning curve", '"lit_sb3[plot]"')
    except CliError as error:
        print(f"lit-sb3 train: no learning curve drawn: {error}", file=sys.stderr)
    else:
        if recorder.rounds:
            plot_learning_curve(recorder.rounds, png_path, title)
            outputs.append(("learning curve", png_path))
    _print_summary(
        algo=algo_class.__name__, args=args, model=model, recorder=recorder, outputs=outputs, interrupted=interrupted
    )
    if interrupted:
        raise SystemExit(130)


def _build_model(
    algo_class: type[PopulationAlgorithm], policy: str, env: Any, args: argparse.Namespace, algo_kwargs: dict[str, Any]
) -> PopulationAlgorithm:
    try:
        return algo_class(policy, env, seed=args.seed, tensorboard_log=args.tensorboard_log, **algo_kwargs)
    except TypeError as error:
        env.close()
        known = ", ".join(algorithm_arguments(algo_class))
        raise CliError(f"bad hyper-parameters for {algo_class.__name__}: {error} (known: {known})") from None
    except ValueError as error:
        env.close()
        raise CliError(f"bad hyper-parameters for {algo_class.__name__}: {error}") from None


def _print_summary(
    *,
    algo: str,
    args: argparse.Namespace,
    model: PopulationAlgorithm,
    recorder: TrainingRecorder,
    outputs: list[tuple[str, pathlib.Path]],
    interrupted: bool,
) -> None:
    rounds = recorder.rounds
    wall_time = rounds[-1].wall_time_s if rounds else 0.0
    where = "this process" if args.workers == 0 else f"{args.workers} local worker processes"
    rows = [
        ["algorithm", algo + (" (interrupted)" if interrupted else "")],
        ["environment", args.env_id],
        ["evaluated on", where],
        ["rounds", f"{len(rounds)}"],
        ["env steps", f"{model.num_timesteps:,}"],
        ["wall time", f"{wall_time:.1f} s"],
        ["env steps/s", f"{model.num_timesteps / max(wall_time, 1e-9):,.0f}"],
    ]
    if rounds:
        best_round = max(rounds, key=lambda record: record.mean_return)
        rows += [
            ["last round: mean / best return", f"{rounds[-1].mean_return:.2f} / {rounds[-1].best_return:.2f}"],
            ["best round mean return", f"{best_round.mean_return:.2f} (round {best_round.round})"],
        ]
    rows += [[label, str(path)] for label, path in outputs]
    width = max(len(label) for label, _ in rows)
    print()
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print(f"\nevaluate it with: lit-sb3 evaluate {outputs[0][1]} {args.env_id} --episodes 10")
