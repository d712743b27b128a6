"""Argument checks shared by the evaluation side and the optimisers: a clear exception naming the argument."""

from __future__ import annotations

from typing import Any

import numpy as np


def check_positive_int(name: str, value: Any) -> None:
    """
    :param name: Argument name for the message.
    :param value: The value to check.
    :raises TypeError: if ``value`` is not an int.
    :raises ValueError: if it is below 1.
    """
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value)!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def check_scale(name: str, value: float, *, allow_zero: bool = False) -> float:
    """
    :param name: Argument name for the message.
    :param value: A step size, a noise scale or another positive real.
    :param allow_zero: Whether zero is a valid value.
    :return: ``value`` as a float.
    :raises ValueError: if it is not finite, negative, or zero without ``allow_zero``.
    """
    if not (np.isfinite(value) and (value >= 0.0 if allow_zero else value > 0.0)):
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value}")
    return float(value)
