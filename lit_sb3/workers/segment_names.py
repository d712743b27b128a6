"""
Names of the shared-memory segments lit_sb3 creates, and the removal of those whose creator is gone.

The resource tracker of ``multiprocessing`` removes the segments of a process that dies, but not when it dies
with it: a SIGKILL sent to the whole process group (``timeout``, a batch scheduler ending a job) leaves them in
``/dev/shm`` until the machine restarts. On Linux a segment's name therefore says who made
it (the pid namespace, the pid and the process's start time since boot), and the first segment a process creates
removes, before it, the segments of processes of its namespace that no longer exist. Elsewhere segments are named
as the standard library names them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import warnings
from pathlib import Path

SEGMENTS = Path("/dev/shm")
PROC = Path("/proc")
PREFIX = "litsb3"


def new_segment_name() -> str:
    """:return: A name for a new segment; on Linux, one that names this process."""
    token = secrets.token_hex(4)
    owner = _process_tag(os.getpid())
    return f"psm_{token}" if owner is None else f"{PREFIX}_{owner}_{token}"


def remove_orphaned_segments() -> None:
    """
    Remove, once per process, the segments named by processes of this pid namespace that have ended, and warn with
    how many there were and their size. Segments of other namespaces are left alone: their processes are not
    visible from here.
    """
    _remove_orphaned_segments_once(os.getpid())  # a forked child sweeps again


@functools.cache
def _remove_orphaned_segments_once(pid: int) -> None:
    namespace = _pid_namespace()
    if namespace is None:
        return
    removed, removed_bytes = 0, 0
    for path in SEGMENTS.glob(f"{PREFIX}_{namespace}_*"):
        owner = path.name.removeprefix(f"{PREFIX}_").rsplit("_", 1)[0]  # NAMESPACE_PID_START
        fields = owner.split("_")
        if len(fields) != 3 or not fields[1].isdigit() or _process_tag(int(fields[1])) == owner:
            continue  # not one of ours, or its creator is alive
        # Gone meanwhile (its creator or another sweep removed it), or another user's: left as it is.
        with contextlib.suppress(FileNotFoundError, PermissionError):
            size = path.stat().st_size
            path.unlink()
            removed, removed_bytes = removed + 1, removed_bytes + size
    if removed:
        warnings.warn(
            f"removed {removed} shared-memory segment(s) ({removed_bytes} bytes) from {SEGMENTS} that lit_sb3 "
            "processes killed together with their resource tracker left behind",
            stacklevel=3,
        )


def _process_tag(pid: int) -> str | None:
    """:return: ``NAMESPACE_PID_START`` of a live process; None if it does not exist, or if segments are not files
    of ``/dev/shm`` and processes not directories of ``/proc`` here (not Linux)."""
    namespace = _pid_namespace()
    if namespace is None:
        return None
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:  # no such process (any more)
        return None
    # Field 22 is the start time in clock ticks since boot; the command name (field 2) may hold spaces.
    start = stat.rsplit(")", 1)[1].split()[19]
    return f"{namespace}_{pid}_{start}"


@functools.cache  # a process's pid namespace does not change (a forked child inherits it)
def _pid_namespace() -> str | None:
    """:return: The inode of this process's pid namespace (``pid:[4026531836]`` gives ``4026531836``); None where
    there is none to read, or segments are not files of ``/dev/shm``."""
    if not SEGMENTS.is_dir():
        return None
    try:
        link = os.readlink(PROC / "self" / "ns" / "pid")
    except OSError:
        return None
    return link.removeprefix("pid:[").removesuffix("]")
