"""A simulated Ray cluster on this machine for every test of this folder: a head and two worker nodes."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

#: The tests folder, where Ray workers import the test environments from.
TESTS_DIR = pathlib.Path(__file__).resolve().parents[1]
#: Custom resource of the worker nodes, one per node: a worker asking for it gets a node of its own.
WORKER_SLOT = "lit_sb3_worker_slot"
#: A removed node's death is noticed within about 5 s (its raylet refuses each check at once; Ray's defaults take
#: tens of seconds), and a raylet starved on a loaded machine is not declared dead before it has missed checks for
#: 15 s (with checks of 200 ms, three in a row, the head node was declared dead under load and its driver killed).
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 3000,
    "health_check_failure_threshold": 5,
}


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[Any]:
    """:return: The cluster (no CPUs on the head: workers run on the worker nodes), connected to."""
    ray = pytest.importorskip("ray", reason="the Ray backend's tests need Ray: pip install 'lit_sb3[ray]'")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": FAST_HEALTH_CHECKS},
    )
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={WORKER_SLOT: 1})
    ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": str(TESTS_DIR)}})
    yield cluster
    ray.shutdown()
    cluster.shutdown()
