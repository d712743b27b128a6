"""Publishing the trainer's acting weights to collection workers: two shared buffers, each stamped with the
version it holds, so a worker never reads a buffer while it is being written."""

from __future__ import annotations

import time

import numpy as np
import torch as th
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from lit_sb3.workers.shared_array import SharedArray, SharedArrayHandle


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
    :return: Its parameters as one float64 vector.
    """
    with th.no_grad():
        return parameters_to_vector(module.parameters()).detach().cpu().double().numpy()


def load_flat_weights(module: th.nn.Module, weights: np.ndarray) -> None:
    """
    :param module: The module to load into.
    :param weights: A vector of :func:`flat_weights`.
    """
    reference = next(module.parameters())
    with th.no_grad():
        vector_to_parameters(th.as_tensor(weights, dtype=reference.dtype), module.parameters())


class WeightBoard:
    """
    The trainer's side: two rows of ``[version, weights...]`` in shared memory. A new version goes into the row
    not read last; :meth:`publish` refuses while a worker may still be reading that row (the caller knows, from the
    workers' acknowledgements, when the previous publication was read by all).

    :param weights: The first weights (version 0).
    :param min_interval: Seconds between two publications (a request within it is refused).
    """

    def __init__(self, weights: np.ndarray, min_interval: float) -> None:
        self.shared = SharedArray((2, 1 + weights.size), np.float64)
        self.shared.array[:, 0] = -1
        self.min_interval = min_interval
        self.version = -1
        self.row = 1
        self.published_at = -np.inf
        self.publications = 0
        self.write(0, weights)

    @property
    def handle(self) -> SharedArrayHandle:
        """What workers open the board with."""
        return self.shared.handle

    def due(self) -> bool:
        """:return: Whether :attr:`min_interval` has passed since the last publication."""
        return time.monotonic() - self.published_at >= self.min_interval

    def write(self, version: int, weights: np.ndarray) -> int:
        """
        Write a new version into the other row (the caller made sure no worker reads it).

        :param version: Version of the weights.
        :param weights: The weights.
        :return: The row written.
        """
        row = 1 - self.row
        board = self.shared.array[row]
        board[0] = -1  # a reader that sees -1 (or another version) knows the row is not what it was told
        board[1:] = weights
        board[0] = version
        self.row, self.version = row, version
        self.published_at = time.monotonic()
        self.publications += 1
        return row

    def close(self) -> None:
        """Free the shared memory."""
        self.shared.close()


def read_board(board: np.ndarray, row: int, version: int) -> np.ndarray | None:
    """
    The worker's side: copy a row if it still holds the version the worker was told about.

    :param board: The opened board.
    :param row: The row named in the message.
    :param version: The version named in the message.
    :return: The weights, or None if the row was rewritten meanwhile (a newer message is on its way).
    """
    if board[row, 0] != version:
        return None
    weights = board[row, 1:].copy()
    return weights if board[row, 0] == version else None
