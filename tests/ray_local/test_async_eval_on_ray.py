"""AsyncEval on Ray actors: the same results as local processes, bit for bit, and the same failures."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest
from sb3_contrib.ars.policies import LinearPolicy
from test_async_eval_failures import BAD_CONSTRUCTION, BAD_JOBS, population

from fixture_envs import BrokenEnv, scalar_vec_env
from lit_sb3 import AsyncEval, WorkerDiedError, WorkerError, WorkerTimeoutError

ray = pytest.importorskip("ray", reason="the Ray backend's tests need Ray: pip install 'lit_sb3[ray]'")
from lit_sb3.workers.ray_backend import RayBackend, RayWorker  # noqa: E402 - needs Ray


def actor_processes() -> list[psutil.Process]:
    """The worker actors' processes (Ray names them after the actor class)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "RayWorkerActor" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            pass
    return found


def run_rounds(env_fn: Callable, policy: LinearPolicy, backend: str, n_rounds: int = 2, **kwargs: object) -> list:
    """Rounds with observation statistics merged and synced between them (when normalised): what each returned."""
    outcomes = []
    with AsyncEval([env_fn] * 2, policy, n_eval_episodes=2, backend=backend, **kwargs) as ae:  # type: ignore[arg-type]
        assert isinstance(ae._pool.backend, RayBackend) == (backend == "ray")
        ae.seed(5)
        weights = population(12)
        for _ in range(n_rounds):
            ae.send_jobs(weights, 12)
            outcomes.append(ae.get_results())
            if ae._pool.descriptions[0]["obs_rms"] is not None:
                merged = ae.merge_obs_rms()
                outcomes.append((merged.count, merged.mean, merged.var))
                ae.sync_obs_rms(merged)
            weights = weights + 0.1
    return outcomes


def assert_same(outcome: list, expected: list) -> None:
    assert len(outcome) == len(expected)
    for got, wanted in zip(outcome, expected, strict=True):
        if isinstance(got, list):  # a round's results
            assert [index for index, _ in got] == [index for index, _ in wanted]
            for (_, (returns, lengths)), (_, (expected_returns, expected_lengths)) in zip(got, wanted, strict=True):
                np.testing.assert_array_equal(returns, expected_returns)
                np.testing.assert_array_equal(lengths, expected_lengths)
        else:  # merged statistics
            assert got[0] == wanted[0]
            np.testing.assert_array_equal(got[1], wanted[1])
            np.testing.assert_array_equal(got[2], wanted[2])


# ------------------------------------------------------------------------------------------------- same results


@pytest.mark.parametrize("normalize", [False, True])
def test_results_equal_the_local_backends_bit_for_bit(scalar_policy: LinearPolicy, normalize: bool) -> None:
    env_fn = functools.partial(scalar_vec_env, n_envs=2, normalize=normalize, random_length=True)
    assert_same(run_rounds(env_fn, scalar_policy, "ray"), run_rounds(env_fn, scalar_policy, "local"))


def test_seed_and_options_behave_as_locally(scalar_policy: LinearPolicy) -> None:
    outcomes = []
    for backend in ("ray", "local"):
        with AsyncEval([scalar_vec_env] * 2, scalar_policy, backend=backend) as ae:  # type: ignore[arg-type]
            ae.seed(3)
            rounds = []
            for start in (0.5, -0.5):  # per-worker options would depend on which worker ran what: one for all
                ae.set_options({"start": start})
                ae.send_jobs(population(6), 6)
                rounds.append(ae.get_results())
            outcomes.append(rounds)
    assert_same(outcomes[0], outcomes[1])
    assert not np.array_equal(outcomes[0][0][0][1][0], outcomes[0][1][0][1][0])  # the options reached the resets


# -------------------------------------------------------------------------------------------------------- failures


def test_an_actor_killed_mid_round_changes_no_result(scalar_policy: LinearPolicy, tmp_path: Path) -> None:
    weights = population(12, bad=(7,))  # candidate 7 makes the environment SIGKILL its actor's process, once
    marker = tmp_path / "crashed-once"
    env_fn = functools.partial(
        scalar_vec_env, random_length=True, normalize=True, trigger=100.0, on_trigger="sigkill", marker=str(marker)
    )
    outcomes = []
    for backend in ("ray", "local"):  # the local run comes second: the marker exists, nothing dies
        with AsyncEval([env_fn] * 2, scalar_policy, n_eval_episodes=2, chunk_size=2, backend=backend) as ae:  # type: ignore[arg-type]
            ae.seed(9)
            ae.send_jobs(weights, 12)
            results = ae.get_results()
            merged = ae.merge_obs_rms()
            outcomes.append([results, (merged.count, merged.mean, merged.var)])
            assert marker.exists() and ae._pool.restarts == (1 if backend == "ray" else 0)
    assert_same(outcomes[0], outcomes[1])


