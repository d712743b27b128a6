"""CMA-ES (through pycma) on Swimmer-v5: a linear policy, candidates evaluated on local worker processes.

    python examples/cmaes_swimmer.py
    python examples/cmaes_swimmer.py --total-timesteps 1 --pop-size 4 --output-dir /tmp/cmaes   # a smoke run

CMA-ES adapts a full covariance matrix over the policy's parameters (16 for Swimmer's linear policy), so it learns
correlations between weights that ARS and ES ignore. ``--separable`` uses the diagonal variant, whose cost grows
linearly with the number of parameters (for large policies). Needs MuJoCo (``pip install mujoco``). Writes
OUTPUT_DIR/progress.csv (Stable-Baselines3's logger, one row per round) and OUTPUT_DIR/model.zip, then prints the
return of the final policy (the distribution's mean) over 5 episodes.
"""

from __future__ import annotations

import argparse
import functools
import pathlib

from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure

from lit_sb3 import CMAES, AsyncEval


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Swimmer-v5", help="gymnasium environment id")
    parser.add_argument("--total-timesteps", type=int, default=1_000_000, help="env steps to train for")
    parser.add_argument("--pop-size", type=int, default=16, help="candidates per round")
    parser.add_argument("--sigma0", type=float, default=0.1, help="initial step size")
    parser.add_argument("--restarts", type=int, default=2, help="IPOP restarts when the strategy stops")
    parser.add_argument("--separable", action="store_true", help="diagonal covariance (CMA_diagonal)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument("--output-dir", default="runs/cmaes_swimmer", help="where to write progress.csv and model.zip")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    env_fn = functools.partial(make_vec_env, args.env_id)
    # Each worker steps 8 candidates' episodes in turn and acts for them in one call: faster, the same results.
    worker_env_fn = functools.partial(make_vec_env, args.env_id, n_envs=8)

    model = CMAES(
        "LinearPolicy",
        env_fn(),
        sigma0=args.sigma0,
        pop_size=args.pop_size,
        restarts=args.restarts,
        cma_options={"CMA_diagonal": True} if args.separable else None,
        zero_policy=True,
        seed=args.seed,
    )
    model.set_logger(configure(str(output_dir), ["stdout", "csv"]))
    with AsyncEval([worker_env_fn] * args.workers, model.policy) as async_eval:
        model.learn(args.total_timesteps, async_eval=async_eval)
    model.save(output_dir / "model")

    eval_env = env_fn()
    eval_env.seed(args.seed + 1000)
    mean_return, std_return = evaluate_policy(model.policy, eval_env, n_eval_episodes=5)
    print(f"final policy on {args.env_id}: {mean_return:.1f} +/- {std_return:.1f} over 5 episodes")


if __name__ == "__main__":
    main()
