"""Fitness shaping: the returns of a population turned into the weights its search gradient is estimated with."""

from __future__ import annotations

from typing import Literal

import numpy as np

Ranking = Literal["centered", "linear", "nes", "normalized", "raw"]
#: The shaping methods, by the names EvoTorch's ``ranking_method`` uses.
RANKINGS: tuple[Ranking, ...] = ("centered", "linear", "nes", "normalized", "raw")


def centered_ranks(values: np.ndarray) -> np.ndarray:
    """
    Centred-rank fitness shaping (Salimans et al., 2017): ranks scaled to [-0.5, 0.5], tied values sharing their
    mean rank.

    :param values: One value per candidate (at least two).
    :return: The shaped values, same shape.
    """
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts
    mean_rank = first_rank + (counts - 1) / 2.0
    return mean_rank[inverse] / (len(values) - 1) - 0.5


def nes_utilities(values: np.ndarray) -> np.ndarray:
    """
    The utilities of the natural evolution strategies (Wierstra et al., 2014, eq. 24): the k-th best of ``n``
    candidates (k from 1) gets ``max(0, log(n / 2 + 1) - log(k)) / sum_j max(0, log(n / 2 + 1) - log(j)) - 1 / n``,
    so the better half shares the weight and the utilities sum to zero. Tied values share the mean of the utilities
    of the ranks they hold (the order of the candidates never decides).

    :param values: One value per candidate (at least two).
    :return: The utilities, same shape.
    """
    n = len(values)
    weights = np.maximum(0.0, np.log(n / 2.0 + 1.0) - np.log(np.arange(1, n + 1)))
    by_rank = (weights / weights.sum() - 1.0 / n)[::-1]  # from the worst candidate to the best
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    sums = np.concatenate([[0.0], np.cumsum(by_rank)])
    return ((sums[ends] - sums[ends - counts]) / counts)[inverse]


def unit_scaled(values: np.ndarray) -> tuple[np.ndarray, int]:
    """
    :param values: Finite numbers.
    :return: ``values`` divided by the power of two ``2**exponent`` that brings the largest magnitude into
        [0.5, 1), and ``exponent``: the division is exact (no rounding, unless a value falls below 2**-1022 on the
        way), and sums and squares of the scaled values cannot overflow. What does not depend on the scale of the
        returns is computed on them, and gives the same bits as on the returns themselves.
    """
    _, exponent = np.frexp(np.abs(values).max(initial=0.0))
    return np.ldexp(values, -exponent), int(exponent)


def standard_deviation(values: np.ndarray, ddof: int = 0) -> float:
    """:return: ``numpy.std(values, ddof=ddof)``, taken on :func:`unit_scaled` values: no square overflows."""
    scaled, exponent = unit_scaled(values)
    return float(np.ldexp(np.std(scaled, ddof=ddof), exponent))


def shape_returns(returns: np.ndarray, ranking: Ranking) -> np.ndarray:
    """
    :param returns: One return per candidate (at least two).
    :param ranking: ``"centered"`` (:func:`centered_ranks`), ``"linear"`` (the same ranks in [0, 1]), ``"nes"``
        (:func:`nes_utilities`), ``"normalized"`` (returns standardised to zero mean and a sample standard deviation
        of one, as EvoTorch's) or
        ``"raw"`` (the returns themselves).
    :return: The shaped returns, higher for better candidates.
    """
    if ranking == "centered":
        return centered_ranks(returns)
    if ranking == "linear":
        return centered_ranks(returns) + 0.5
    if ranking == "nes":
        return nes_utilities(returns)
    if ranking == "normalized":
        scaled, _ = unit_scaled(returns)
        std = scaled.std(ddof=1)
        return (scaled - scaled.mean()) / std if std > 0.0 else np.zeros_like(returns)
    return returns.astype(np.float64, copy=True)


def check_ranking(ranking: object) -> Ranking:
    """
    :param ranking: A shaping method's name; ``True`` and ``False`` (pgpelib's ``solution_ranking``) stand for
        ``"centered"`` and ``"raw"``, None (EvoTorch's ``ranking_method=None``) for ``"raw"``.
    :return: The method's name.
    :raises ValueError: for anything else.
    """
    if ranking is True:
        return "centered"
    if ranking is False or ranking is None:
        return "raw"
    if not isinstance(ranking, str) or ranking not in RANKINGS:
        raise ValueError(f"ranking must be one of {', '.join(map(repr, RANKINGS))} (or a bool), got {ranking!r}")
    return ranking
