"""What ``lit-sb3 train`` records: callbacks that keep every round's (population methods) or every episode's
(gradient agents) returns and drive the live progress bar, the CSV and the learning-curve plot."""

from __future__ import annotations

import csv
import dataclasses
import pathlib
import time
from collections.abc import Sequence
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


@dataclass
class EpisodeRecord:
    """
    One finished episode of a gradient agent.

    :param episode: Episode number, from 1, in the order the agent consumed them.
    :param env_steps: Environment steps when the agent consumed it (``model.num_timesteps``).
    :param wall_time_s: Seconds since training started.
    :param episode_return: Its return (the environment's reward, before any normalisation).
    :param episode_length: Its length in steps.
    """

    episode: int
    env_steps: int
    wall_time_s: float
    episode_return: float
    episode_length: int


class ProgressRecorder(BaseCallback):
    """
    A callback that drives a tqdm progress bar of environment steps (with a postfix of returns set by subclasses)
    and knows how long training has run; subclasses keep :attr:`records` and write them as CSV and a plot.

    :param total_timesteps: The training budget (the bar's length).
    :param progress_bar: Whether to show the bar (tqdm; it hides itself when standard error is not a terminal).
    """

    def __init__(self, total_timesteps: int, *, progress_bar: bool = True) -> None:
        super().__init__()
        self.total_timesteps = total_timesteps
        self.show_progress_bar = progress_bar
        self._started = 0.0
        self._finished: float | None = None
        self._counted_steps = 0
        self._bar: Any = None

    #: What one record is, plural (the CSV's label in the summary).
    unit = "records"

    @property
    def records(self) -> Sequence[RoundRecord] | Sequence[EpisodeRecord]:
        """The records, in order."""
        raise NotImplementedError

    @property
    def elapsed_s(self) -> float:
        """Seconds since training started."""
        return time.perf_counter() - self._started

    @property
    def wall_time_s(self) -> float:
        """Seconds training took (until now if it is still running)."""
        return (self._finished if self._finished is not None else time.perf_counter()) - self._started

    def write_csv(self, path: pathlib.Path) -> None:
        """:param path: The CSV file to write, one row per record."""
        raise NotImplementedError

    def plot(self, path: pathlib.Path, title: str) -> None:
        """
        :param path: The PNG file of the learning curve.
        :param title: Its title.
        """
        raise NotImplementedError

    def summary_rows(self) -> list[list[str]]:
        """:return: Rows (label, value) of the summary table about the records."""
        raise NotImplementedError

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

    def _advance_bar(self) -> None:
        if self._bar is not None:
            # The last round or rollout completes past the budget: the bar grows with it rather than overflow.
            self._bar.total = max(self._bar.total, self.model.num_timesteps)
            self._bar.update(self.model.num_timesteps - self._counted_steps)
        self._counted_steps = self.model.num_timesteps

    def _set_postfix(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def _on_step(self) -> bool:
        self._advance_bar()
        return True

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the clock and close the progress bar (also after an interruption)."""
        if self._finished is None:
            self._finished = time.perf_counter()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class TrainingRecorder(ProgressRecorder):
    """
    Collects every episode a population method reports (``on_step`` runs once per episode) and summarises each
    round in :attr:`rounds`; the progress bar shows the last round's best and mean return.

    :param total_timesteps: The training budget (the bar's length).
    :param progress_bar: Whether to show the bar (tqdm; it hides itself when standard error is not a terminal).
    """

    def __init__(self, total_timesteps: int, *, progress_bar: bool = True) -> None:
        super().__init__(total_timesteps, progress_bar=progress_bar)
        self.rounds: list[RoundRecord] = []
        self._episodes: list[tuple[int, float, int]] = []

    def _on_step(self) -> bool:
        self._episodes.append(
            (
                int(self.locals["candidate_index"]),
                float(self.locals["episode_return"]),
                int(self.locals["episode_length"]),
            )
        )
        self._advance_bar()
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
            wall_time_s=self.elapsed_s,
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
        self._set_postfix(f"best {record.best_return:.1f}, mean {record.mean_return:.1f}")

    unit = "rounds"

    @property
    def records(self) -> list[RoundRecord]:
        """The recorded rounds."""
        return self.rounds

    def write_csv(self, path: pathlib.Path) -> None:
        """:param path: The CSV file to write, one row per round."""
        write_records_csv(self.rounds, RoundRecord, path)

    def plot(self, path: pathlib.Path, title: str) -> None:
        """
        :param path: The PNG file: mean and best candidate return of each round against env steps.
        :param title: Its title.
        """
        plot_learning_curve(self.rounds, path, title)

    def summary_rows(self) -> list[list[str]]:
        """:return: Rounds, the last round's mean and best return, the best round."""
        rows = [["rounds", f"{len(self.rounds)}"]]
        if self.rounds:
            last, best = self.rounds[-1], max(self.rounds, key=lambda record: record.mean_return)
            rows += [
                ["last round: mean / best return", f"{last.mean_return:.2f} / {last.best_return:.2f}"],
                ["best round mean return", f"{best.mean_return:.2f} (round {best.round})"],
            ]
        return rows


class EpisodeRecorder(ProgressRecorder):
    """
    Keeps every episode a gradient agent finishes (read from the ``infos`` of each step, as
    ``model.ep_info_buffer`` is filled) in :attr:`episodes`; the progress bar shows the mean return of the recent
    episodes in ``model.ep_info_buffer`` (the last 100 by default, as Stable-Baselines3 logs ``ep_rew_mean``).

    :param total_timesteps: The training budget (the bar's length).
    :param progress_bar: Whether to show the bar (tqdm; it hides itself when standard error is not a terminal).
    """

    def __init__(self, total_timesteps: int, *, progress_bar: bool = True) -> None:
        super().__init__(total_timesteps, progress_bar=progress_bar)
        self.episodes: list[EpisodeRecord] = []

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
            if done and "episode" in info:
                self.episodes.append(
                    EpisodeRecord(
                        episode=len(self.episodes) + 1,
                        env_steps=self.model.num_timesteps,
                        wall_time_s=self.elapsed_s,
                        episode_return=float(info["episode"]["r"]),
                        episode_length=int(info["episode"]["l"]),
                    )
                )
        self._advance_bar()
        return True

    def _on_rollout_end(self) -> None:
        recent = self.model.ep_info_buffer
        if recent:
            self._set_postfix(f"mean return {np.mean([info['r'] for info in recent]):.1f} ({len(recent)} episodes)")

    unit = "episodes"

    @property
    def records(self) -> list[EpisodeRecord]:
        """The recorded episodes."""
        return self.episodes

    @property
    def window(self) -> int:
        """Episodes in the recent mean: those ``model.ep_info_buffer`` keeps (``stats_window_size``)."""
        recent = self.model.ep_info_buffer if self.model is not None else None
        return recent.maxlen if recent is not None and recent.maxlen else 100

    def write_csv(self, path: pathlib.Path) -> None:
        """:param path: The CSV file to write, one row per episode."""
        write_records_csv(self.episodes, EpisodeRecord, path)

    def plot(self, path: pathlib.Path, title: str) -> None:
        """
        :param path: The PNG file: every episode's return and the recent mean against env steps.
        :param title: Its title.
        """
        plot_episode_curve(self.episodes, path, title, window=self.window)

    def summary_rows(self) -> list[list[str]]:
        """:return: Episodes, the mean return of the recent ones, the best one."""
        rows = [["episodes", f"{len(self.episodes)}"]]
        if self.episodes:
            recent = [record.episode_return for record in self.episodes[-self.window :]]
            best = max(self.episodes, key=lambda record: record.episode_return)
            rows += [
                [f"mean return, last {len(recent)} episodes", f"{np.mean(recent):.2f}"],
                ["best episode return", f"{best.episode_return:.2f} (episode {best.episode})"],
            ]
        return rows


def write_records_csv(
    records: Sequence[RoundRecord] | Sequence[EpisodeRecord], record_class: type, path: pathlib.Path
) -> None:
    """
    :param records: The recorded rounds or episodes.
    :param record_class: Their class (:class:`RoundRecord` or :class:`EpisodeRecord`): its fields are the columns.
    :param path: The CSV file to write, one row per record.
    """
    names = [item.name for item in dataclasses.fields(record_class)]
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=names)
        writer.writeheader()
        for record in records:
            writer.writerow(dataclasses.asdict(record))


def plot_learning_curve(rounds: list[RoundRecord], path: pathlib.Path, title: str) -> None:
    """
    Draw the mean and the best candidate return of each round against environment steps.

    :param rounds: The recorded rounds.
    :param path: The PNG file to write.
    :param title: The plot's title.
    """
    plt, figure, axes = _figure()
    steps = [record.env_steps for record in rounds]
    axes.plot(steps, [record.best_return for record in rounds], label="best candidate", marker=".")
    axes.plot(steps, [record.mean_return for record in rounds], label="mean of the round", marker=".")
    axes.fill_between(
        steps,
        [record.worst_return for record in rounds],
        [record.best_return for record in rounds],
        alpha=0.15,
        label="candidates (worst to best)",
    )
    _save_figure(plt, figure, axes, path, title)


def plot_episode_curve(episodes: list[EpisodeRecord], path: pathlib.Path, title: str, *, window: int = 100) -> None:
    """
    Draw every episode's return, and the mean of the last ``window`` episodes, against environment steps.

    :param episodes: The recorded episodes.
    :param path: The PNG file to write.
    :param title: The plot's title.
    :param window: Episodes in the running mean (Stable-Baselines3's ``stats_window_size``).
    """
    plt, figure, axes = _figure()
    steps = [record.env_steps for record in episodes]
    returns = np.array([record.episode_return for record in episodes])
    cumulative = np.concatenate([[0.0], np.cumsum(returns)])
    ends = np.arange(1, len(returns) + 1)
    starts = np.maximum(ends - window, 0)
    axes.scatter(steps, returns, s=6, alpha=0.3, label="episode")
    axes.plot(steps, (cumulative[ends] - cumulative[starts]) / (ends - starts), label=f"mean of the last {window}")
    _save_figure(plt, figure, axes, path, title)


def _figure() -> tuple[Any, Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), layout="constrained")
    return plt, figure, axes


def _save_figure(plt: Any, figure: Any, axes: Any, path: pathlib.Path, title: str) -> None:
    axes.set_xlabel("environment steps")
    axes.set_ylabel("episode return")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.savefig(path, dpi=120)
    plt.close(figure)
