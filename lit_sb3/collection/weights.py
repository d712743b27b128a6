"""Publishing the trainer's acting weights to collection workers: two publications in turn, each stamped with the
version it holds, so a worker never reads one while it is being written."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import torch as th

from lit_sb3.workers.arrays import ArrayHandle, ArrayPublisher


def acting_module(policy: th.nn.Module) -> th.nn.Module:
    """
    :param policy: A Stable-Baselines3 policy.
    :return: The part of it that chooses actions (and values, on-policy): what workers need.
    """
    for name in ("actor", "q_net", "quantile_net"):
        module = getattr(policy, name, None)
        if isinstance(module, th.nn.Module):
            return module
    return policy


def flat_weights(module: th.nn.Module) -> np.ndarray:
    """
    :param module: The module.
    :return: Its parameters, then its floating-point buffers (running statistics, such as the batch normalisation of
        CrossQ's actor), as one float64 vector: the parameters start at 0 as in ``parameters_to_vector``.
    """
    with th.no_grad():
        return th.cat([tensor.detach().reshape(-1).cpu().double() for tensor in _state(module)]).numpy()


def load_flat_weights(module: th.nn.Module, weights: np.ndarray) -> None:
    """
    :param module: The module to load into.
    :param weights: A vector of :func:`flat_weights`.
    """
    vector = th.as_tensor(weights)
    offset = 0
    with th.no_grad():
        for tensor in _state(module):
            tensor.copy_(vector[offset : offset + tensor.numel()].view_as(tensor))
            offset += tensor.numel()


def _state(module: th.nn.Module) -> list[th.Tensor]:
    return [*module.parameters(), *(buffer for buffer in module.buffers() if buffer.is_floating_point())]


class WeightBoard:
    """
    The trainer's side: each version goes out with its number in front, through two publishers of the backend in
    turn (shared memory locally, the object store on Ray), so that what a worker may still be reading is never
    rewritten: :meth:`write` may be called only once every worker acknowledged the previous publication. Workers
    start with ``initial_version`` (the weights of their policy copy).

    :param publishers: The backend's two publishers (e.g. ``backend.array_publisher()`` twice).
    :param min_interval: Seconds between two publications (:meth:`due` says whether the next one may go).
    :param initial_version: The version the workers start with.
    """

    def __init__(
        self, publishers: tuple[ArrayPublisher, ArrayPublisher], min_interval: float, initial_version: int = 0
    ) -> None:
        self._publishers = publishers
        self._next = 0
        self._held: deque[tuple[int, ArrayHandle]] = deque(maxlen=len(publishers))  # (version, handle), oldest first
        self.min_interval = min_interval
        self.version = initial_version
        self.published_at = -np.inf
        self.publications = 0

    @property
    def previous(self) -> tuple[int, ArrayHandle] | None:
        """``(version, handle)`` of the publication before the last one, which the board still holds, or None."""
        return self._held[0] if len(self._held) == self._held.maxlen else None

    def due(self) -> bool:
        """:return: Whether :attr:`min_interval` has passed since the last publication."""
        return time.monotonic() - self.published_at >= self.min_interval

    def write(self, version: int, weights: np.ndarray) -> ArrayHandle:
        """
        Publish a new version through the publisher not used last.

        :param version: Version of the weights.
        :param weights: The weights.
        :return: The handle a worker reads them with (see :func:`read_board`).
        """
        handle = self._publishers[self._next].publish(np.concatenate([[float(version)], weights]))
        self._held.append((version, handle))
        self._next = 1 - self._next
        self.version = version
        self.published_at = time.monotonic()
        self.publications += 1
        return handle

    def close(self) -> None:
        """Release what was published."""
        for publisher in self._publishers:
            publisher.close()


def read_board(board: np.ndarray, version: int) -> np.ndarray | None:
    """
    The worker's side: copy published weights if they are still the version the worker was told about.

    :param board: The opened publication (``[version, weights...]``).
    :param version: The version named in the message.
    :return: The weights, or None if the publication was rewritten meanwhile (a newer message is on its way).
    """
    if board[0] != version:
        return None
    weights = board[1:].copy()
    return weights if board[0] == version else None
