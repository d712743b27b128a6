"""One local Ray instance for every test of this folder (starting Ray takes about 4 s)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import cloudpickle
import pytest
from workers import toy_apps

cloudpickle.register_pickle_by_value(toy_apps)

#: The tests folder, where Ray workers import the test environments and apps from.
TESTS_DIR = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="package", autouse=True)
def local_ray() -> Iterator[None]:
    """A small local Ray instance, never one a previous ``ray start`` left running."""
    ray = pytest.importorskip("ray", reason="the Ray backend's tests need Ray: pip install 'lit_sb3[ray]'")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(TESTS_DIR)}},
    )
    yield
    ray.shutdown()
