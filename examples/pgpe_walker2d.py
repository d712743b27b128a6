"""PGPE with ClipUp on Walker2d-v5, each round growing until its episodes have taken enough env steps.

    python examples/pgpe_walker2d.py
    python examples/pgpe_walker2d.py --total-timesteps 1 --popsize 4 --num-interactions 400 --output-dir /tmp/pgpe
    # a smoke run

The settings are those of the shipped ``pgpe.yml`` entry (``lit-sb3 train pgpe Walker2d-v5``): EvoTorch's MuJoCo
recipe for PGPE with three times its ClipUp speed, which the MuJoCo study found reaches the ARS paper's 4390 with
3 of 3 seeds (18.5M, 25.5M and 36.6M env steps). Walker2d's episodes end when it falls: a round samples batches of
``popsize`` candidates until their episodes have taken ``num_interactions`` env steps (or ``popsize_max``
candidates), so early rounds of short episodes still estimate the gradient from enough experience. The alive bonus
is taken off the reward (``alive_bonus_offset=-1``) so that standing still is not a good solution. Needs MuJoCo
(``pip install mujoco``). Writes OUTPUT_DIR/progress.csv and OUTPUT_DIR/model.zip (with the observation
statistics), then prints the return of the final policy (the centre) over 5 episodes.
"""

from __future__ import annotations

import argparse
import functools
import pathlib

from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3 import PGPE, AsyncEval


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Walker2d-v5", help="gymnasium environment id")
    parser.add_argument("--total-timesteps", type=int, default=40_000_000, help="env steps to train for")
    parser.add_argument("--popsize", type=int, default=100, help="candidates per batch (even: symmetric pairs)")
    parser.add_argument("--num-interactions", type=int, default=75_000, help="env steps a round takes at least")
    parser.add_argument("--popsize-max", type=int, default=800, help="candidates a round takes at most")
    parser.add_argument("--center-learning-rate", type=float, default=0.03375, help="ClipUp's step length")
    parser.add_argument("--max-speed", type=float, default=0.045, help="ClipUp's largest velocity norm")
    parser.add_argument("--radius-init", type=float, default=0.225, help="initial norm of the standard deviations")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument("--output-dir", default="runs/pgpe_walker2d", help="where to write progress.csv, model.zip")
    return parser.parse_args()


def make_env(env_id: str, n_envs: int = 1) -> VecNormalize:
    # Rewards stay raw: candidates are ranked by their returns.
    return VecNormalize(make_vec_env(env_id, n_envs=n_envs), norm_obs=True, norm_reward=False)


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)

    model = PGPE(
        "LinearPolicy",
        make_env(args.env_id),
        popsize=args.popsize,
        num_interactions=args.num_interactions,
        popsize_max=args.popsize_max,
        center_learning_rate=args.center_learning_rate,
        max_speed=args.max_speed,
        radius_init=args.radius_init,
        stdev_learning_rate=0.1,
        stdev_max_change=0.2,
        alive_bonus_offset=-1.0,
        policy_kwargs={"with_bias": True},
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
