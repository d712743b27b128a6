"""Experiment control: one saved policy over a grid of physics parameters (``set_options``) and seeds (``seed``).

    python examples/experiment_control.py                       # trains a policy first, unless --model is given
    python examples/experiment_control.py --train-timesteps 2000 --gravity 8 12 --mass 1 2 --seeds 0 \\
        --output-dir /tmp/grid                                  # a smoke run

The environment is a pendulum whose ``reset`` reads its gravity and mass from ``options``. lit_sb3's AsyncEval
passes the options of ``set_options`` to every reset from the next round on (sb3-contrib's to the next reset only),
so one call sets a grid cell for all the episodes of a round. ``seed(s)`` before every cell restarts the episode
seeds: each cell sees the same initial states for the same seed (common random numbers), so differences between
cells come from the physics, not from luck. Prints the table of mean returns (over seeds and episodes) and writes
OUTPUT_DIR/grid.csv (gravity by mass), OUTPUT_DIR/heatmap.png and, if it trained one, OUTPUT_DIR/model.zip.
"""

from __future__ import annotations

import argparse
import csv
import pathlib

import numpy as np
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from gymnasium.wrappers import TimeLimit
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

from lit_sb3 import ARS, AsyncEval


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a saved ARS model for this env (default: train one)")
    parser.add_argument("--train-timesteps", type=int, default=300_000, help="env steps to train for without --model")
    parser.add_argument("--gravity", type=float, nargs="+", default=[4.0, 7.0, 10.0, 13.0, 16.0], help="grid rows")
    parser.add_argument("--mass", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.25, 1.5], help="grid columns")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the episodes")
    parser.add_argument("--episodes", type=int, default=4, help="episodes per cell and seed")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--output-dir", default="runs/experiment_control", help="where to write the outputs")
    return parser.parse_args()


class VariablePendulum(PendulumEnv):
    """Pendulum-v1 whose gravity and mass are reset options (10 and 1 when not given)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        options = dict(options or {})
        self.g = float(options.pop("gravity", 10.0))
        self.m = float(options.pop("mass", 1.0))
        return super().reset(seed=seed, options=options or None)


def make_env() -> VecEnv:
    return make_vec_env(lambda: TimeLimit(VariablePendulum(), max_episode_steps=200))


def train(timesteps: int, path: pathlib.Path) -> ARS:
    """A small MLP policy trained on the nominal pendulum (rl-zoo's ARS settings for Pendulum, no normalisation)."""
    model = ARS(
        "MlpPolicy",
        make_env(),
        n_delta=4,
        n_top=1,
        learning_rate=0.018,
        delta_std=0.1,
        zero_policy=False,
        policy_kwargs={"net_arch": [16]},
        seed=0,
    )
    model.learn(timesteps)
    model.save(path)
    return model


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model = ARS.load(args.model) if args.model else train(args.train_timesteps, output_dir / "model")
    weights = model.policy.parameters_to_vector()[None]  # a population of one

    # returns[g, m, s]: mean return of the policy with gravity g and mass m, over the episodes of seed s
    returns = np.zeros((len(args.gravity), len(args.mass), len(args.seeds)))
    with AsyncEval([make_env] * args.workers, model.policy, n_eval_episodes=args.episodes) as async_eval:
        for row, gravity in enumerate(args.gravity):
            for column, mass in enumerate(args.mass):
                async_eval.set_options({"gravity": gravity, "mass": mass})
                for index, seed in enumerate(args.seeds):
                    async_eval.seed(seed)
                    async_eval.send_jobs(weights, pop_size=1)
                    [(_, (episode_returns, _))] = async_eval.get_results()
                    returns[row, column, index] = episode_returns.mean()
    grid = returns.mean(axis=2)

    print("mean return by gravity (rows) and mass (columns), over seeds " + ", ".join(map(str, args.seeds)))
    print("gravity \\ mass " + "".join(f"{mass:>10g}" for mass in args.mass))
    for gravity, values in zip(args.gravity, grid, strict=True):
        print(f"{gravity:>14g} " + "".join(f"{value:>10.1f}" for value in values))
    spread = returns.std(axis=2).max()
    print(f"largest standard deviation across seeds in a cell: {spread:.1f}")

    with (output_dir / "grid.csv").open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["gravity", *[f"mass={mass:g}" for mass in args.mass]])
        for gravity, values in zip(args.gravity, grid, strict=True):
            writer.writerow([gravity, *values.tolist()])
    save_heatmap(grid, args.gravity, args.mass, output_dir / "heatmap.png")


def save_heatmap(grid: np.ndarray, gravity: list[float], mass: list[float], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4.5), layout="constrained")
    image = axes.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    axes.set_xticks(range(len(mass)), [f"{value:g}" for value in mass])
    axes.set_yticks(range(len(gravity)), [f"{value:g}" for value in gravity])
    axes.set_xlabel("mass")
    axes.set_ylabel("gravity")
    axes.set_title("mean return of one policy")
    for (row, column), value in np.ndenumerate(grid):
        axes.text(column, row, f"{value:.0f}", ha="center", va="center", color="white", fontsize=8)
    figure.colorbar(image, label="mean episode return")
    figure.savefig(path, dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    main()
