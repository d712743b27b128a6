"""The engine's configuration: how long to train, how fresh the data must be, when to evaluate and checkpoint."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lit_sb3.checks import (
    check_finite_number,
    check_non_negative_int,
    check_positive_int,
)

#: SB3 logger outputs the engine can write.
LOG_FORMATS = frozenset({"stdout", "log", "csv", "json", "tensorboard"})


@dataclass(frozen=True)
class EngineConfig:
    """
    What an engine run does (the typed counterpart of the reference's ``MainConfig``).

    :param total_env_steps: Stop once this many environment steps were trained on (exactly one of it and
        ``train_epochs``).
    :param train_epochs: Stop after this many train steps.
    :param batch_size: Minibatch size of a train step; None keeps the algorithm's.
    :param max_policy_lag: Largest allowed policy lag, in train steps: episodes begun by weights older than this
        when they are assembled are dropped (counted); an on-policy rollout then waits for one more train step.
        None for no bound.
    :param replay_ratio: Off-policy: gradient steps per environment step; None takes the algorithm's, as ``learn()``
        trains: ``gradient_steps / (train_freq * n_envs)``, 1 for ``gradient_steps=-1``.
    :param weight_sync_interval: Least seconds between two weight publications to the workers.
    :param eval_interval: Evaluate every this many environment steps (on separate environments, while training
        goes on); None never evaluates.
    :param eval_episodes: Episodes of an evaluation.
    :param checkpoint_interval: Save a checkpoint every this many train steps; None saves none.
    :param checkpoint_folder: Where checkpoints go (needed with ``checkpoint_interval``).
    :param seed: Seed of the episodes' resets and the workers' random draws; None draws one.
    :param log_folder: Folder of the SB3 logger's files (csv, TensorBoard); None writes files nowhere.
    :param log_formats: SB3 logger outputs (``stdout``, ``log``, ``csv``, ``json``, ``tensorboard``); the
        file formats need ``log_folder``.
    :param log_interval: Dump the logger every this many train steps.
    :param verbose: Print the timing summary at the end of :meth:`run`.
    """

    total_env_steps: int | None = None
    train_epochs: int | None = None
    batch_size: int | None = None
    max_policy_lag: int | None = 4
    replay_ratio: float | None = None
    weight_sync_interval: float = 0.0
    eval_interval: int | None = None
    eval_episodes: int = 10
    checkpoint_interval: int | None = None
    checkpoint_folder: str | Path | None = None
    seed: int | None = None
    log_folder: str | Path | None = None
    log_formats: tuple[str, ...] = ("stdout",)
    log_interval: int = 1
    verbose: bool = True

    def __post_init__(self) -> None:
        if (self.total_env_steps is None) == (self.train_epochs is None):
            raise ValueError("give exactly one of total_env_steps and train_epochs")
        for name in ("total_env_steps", "train_epochs", "batch_size", "eval_interval", "checkpoint_interval"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        check_positive_int("eval_episodes", self.eval_episodes)
        check_positive_int("log_interval", self.log_interval)
        if self.max_policy_lag is not None:
            check_non_negative_int("max_policy_lag", self.max_policy_lag)
        if self.replay_ratio is not None and check_finite_number("replay_ratio", self.replay_ratio) <= 0:
            raise ValueError(f"replay_ratio must be a positive number, got {self.replay_ratio}")
        if check_finite_number("weight_sync_interval", self.weight_sync_interval) < 0:
            raise ValueError(f"weight_sync_interval must be a non-negative number, got {self.weight_sync_interval}")
        for name in ("checkpoint_folder", "log_folder"):
            folder = getattr(self, name)
            if folder is not None and not isinstance(folder, str | os.PathLike):
                raise TypeError(f"{name} must be a path (str or os.PathLike) or None, got {folder!r}")
        if not isinstance(self.verbose, int):
            raise TypeError(f"verbose must be a bool (or an int, as Stable-Baselines3's), got {self.verbose!r}")
        if self.checkpoint_interval is not None and self.checkpoint_folder is None:
            raise ValueError("checkpoint_interval needs a checkpoint_folder")
        if self.seed is not None:
            check_non_negative_int("seed", self.seed)
        if not isinstance(self.log_formats, tuple | list) or not LOG_FORMATS.issuperset(self.log_formats):
            raise ValueError(f"log_formats must be a tuple of {sorted(LOG_FORMATS)}, got {self.log_formats!r}")
        if self.log_folder is None and set(self.log_formats) - {"stdout"}:
            raise ValueError(f"log_formats {self.log_formats!r} write files: give a log_folder")
