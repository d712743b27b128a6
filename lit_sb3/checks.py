"""Argument checks every layer uses: a clear exception naming the argument and what was expected."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def check_int(name: str, value: Any) -> None:
    """
    :param name: Argument name for the message.
    :param value: The value to check.
    :raises TypeError: if ``value`` is not an int (a bool is not).
    """
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value)!r}")


def _check_number(name: str, value: Any) -> None:
    if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value)!r}")


def check_positive_int(name: str, value: Any) -> None:
    """
    :param name: Argument name for the message.
    :param value: The value to check.
    :raises TypeError: if ``value`` is not an int.
    :raises ValueError: if it is below 1.
    """
    check_int(name, value)
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def check_non_negative_int(name: str, value: Any) -> None:
    """
    :param name: Argument name for the message.
    :param value: The value to check (a count that may be zero, e.g. ``max_restarts``).
    :raises TypeError: if ``value`` is not an int.
    :raises ValueError: if it is negative.
    """
    check_int(name, value)
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value}")


def check_positive_number(name: str, value: Any) -> None:
    """
    :param name: Argument name for the message.
    :param value: The value to check (e.g. a timeout in seconds; infinity is allowed).
    :raises TypeError: if ``value`` is not a real number.
    :raises ValueError: if it is NaN, zero or negative.
    """
    _check_number(name, value)
    if not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value}")


def check_non_negative_number(name: str, value: Any) -> None:
    """
    :param name: Argument name for the message.
    :param value: The value to check (e.g. seconds to wait, where zero means not at all; infinity is allowed).
    :raises TypeError: if ``value`` is not a real number.
    :raises ValueError: if it is NaN or negative.
    """
    _check_number(name, value)
    if not value >= 0:
        raise ValueError(f"{name} must be a non-negative number, got {value}")


def check_finite_number(name: str, value: Any) -> float:
    """
    :param name: Argument name for the message.
    :param value: A real number of either sign (e.g. a reward offset).
    :return: ``value`` as a float.
    :raises TypeError: if ``value`` is not a real number.
    :raises ValueError: if it is NaN or infinite.
    """
    _check_number(name, value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return float(value)


def check_settings(name: str, value: Any) -> dict[str, Any]:
    """
    :param name: Argument name for the message.
    :param value: Keyword settings (e.g. ``cma_options``), or None for none.
    :return: A new dict of the settings.
    :raises TypeError: if ``value`` is neither None nor a mapping with string keys.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(f"{name} must be a dict of settings by name, or None, got {value!r}")
    return dict(value)


def check_unit_interval(name: str, value: Any, *, open_low: bool = False, open_high: bool = False) -> None:
    """
    :param name: Argument name for the message.
    :param value: A fraction or a coefficient in [0, 1].
    :param open_low: Whether 0 is left out of the interval.
    :param open_high: Whether 1 is left out of the interval.
    :raises TypeError: if ``value`` is not a real number.
    :raises ValueError: if it is outside the interval (or NaN).
    """
    _check_number(name, value)
    above_low = value > 0.0 if open_low else value >= 0.0
    below_high = value < 1.0 if open_high else value <= 1.0
    if not (above_low and below_high):
        interval = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")


def check_scale(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """
    :param name: Argument name for the message.
    :param value: A step size, a noise scale or another positive real.
    :param allow_zero: Whether zero is a valid value.
    :return: ``value`` as a float.
    :raises TypeError: if ``value`` is not a real number.
    :raises ValueError: if it is not finite, negative, or zero without ``allow_zero``.
    """
    _check_number(name, value)
    if not (np.isfinite(value) and (value >= 0.0 if allow_zero else value > 0.0)):
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value}")
    return float(value)
