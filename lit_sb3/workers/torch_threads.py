"""This process's torch threads while workers on this machine (processes or threads) take cores from it: the
cores they leave.

Torch's intra-op threads wait on each other at every operation. When one of them shares a core with a busy worker
process, each operation waits for the scheduler: PPO's ``train()`` on CartPole (64-unit layers, minibatches of 256)
took 1.04-1.31 s with 2 threads beside one busy process on 2 cores, 0.26 s with 1 thread, and 0.30 s with 2 threads
on an idle machine. Beside a worker thread, PPO on 4 gSDE Pendulums ran at 0.95x plain SB3's steps/s with 2
threads, 1.38-1.41x with one (before worker threads ran torch on themselves alone, below; since then the limit
makes no measurable difference beside worker threads). A :class:`~lit_sb3.workers.pool.WorkerPool` of local
processes or threads whose workers keep busy limits the threads when it starts and gives them back when it closes,
both on its creator's thread: torch's count is that thread's (and the one threads started afterwards begin with).

A worker thread runs its own torch operations on itself alone (:func:`torch_on_this_thread_alone`): the first
operation big enough to be split would start a second team of OpenMP threads, and from then on the trainer's team
waits at every operation (SAC's ``train()`` on Pendulum: 13.1-13.9 ms a step beside such a worker thread, against
11.1-11.2 ms with the worker at one thread and 10.8-11.8 ms in plain SB3).
"""

from __future__ import annotations

import os

import torch

#: Each holder's limit (a pool of workers on this machine).
_limits: dict[int, int] = {}
#: The thread count before the first limit (meaningful while there are limits).
_before = 0


def torch_on_this_thread_alone() -> None:
    """
    Run this thread's torch operations on it alone, for good. Torch keeps a count per thread once the thread used
    it, but setting one also sets the count threads begin with: whoever starts the thread sets its own count again
    once this returned (see :class:`~lit_sb3.workers.threads.ThreadWorker`).
    """
    torch.get_num_threads()  # the thread's first use of torch gives it the count threads begin with: done first
    torch.set_num_threads(1)


def limit_torch_threads(holder: object, n_workers: int) -> None:
    """
    Keep this process's torch threads to the cores ``n_workers`` leave (at least one) until
    :func:`release_torch_threads` for ``holder``. Never raises the count; with several holders the lowest limit holds.

    :param holder: What the workers belong to.
    :param n_workers: How many workers it runs on this machine.
    """
    global _before  # noqa: PLW0603 - the count this process had, shared by every pool
    limit = max(1, (os.cpu_count() or 1) - n_workers)
    if not _limits:
        _before = torch.get_num_threads()
    _limits[id(holder)] = limit
    if torch.get_num_threads() > limit:
        torch.set_num_threads(limit)


def release_torch_threads(holder: object) -> None:
    """
    Drop ``holder``'s limit; the last one gives back the thread count from before the first, unless someone set
    another since.

    :param holder: As given to :func:`limit_torch_threads`.
    """
    limit = _limits.pop(id(holder), None)
    if limit is None or torch.get_num_threads() != min(limit, *_limits.values(), _before):
        return  # not limited, or changed since by someone else
    torch.set_num_threads(min([*_limits.values(), _before]))
