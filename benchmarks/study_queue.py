"""The learning study's job queue: a jobs file whose lines run one at a time, each in a fresh process."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import psutil

#: The study's command line, which runs each job.
STUDY_SCRIPT = Path(__file__).with_name("learning_study.py")


@contextmanager
def locked(path: str) -> Iterator[IO[str]]:
    """:return: The file opened for update (created if missing) under an exclusive lock."""
    with open(path, "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        yield file


def job_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def rewrite(file: IO[str], lines: list[str]) -> None:
    file.seek(0)
    file.truncate()
    file.write("".join(f"{line}\n" for line in lines))


def take_job(jobs_file: str, running_file: str) -> list[str] | None:
    """Move the first job of the jobs file to the running file (with this process's id); None when none is left."""
    with locked(jobs_file) as file:  # several queues may share the file
        lines = job_lines(file.read())
        if not lines:
            return None
        rewrite(file, lines[1:])
    with locked(running_file) as running:
        running.write(f"{os.getpid()} {lines[0]}\n")
    return lines[0].split()


def finish_job(running_file: str, job: list[str]) -> None:
    with locked(running_file) as running:
        lines = running.read().splitlines()
        lines.remove(f"{os.getpid()} {' '.join(job)}")
        rewrite(running, lines)


def requeue_interrupted(jobs_file: str, running_file: str) -> None:
    """Put the jobs of queues that are no longer alive back at the head of the jobs file."""
    with locked(running_file) as running:
        lines = running.read().splitlines()
        alive = [line for line in lines if psutil.pid_exists(int(line.split()[0]))]
        interrupted = [line.split(maxsplit=1)[1] for line in lines if line not in alive]
        rewrite(running, alive)
    if interrupted:
        with locked(jobs_file) as file:
            rest = file.read().splitlines()
            rewrite(file, interrupted + rest)
        print(time.strftime("%H:%M:%S"), "requeued", interrupted, flush=True)


def queue(jobs_file: str, out: str) -> None:
    """Run the jobs file's lines one at a time (each in a fresh process), taking each off the file first."""
    running_file, failed_file = f"{jobs_file}.running", f"{jobs_file}.failed"
    requeue_interrupted(jobs_file, running_file)
    while (job := take_job(jobs_file, running_file)) is not None:
        task, config, seed = job[:3]
        command = [sys.executable, str(STUDY_SCRIPT), "run", "--task", task, "--config", config, "--seed", seed]
        command += ["--out", out]
        if len(job) > 3:
            command += ["--budget", job[3]]
        print(time.strftime("%H:%M:%S"), " ".join(job), flush=True)
        returncode = subprocess.run(command, check=False).returncode
        if returncode != 0:
            print(time.strftime("%H:%M:%S"), f"exit code {returncode}:", " ".join(job), flush=True)
            with locked(failed_file) as failed:
                failed.read()
                failed.write(f"{' '.join(job)}  # exit code {returncode} at {time.strftime('%Y-%m-%d %H:%M')}\n")
        finish_job(running_file, job)
