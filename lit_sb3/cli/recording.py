"""What ``lit-sb3 train`` records: a callback that keeps every round's returns, the live progress bar, the CSV and
the learning-curve plot."""

from __future__ import annotations

import csv
import dataclasses
import pathlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback


@dataclass
class RoundRecord:
    """
    The statistics of one evaluated round (before it is told).

    :param round: Round number, from 1.
    :param env_steps: Environment steps at the end of the round (``model.num_timesteps``).
    :param wall_time_s: Seconds since training started.
    :param mean_return: Mean episode return of the round's candidates.
    :param best_return: Highest mean episode return of a candidate.
    :param worst_return: Lowest mean episode return of a candidate.
    :param return_std: Standard deviation of the candidates' mean returns.
    :param mean_episode_length: Mean episode length.
    :param candidates: Candidates in the round.
    :param episodes: Episodes in the round.
    """

    round: int
    env_steps: int
    wall_time_s: float
    mean_return: float
    best_return: float
    worst_return: float
    return_std: float
    mean_episode_length: float
    candidates: int
    episodes: int


class TrainingRecorder(BaseCallback):
    """
    Collects every episode a population method reports (``on_step`` runs once per episode) and summarises each
    round in :attr:`rounds`; optionally drives a tqdm progress bar of environment steps with the last round's best
    and mean return.

    :param total_timesteps: The training budget (the bar's length).
    :param progress_bar: Whether to show the bar (tqdm; it hides itself when standard error is not a terminal).
    """

    def __init__(self, total_timesteps: int, *, progress_bar: bool = True) -> None:
        super().__init__()
        self.total_timesteps = total_timesteps
        self.show_progress_bar = progress_bar
        self.rounds: list[RoundRecord] = []
        self._episodes: list[tuple[int, float, int]] = []
        self._started = 0.0
        self._counted_steps = 0
        self._bar: Any = None

    def _on_training_start(self) -> None:
        self._started = time.perf_counter()
        self._counted_steps = self.model.num_timesteps
        if self.show_progress_bar:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total_timesteps,
                initial=self.model.num_timesteps,
                unit=" steps",
                unit_scale=True,
                dynamic_ncols=True,
                disable=None,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} env steps [{elapsed}<{remaining}, {rate_fmt}{postfix}]",
            )

    def _on_step(self) -> bool:
        self._episodes.append(
            (
                int(self.locals["candidate_index"]),
                float(self.locals["episode_return"]),
                int(self.locals["episode_length"]),
            )
        )
        if self._bar is not None:
            # The last round completes past the budget: the bar grows with it rather than overflow.
            self._bar.total = max(self._bar.total, self.model.num_timesteps)
            self._bar.update(self.model.num_timesteps - self._counted_steps)
        self._counted_steps = self.model.num_timesteps
        return True

    def _on_rollout_end(self) -> None:
        if not self._episodes:
            return
        candidates = np.array([episode[0] for episode in self._episodes])
        returns = np.array([episode[1] for episode in self._episodes])
        lengths = np.array([episode[2] for episode in self._episodes])
        indices = np.unique(candidates)
        candidate_returns = np.array([returns[candidates == index].mean() for index in indices])
        record = RoundRecord(
            round=len(self.rounds) + 1,
            env_steps=self.model.num_timesteps,
            wall_time_s=time.perf_counter() - self._started,
            mean_return=float(returns.mean()),
            best_return=float(candidate_returns.max()),
            worst_return=float(candidate_returns.min()),
            return_std=float(candidate_returns.std()),
            mean_episode_length=float(lengths.mean()),
            candidates=len(indices),
            episodes=len(returns),
        )
        self.rounds.append(record)
        self._episodes = []
        if self._bar is not None:
            self._bar.set_postfix_str(f"best {record.best_return:.1f}, mean {record.mean_return:.1f}")

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the progress bar (also after an interruption)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def write_rounds_csv(rounds: list[RoundRecord], path: pathlib.Path) -> None:
    """
    :param rounds: The recorded rounds.
    :param path: The CSV file to write, one row per round.
    """
    names = [item.name for item in dataclasses.fields(RoundRecord)]
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=names)
        writer.writeheader()
        for record in rounds:
            writer.writerow(dataclasses.asdict(record))


def plot_learning_curve(rounds: list[RoundRecord], path: pathlib.Path, title: str) -> None:
    """
    Draw the mean and the best candidate return of each round against environment steps.

    :param rounds: The recorded rounds.
    :param path: The PNG file to write.
    :param title: The plot's title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [record.env_steps for record in rounds]
    figure, axes = plt.subplots(figsize=(7, 4), layout="constrained")
    axes.plot(steps, [record.best_return for record in rounds], label="best candidate", marker=".")
    axes.plot(steps, [record.mean_return for record in rounds], label="mean of the round", marker=".")
    axes.fill_between(
        steps,
        [record.worst_return for record in rounds],
        [record.best_return for record in rounds],
        alpha=0.15,
        label="candidates (worst to best)",
    )
    axes.set_xlabel("environment steps")
    axes.set_ylabel("episode return")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.savefig(path, dpi=120)
    plt.close(figure)
