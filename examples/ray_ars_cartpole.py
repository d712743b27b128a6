"""ARS on CartPole-v1 with its candidates evaluated by Ray actors (a local Ray instance), checked against local
worker processes.

    python examples/ray_ars_cartpole.py
    python examples/ray_ars_cartpole.py --total-timesteps 2000 --output-dir /tmp/ray_ars   # a smoke run
    python examples/ray_ars_cartpole.py --ray-address auto   # on the Ray cluster this machine belongs to

``AsyncEval(..., backend="ray")`` runs one actor per worker; without ``--ray-address`` it starts a local Ray
instance and shuts it down when closed. Each round's population goes once into Ray's object store, chunks of
candidates go to whichever actor has room, and episode seeds derive from the seed, not from the actor, so the same
run on local worker processes (``--compare-local``, on by default) ends with the same weights, bit for bit. Writes
OUTPUT_DIR/progress.csv (SB3's logger, one row per round) and OUTPUT_DIR/model.zip.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
from typing import Literal

import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure

from lit_sb3 import ARS, AsyncEval


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="CartPole-v1", help="gymnasium environment id")
    parser.add_argument("--total-timesteps", type=int, default=100_000, help="env steps to train for")
    parser.add_argument("--n-delta", type=int, default=8, help="random directions per round")
    parser.add_argument("--workers", type=int, default=2, help="Ray actors (and local processes to compare with)")
    parser.add_argument("--ray-address", default=None, help="a Ray cluster's address (default: a local instance)")
    parser.add_argument(
        "--compare-local", action=argparse.BooleanOptionalAction, default=True, help="rerun on local processes"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument(
        "--output-dir", default="runs/ray_ars_cartpole", help="where to write progress.csv and model.zip"
    )
    return parser.parse_args()


def train(args: argparse.Namespace, backend: Literal["local", "ray"], output_dir: pathlib.Path | None) -> ARS:
    """:return: ARS trained with its candidates on ``backend`` workers."""
    env_fn = functools.partial(make_vec_env, args.env_id)
    model = ARS("LinearPolicy", env_fn(), n_delta=args.n_delta, seed=args.seed)
    if output_dir is not None:
        model.set_logger(configure(str(output_dir), ["stdout", "csv"]))
    ray_address = args.ray_address if backend == "ray" else None
    with AsyncEval([env_fn] * args.workers, model.policy, backend=backend, ray_address=ray_address) as async_eval:
        model.learn(args.total_timesteps, async_eval=async_eval)
    return model


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    model = train(args, "ray", output_dir)
    model.save(output_dir / "model")
    if args.compare_local:
        local = train(args, "local", None)
        same = np.array_equal(model.policy.parameters_to_vector(), local.policy.parameters_to_vector())
        print(f"Ray actors and local processes end with {'the same' if same else 'different'} weights")
    eval_env = make_vec_env(args.env_id)
    eval_env.seed(args.seed + 1000)
    mean_return, std_return = evaluate_policy(model.policy, eval_env, n_eval_episodes=10)
    print(f"final policy on {args.env_id}: {mean_return:.1f} +/- {std_return:.1f} over 10 episodes")


if __name__ == "__main__":
    main()
