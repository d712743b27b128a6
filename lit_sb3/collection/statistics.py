"""The trainer's ``VecNormalize`` statistics under async collection: each consumed episode counted once, in order."""

from __future__ import annotations

import copy
import threading

import numpy as np
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3.collection.episodes import EpisodePacket, ObservationStatistics


class NormalizationStatistics:
    """
    Keeps a ``VecNormalize``'s running statistics with the episodes the trainer consumes, and hands the workers a
    copy of its observation statistics.

    :param normalize: The trainer's ``VecNormalize``.
    """

    def __init__(self, normalize: VecNormalize) -> None:
        self.normalize = normalize
        self._lock = threading.Lock()

    def observation_statistics(self) -> ObservationStatistics | None:
        """:return: A copy of the observation statistics (per normalised key for Dict observations), if observations
        are normalised."""
        if not self.normalize.norm_obs:
            return None
        with self._lock:
            obs_rms: ObservationStatistics = copy.deepcopy(self.normalize.obs_rms)
        return obs_rms

    def count(self, packet: EpisodePacket, start: int = 0, stop: int | None = None) -> np.ndarray | None:
        """
        Count steps ``start`` to ``stop`` of an episode in the statistics (if they are being trained), as
        ``VecNormalize`` counts them: its running discounted return goes on from the episode's earlier steps.

        :param packet: The episode.
        :param start: Its first step counted now.
        :param stop: The step after the last one counted now (None: the episode's end).
        :return: The rewards of those steps normalised as ``VecNormalize`` would (with its frozen statistics when it
            does not train them), if it normalises rewards; else None.
        """
        normalize = self.normalize
        rows = slice(start, packet.length if stop is None else stop)
        if not normalize.training:
            return (
                normalize.normalize_reward(packet.rewards[rows]).astype(np.float32) if normalize.norm_reward else None
            )
        with self._lock:
            if normalize.norm_obs:
                observations = packet.observations
                if isinstance(observations, dict):
                    assert isinstance(normalize.obs_rms, dict)
                    for key, statistics in normalize.obs_rms.items():
                        statistics.update(observations[key][rows])
                else:
                    normalize.obs_rms.update(observations[rows])
            if not normalize.norm_reward:
                return None
            running, discounted = 0.0, []
            for reward in packet.rewards[: rows.stop]:
                running = running * normalize.gamma + float(reward)
                discounted.append(running)
            normalize.ret_rms.update(np.array(discounted[start:]))
            return normalize.normalize_reward(packet.rewards[rows]).astype(np.float32)
