"""ARS V2-t (observation normalisation, top directions) on HalfCheetah-v5, on local worker processes.

    python examples/ars_halfcheetah.py
    python examples/ars_halfcheetah.py --total-timesteps 1 --n-delta 2 --output-dir /tmp/ars   # a smoke run

The hyper-parameters are those of the ARS paper (Mania, Guy and Recht 2018) for HalfCheetah. Observations are
normalised by a ``VecNormalize`` around the model's environment and every worker's: during a round the workers
normalise with the statistics of the round's start, after it each observation they saw is merged once into the
model's statistics, which are saved with the model. The README's learning benchmark reached a return of 3430 in a
median 2.6M env steps (5 of 5 seeds) with these settings. Needs MuJoCo (``pip install mujoco``). Writes
OUTPUT_DIR/progress.csv and OUTPUT_DIR/model.zip, then prints the return of the final policy over 5 episodes.
"""

from __future__ import annotations

import argparse
import functools
import pathlib

from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3 import ARS, AsyncEval


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="HalfCheetah-v5", help="gymnasium environment id")
    parser.add_argument("--total-timesteps", type=int, default=5_000_000, help="env steps to train for")
    parser.add_argument("--n-delta", type=int, default=32, help="random directions per round")
    parser.add_argument("--n-top", type=int, default=4, help="best directions used in the update")
    parser.add_argument("--learning-rate", type=float, default=0.02, help="step size")
    parser.add_argument("--delta-std", type=float, default=0.03, help="standard deviation of the directions")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument("--output-dir", default="runs/ars_halfcheetah", help="where to write progress.csv, model.zip")
    return parser.parse_args()


def make_env(env_id: str, n_envs: int = 1) -> VecNormalize:
    # Rewards stay raw: candidates are ranked by their returns.
    return VecNormalize(make_vec_env(env_id, n_envs=n_envs), norm_obs=True, norm_reward=False)


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    env_fn = functools.partial(make_env, args.env_id)

    model = ARS(
        "LinearPolicy",
        env_fn(),
        n_delta=args.n_delta,
        n_top=min(args.n_top, args.n_delta),
        learning_rate=args.learning_rate,
        delta_std=args.delta_std,
        seed=args.seed,
    )
    model.set_logger(configure(str(output_dir), ["stdout", "csv"]))
    # Each worker steps 8 candidates' episodes in turn and acts for them in one call: faster, the same results.
    worker_env_fn = functools.partial(make_env, args.env_id, n_envs=8)
    with AsyncEval([worker_env_fn] * args.workers, model.policy) as async_eval:
        model.learn(args.total_timesteps, async_eval=async_eval)
    model.save(output_dir / "model")  # with the observation statistics

    eval_env = make_env(args.env_id)
    eval_env.training = False  # evaluate with the model's statistics, frozen
    model.set_env(eval_env)  # copies the model's statistics into eval_env
    eval_env.seed(args.seed + 1000)
    mean_return, std_return = evaluate_policy(model.policy, eval_env, n_eval_episodes=5)
    print(f"final policy on {args.env_id}: {mean_return:.1f} +/- {std_return:.1f} over 5 episodes")


if __name__ == "__main__":
    main()