@pytest.mark.slow
def test_an_externally_killed_actor_is_replaced(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, length=50_000)  # rounds long enough to kill an actor mid-way
    with AsyncEval([env_fn] * 2, scalar_policy, chunk_size=1, backend="ray") as ae:
        victim = actor_processes()[0]
        ae.send_jobs(population(4), 4)
        time.sleep(0.3)
        assert ae._pending is not None and not ae._pending.done()
        os.kill(victim.pid, signal.SIGKILL)
        results = ae.get_results()
        assert ae._pool.restarts == 1
        assert len(results) == 4 and all(lengths[0] == 50_000 for _, (_, lengths) in results)
        assert victim.pid not in [process.pid for process in actor_processes()]


def test_an_environment_exception_arrives_with_the_remote_traceback(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="raise")
    with AsyncEval([env_fn] * 2, scalar_policy, chunk_size=1, backend="ray") as ae:
        ae.send_jobs(population(8, bad=(5,)), 8)
        with pytest.raises(WorkerError) as error:
            ae.get_results()
        assert error.value.worker_index in (0, 1) and error.value.unit_index == 5
        assert error.value.exception_type == "ValueError"
        assert error.value.remote_traceback.strip().endswith("ValueError: step failed on purpose")
        assert "in _misbehave" in error.value.remote_traceback
        ae.send_jobs(population(8), 8)  # the pool stays usable
        assert len(ae.get_results()) == 8


def test_an_environment_that_cannot_be_built_names_the_worker(scalar_policy: LinearPolicy) -> None:
    with pytest.raises(WorkerError) as error:
        AsyncEval([scalar_vec_env, BrokenEnv], scalar_policy, backend="ray")
    assert error.value.worker_index == 1
    assert error.value.remote_traceback.strip().endswith("RuntimeError: this environment cannot be built")


@pytest.mark.slow
def test_past_the_restart_budget_the_error_names_the_worker(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="sigkill")  # no marker: dies every time
    with AsyncEval([env_fn] * 2, scalar_policy, max_restarts=1, chunk_size=1, backend="ray") as ae:
        ae.send_jobs(population(6, bad=(3,)), 6)
        death = r"Ray actor, died: its worker process has died \(actor_id \w+, pid \d+, ip [\d.]+\)"
        with pytest.raises(WorkerDiedError, match=rf"worker [01] \({death}\) died while running candidates 3-3; .*=1"):
            ae.get_results()


@pytest.mark.slow
def test_candidate_timeout_uses_the_actors_heartbeats(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="sleep")
    with AsyncEval([env_fn] * 2, scalar_policy, candidate_timeout=1.0, chunk_size=1, backend="ray") as ae:
        started = time.monotonic()
        ae.send_jobs(population(6, bad=(4,)), 6)
        with pytest.raises(WorkerTimeoutError, match=r"candidate 4 on worker [01] did not finish within 1 s"):
            ae.get_results()
        assert time.monotonic() - started < 1.0 + 2.0  # a heartbeat is 0.5 s
        ae.send_jobs(population(6), 6)  # the stuck actor was replaced
        assert len(ae.get_results()) == 6
        assert ae._pool.restarts == 0


# ------------------------------------------------------------------------------------------------------ bad input


def test_bad_jobs_are_refused_before_any_work(scalar_policy: LinearPolicy) -> None:
    with AsyncEval([scalar_vec_env], scalar_policy, backend="ray") as ae:
        for weights, pop_size, error, message in BAD_JOBS:
            with pytest.raises(error, match=message):
                ae.send_jobs(weights, pop_size)  # type: ignore[arg-type]
            ae.send_jobs(np.zeros((3, 2), np.float32), 3)  # nothing was left pending
            assert len(ae.get_results()) == 3


