"""OpenAI-ES on Pendulum-v1: an MLP policy, candidates evaluated on local worker processes through AsyncEval.

    python examples/es_pendulum.py
    python examples/es_pendulum.py --total-timesteps 2000 --output-dir /tmp/es   # a smoke run

Writes OUTPUT_DIR/progress.csv (Stable-Baselines3's logger, one row per round) and OUTPUT_DIR/model.zip, then
prints the return of the final policy (the centre of the search distribution) over 10 episodes.
"""

from __future__ import annotations

import argparse
import functools
import pathlib

from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure

from lit_sb3 import ES, AsyncEval


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Pendulum-v1", help="gymnasium environment id")
    parser.add_argument("--total-timesteps", type=int, default=1_000_000, help="env steps to train for")
    parser.add_argument("--pop-size", type=int, default=32, help="candidates per round (antithetic pairs)")
    parser.add_argument("--sigma", type=float, default=0.1, help="standard deviation of the perturbations")
    parser.add_argument("--learning-rate", type=float, default=0.03, help="Adam step size")
    parser.add_argument("--net-arch", type=int, nargs="*", default=[32], help="hidden layer sizes")
    parser.add_argument("--n-eval-episodes", type=int, default=2, help="episodes per candidate")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument("--output-dir", default="runs/es_pendulum", help="where to write progress.csv and model.zip")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    env_fn = functools.partial(make_vec_env, args.env_id)

    model = ES(
        "MlpPolicy",
        env_fn(),
        pop_size=args.pop_size,
        sigma=args.sigma,
        learning_rate=args.learning_rate,
        n_eval_episodes=args.n_eval_episodes,
        policy_kwargs={"net_arch": args.net_arch},
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
