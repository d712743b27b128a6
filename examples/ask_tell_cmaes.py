"""Ask/tell with CMA-ES on an objective of your own: tune a linear state-feedback controller of a simulated system.

    python examples/ask_tell_cmaes.py
    python examples/ask_tell_cmaes.py --rounds 3 --output-dir /tmp/ask_tell   # a smoke run

No ``learn()`` and no gymnasium episodes: ``model.ask()`` returns the candidate weight matrix (one flat policy
parameter vector per row), we score every candidate however we like, here with a batched numpy simulation of a
double integrator (position and velocity, the action is a force) under a quadratic cost, and ``model.tell()`` takes
one return per candidate (higher is better, so the negated cost). The environment given to CMAES only defines the
policy's spaces. The best linear controller of this problem is known (the discrete-time LQR gain, from the Riccati
equation), so the example prints how close CMA-ES gets. Writes OUTPUT_DIR/history.csv (round, mean and best cost).
"""

from __future__ import annotations

import argparse
import csv
import pathlib

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from lit_sb3 import CMAES


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40, help="ask/tell rounds")
    parser.add_argument("--pop-size", type=int, default=12, help="candidates per round")
    parser.add_argument("--sigma0", type=float, default=1.0, help="initial step size")
    parser.add_argument("--n-starts", type=int, default=64, help="initial states each candidate is scored on")
    parser.add_argument("--horizon", type=int, default=200, help="simulated steps")
    parser.add_argument("--seed", type=int, default=0, help="seed of the run")
    parser.add_argument("--output-dir", default="runs/ask_tell_cmaes", help="where to write history.csv")
    return parser.parse_args()


DT = 0.05
A = np.array([[1.0, DT], [0.0, 1.0]])  # x' = A x + B u: position and velocity
B = np.array([[0.0], [DT]])
Q = np.eye(2)  # cost per step: x Q x + u R u
R = np.array([[0.1]])


class DoubleIntegrator(gym.Env):
    """The simulated system as a gymnasium environment (CMAES takes the policy's spaces from it)."""

    observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
    action_space = spaces.Box(-50.0, 50.0, shape=(1,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1.0, 1.0, size=2)
        return self.state.astype(np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        cost = self.state @ Q @ self.state + action @ R @ action
        self.state = A @ self.state + B @ action
        return self.state.astype(np.float32), -float(cost), False, False, {}


def batched_costs(gains: np.ndarray, starts: np.ndarray, horizon: int) -> np.ndarray:
    """
    :param gains: Feedback gains ``u = gains @ x``, shape ``(n_candidates, 1, 2)``.
    :param starts: Initial states, shape ``(n_starts, 2)``.
    :param horizon: Steps to simulate.
    :return: The mean cost of each candidate over the initial states.
    """
    states = np.broadcast_to(starts, (len(gains), *starts.shape)).copy()  # (candidates, starts, 2)
    low, high = DoubleIntegrator.action_space.low, DoubleIntegrator.action_space.high
    costs = np.zeros(len(gains))
    for _ in range(horizon):
        actions = np.clip(states @ gains.transpose(0, 2, 1), low, high)  # (candidates, starts, 1)
        costs += np.einsum("csi,ij,csj->c", states, Q, states) + np.einsum("csi,ij,csj->c", actions, R, actions)
        states = states @ A.T + actions @ B.T
    return np.minimum(costs / len(starts), 1e12)  # unstable gains: a large, finite cost


def lqr_gain(horizon: int) -> np.ndarray:
    """The optimal linear feedback of the infinite-horizon problem, by iterating the Riccati equation."""
    p = Q.copy()
    for _ in range(10 * horizon):
        k = np.linalg.solve(R + B.T @ p @ B, B.T @ p @ A)
        p = Q + A.T @ p @ (A - B @ k)
    return -k


def main() -> None:
    args = parse_args()
    output_dir = pathlib.Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    starts = np.random.default_rng(args.seed).uniform(-1.0, 1.0, size=(args.n_starts, 2))

    model = CMAES(
        "LinearPolicy",
        DoubleIntegrator(),
        sigma0=args.sigma0,
        pop_size=args.pop_size,
        zero_policy=True,
        policy_kwargs={"with_bias": False},  # the flat vector is then the action matrix, row by row
        seed=args.seed,
    )
    history = []
    for round_index in range(1, args.rounds + 1):
        candidate_weights = model.ask()  # (pop_size, 2)
        costs = batched_costs(candidate_weights.astype(np.float64).reshape(-1, 1, 2), starts, args.horizon)
        model.tell(-costs)  # the policy now holds the new mean
        history.append((round_index, float(np.mean(costs)), float(np.min(costs))))
        if round_index % 10 == 0 or round_index == args.rounds:
            print(f"round {round_index:3d}: mean cost {history[-1][1]:12.3f}, best {history[-1][2]:10.3f}")

    with (output_dir / "history.csv").open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["round", "mean_cost", "best_cost"])
        writer.writerows(history)
    final_gain = model.policy.parameters_to_vector().astype(np.float64).reshape(1, 2)
    final_cost = batched_costs(final_gain[None], starts, args.horizon)[0]
    optimum = batched_costs(lqr_gain(args.horizon)[None], starts, args.horizon)[0]
    print(f"CMA-ES mean gain {final_gain.ravel().round(3)}: cost {final_cost:.3f}")
    print(f"LQR gain         {lqr_gain(args.horizon).ravel().round(3)}: cost {optimum:.3f}")


if __name__ == "__main__":
    main()
