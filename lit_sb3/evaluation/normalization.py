"""Observation normalisation done in the evaluation loop, the way ``VecNormalize`` does it."""

from __future__ import annotations

from typing import cast

import numpy as np
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize

#: Observations collected before they are folded into the running statistics in one batch.
BUFFER_ROWS = 4096


class ObservationNormalizer:
    """
    Normalises observations with the statistics of a ``VecNormalize`` frozen at the start of a round, and collects
    the raw observations into its running statistics (when it is in training mode).

    Freezing makes a candidate's normalisation the same on every worker, whatever else the worker evaluated in the
    round; collecting in batches keeps the per-step cost to one row copy.

    :param vec_normalize: The wrapper whose ``obs_rms``, ``clip_obs``, ``epsilon``, ``norm_obs`` and ``training``
        are used.
    """

    def __init__(self, vec_normalize: VecNormalize) -> None:
        self.vec_normalize = vec_normalize
        shape = vec_normalize.observation_space.shape
        assert shape is not None
        self._buffer = np.empty((BUFFER_ROWS, *shape), np.float64)
        self._buffered = 0
        self.freeze()

    @property
    def _obs_rms(self) -> RunningMeanStd:
        # Box observations: a single RunningMeanStd (Stable-Baselines3 annotates the attribute as a dict).
        return cast(RunningMeanStd, self.vec_normalize.obs_rms)

    def freeze(self) -> None:
        """Take the current statistics as the ones to normalise with."""
        obs_rms = self._obs_rms
        self._mean = obs_rms.mean.copy()
        self._std = np.sqrt(obs_rms.var + self.vec_normalize.epsilon)

    def normalize(self, observations: np.ndarray, slots: list[int]) -> np.ndarray:
        """
        :param observations: Raw observations, one per slot.
        :param slots: The slots whose observations count (they are collected).
        :return: The normalised observations.
        """
        if self.vec_normalize.training:
            self._collect(observations[slots])
        if not self.vec_normalize.norm_obs:
            return observations
        clip = self.vec_normalize.clip_obs
        return np.clip((observations - self._mean) / self._std, -clip, clip)

    def _collect(self, rows: np.ndarray) -> None:
        if self._buffered + len(rows) > BUFFER_ROWS:
            self.flush()
            if len(rows) > BUFFER_ROWS:
                self._obs_rms.update(rows)
                return
        self._buffer[self._buffered : self._buffered + len(rows)] = rows
        self._buffered += len(rows)

    def flush(self) -> None:
        """Fold the collected observations into the running statistics."""
        if self._buffered:
            self._obs_rms.update(self._buffer[: self._buffered])
            self._buffered = 0
