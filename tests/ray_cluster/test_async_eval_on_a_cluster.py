"""AsyncEval over the nodes of a simulated Ray cluster: the same results as local processes, also when a node
disappears mid-round."""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import psutil
import pytest
from sb3_contrib.ars.policies import LinearPolicy

from fixture_envs import scalar_vec_env
from lit_sb3 import AsyncEval

ray = pytest.importorskip("ray", reason="the Ray backend's tests need Ray: pip install 'lit_sb3[ray]'")
from ray_cluster.conftest import WORKER_SLOT  # noqa: E402 - needs Ray

ONE_PER_NODE = {"num_cpus": 1, WORKER_SLOT: 1}
Results = list[tuple[int, tuple[np.ndarray, np.ndarray]]]


def population(pop_size: int) -> np.ndarray:
    return np.random.default_rng(1).normal(size=(pop_size, 2)).astype(np.float32)


def evaluate_locally(env_fn: Any, policy: LinearPolicy, weights: np.ndarray, n_rounds: int) -> list[Results]:
    with AsyncEval([env_fn] * 2, policy, n_eval_episodes=2) as ae:
        ae.seed(4)
        rounds = []
        for _ in range(n_rounds):
            ae.send_jobs(weights, len(weights))
            rounds.append(ae.get_results())
            if ae._pool.descriptions[0]["obs_rms"] is not None:
                ae.sync_obs_rms(ae.merge_obs_rms())
        return rounds


def assert_same(results: Results, expected: Results) -> None:
    assert [index for index, _ in results] == [index for index, _ in expected]
    for (_, (returns, lengths)), (_, (expected_returns, expected_lengths)) in zip(results, expected, strict=True):
        np.testing.assert_array_equal(returns, expected_returns)
        np.testing.assert_array_equal(lengths, expected_lengths)


def raylet_of_each_actor() -> list[int]:
    """Process id of the raylet (the node) that started each worker actor."""
    raylets = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "RayWorkerActor" in " ".join(process.cmdline()):
                raylets.append(process.ppid())
        except psutil.Error:
            pass
    return raylets


def test_results_over_two_nodes_equal_the_local_backends(ray_cluster: Any, scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, n_envs=2, normalize=True, random_length=True)
    weights = population(16)
    expected = evaluate_locally(env_fn, scalar_policy, weights, n_rounds=2)
    with AsyncEval([env_fn] * 2, scalar_policy, n_eval_episodes=2, backend="ray", worker_resources=ONE_PER_NODE) as ae:
        nodes = raylet_of_each_actor()
        assert len(nodes) == 2 and len(set(nodes)) == 2  # one actor on each worker node
        ae.seed(4)
        for round_expected in expected:
            ae.send_jobs(weights, 16)
            assert_same(ae.get_results(), round_expected)
            ae.sync_obs_rms(ae.merge_obs_rms())


def test_a_node_removed_mid_round_loses_no_candidate(ray_cluster: Any, scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, length=20_000, random_length=True)
    weights = population(12)
    expected = evaluate_locally(env_fn, scalar_policy, weights, n_rounds=1)[0]
    with AsyncEval(
        [env_fn] * 2, scalar_policy, n_eval_episodes=2, chunk_size=1, backend="ray", worker_resources=ONE_PER_NODE
    ) as ae:
        ae.seed(4)
        ae.send_jobs(weights, 12)
        time.sleep(0.2)  # the round takes seconds: its 24 episodes are 10,000 steps long on average
        assert ae._pending is not None and not ae._pending.done()
        ray_cluster.remove_node(ray_cluster.worker_nodes.copy().pop())
        assert_same(ae.get_results(), expected)  # the other node ran what the lost one had
        assert ae._pool.restarts == 1
        # The replacement waits for a node with a free worker slot; once one joins, the pool is whole again.
        ray_cluster.add_node(num_cpus=1, resources={WORKER_SLOT: 1})
        deadline = time.monotonic() + 60
        while not all(slot.ready for slot in ae._pool._slots):
            assert time.monotonic() < deadline, "the replacement actor never started"
            time.sleep(0.1)
        assert len(set(raylet_of_each_actor())) == 2
        ae.seed(4)
        ae.send_jobs(weights, 12)
        assert_same(ae.get_results(), expected)


def test_ray_address_connects_to_the_cluster_and_close_disconnects(
    ray_cluster: Any, scalar_policy: LinearPolicy
) -> None:
    """How a script runs on a real cluster: not connected yet, it names the cluster's address."""
    ray.shutdown()  # the fixture's connection; the cluster keeps running
    try:
        weights = population(6)
        with AsyncEval(
            [scalar_vec_env] * 2,
            scalar_policy,
            n_eval_episodes=2,
            backend="ray",
            ray_address=ray_cluster.address,
            worker_resources=ONE_PER_NODE,
        ) as ae:
            assert ray.is_initialized()
            assert len(set(raylet_of_each_actor())) == 2
            ae.seed(4)
            ae.send_jobs(weights, 6)
            results = ae.get_results()
        assert not ray.is_initialized()  # close() disconnected what it connected
        assert raylet_of_each_actor() == []
        assert_same(results, evaluate_locally(scalar_vec_env, scalar_policy, weights, n_rounds=1)[0])
    finally:
        if not ray.is_initialized():
            ray.init(address=ray_cluster.address)
