"""The ``lit-sb3`` command."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence

import numpy as np
from stable_baselines3.common.env_util import make_vec_env

from lit_sb3.policies import LinearPolicy, MlpPolicy
from lit_sb3.vec_env.async_eval import AsyncEval

POLICIES = {"linear": LinearPolicy, "mlp": MlpPolicy}


def build_parser() -> argparse.ArgumentParser:
    """:return: The parser of the ``lit-sb3`` command line."""
    parser = argparse.ArgumentParser(prog="lit-sb3", description="Population-based RL on Stable-Baselines3.")
    commands = parser.add_subparsers(dest="command", required=True)
    evaluate = commands.add_parser(
        "evaluate", help="evaluate a random population of policies on a gymnasium environment through the worker pool"
    )
    evaluate.add_argument("--env", default="CartPole-v1", help="gymnasium environment id")
    evaluate.add_argument("--policy", choices=sorted(POLICIES), default="linear", help="policy architecture")
    evaluate.add_argument("--pop-size", type=int, default=32, help="number of candidates")
    evaluate.add_argument("--sigma", type=float, default=1.0, help="standard deviation of the random weights")
    evaluate.add_argument("--episodes", type=int, default=3, help="evaluation episodes per candidate")
    evaluate.add_argument("--workers", type=int, default=2, help="worker processes")
    evaluate.add_argument("--n-envs", type=int, default=1, help="sub-environments per worker (candidates at once)")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the weights and of the episodes")
    evaluate.add_argument("--top", type=int, default=10, help="rows of the results table (best candidates first)")
    evaluate.set_defaults(run=run_evaluate)
    return parser


def run_evaluate(args: argparse.Namespace) -> None:
    """
    Evaluate a random population and print a results table.

    :param args: Parsed ``evaluate`` arguments.
    """
    for name in ("pop_size", "episodes", "workers", "n_envs", "top"):
        if getattr(args, name) < 1:
            raise SystemExit(f"lit-sb3 evaluate: --{name.replace('_', '-')} must be at least 1")
    env = make_vec_env(args.env)
    policy = POLICIES[args.policy](env.observation_space, env.action_space)
    env.close()
    n_params = sum(parameter.numel() for parameter in policy.parameters())
    weights = np.random.default_rng(args.seed).normal(0.0, args.sigma, (args.pop_size, n_params))
    env_fn = functools.partial(make_vec_env, args.env, n_envs=args.n_envs)
    started = time.perf_counter()
    with AsyncEval([env_fn] * args.workers, policy, n_eval_episodes=args.episodes) as async_eval:
        ready = time.perf_counter()
        async_eval.seed(args.seed)
        async_eval.send_jobs(weights, args.pop_size)
        results = async_eval.get_results()
    finished = time.perf_counter()
    print(format_results(results, args.top))
    steps = sum(int(lengths.sum()) for _, (_, lengths) in results)
    print(
        f"\n{args.pop_size} candidates x {args.episodes} episodes of {args.env} ({n_params} parameters, "
        f"{args.policy} policy) on {args.workers} workers: {steps} steps in {finished - ready:.2f} s "
        f"({steps / max(finished - ready, 1e-9):,.0f} steps/s); pool start {ready - started:.2f} s"
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


def main(argv: Sequence[str] | None = None) -> None:
    """
    Entry point of ``lit-sb3``.

    :param argv: Arguments (``sys.argv[1:]`` by default).
    """
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    args.run(args)


if __name__ == "__main__":
    main()
