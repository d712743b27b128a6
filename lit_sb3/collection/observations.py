"""Observations as collection moves them: one array, or one array per key of a ``Dict`` observation space (as
Stable-Baselines3's buffers and ``VecEnv`` s hold them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th

#: A batch (or one) of observations: an array, or a dict of arrays with the same leading length.
Observations = np.ndarray | dict[str, np.ndarray]


def stack(observations: Sequence[Any]) -> Observations:
    """
    :param observations: Observations of one space (arrays, or dicts of arrays).
    :return: Them stacked along a new first axis (key by key for dicts).
    """
    first = observations[0]
    if isinstance(first, dict):
        return {key: np.stack([observation[key] for observation in observations]) for key in first}
    return np.stack(observations)


def concatenate(batches: Sequence[Observations]) -> Observations:
    """
    :param batches: Batches of observations of one space.
    :return: Them concatenated along the first axis (key by key for dicts).
    """
    first = batches[0]
    if isinstance(first, dict):
        return {key: np.concatenate([batch[key] for batch in batches]) for key in first}
    return np.concatenate(batches)  # type: ignore[arg-type]


def select(observations: Observations, where: Any) -> Observations:
    """
    :param observations: A batch of observations.
    :param where: An index, slice or index array of the first axis (``None`` adds an axis of length one).
    :return: ``observations[where]`` (key by key for dicts).
    """
    if isinstance(observations, dict):
        return {key: value[where] for key, value in observations.items()}
    return observations[where]


def as_tensor(observations: Observations) -> th.Tensor | dict[str, th.Tensor]:
    """
    :param observations: A batch of observations, already shaped as the policy's space (on the CPU).
    :return: The same as tensors (key by key for dicts), without ``obs_to_tensor``'s checks and copies.
    """
    if isinstance(observations, dict):
        return {key: th.as_tensor(value) for key, value in observations.items()}
    return th.as_tensor(observations)
