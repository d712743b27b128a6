"""PPO on CartPole-v1 with AsyncRLEngine: rollout, dataset, train, weight-sync and evaluation threads.

    python examples/engine_ppo_cartpole.py
    python examples/engine_ppo_cartpole.py --total-env-steps 2000 --output-dir /tmp/engine   # a smoke run
    python examples/engine_ppo_cartpole.py --resume runs/engine_ppo_cartpole/checkpoints/train_step_50

The engine trains Stable-Baselines3's PPO while ``--workers`` processes collect whole episodes of the ``--n-envs``
environments with weights at most ``--max-policy-lag`` train steps old; every ``--eval-interval`` env steps the
newest weights play ``--eval-episodes`` episodes on separate environments, and every ``--checkpoint-interval`` train
steps a checkpoint (the algorithm, the engine's counters) goes to OUTPUT_DIR/checkpoints/train_step_N.
``--resume`` continues from one. Writes OUTPUT_DIR/progress.csv (SB3's logger: train, timing and eval rows),
OUTPUT_DIR/evaluations.json, OUTPUT_DIR/summary.json (the timing summary) and OUTPUT_DIR/model.zip (``PPO.load``
reads it).
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib

import gymnasium as gym
from stable_baselines3 import PPO

from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="CartPole-v1", help="gymnasium environment id")
    parser.add_argument("--total-env-steps", type=int, default=100_000, help="env steps to train on")
    parser.add_argument("--n-envs", type=int, default=8, help="environments, shared out among the workers")
    parser.add_argument("--workers", type=int, default=2, help="collection worker processes")
    parser.add_argument("--n-steps", type=int, default=32, help="steps per environment and rollout (at least)")
    parser.add_argument("--batch-size", type=int, default=256, help="minibatch size")
    parser.add_argument("--n-epochs", type=int, default=20, help="passes over each rollout")
    parser.add_argument("--gamma", type=float, default=0.98, help="discount")
    parser.add_argument("--gae-lambda", type=float, default=0.8, help="GAE's lambda")
    parser.add_argument("--max-policy-lag", type=int, default=4, help="oldest weights (train steps) an episode may use")
    parser.add_argument("--eval-interval", type=int, default=20_000, help="env steps between two evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes of an evaluation")
    parser.add_argument("--checkpoint-interval", type=int, default=50, help="train steps between two checkpoints")
    parser.add_argument("--resume", default=None, help="a checkpoint folder to continue from")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument("--output-dir", default="runs/engine_ppo_cartpole", help="where to write the outputs")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    env_fn = functools.partial(gym.make, args.env_id)
    env_group = EnvGroup([env_fn] * args.n_envs, backend="processes", n_workers=args.workers, eval_env_fn=env_fn)
    model = PPO(
        "MlpPolicy",
        env_group.env,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=args.n_epochs,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        ent_coef=0.0,
        seed=args.seed,
    )
    config = EngineConfig(
        total_env_steps=args.total_env_steps,
        max_policy_lag=args.max_policy_lag,
        eval_interval=args.eval_interval,
        eval_episodes=args.eval_episodes,
        checkpoint_interval=args.checkpoint_interval,
        checkpoint_folder=output_dir / "checkpoints",
        seed=args.seed,
        log_folder=output_dir,
        log_formats=("stdout", "csv"),
    )
    engine = AsyncRLEngine(config, env_group, PolicyGroup(model), DataBuffer.for_algorithm(model))
    if args.resume is not None:
        engine.load_checkpoint(args.resume)
    summary = engine.run()  # stops every thread and worker before it returns, also on an error or Ctrl-C
    model.save(output_dir / "model")
    (output_dir / "evaluations.json").write_text(json.dumps(engine.evaluations, indent=1))
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    for evaluation in engine.evaluations:
        print(
            f"evaluation at {evaluation['env_steps']:,} env steps (train step {evaluation['train_steps']}): "
            f"{evaluation['mean_return']:.1f} +/- {evaluation['std_return']:.1f}"
        )
    checkpoints = sorted((output_dir / "checkpoints").glob("train_step_*"), key=lambda path: int(path.name[11:]))
    print(f"checkpoints: {', '.join(path.name for path in checkpoints) or 'none'}")


if __name__ == "__main__":
    main()
