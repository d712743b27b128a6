"""AsyncEval fails loudly and loses nothing: worker exceptions, dead workers, timeouts, bad input, shutdown."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch as th
from sb3_contrib.ars.policies import LinearPolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd

from fixture_envs import BrokenEnv, FragilePolicy, ScalarEnv, scalar_vec_env
from lit_sb3 import AsyncEval, PoolClosedError, WorkerDiedError, WorkerError, WorkerTimeoutError
from lit_sb3.vec_env import InProcessEval

HUGE = 1e6  # a weight that drives ScalarEnv's action past its trigger


def population(pop_size: int, bad: tuple[int, ...] = ()) -> np.ndarray:
    weights = np.random.default_rng(0).normal(size=(pop_size, 2)).astype(np.float32)
    for index in bad:
        weights[index] = HUGE
    return weights


def worker_pids(async_eval: AsyncEval) -> list[int]:
    return [handle.pid for handle in async_eval.remotes]  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------- worker exceptions


def test_env_construction_error_names_the_worker(scalar_policy: LinearPolicy) -> None:
    with pytest.raises(WorkerError) as error:
        AsyncEval([scalar_vec_env, BrokenEnv], scalar_policy)
    assert error.value.worker_index == 1
    assert error.value.exception_type == "RuntimeError"
    assert "cannot be built" in str(error.value)
    assert "in __init__" in error.value.remote_traceback
    assert error.value.remote_traceback.strip().endswith("RuntimeError: this environment cannot be built")


def test_step_error_names_worker_and_candidate_and_pool_stays_usable(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="raise")
    with AsyncEval([env_fn] * 2, scalar_policy, chunk_size=1) as ae:
        ae.send_jobs(population(8, bad=(5,)), 8)
        with pytest.raises(WorkerError) as error:
            ae.get_results()
        assert error.value.unit_index == 5
        assert error.value.exception_type == "ValueError"
        assert "candidate 5" in str(error.value) and "step failed on purpose" in str(error.value)
        assert "_misbehave" in error.value.remote_traceback
        assert "_misbehave" in str(error.value.__cause__)  # shown when the traceback is printed
        ae.send_jobs(population(8), 8)
        assert len(ae.get_results()) == 8


def test_system_exit_in_an_environment_fails_the_candidate_not_the_worker(scalar_policy: LinearPolicy) -> None:
    with AsyncEval([functools.partial(scalar_vec_env, trigger=100.0, on_trigger="exit")], scalar_policy) as ae:
        ae.send_jobs(population(3, bad=(1,)), 3)
        with pytest.raises(WorkerError, match="candidate 1") as error:
            ae.get_results()
        assert error.value.exception_type == "SystemExit"
        ae.send_jobs(population(3), 3)
        assert len(ae.get_results()) == 3
        assert ae._pool.restarts == 0


def test_arguments_a_worker_cannot_rebuild_fail_the_round_not_the_worker(scalar_policy: LinearPolicy) -> None:
    ghost = types.ModuleType("lit_sb3_ghost_module")  # importable here, unknown to the workers
    exec("class Level:\n    pass", ghost.__dict__)
    ghost.Level.__module__ = ghost.__name__
    sys.modules[ghost.__name__] = ghost
    try:
        with AsyncEval([scalar_vec_env] * 2, scalar_policy) as ae:
            ae.set_options({"level": ghost.Level()})
            ae.send_jobs(population(4), 4)
            with pytest.raises(WorkerError, match="lit_sb3_ghost_module") as error:
                ae.get_results()
            assert error.value.exception_type == "ModuleNotFoundError"
            ae.set_options(None)
            ae.send_jobs(population(4), 4)
            assert len(ae.get_results()) == 4
            assert ae._pool.restarts == 0
    finally:
        del sys.modules[ghost.__name__]


def test_reset_error_reaches_the_caller(scalar_policy: LinearPolicy) -> None:
    with AsyncEval([functools.partial(scalar_vec_env, fail_reset=True)], scalar_policy) as ae:
        ae.send_jobs(population(3), 3)
        with pytest.raises(WorkerError, match="reset failed on purpose") as error:
            ae.get_results()
    assert error.value.worker_index == 0 and error.value.unit_index == 0


def test_weight_loading_error_names_the_candidate() -> None:
    env = ScalarEnv()
    policy = FragilePolicy(env.observation_space, env.action_space, lr_schedule=lambda _: 0.0, net_arch=[])
    n_params = sum(parameter.numel() for parameter in policy.parameters())
    weights = np.zeros((4, n_params), np.float32)
    weights[2, 0] = HUGE
    with AsyncEval([scalar_vec_env] * 2, policy) as ae:
        ae.send_jobs(weights, 4)
        with pytest.raises(WorkerError, match="cannot be loaded") as error:
            ae.get_results()
    assert error.value.unit_index == 2


# ----------------------------------------------------------------------------------------------- dead workers


@pytest.mark.parametrize("how", ["sigkill", "segfault"])
def test_dead_worker_is_replaced_and_its_candidates_rerun(
    scalar_policy: LinearPolicy, tmp_path: Path, how: str
) -> None:
    weights = population(12, bad=(7,))
    marker = tmp_path / "crashed-once"
    env_fn = functools.partial(scalar_vec_env, random_length=True, trigger=100.0, on_trigger=how, marker=str(marker))
    with AsyncEval([env_fn] * 2, scalar_policy, n_eval_episodes=2, chunk_size=2) as ae:
        ae.seed(9)
        ae.send_jobs(weights, 12)
        results = ae.get_results()
        assert marker.exists()  # a worker did die
        assert ae._pool.restarts == 1
    with AsyncEval([env_fn] * 2, scalar_policy, n_eval_episodes=2, chunk_size=2) as ae:  # marker set: no crash
        ae.seed(9)
        ae.send_jobs(weights, 12)
        expected = ae.get_results()
    assert [index for index, _ in results] == list(range(12))
    for (_, (returns, lengths)), (_, (expected_returns, expected_lengths)) in zip(results, expected, strict=True):
        np.testing.assert_array_equal(returns, expected_returns)
        np.testing.assert_array_equal(lengths, expected_lengths)


def test_externally_killed_worker_is_noticed_and_replaced(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, length=100_000)  # rounds long enough to kill a worker mid-way
    with AsyncEval([env_fn] * 2, scalar_policy, chunk_size=1) as ae:
        ae.send_jobs(population(4), 4)
        time.sleep(0.3)
        assert ae._pending is not None and not ae._pending.done()
        victim = worker_pids(ae)[0]
        os.kill(victim, signal.SIGKILL)
        results = ae.get_results()
        assert ae._pool.restarts == 1
        assert len(results) == 4 and all(lengths[0] == 100_000 for _, (_, lengths) in results)
        assert victim not in worker_pids(ae)
        assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE


def test_too_many_deaths_raise_a_clear_error(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="sigkill")  # no marker: dies every time
    with AsyncEval([env_fn] * 2, scalar_policy, max_restarts=2, chunk_size=1) as ae:
        ae.send_jobs(population(6, bad=(3,)), 6)
        with pytest.raises(WorkerDiedError, match=r"killed by SIGKILL.*candidates 3-3.*max_restarts=2"):
            ae.get_results()
        with pytest.raises(WorkerDiedError, match=r"unusable.*max_restarts=2"):
            ae.send_jobs(population(6), 6)


def test_candidate_timeout_names_the_candidate(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="sleep")
    with AsyncEval([env_fn] * 2, scalar_policy, candidate_timeout=1.0, chunk_size=1) as ae:
        ae.send_jobs(population(6, bad=(4,)), 6)
        with pytest.raises(WorkerTimeoutError, match=r"candidate 4 on worker [01] did not finish within 1 s"):
            ae.get_results()
        ae.send_jobs(population(6), 6)  # the stuck worker was replaced
        assert len(ae.get_results()) == 6
        assert ae._pool.restarts == 0  # a timeout is not a crash


def test_a_stuck_worker_never_blocks_the_pool(scalar_policy: LinearPolicy) -> None:
    """Large messages to a worker that stopped reading queue up; the timeout still fires and close still works."""
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="sleep")
    with AsyncEval([env_fn] * 2, scalar_policy, candidate_timeout=1.0, chunk_size=1) as ae:
        ae.set_options({"ballast": np.zeros(8 * 2**20)})  # 64 MiB in every task
        ae.send_jobs(population(4, bad=(0, 1)), 4)
        with pytest.raises(WorkerTimeoutError):
            ae.get_results()


# -------------------------------------------------------------------------------------------------- bad input


@pytest.fixture
def pool() -> Iterator[AsyncEval]:
    env = ScalarEnv()
    with AsyncEval([scalar_vec_env], LinearPolicy(env.observation_space, env.action_space)) as async_eval:
        yield async_eval


#: Jobs refused before any work: weights, pop_size, error type, message.
BAD_JOBS = [
    (np.zeros((4, 1), np.float32), 4, ValueError, "rows have 1 values but the policy has 2 parameters"),
    (np.zeros((4, 3), np.float32), 4, ValueError, "rows have 3 values but the policy has 2 parameters"),
    (np.zeros(2, np.float32), 1, ValueError, r"candidate_weights must have shape \(rows, n_params\)"),
    (np.zeros((4, 2), np.float32), 0, ValueError, "pop_size must be at least 1"),
    (np.zeros((4, 2), np.float32), 5, ValueError, "pop_size=5 exceeds the 4 rows"),
    (np.zeros((4, 2), np.float32), 2.0, TypeError, "pop_size must be an int"),
    (np.array([[0, 0], [np.nan, 0]], np.float32), 2, ValueError, r"NaN or inf values in candidates \[1\]"),
    (np.array([[np.inf, 0]], np.float32), 1, ValueError, r"NaN or inf values in candidates \[0\]"),
    ([[0.0, 0.0]], 1, TypeError, "candidate_weights must be a torch.Tensor or a numpy array"),
]


@pytest.mark.parametrize(("weights", "pop_size", "error", "message"), BAD_JOBS)
def test_bad_jobs_are_refused_before_any_work(
    pool: AsyncEval, weights: object, pop_size: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        pool.send_jobs(weights, pop_size)
    pool.send_jobs(th.zeros(3, 2), 3)  # nothing was left pending
    assert len(pool.get_results()) == 3


def test_bad_calls_are_refused(pool: AsyncEval) -> None:
    with pytest.raises(ValueError, match="no round pending"):
        pool.get_results()
    pool.send_jobs(np.zeros((2, 2), np.float32), 2)
    with pytest.raises(ValueError, match="before get_results"):
        pool.send_jobs(np.zeros((2, 2), np.float32), 2)
    with pytest.raises(ValueError, match="round is pending"):
        pool.get_obs_rms()
    pool.get_results()
    with pytest.raises(ValueError, match="no VecNormalize"):
        pool.sync_obs_rms(RunningMeanStd(shape=(2,)))
    with pytest.raises(ValueError, match="options has 3 entries but there are 1 workers"):
        pool.set_options([{}, {}, {}])
    with pytest.raises(TypeError, match="seed must be an int"):
        pool.seed("0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        pool.seed(-1)
    with pytest.raises(ValueError, match=r"worker_index must be in \[0, 1\)"):
        pool._pool.call(1, "get_obs_rms")


#: AsyncEval arguments refused before any worker starts: arguments, error type, message.
BAD_CONSTRUCTION = [
    ({"envs_fn": []}, ValueError, "envs_fn is empty"),
    ({"envs_fn": scalar_vec_env}, TypeError, "envs_fn must be a list"),
    ({"envs_fn": [scalar_vec_env, 3]}, TypeError, r"envs_fn\[1\] must be callable"),
    ({"train_policy": "LinearPolicy"}, TypeError, "train_policy must be a Stable-Baselines3 BasePolicy"),
    ({"n_eval_episodes": 0}, ValueError, "n_eval_episodes must be at least 1"),
    ({"start_method": "teleport"}, ValueError, "start_method must be one of"),
    ({"chunk_size": 0}, ValueError, "chunk_size must be at least 1"),
    ({"candidate_timeout": -1.0}, ValueError, "candidate_timeout must be a positive number"),
    ({"candidate_timeout": "5"}, TypeError, "candidate_timeout must be a number"),
    ({"max_restarts": True}, TypeError, "max_restarts must be an int"),
    ({"max_restarts": -1}, ValueError, "max_restarts must be a non-negative int"),
    (
        {"backend": "spark"},
        ValueError,
        r"backend must be one of \('processes', 'threads', 'ray', 'local'\) or a Backend",
    ),
    ({"backend": "threads", "start_method": "spawn"}, ValueError, "start_method is for backend='local' only"),
    ({"ray_address": "auto"}, ValueError, "ray_address and worker_resources need backend='ray'"),
    (
        {"envs_fn": [functools.partial(scalar_vec_env, marker=threading.Lock())]},
        TypeError,
        r"envs_fn\[0\] cannot be pickled to send it to its worker: cannot pickle '_thread.lock'",
    ),
    ({"worker_resources": {"num_cpus": 1}}, ValueError, "ray_address and worker_resources need backend='ray'"),
]


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD_CONSTRUCTION)
def test_bad_construction_is_refused_before_starting_workers(
    scalar_policy: LinearPolicy, kwargs: dict, error: type[Exception], message: str
) -> None:
    arguments = {"envs_fn": [scalar_vec_env], "train_policy": scalar_policy, **kwargs}
    children_before = set(psutil.Process().children(recursive=True))
    with pytest.raises(error, match=message):
        AsyncEval(**arguments)
    assert set(psutil.Process().children(recursive=True)) <= children_before


def test_statistics_of_the_wrong_kind_are_refused(scalar_policy: LinearPolicy) -> None:
    with AsyncEval([functools.partial(scalar_vec_env, normalize=True)], scalar_policy) as ae:
        with pytest.raises(ValueError, match=r"obs_rms has mean shape \(5,\)"):
            ae.sync_obs_rms(RunningMeanStd(shape=(5,)))
        with pytest.raises(TypeError, match="obs_rms must be a RunningMeanStd"):
            ae.sync_obs_rms({"observation": RunningMeanStd(shape=(2,))})  # type: ignore[arg-type]
        ae.send_jobs(population(2), 2)
        assert len(ae.get_results()) == 2  # nothing reached the workers


def test_in_process_evaluation_resumes_after_ctrl_c(scalar_policy: LinearPolicy, tmp_path: Path) -> None:
    env = scalar_vec_env(trigger=100.0, on_trigger="interrupt", marker=str(tmp_path / "interrupted"))
    evaluator = InProcessEval(env, scalar_policy)
    evaluator.seed(0)
    evaluator.send_jobs(population(4, bad=(2,)), 4)
    with pytest.raises(KeyboardInterrupt):
        evaluator.get_results()
    results = evaluator.get_results()  # the round goes on where it stopped
    assert [index for index, _ in results] == [0, 1, 2, 3]


def test_mismatched_spaces_are_reported(scalar_policy: LinearPolicy) -> None:
    with pytest.raises(WorkerError, match="differ from the policy's"):
        AsyncEval([scalar_vec_env, functools.partial(gym.make, "CartPole-v1")], scalar_policy)


# --------------------------------------------------------------------------------------------------- shutdown


def test_close_is_idempotent_and_every_call_after_it_is_refused(scalar_policy: LinearPolicy) -> None:
    ae = AsyncEval([scalar_vec_env] * 2, scalar_policy)
    pids = worker_pids(ae)
    ae.close()
    ae.close()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    calls = [
        lambda: ae.send_jobs(population(2), 2),
        ae.get_results,
        ae.get_obs_rms,
        lambda: ae.sync_obs_rms(RunningMeanStd()),
        lambda: ae.seed(0),
        lambda: ae.set_options({}),
    ]
    for call in calls:
        with pytest.raises(PoolClosedError, match="closed"):
            call()
    assert issubclass(PoolClosedError, ValueError)


def test_close_cancels_a_running_round(scalar_policy: LinearPolicy) -> None:
    env_fn = functools.partial(scalar_vec_env, trigger=100.0, on_trigger="sleep")  # candidates that never finish
    ae = AsyncEval([env_fn] * 2, scalar_policy)
    pids = worker_pids(ae)
    ae.send_jobs(population(4, bad=(0, 1, 2, 3)), 4)
    time.sleep(0.2)
    ae.close()  # workers stuck in the env are killed, not waited for forever
    assert ae.closed
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


def test_a_worker_thread_stops_stepping_soon_after_close(scalar_policy: LinearPolicy) -> None:
    """A thread cannot be killed: it ends when its evaluation hands control back, which it does every 0.1 s, not only
    every 256 steps (12.8 s of this environment's) or at the end of the episode (50 s)."""
    env_fn = functools.partial(scalar_vec_env, length=1000, step_seconds=0.05)
    ae = AsyncEval([env_fn], scalar_policy, backend="threads")
    ae.send_jobs(population(1), 1)
    time.sleep(0.3)
    ae.close()
    deadline = time.monotonic() + 5.0
    while any(thread.name.startswith("lit-sb3-worker") for thread in threading.enumerate()):
        assert time.monotonic() < deadline, "the worker thread still steps its environment 5 s after close()"
        time.sleep(0.05)


def test_close_after_an_error(scalar_policy: LinearPolicy) -> None:
    ae = AsyncEval([functools.partial(scalar_vec_env, trigger=100.0)], scalar_policy)
    ae.send_jobs(population(2, bad=(1,)), 2)
    with pytest.raises(WorkerError):
        ae.get_results()
    ae.close()
    assert ae.closed


def run_script(body: str, tmp_path: Path, length: int = 10**7) -> subprocess.Popen:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import functools, signal, sys, time
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job starts with it ignored
            import numpy as np
            from sb3_contrib.ars.policies import LinearPolicy
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from fixture_envs import ScalarEnv, scalar_vec_env
            from lit_sb3 import AsyncEval

            if __name__ == "__main__":
                env = ScalarEnv()
                policy = LinearPolicy(env.observation_space, env.action_space)
                env_fn = functools.partial(scalar_vec_env, length={length})
                ae = AsyncEval([env_fn] * 2, policy)
                print(*[handle.pid for handle in ae.remotes], flush=True)
                ae.send_jobs(np.ones((2, 2), np.float32), 2)
            """
        )
        + textwrap.indent(textwrap.dedent(body), " " * 4)
    )
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_workers_exit_when_the_main_process_dies(tmp_path: Path) -> None:
    process = run_script("time.sleep(600)\n", tmp_path)
    assert process.stdout is not None
    pids = [int(pid) for pid in process.stdout.readline().split()]
    assert len(pids) == 2
    process.kill()
    process.wait()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(psutil.pid_exists(pid) for pid in pids)


def test_workers_stuck_in_their_environment_exit_when_the_main_process_dies(tmp_path: Path) -> None:
    body = """
    ae.get_results()  # the first round of the script has finished
    stuck = AsyncEval([functools.partial(scalar_vec_env, trigger=0.0, on_trigger="sleep")] * 2, policy)
    print(*[handle.pid for handle in stuck.remotes], flush=True)
    stuck.send_jobs(np.ones((2, 2), np.float32), 2)
    time.sleep(600)
    """
    process = run_script(body, tmp_path, length=10)
    assert process.stdout is not None
    process.stdout.readline()
    pids = [int(pid) for pid in process.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(1.0)  # the workers are inside env.step, asleep
    process.kill()
    process.wait()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(psutil.pid_exists(pid) for pid in pids)


def test_ctrl_c_during_get_results_leaves_the_pool_closable(tmp_path: Path) -> None:
    body = """
    try:
        ae.get_results()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        ae.close()
        print("closed", flush=True)
    """
    process = run_script(body, tmp_path)
    assert process.stdout is not None
    pids = [int(pid) for pid in process.stdout.readline().split()]
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert out.split() == ["interrupted", "closed"], err
    assert process.returncode == 0
    assert not any(psutil.pid_exists(pid) for pid in pids)


def test_an_evaluator_dropped_without_close_stops_its_workers_and_frees_shared_memory(
    scalar_policy: LinearPolicy,
) -> None:
    import gc

    def own_segments() -> set[str]:
        return {name for name in os.listdir("/dev/shm") if f"_{os.getpid()}_" in name}

    segments_before = own_segments()
    ae = AsyncEval([scalar_vec_env] * 2, scalar_policy)
    ae.send_jobs(np.zeros((4, 2), np.float32), 4)
    ae.get_results()
    workers = [psutil.Process(pid) for pid in worker_pids(ae)]
    assert own_segments() > segments_before
    del ae
    gc.collect()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    assert own_segments() == segments_before
