"""``lit-sb3 evaluate``: a saved model's returns (optionally on video), or a random population on the worker pool."""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import pathlib
import pickle
import time
import zipfile
from typing import Any, cast

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.utils import ConstantSchedule
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from lit_sb3 import AsyncEval, LinearPolicy, MlpPolicy
from lit_sb3.cli.common import (
    POPULATION_N_ENVS,
    CliError,
    ExampleFormatter,
    check_env_id,
    print_table,
    require_module,
    seed_value,
)

POPULATION_POLICIES = {"linear": LinearPolicy, "mlp": MlpPolicy}
DEFAULT_POPULATION_ENV = "CartPole-v1"
#: The defaults of the random population's options (given with a saved model, they are refused).
POPULATION_DEFAULTS: dict[str, Any] = {
    "policy": "linear",
    "pop_size": 32,
    "sigma": 1.0,
    "workers": 2,
    "n_envs": POPULATION_N_ENVS,
    "top": 10,
}

EXAMPLES = """\
examples:
  lit-sb3 evaluate runs/ars_cartpole.zip CartPole-v1 --episodes 10
  lit-sb3 evaluate runs/ars_cartpole.zip CartPole-v1 --episodes 2 --render-video videos/
  lit-sb3 evaluate --random-population Pendulum-v1 --pop-size 64 --workers 2

A saved model (of lit-sb3 train, of any lit_sb3 optimiser's save, or of any Stable-Baselines3 algorithm's save, with
or without async collection) runs in this process with its saved observation statistics (in the model, or in
PATH.vecnormalize.pkl beside it, as lit-sb3 train writes them for a gradient agent); --render-video records
every episode with gymnasium's RecordVideo (pip install "lit_sb3[video]").
--random-population evaluates random linear or MLP policies on the worker pool and prints the best.
"""


