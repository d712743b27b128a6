"""Observation normalisation during evaluation, with ``VecNormalize``'s statistics frozen for a round.

Freezing makes a candidate's normalisation the same on every worker, whatever else the worker evaluated in the
round. The observations the policies act on are gathered per episode meanwhile: each episode's statistics go back
with its candidate's results (so the main process can add them in candidate order, the same for any number of
workers), and are folded into the worker's running statistics when the pool asks for them (``get_obs_rms``).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3.evaluation.obs_rms import ObsRms

#: Most observation rows buffered per slot before they are folded into the episode's statistics in one batch. Fixed
#: (not shared among the slots), so an episode's statistics never depend on how many slots the worker has.
BUFFER_ROWS = 1024
#: Most bytes one slot's buffer may take (images have large rows).
BUFFER_BYTES = 4 * 2**20


class _EpisodeCollector:
    """Each slot's observations of its running episode, gathered in batches into statistics of their own."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self._shape = shape
        self._rows = max(1, min(BUFFER_ROWS, BUFFER_BYTES // (8 * int(np.prod(shape)))))
        # Allocated for as many slots as the first observations have rows.
        self._pending: list[list[np.ndarray]] = []  # each slot's rows not folded yet
        self._episodes: list[RunningMeanStd] = []

    def add(self, observations: np.ndarray, slots: list[int]) -> None:
        """:param observations: One row per slot (all slots); the rows of ``slots`` are added to their episodes."""
        if len(self._episodes) < len(observations):
            self._pending = [[] for _ in observations]
            self._episodes = [RunningMeanStd(epsilon=0.0, shape=self._shape) for _ in observations]
        for slot in slots:  # a loop over a few slots costs less than fancy indexing
            pending = self._pending[slot]
            pending.append(np.array(observations[slot], np.float64))  # a copy: the slot's row is overwritten
            if len(pending) == self._rows:
                self._fold(slot)

    def take(self, slot: int) -> RunningMeanStd:
        """:return: Statistics of the slot's episode (count 0 if it saw nothing); the slot starts afresh."""
        if slot >= len(self._episodes):
            return RunningMeanStd(epsilon=0.0, shape=self._shape)
        self._fold(slot)
        episode = self._episodes[slot]
        self._episodes[slot] = RunningMeanStd(epsilon=0.0, shape=self._shape)
        return episode

    def _fold(self, slot: int) -> None:
        pending = self._pending[slot]
        if pending:
            self._episodes[slot].update(np.stack(pending))
            pending.clear()


class ObservationNormalizer:
    """
    Base of the two ways to normalise: see :class:`FrozenNormalizer` and :class:`WrappedNormalizer`.

    :param vec_normalize: The environment's ``VecNormalize``; its ``training`` flag says whether to collect.
    """

    def __init__(self, vec_normalize: VecNormalize) -> None:
        self.vec_normalize = vec_normalize
        self.collect = vec_normalize.training
        obs_rms = vec_normalize.obs_rms
        shapes = (
            {key: rms.mean.shape for key, rms in obs_rms.items()}
            if isinstance(obs_rms, dict)
            else {None: cast(RunningMeanStd, obs_rms).mean.shape}
        )
        self._collectors = {key: _EpisodeCollector(shape) for key, shape in shapes.items()}
        # The ended episodes' statistics since the last flush, combined as they come (in no canonical order: results
        # never depend on a worker's full statistics).
        self._unflushed = {key: RunningMeanStd(epsilon=0.0, shape=shape) for key, shape in shapes.items()}

    def freeze(self) -> None:
        """Take the current statistics as the ones to normalise with, until the next call."""

    def normalize(self, observations: Any, slots: list[int]) -> Any:
        """
        :param observations: The observations of every slot, as the slot environment gives them.
        :param slots: The slots whose observations the policy acts on (they are collected).
        :return: The observations to give the policy.
        """
        raise NotImplementedError

    def end_episode(self, slot: int) -> ObsRms | None:
        """
        :param slot: A slot whose episode ended.
        :return: The statistics of the observations its policy acted on (None when not collecting); they are also
            kept for the next :meth:`flush`.
        """
        if not self.collect:
            return None
        taken = {key: collector.take(slot) for key, collector in self._collectors.items()}
        for key, rms in taken.items():
            if rms.count > 0:
                self._unflushed[key].combine(rms)
        return taken[None] if None in taken else cast(dict[str, RunningMeanStd], taken)

    def drop_episode(self, slot: int) -> None:
        """Forget what a slot's stopped (unfinished) episode collected."""
        for collector in self._collectors.values():
            collector.take(slot)

    def flush(self) -> None:
        """Fold the statistics of the episodes ended since the last flush into the ``VecNormalize``'s."""
        obs_rms: Any = self.vec_normalize.obs_rms
        for key, rms in self._unflushed.items():
            if rms.count > 0:
                (obs_rms if key is None else obs_rms[key]).combine(rms)
                self._unflushed[key] = RunningMeanStd(epsilon=0.0, shape=rms.mean.shape)

    def _collect(self, raw: Any, slots: list[int]) -> None:
        for key, collector in self._collectors.items():
            collector.add(raw if key is None else raw[key], slots)


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
        clip = self.vec_normalize.clip_obs
        # VecNormalize's np.clip((obs - mean) / std, -clip, clip), in place: the same numbers, fewer temporaries.
        normalized = np.subtract(observations, self._mean)
        np.divide(normalized, self._std, out=normalized)
        np.maximum(normalized, -clip, out=normalized)
        return np.minimum(normalized, clip, out=normalized)


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
