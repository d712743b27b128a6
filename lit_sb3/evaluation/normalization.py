"""Observation normalisation during evaluation, with ``VecNormalize``'s statistics frozen for a round.

Freezing makes a candidate's normalisation the same on every worker, whatever else the worker evaluated in the
round. The observations the policies act on are collected meanwhile and folded into the running statistics when
the pool asks for them (``get_obs_rms``), so that the statistics still see every observation.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize

#: Most observation rows buffered before they are folded into the pending statistics in one batch.
BUFFER_ROWS = 4096
#: Most bytes one buffer may take (images have large rows).
BUFFER_BYTES = 32 * 2**20


class _Collector:
    """Observations gathered in batches into statistics of their own (count starting at 0)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        row_bytes = 8 * int(np.prod(shape))
        self._buffer = np.empty((max(1, min(BUFFER_ROWS, BUFFER_BYTES // row_bytes)), *shape), np.float64)
        self._buffered = 0
        self.pending = RunningMeanStd(epsilon=0.0, shape=shape)

    def add(self, rows: np.ndarray) -> None:
        if self._buffered + len(rows) > len(self._buffer):
            self._fold()
            if len(rows) > len(self._buffer):
                self.pending.update(np.asarray(rows, np.float64))
                return
        self._buffer[self._buffered : self._buffered + len(rows)] = rows
        self._buffered += len(rows)

    def take(self) -> RunningMeanStd:
        """:return: Statistics of everything added since the last take (count 0 if nothing)."""
        self._fold()
        taken, self.pending = self.pending, RunningMeanStd(epsilon=0.0, shape=self.pending.mean.shape)
        return taken

    def _fold(self) -> None:
        if self._buffered:
            self.pending.update(self._buffer[: self._buffered])
            self._buffered = 0


class ObservationNormalizer:
    """
    Base of the two ways to normalise: see :class:`FrozenNormalizer` and :class:`WrappedNormalizer`.

    :param vec_normalize: The environment's ``VecNormalize``; its ``training`` flag says whether to collect.
    """

    def __init__(self, vec_normalize: VecNormalize) -> None:
        self.vec_normalize = vec_normalize
        self.collect = vec_normalize.training
        obs_rms = vec_normalize.obs_rms
        if isinstance(obs_rms, dict):
            self._collectors = {key: _Collector(rms.mean.shape) for key, rms in obs_rms.items()}
        else:
            self._collectors = {None: _Collector(cast(RunningMeanStd, obs_rms).mean.shape)}

    def freeze(self) -> None:
        """Take the current statistics as the ones to normalise with, until the next call."""

    def normalize(self, observations: Any, slots: list[int]) -> Any:
        """
        :param observations: The observations of every slot, as the slot environment gives them.
        :param slots: The slots whose observations the policy acts on (they are collected).
        :return: The observations to give the policy.
        """
        raise NotImplementedError

    def flush(self) -> None:
        """Fold the collected observations into the ``VecNormalize``'s running statistics."""
        obs_rms: Any = self.vec_normalize.obs_rms
        for key, collector in self._collectors.items():
            new_data = collector.take()
            if new_data.count > 0:
                (obs_rms if key is None else obs_rms[key]).combine(new_data)

    def _collect(self, raw: Any, slots: list[int]) -> None:
        for key, collector in self._collectors.items():
            collector.add((raw if key is None else raw[key])[slots])


class FrozenNormalizer(ObservationNormalizer):
    """
    Normalises Box observations here, as ``VecNormalize`` would, with statistics copied at :meth:`freeze`; the slot
    environment runs below the ``VecNormalize``.

    :param vec_normalize: The outermost ``VecNormalize`` (under ``VecMonitor`` layers at most).
    """

    def __init__(self, vec_normalize: VecNormalize) -> None:
        super().__init__(vec_normalize)
        self.freeze()

    def freeze(self) -> None:
        obs_rms = cast(RunningMeanStd, self.vec_normalize.obs_rms)
        self._mean = obs_rms.mean.copy()
        self._std = np.sqrt(obs_rms.var + self.vec_normalize.epsilon)

    def normalize(self, observations: Any, slots: list[int]) -> Any:
        if self.collect:
            self._collect(observations, slots)
        if not self.vec_normalize.norm_obs:
            return observations
        clip = self.vec_normalize.clip_obs
        return np.clip((observations - self._mean) / self._std, -clip, clip)


class WrappedNormalizer(ObservationNormalizer):
    """
    Leaves normalisation to a ``VecNormalize`` deeper in the environment's wrappers, with its updates turned off
    (its statistics then only change on :meth:`flush`), and collects its original observations.

    :param vec_normalize: The ``VecNormalize`` inside the environment.
    """

    def __init__(self, vec_normalize: VecNormalize) -> None:
        super().__init__(vec_normalize)
        vec_normalize.training = False

    def normalize(self, observations: Any, slots: list[int]) -> Any:
        if self.collect:
            self._collect(self.vec_normalize.get_original_obs(), slots)
        return observations