def add_parser(commands: Any) -> None:
    """:param commands: The subparsers of the ``lit-sb3`` parser."""
    parser = commands.add_parser(
        "evaluate",
        help="evaluate a saved model, or a random population on the worker pool",
        description="Evaluate a saved model on a gymnasium environment, or a random population of policies.",
        epilog=EXAMPLES,
        formatter_class=ExampleFormatter,
    )
    parser.add_argument("path", nargs="?", metavar="PATH", help="the saved model (.zip)")
    parser.add_argument("env_id", nargs="?", metavar="ENV_ID", help="gymnasium environment id")
    parser.add_argument(
        "--episodes", type=int, default=None, help="episodes (default 10; per candidate with --random-population: 3)"
    )
    parser.add_argument("--seed", type=seed_value, default=0, help="seed of the episodes (default: %(default)s)")
    parser.add_argument("--render-video", metavar="DIR", default=None, help="record every episode as MP4 in DIR")
    population = parser.add_argument_group(
        "random population", "lit-sb3 evaluate --random-population [ENV_ID] (default ENV_ID: CartPole-v1)"
    )
    population.add_argument(
        "--random-population", action="store_true", help="evaluate random policies instead of a saved model"
    )
    defaults = POPULATION_DEFAULTS
    population.add_argument(
        "--policy", choices=sorted(POPULATION_POLICIES), default=defaults["policy"], help="architecture"
    )
    population.add_argument(
        "--pop-size", type=int, default=defaults["pop_size"], help="number of candidates (default: %(default)s)"
    )
    population.add_argument(
        "--sigma", type=float, default=defaults["sigma"], help="standard deviation of the random weights"
    )
    population.add_argument(
        "--workers", type=int, default=defaults["workers"], help="worker processes (default: %(default)s)"
    )
    population.add_argument(
        "--n-envs",
        type=int,
        default=defaults["n_envs"],
        help="sub-environments per worker (candidates at once; default: %(default)s)",
    )
    population.add_argument(
        "--top", type=int, default=defaults["top"], help="rows of the results table (best candidates first)"
    )
    parser.set_defaults(run=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> None:
    """
    Evaluate a saved model, or a random population with ``--random-population``.

    :param args: Parsed ``evaluate`` arguments.
    """
    if args.random_population:
        if args.env_id is not None:
            raise CliError("--random-population takes one ENV_ID and no model path")
        if args.render_video is not None:
            raise CliError("--render-video records a saved model, not a random population")
        run_random_population(args, args.path or DEFAULT_POPULATION_ENV)
        return
    if args.path is None or args.env_id is None:
        raise CliError("give the saved model and the environment: lit-sb3 evaluate PATH ENV_ID (see --help)")
    for name, default in POPULATION_DEFAULTS.items():
        if getattr(args, name) != default:
            raise CliError(f"--{name.replace('_', '-')} is for --random-population, not a saved model")
    episodes = 10 if args.episodes is None else args.episodes
    if episodes < 1:
        raise CliError("--episodes must be at least 1")
    check_env_id(args.env_id)
    source, policy, obs_rms = load_policy(args.path)
    env = _evaluation_env(args.env_id, args.render_video, episodes)
    try:
        _check_spaces(args.path, args.env_id, policy, env)
        if obs_rms is not None:
            env = VecNormalize(env, training=False, norm_obs=True, norm_reward=False)
            env.obs_rms = obs_rms  # type: ignore[assignment]  # a flat-observation RunningMeanStd
        elif statistics_file(source) is not None:
            env = _load_statistics(source, env)
        env.seed(args.seed)
        try:
            returns, lengths = cast(
                tuple[list[float], list[int]],
                evaluate_policy(policy, env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True),
            )
        except gym.error.DependencyNotInstalled as error:
            raise CliError(f"{args.env_id} cannot render: {' '.join(str(error).split())}") from None
    finally:
        env.close()
    rows = [
        [f"{index}", f"{value:.2f}", f"{length}"]
        for index, (value, length) in enumerate(zip(returns, lengths, strict=True))
    ]
    print_table(["episode", "return", "length"], rows)
    mean, std = float(np.mean(returns)), float(np.std(returns))
    print(f"\n{source} on {args.env_id}: mean return {mean:.2f} +/- {std:.2f} over {episodes} episodes")
    if args.render_video is not None:
        print(f"videos in {args.render_video}")


def load_policy(path: str) -> tuple[pathlib.Path, BasePolicy, RunningMeanStd | None]:
    """
    :param path: A model saved by a lit_sb3 population method or a Stable-Baselines3 algorithm (also one with async
        collection); ``.zip`` may be left out, as Stable-Baselines3's ``load`` allows.
    :return: The file, its policy in evaluation mode, and its saved observation statistics (None without
        normalisation).
    :raises CliError: if the file is missing or not a saved model.
    """
    source = pathlib.Path(path)
    if not source.is_file() and source.suffix != ".zip" and pathlib.Path(f"{path}.zip").is_file():
        source = pathlib.Path(f"{path}.zip")  # appended, as Stable-Baselines3's load does (runs/ppo.v2.zip)
    if not source.is_file():
        raise CliError(f"model file {path!r} {'is a folder' if source.is_dir() else 'does not exist'}")
    try:
        data, params, _ = load_from_zip_file(source, device="cpu")
    except (zipfile.BadZipFile, ValueError, KeyError) as error:
        raise CliError(f"{path} is not a saved model ({' '.join(str(error).split())})") from None
    if data is None or "policy_class" not in data or "policy" not in params:
        raise CliError(f"{path} is not a saved model (no policy in it)")
    policy = _build_policy(data)
    policy.load_state_dict(cast(dict[str, Any], params["policy"]))
    policy.set_training_mode(False)
    return source, policy, data.get("_saved_obs_rms")


def _build_policy(data: dict[str, Any]) -> BasePolicy:
    # As the algorithms' _setup_model build it: the policy needs no algorithm class, so evaluate needs no ALGO.
    policy_class = data["policy_class"]
    parameters = inspect.signature(policy_class).parameters
    arguments = [data["observation_space"], data["action_space"]]
    if "lr_schedule" in parameters:
        arguments.append(ConstantSchedule(0.0))  # only the optimiser reads it, and evaluation does not train
    kwargs = dict(data.get("policy_kwargs", {}))
    if "use_sde" in parameters and "use_sde" not in kwargs:
        kwargs["use_sde"] = data.get("use_sde", False)  # on-policy algorithms pass it besides policy_kwargs
    return policy_class(*arguments, **kwargs)


def statistics_file(model_path: pathlib.Path) -> pathlib.Path | None:
    """
    :param model_path: A saved model, ``PATH.zip``.
    :return: ``PATH.vecnormalize.pkl`` if it exists (the ``VecNormalize`` statistics ``lit-sb3 train`` writes for a
        gradient agent), else None.
    """
    path = model_path.with_suffix(".vecnormalize.pkl")
    return path if path.is_file() else None


def _load_statistics(model_path: pathlib.Path, env: VecEnv) -> VecNormalize:
    path = statistics_file(model_path)
    assert path is not None
    try:
        normalized = VecNormalize.load(str(path), env)
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as error:
        raise CliError(f"{path} is not a saved VecNormalize ({' '.join(str(error).split())})") from None
    except AssertionError as error:  # Stable-Baselines3's check of the spaces
        raise CliError(f"{path} holds the statistics of other observations ({' '.join(str(error).split())})") from None
    normalized.training = False
    normalized.norm_reward = False  # the returns shown are the environment's
    return normalized


def _evaluation_env(env_id: str, video_folder: str | None, episodes: int) -> VecEnv:
    if video_folder is None:
        return make_vec_env(env_id)
    require_module("moviepy", "--render-video", '"lit_sb3[video]"')
    probe = gym.make(env_id)
    render_modes = probe.metadata.get("render_modes", [])
    probe.close()
    if "rgb_array" not in render_modes:
        raise CliError(f"{env_id} does not render frames (render modes: {render_modes or 'none'}): no video possible")
    return make_vec_env(
        env_id,
        env_kwargs={"render_mode": "rgb_array"},
        wrapper_class=gym.wrappers.RecordVideo,  # type: ignore[arg-type]
        wrapper_kwargs={
            "video_folder": video_folder,
            # The vectorised env starts one more episode after the last: leave it out of the videos.
            "episode_trigger": functools.partial(_is_before, episodes),
            "name_prefix": env_id.replace("/", "_"),
            "disable_logger": True,
        },
    )


def _is_before(end: int, episode_index: int) -> bool:
    return episode_index < end


def _check_spaces(path: str, env_id: str, policy: BasePolicy, env: VecEnv) -> None:
    for kind, saved, actual in [
        ("observation", policy.observation_space, env.observation_space),
        ("action", policy.action_space, env.action_space),
    ]:
        if saved != actual:
            raise CliError(f"{path} was trained for {kind} space {saved}, but {env_id} has {actual}")


def run_random_population(args: argparse.Namespace, env_id: str) -> None:
    """
    Evaluate a random population through the worker pool and print a results table.

    :param args: Parsed ``evaluate --random-population`` arguments.
    :param env_id: The environment.
    """
    episodes = 3 if args.episodes is None else args.episodes
    for name, value in [
        ("pop-size", args.pop_size),
        ("episodes", episodes),
        ("workers", args.workers),
        ("n-envs", args.n_envs),
        ("top", args.top),
    ]:
        if value < 1:
            raise CliError(f"--{name} must be at least 1")
    if not (math.isfinite(args.sigma) and args.sigma >= 0):
        raise CliError(f"--sigma must be a finite number of at least 0, got {args.sigma}")
    check_env_id(env_id)
    env = make_vec_env(env_id)
    policy = POPULATION_POLICIES[args.policy](env.observation_space, env.action_space)
    env.close()
    n_params = sum(parameter.numel() for parameter in policy.parameters())
    weights = np.random.default_rng(args.seed).normal(0.0, args.sigma, (args.pop_size, n_params))
    env_fn = functools.partial(make_vec_env, env_id, n_envs=args.n_envs)
    started = time.perf_counter()
    with AsyncEval([env_fn] * args.workers, policy, n_eval_episodes=episodes) as async_eval:
        ready = time.perf_counter()
        async_eval.seed(args.seed)
        async_eval.send_jobs(weights, args.pop_size)
        results = async_eval.get_results()
    finished = time.perf_counter()
    print(format_results(results, args.top))
    steps = sum(int(lengths.sum()) for _, (_, lengths) in results)
    print(
        f"\n{args.pop_size} candidates x {episodes} episodes of {env_id} ({n_params} parameters, "
        f"{args.policy} policy) on {args.workers} workers of {args.n_envs} sub-environments: {steps} steps in "
        f"{finished - ready:.2f} s ({steps / max(finished - ready, 1e-9):,.0f} steps/s); "
        f"pool start {ready - started:.2f} s"
    )


def format_results(results: list[tuple[int, tuple[np.ndarray, np.ndarray]]], top: int) -> str:
    """
    :param results: ``AsyncEval.get_results()``.
    :param top: How many rows to show, best mean return first.
    :return: A text table.
    """
    rows = sorted(results, key=lambda item: -float(np.mean(item[1][0])))[:top]
    lines = [f"{'candidate':>9}  {'mean return':>12}  {'std':>9}  {'mean length':>11}"]
    for index, (returns, lengths) in rows:
        lines.append(f"{index:>9}  {np.mean(returns):>12.2f}  {np.std(returns):>9.2f}  {np.mean(lengths):>11.1f}")
    return "\n".join(lines)
