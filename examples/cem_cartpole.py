"""The cross-entropy method on CartPole-v1: a linear policy, candidates evaluated on local worker processes.

    python examples/cem_cartpole.py
    python examples/cem_cartpole.py --total-timesteps 2000 --output-dir /tmp/cem   # a smoke run

Each round samples ``pop_size`` policies from a diagonal Gaussian, keeps the best ``elite_fraction`` of them and
refits the Gaussian to those, plus a little extra noise that keeps the search from collapsing too early. Writes
OUTPUT_DIR/progress.csv (Stable-Baselines3's logger, one row per round) and OUTPUT_DIR/model.zip, then prints the
return of the final policy (the Gaussian's mean) over 10 episodes.
"""

from __future__ import annotations

import argparse
import functools
import pathlib

from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure

from lit_sb3 import CEM, AsyncEval


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="CartPole-v1", help="gymnasium environment id")
    parser.add_argument("--total-timesteps", type=int, default=200_000, help="env steps to train for")
    parser.add_argument("--pop-size", type=int, default=32, help="candidates per round")
    parser.add_argument("--elite-fraction", type=float, default=0.25, help="fraction of candidates refitted to")
    parser.add_argument("--initial-std", type=float, default=0.5, help="initial standard deviation of the weights")
    parser.add_argument("--extra-noise", type=float, default=0.01, help="variance added after each refit")
    parser.add_argument("--n-eval-episodes", type=int, default=3, help="episodes per candidate")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument("--output-dir", default="runs/cem_cartpole", help="where to write progress.csv and model.zip")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    env_fn = functools.partial(make_vec_env, args.env_id)

    model = CEM(
        "LinearPolicy",
        env_fn(),
        pop_size=args.pop_size,
        elite_fraction=args.elite_fraction,
        initial_std=args.initial_std,
        extra_noise=args.extra_noise,
        n_eval_episodes=args.n_eval_episodes,
        seed=args.seed,
    )
    model.set_logger(configure(str(output_dir), ["stdout", "csv"]))
    with AsyncEval([env_fn] * args.workers, model.policy, n_eval_episodes=args.n_eval_episodes) as async_eval:
        model.learn(args.total_timesteps, async_eval=async_eval)
    model.save(output_dir / "model")

    eval_env = env_fn()
    eval_env.seed(args.seed + 1000)
    mean_return, std_return = evaluate_policy(model.policy, eval_env, n_eval_episodes=10)
    print(f"final policy on {args.env_id}: {mean_return:.1f} +/- {std_return:.1f} over 10 episodes")


if __name__ == "__main__":
    main()
