"""Workers that never become ready (an app whose constructor hangs; on Ray, an actor with no free CPU): the pool
gives up after ``start_timeout`` with an error naming them. Local processes: a thread stuck in a constructor cannot
be stopped. A script that starts workers outside ``if __name__ == "__main__":`` is told so."""

from __future__ import annotations

import functools
import pathlib
import subprocess
import sys

import pytest

from lit_sb3.workers import ThreadBackend, WorkerDiedError, WorkerPool
from workers.test_pool import count_stream, kill_worker, new_backend, take
from workers.toy_apps import CountingApp, StuckWhileMarked


def test_a_worker_that_never_becomes_ready_fails_the_start_naming_it(tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "stuck"
    marker.touch()
    factories = [CountingApp, functools.partial(StuckWhileMarked, str(marker))]
    with pytest.raises(WorkerDiedError, match=r"worker\(s\) 1 not ready 1 s after being started \(start_timeout\)"):
        WorkerPool(factories, backend=new_backend("processes"), start_timeout=1.0)


def test_a_replacement_that_never_becomes_ready_fails_the_stream(tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "stuck"
    pool = WorkerPool(
        [functools.partial(StuckWhileMarked, str(marker))], backend=new_backend("processes"), start_timeout=1.0
    )
    try:
        stream = count_stream(pool, n_tasks=1, n_units=200, unit_seconds=0.02)
        take(stream, 2)
        marker.touch()
        kill_worker(pool, 0)
        with pytest.raises(WorkerDiedError, match=r"worker\(s\) 0 not ready 1 s after being started"):
            list(stream)
        assert pool.restarts == 1
    finally:
        pool.close()


def test_start_timeout_is_checked() -> None:
    with pytest.raises(ValueError, match="start_timeout"):
        WorkerPool([CountingApp], backend=ThreadBackend(), start_timeout=0)


def test_a_script_that_starts_workers_at_import_time_is_told_to_use_the_main_guard(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from lit_sb3.workers import WorkerPool\n"
        "from lit_sb3.workers.local import LocalBackend\n"
        "from workers.toy_apps import CountingApp\n"
        "WorkerPool([CountingApp], backend=LocalBackend('forkserver')).close()\n"
    )
    tests_folder = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tests_folder), "PATH": ""},
        check=False,
    )
    assert done.returncode == 1
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith("lit_sb3.workers.errors.WorkerDiedError: worker 0 (pid ")
    assert "exit code 1) died while building its app; it failed before lit_sb3's worker code ran" in last_line
    assert "start method 'forkserver'" in last_line and 'if __name__ == "__main__":' in last_line
    assert "finished its bootstrapping phase" in done.stderr  # Python's own explanation, printed by the worker
