"""Segments left by processes killed together with their resource tracker are removed by the next process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lit_sb3.workers import segment_names
from lit_sb3.workers.shared_array import SharedArray

SHM = Path("/dev/shm")

pytestmark = pytest.mark.skipif(
    segment_names.new_segment_name().startswith("psm_"),
    reason="only on Linux are segments files of /dev/shm and processes readable in /proc: elsewhere segments keep "
    "the standard library's names and there is nothing to sweep",
)

CREATOR = """
import sys, time
import numpy as np
from lit_sb3.workers.shared_array import SharedArray
array = SharedArray((1000,), np.float64)
print(array.handle.name, flush=True)
time.sleep(60)
"""


@pytest.fixture
def creator() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A process in a group of its own that created a segment (and started its resource tracker), and the name."""
    process = subprocess.Popen(
        [sys.executable, "-c", CREATOR], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout is not None
    name = process.stdout.readline().strip()
    yield process, name
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    process.wait()


def sweep() -> None:
    segment_names._remove_orphaned_segments_once.cache_clear()  # this process swept already
    segment_names.remove_orphaned_segments()


def test_a_segment_of_a_process_killed_with_its_resource_tracker_is_removed_by_the_next_one(
    creator: tuple[subprocess.Popen[str], str],
) -> None:
    process, name = creator
    os.killpg(process.pid, signal.SIGKILL)  # the creator and its resource tracker: nobody left to remove it
    process.wait()
    assert (SHM / name).exists()
    segment_names._remove_orphaned_segments_once.cache_clear()
    with pytest.warns(UserWarning, match=r"removed 1 shared-memory segment\(s\) \(8000 bytes\)"):
        array = SharedArray((3,), np.float64)  # a process's first segment sweeps first
    assert not (SHM / name).exists()
    assert (SHM / array.handle.name).exists()
    array.close()


def test_the_segments_of_live_processes_and_other_namespaces_stay(creator: tuple[subprocess.Popen[str], str]) -> None:
    _, live = creator
    namespace = live.split("_")[1]
    other_namespace = SHM / f"litsb3_{int(namespace) + 1}_4000000_1_deadbeef"
    same_pid_later_process = SHM / f"{live.rsplit('_', 2)[0]}_1_deadbeef"  # the pid reused by another process
    not_ours = SHM / f"litsb3_{namespace}_x_deadbeef"
    for path in (other_namespace, same_pid_later_process, not_ours):
        path.write_bytes(b"\0" * 8)
    try:
        with pytest.warns(UserWarning, match=r"removed 1 shared-memory segment\(s\) \(8 bytes\)"):
            sweep()
        assert (SHM / live).exists() and other_namespace.exists() and not_ours.exists()
        assert not same_pid_later_process.exists()
    finally:
        for path in (other_namespace, same_pid_later_process, not_ours):
            path.unlink(missing_ok=True)
