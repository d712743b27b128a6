"""Shared fixtures: test environments are pickled by value so that worker processes need not import them."""

from __future__ import annotations

import gc
import importlib
import os
import pathlib
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType

import cloudpickle
import psutil
import pytest
from sb3_contrib.ars.policies import LinearPolicy

import fixture_envs

cloudpickle.register_pickle_by_value(fixture_envs)


@pytest.fixture
def scalar_policy() -> LinearPolicy:
    """ARS linear policy (2 weights, no bias) for :class:`fixture_envs.ScalarEnv`."""
    env = fixture_envs.ScalarEnv()
    return LinearPolicy(env.observation_space, env.action_space)


@pytest.fixture(autouse=True)
def sb3_log_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stable-Baselines3 creates a log folder for every ``learn()``: keep them in the test's temporary folder."""
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "sb3_logs"))


BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def benchmark_module() -> Iterator[Callable[[str], ModuleType]]:
    """Imports a module of ``benchmarks/`` by name (the study's modules import their siblings)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCHMARKS))


SHARED_MEMORY = pathlib.Path("/dev/shm")


@pytest.fixture(autouse=True)
def no_leftover_shared_memory() -> Iterator[None]:
    """Every test must leave no shared-memory segment behind that no process has open any more (one that outlived
    its creator). Segments of other programs on the machine are told apart by being open: set up first, checked
    last, after the workers' exit."""
    if not SHARED_MEMORY.is_dir():  # the segments of macOS and Windows have no files to look at
        yield
        return
    before = _segments()
    yield
    new = _segments() - before
    if new:
        gc.collect()  # an unreachable array unlinks its segment when collected
        orphans = _mapped_by_no_process(new)
        # The resource tracker of a killed process removes its segments once the last process holding its pipe (the
        # fork server, workers) has exited: a moment after.
        deadline = time.monotonic() + 10.0
        while orphans and time.monotonic() < deadline:
            time.sleep(0.1)
            orphans = _mapped_by_no_process(set(orphans))
        assert not orphans, f"shared-memory segments left behind: {orphans}"


def _segments() -> set[str]:
    """:return: The names of the segments lit_sb3 (``litsb3_*``) and the standard library (``psm_*``) create."""
    return {path.name for pattern in ("litsb3_*", "psm_*") for path in SHARED_MEMORY.glob(pattern)}


def _mapped_by_no_process(names: set[str]) -> list[str]:
    """:return: Those of the segments that no process maps."""
    unmapped = set(names)
    for maps in pathlib.Path("/proc").glob("[0-9]*/maps"):
        if not unmapped:
            break
        try:
            text = maps.read_text()
        except OSError:  # gone, or not ours to read
            continue
        unmapped = {name for name in unmapped if f"{SHARED_MEMORY}/{name}" not in text}
    return sorted(name for name in unmapped if (SHARED_MEMORY / name).exists())


@pytest.fixture(autouse=True)
def no_leftover_workers() -> Iterator[None]:
    """Every test must leave no process behind but multiprocessing's own fork server and resource tracker, and the
    services of a Ray instance a Ray test fixture keeps running (never the actors of a worker pool)."""
    yield
    descendants = psutil.Process().children(recursive=True)
    leftovers = [
        process for process in descendants if not _is_multiprocessing_helper(process) and not _is_ray_service(process)
    ]
    for process in leftovers:
        try:
            process.wait(5)  # a process that was asked to exit gets a moment to do so
        except psutil.TimeoutExpired:
            pytest.fail(f"process left behind: {process}")
        except psutil.NoSuchProcess:
            pass


def _is_multiprocessing_helper(process: psutil.Process) -> bool:
    try:
        command = " ".join(process.cmdline())
        is_direct_child = process.ppid() == os.getpid()
    except psutil.Error:
        return True  # already gone
    return is_direct_child and ("forkserver" in command or "resource_tracker" in command)


def _is_ray_service(process: psutil.Process) -> bool:
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return True  # already gone
    return "RayWorkerActor" not in command and ("/ray/" in command or command.startswith("ray::"))
