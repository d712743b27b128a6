"""PPO on CartPole-v1 with asynchronous episode collection: worker processes play episodes while PPO trains.

    python examples/async_ppo_cartpole.py
    python examples/async_ppo_cartpole.py --total-timesteps 512 --n-epochs 1 --output-dir /tmp/ppo   # a smoke run

``get_injected_agent(PPO)`` is Stable-Baselines3's PPO whose rollouts are complete episodes streamed from
``--workers`` processes, each running its share of the ``--n-envs`` environments with its own copy of the policy;
the next rollout is collected while the current one trains, and the weights reach the workers through shared
memory. The hyper-parameters are rl-zoo's for CartPole-v1, with its 32 steps per environment as 256 per rollout:
an ``IndexableMultiEnv`` counts as one environment, as in async-gym-agents. Writes OUTPUT_DIR/progress.csv
(Stable-Baselines3's logger, one row per rollout) and OUTPUT_DIR/model.zip (``PPO.load`` reads it), prints the
profiler report (time spent training and waiting, episodes per worker, buffer use, policy lag) and the return of the
final policy.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure
from stable_baselines3.common.utils import LinearSchedule

from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.envs.multi_env import IndexableMultiEnv


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="CartPole-v1", help="gymnasium environment id")
    parser.add_argument("--total-timesteps", type=int, default=100_000, help="env steps to train for")
    parser.add_argument("--n-envs", type=int, default=8, help="environments, shared out among the workers")
    parser.add_argument("--workers", type=int, default=2, help="collection worker processes")
    parser.add_argument("--n-steps", type=int, default=256, help="steps per rollout, all environments (at least)")
    parser.add_argument("--batch-size", type=int, default=256, help="minibatch size")
    parser.add_argument("--n-epochs", type=int, default=20, help="passes over each rollout")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="initial learning rate, falling to 0")
    parser.add_argument("--clip-range", type=float, default=0.2, help="initial clip range, falling to 0")
    parser.add_argument("--gamma", type=float, default=0.98, help="discount")
    parser.add_argument("--gae-lambda", type=float, default=0.8, help="GAE's lambda")
    parser.add_argument("--max-episodes-in-buffer", type=int, default=8, help="finished episodes buffered at once")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes of the final evaluation")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument(
        "--output-dir", default="runs/async_ppo_cartpole", help="where to write progress.csv and model.zip"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    # One picklable factory per environment: each worker process builds its environments from them.
    env = IndexableMultiEnv([functools.partial(gym.make, args.env_id) for _ in range(args.n_envs)])

    model = get_injected_agent(PPO)(
        "MlpPolicy",
        env,
        use_mp=True,
        n_workers=args.workers,
        max_episodes_in_buffer=args.max_episodes_in_buffer,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=args.n_epochs,
        learning_rate=LinearSchedule(args.learning_rate, 0.0, 1.0),
        clip_range=LinearSchedule(args.clip_range, 0.0, 1.0),
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        ent_coef=0.0,
        seed=args.seed,
    )
    model.set_logger(configure(str(output_dir), ["stdout", "csv"]))
    try:
        model.learn(args.total_timesteps)
        report = model.get_profiler_report()
    finally:
        model.shutdown()  # stops the workers, also after an error or Ctrl-C
    model.save(output_dir / "model")
    print("profiler report:")
    print(json.dumps(report, indent=2, default=float))

    eval_env = make_vec_env(args.env_id)
    eval_env.seed(args.seed + 1000)
    mean_return, std_return = evaluate_policy(model.policy, eval_env, n_eval_episodes=args.eval_episodes)
    print(f"final policy on {args.env_id}: {mean_return:.1f} +/- {std_return:.1f} over {args.eval_episodes} episodes")


if __name__ == "__main__":
    main()
