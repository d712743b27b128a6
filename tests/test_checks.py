"""The shared argument checks: the exception type and a message naming the argument."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lit_sb3.checks import (
    check_finite_number,
    check_non_negative_int,
    check_non_negative_number,
    check_positive_int,
    check_positive_number,
    check_scale,
    check_settings,
    check_unit_interval,
)

open_fraction = functools.partial(check_unit_interval, open_low=True, open_high=True)

ACCEPTED: list[tuple[Callable[[str, Any], None], Any]] = [
    (check_positive_int, 1),
    (check_positive_int, np.int64(3)),
    (check_non_negative_int, 0),
    (check_non_negative_int, np.int32(2)),
    (check_positive_number, 0.5),
    (check_positive_number, 2),
    (check_positive_number, math.inf),
    (check_non_negative_number, 0),
    (check_non_negative_number, np.float32(0.25)),
    (check_non_negative_number, math.inf),
    (check_unit_interval, 0),
    (check_unit_interval, np.float32(1.0)),
    (open_fraction, 0.5),
    (check_scale, np.float16(0.1)),
    (check_finite_number, -5),
    (check_settings, {"popsize": 4}),
    (check_settings, None),
]

REFUSED: list[tuple[Callable[[str, Any], None], Any, type[Exception], str]] = [
    (check_positive_int, 0, ValueError, "x must be at least 1, got 0"),
    (check_positive_int, 1.0, TypeError, "x must be an int"),
    (check_positive_int, True, TypeError, "x must be an int"),
    (check_non_negative_int, -1, ValueError, "x must be a non-negative int, got -1"),
    (check_non_negative_int, "3", TypeError, "x must be an int"),
    (check_non_negative_int, False, TypeError, "x must be an int"),
    (check_positive_number, 0.0, ValueError, "x must be a positive number, got 0.0"),
    (check_positive_number, -2, ValueError, "x must be a positive number"),
    (check_positive_number, math.nan, ValueError, "x must be a positive number, got nan"),
    (check_positive_number, "5", TypeError, "x must be a number"),
    (check_positive_number, True, TypeError, "x must be a number"),
    (check_non_negative_number, -0.5, ValueError, "x must be a non-negative number, got -0.5"),
    (check_non_negative_number, math.nan, ValueError, "x must be a non-negative number"),
    (check_non_negative_number, None, TypeError, "x must be a number"),
    (check_unit_interval, 1.5, ValueError, r"x must be in \[0, 1\], got 1.5"),
    (check_unit_interval, math.nan, ValueError, r"x must be in \[0, 1\], got nan"),
    (check_unit_interval, True, TypeError, "x must be a number"),
    (open_fraction, 0.0, ValueError, r"x must be in \(0, 1\), got 0.0"),
    (open_fraction, 1, ValueError, r"x must be in \(0, 1\), got 1"),
    (functools.partial(check_unit_interval, open_low=True), 0, ValueError, r"x must be in \(0, 1\], got 0"),
    (check_scale, 0.0, ValueError, "x must be finite and > 0, got 0.0"),
    (check_scale, math.inf, ValueError, "x must be finite and > 0, got inf"),
    (check_scale, "0.1", TypeError, "x must be a number"),
    (check_scale, False, TypeError, "x must be a number"),
    (check_finite_number, -math.inf, ValueError, "x must be a finite number, got -inf"),
    (check_finite_number, "1", TypeError, "x must be a number"),
    (check_settings, [("popsize", 4)], TypeError, "x must be a dict of settings by name, or None, got"),
]


@pytest.mark.parametrize(("check", "value"), ACCEPTED)
def test_valid_values_pass(check: Callable[[str, Any], None], value: Any) -> None:
    check("x", value)


@pytest.mark.parametrize(("check", "value", "error", "message"), REFUSED)
def test_invalid_values_are_refused_naming_the_argument(
    check: Callable[[str, Any], None], value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        check("x", value)
