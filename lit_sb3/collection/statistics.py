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

    def count(self, packet: EpisodePacket) -> np.ndarray | None:
        """
        Count the episode in the statistics (if they are being trained).

        :param packet: The episode.
        :return: Its rewards normalised as ``VecNormalize`` would, if it trains reward statistics; else None.
        """
        normalize = self.normalize
        if not normalize.training:
            return None
        with self._lock:
            if normalize.norm_obs:
                observations = packet.observations
                if isinstance(observations, dict):
                    assert isinstance(normalize.obs_rms, dict)
                    for key, statistics in normalize.obs_rms.items():
                        statistics.update(observations[key][:-1])
                else:
                    normalize.obs_rms.update(observations[:-1])
            if not normalize.norm_reward:
                return None
            discounted = np.empty(packet.length)
            running = 0.0
            for step, reward in enumerate(packet.rewards):
                running = running * normalize.gamma + float(reward)
                discounted[step] = running
            normalize.ret_rms.update(discounted)
            return normalize.normalize_reward(packet.rewards).astype(np.float32)
