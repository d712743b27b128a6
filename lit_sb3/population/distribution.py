"""Arguments shared by the Gaussian search distributions (PGPE, SNES, XNES), spelt as EvoTorch and pgpelib do."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lit_sb3.checks import check_scale
from lit_sb3.population.base import check_population_size

#: The initial standard deviation of every parameter when neither ``stdev_init`` nor ``radius_init`` is given.
DEFAULT_STDEV_INIT = 0.1


def population_size(popsize: int | None, pop_size: int | None, *, even: bool = False) -> int | None:
    """
    :param popsize: The population size as EvoTorch and pgpelib name it.
    :param pop_size: The same, as the other lit_sb3 methods name it.
    :param even: Whether the population is made of antithetic pairs.
    :return: The one given (checked), or None if neither is.
    :raises ValueError: if both are given, or the size is too small (or odd with ``even``).
    """
    if popsize is not None and pop_size is not None:
        raise ValueError(f"give popsize or pop_size (the same setting), not both: got {popsize} and {pop_size}")
    if popsize is not None:
        check_population_size(popsize, even=even, name="popsize")
        return popsize
    if pop_size is not None:
        check_population_size(pop_size, even=even)
    return pop_size


def check_budget_bound(popsize_max: int | None, pop_size: int) -> None:
    """
    :param popsize_max: The number of candidates at which a round stops growing, or None.
    :param pop_size: The candidates of one batch.
    :raises ValueError: if a single batch is already larger than ``popsize_max``.
    """
    if popsize_max is not None and popsize_max < pop_size:
        raise ValueError(f"popsize_max={popsize_max} is smaller than one batch of popsize={pop_size} candidates")


def check_stdev_init(stdev_init: Any, radius_init: Any) -> None:
    """
    :param stdev_init: The initial standard deviation: a positive number, an array of them, or None.
    :param radius_init: The initial radius (norm of the standard deviation vector), or None.
    :raises TypeError: if a value is not a real number.
    :raises ValueError: if both are given or a value is not positive and finite.
    """
    if stdev_init is not None and radius_init is not None:
        raise ValueError("give stdev_init or radius_init (the same setting, two ways), not both")
    if radius_init is not None:
        check_scale("radius_init", radius_init)
    if stdev_init is not None:
        values = np.asarray(stdev_init)
        if values.dtype.kind not in "iuf":
            raise TypeError(f"stdev_init must be a number or a vector of numbers, got {stdev_init!r}")
        if values.ndim > 1 or not (np.all(np.isfinite(values)) and np.all(values > 0.0)):
            raise ValueError(f"stdev_init must be a finite number > 0 or a vector of them, got {stdev_init!r}")


def initial_stdev(stdev_init: Any, radius_init: float | None, n_params: int) -> np.ndarray:
    """
    :param stdev_init: As :func:`check_stdev_init` checked it (a vector must have one value per parameter).
    :param radius_init: As :func:`check_stdev_init` checked it: every parameter then gets
        ``radius_init / sqrt(n_params)``, so the standard deviation vector has that norm (EvoTorch's ``radius_init``).
    :param n_params: Number of policy parameters.
    :return: The initial standard deviation of every parameter (float64).
    :raises ValueError: if a vector ``stdev_init`` has the wrong length.
    """
    if radius_init is not None:
        return np.full(n_params, radius_init / math.sqrt(n_params))
    if stdev_init is None:
        return np.full(n_params, DEFAULT_STDEV_INIT)
    values = np.asarray(stdev_init, dtype=np.float64)
    if values.ndim == 0:
        return np.full(n_params, float(values))
    if values.shape != (n_params,):
        raise ValueError(f"stdev_init has {len(values)} values but the policy has {n_params} parameters")
    return values.copy()