RAY_BAD_CONSTRUCTION = [
    ({"start_method": "spawn"}, ValueError, "start_method is for backend='local' only"),
    ({"worker_resources": {"num_cpus": -1}}, ValueError, r"worker_resources\['num_cpus'\] must be a non-negative"),
    ({"worker_resources": {"gpu_node": "1"}}, TypeError, r"worker_resources\['gpu_node'\] must be a number"),
    ({"worker_resources": [("num_cpus", 1)]}, TypeError, "worker_resources must be a mapping"),
    ({"ray_address": "auto"}, ValueError, "ray_address='auto' was given, but this process is already connected"),
    ({"worker_resources": {"num_gpus": 1}}, ValueError, r"no node of the Ray cluster has .*\{'CPU': 1, 'GPU': 1\}"),
    ({"worker_resources": {"num_cpus": 3}}, ValueError, r"no node of the Ray cluster has .*\{'CPU': 3\}"),
    ({"envs_fn": [scalar_vec_env] * 3}, ValueError, "3 workers ask for 3 CPU in all and the Ray cluster has 2"),
]


#: Arguments of the local backend's cases that are about the backend itself (their Ray cases are above).
BACKEND_ARGUMENTS = {"backend", "start_method", "ray_address", "worker_resources"}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [case for case in BAD_CONSTRUCTION if not BACKEND_ARGUMENTS & set(case[0])] + RAY_BAD_CONSTRUCTION,
)
def test_bad_construction_is_refused_before_starting_actors(
    scalar_policy: LinearPolicy, kwargs: dict, error: type[Exception], message: str
) -> None:
    arguments = {"envs_fn": [scalar_vec_env], "train_policy": scalar_policy, "backend": "ray", **kwargs}
    with pytest.raises(error, match=message):
        AsyncEval(**arguments)
    assert actor_processes() == []


def test_the_room_counts_the_actors_of_the_other_pools(scalar_policy: LinearPolicy) -> None:
    """Two pools of the process on a cluster with room for one: the second is refused at once, not left waiting."""
    with AsyncEval([scalar_vec_env] * 2, scalar_policy, backend="ray") as first:
        with pytest.raises(ValueError, match=r"the Ray cluster has 2 \(other lit_sb3 pools of this process hold 2\)"):
            AsyncEval([scalar_vec_env], scalar_policy, backend="ray")
        first.send_jobs(np.zeros((2, 2), np.float32), 2)
        assert len(first.get_results()) == 2
    with AsyncEval([scalar_vec_env] * 2, scalar_policy, backend="ray") as after:  # the room is free again
        assert after.n_workers == 2


# -------------------------------------------------------------------------------------------------------- shutdown


def test_close_kills_the_actors_and_keeps_the_callers_ray(scalar_policy: LinearPolicy) -> None:
    ae = AsyncEval([scalar_vec_env] * 2, scalar_policy, backend="ray")
    actors = actor_processes()
    assert len(actors) == 2
    assert all(isinstance(handle, RayWorker) for handle in ae.remotes)
    ae.close()
    psutil.wait_procs(actors, timeout=10)
    assert actor_processes() == []
    assert ray.is_initialized()  # the fixture's Ray: not ours to shut down


def test_close_shuts_down_the_ray_it_started(tmp_path: Path) -> None:
    """A script with no Ray of its own: AsyncEval starts a local Ray instance, which other pools share and the last
    one to close shuts down, leaving no process."""
    script = tmp_path / "own_ray.py"
    script.write_text(
        textwrap.dedent(
            """
            import gc

            import numpy as np
            import psutil
            import ray
            from sb3_contrib.ars.policies import LinearPolicy
            from fixture_envs import ScalarEnv, scalar_vec_env
            from lit_sb3 import AsyncEval

            if __name__ == "__main__":
                env = ScalarEnv()
                policy = LinearPolicy(env.observation_space, env.action_space)
                ae = AsyncEval([scalar_vec_env] * 2, policy, backend="ray", worker_resources={"num_cpus": 0.5})
                # A second pool finds the Ray instance the first started and shares it.
                other = AsyncEval([scalar_vec_env] * 2, policy, backend="ray", worker_resources={"num_cpus": 0.5})
                ae.send_jobs(np.zeros((4, 2), np.float32), 4)
                assert len(ae.get_results()) == 4
                ae.close()
                assert ray.is_initialized()  # the other pool still runs on it
                other.send_jobs(np.zeros((4, 2), np.float32), 4)
                assert len(other.get_results()) == 4
                del other  # its finaliser closes it: the last pool on the Ray instance shuts it down
                gc.collect()
                assert not ray.is_initialized()
                gone, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=10)
                print("left behind:", alive)
            """
        )
    )
    tests_dir = str(Path(__file__).resolve().parents[1])
    environment = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    environment["PYTHONPATH"] = tests_dir
    finished = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=environment, timeout=120, check=False
    )
    assert finished.returncode == 0, finished.stderr
    assert "left behind: []" in finished.stdout
