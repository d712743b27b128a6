"""The pool's toy apps travel to workers by value, like the test environments."""

from __future__ import annotations

import cloudpickle

from workers import toy_apps

cloudpickle.register_pickle_by_value(toy_apps)
