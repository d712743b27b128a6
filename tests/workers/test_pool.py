"""The worker pool on its own, with toy apps, on both local backends: streams, immediate controls, credit,
retries, deaths and shutdown."""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from pathlib import Path

import pytest

from lit_sb3.workers import (
    PoolClosedError,
    Stream,
    ThreadBackend,
    WorkerDiedError,
    WorkerError,
    WorkerPool,
    WorkerTimeoutError,
)
from lit_sb3.workers.backend import Backend
from lit_sb3.workers.choice import BackendChoice
from lit_sb3.workers.local import LocalWorker
from workers.toy_apps import BlockingApp, BrokenApp, CountingApp, DiesInMarkedConfigure, SquareApp


@pytest.fixture(params=["processes", "threads"])
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def pickling_backend_name() -> str:
    """A backend whose workers' replies are pickled (not threads: theirs are passed as they are)."""
    return "processes"


def new_backend(backend_name: str) -> Backend:
    return BackendChoice.parse(backend_name).build()  # type: ignore[arg-type]


def counting_pool(backend_name: str, n_workers: int = 2, **kwargs: object) -> WorkerPool:
    factories = [functools.partial(CountingApp, index) for index in range(n_workers)]
    return WorkerPool(factories, backend=new_backend(backend_name), **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def pool(backend_name: str) -> Iterator[WorkerPool]:
    with_pool = counting_pool(backend_name)
    yield with_pool
    with_pool.close()


def count_stream(pool: WorkerPool, n_tasks: int, n_units: int, unit_seconds: float, fail_at: int = -1) -> Stream:
    payloads = [(n_units, unit_seconds, fail_at) for _ in range(n_tasks)]
    labels = [f"task {index}" for index in range(n_tasks)]
    return pool.stream_tasks("count", payloads, labels=labels, capacities=[1] * pool.n_workers)


def take(stream: Stream, count: int, timeout: float = 30.0) -> list:
    items = []
    for _ in range(count):
        item = stream.get(timeout)
        assert item is not None
        items.append(item)
    return items


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


# ------------------------------------------------------------------------------------------------------ streams


def test_partial_results_arrive_before_their_task_ends(pool: WorkerPool) -> None:
    endless = pool.stream_tasks("forever", [(0.01,), (0.01,)], labels=["a", "b"], capacities=[1, 1])
    firsts = take(endless, 6)  # only partial results can come: the tasks never end
    assert not endless.result.done()
    for task in (0, 1):
        units = [item.unit for item in firsts if item.task_index == task]
        assert units == list(range(len(units)))  # in order, from the first unit
    endless.cancel()
    stream = count_stream(pool, n_tasks=2, n_units=20, unit_seconds=0.0)
    items = list(stream)
    units_per_task = {task: [item.unit for item in items if item.task_index == task] for task in (0, 1)}
    assert units_per_task == {0: list(range(20)), 1: list(range(20))}
    assert all(item.value == (item.unit, None) for item in items)
    assert stream.result.result(5) == [list(range(20)), list(range(20))]
    assert stream.counts.received == stream.counts.taken == 40
    assert stream.counts.dropped == stream.counts.discarded == 0
    assert stream.get() is None  # ended and drained


def test_a_failing_task_ends_its_stream_with_the_worker_traceback(pool: WorkerPool) -> None:
    stream = count_stream(pool, n_tasks=1, n_units=10, unit_seconds=0.01, fail_at=3)
    with pytest.raises(WorkerError, match="unit 3 failed on purpose") as caught:
        list(stream)
    assert caught.value.exception_type == "ValueError" and caught.value.unit_index == 3
    assert "in advance" in caught.value.remote_traceback
    assert isinstance(stream.result.exception(5), WorkerError)
    assert pool.call(0, "whoami").result(10)[0] == 0  # the pool goes on


def test_emitting_outside_a_stream_fails_the_job_loudly(backend_name: str) -> None:
    pool = WorkerPool([SquareApp], backend=new_backend(backend_name))
    try:
        assert pool.run_tasks("square", [(3, False)], labels=["x"], capacities=[1]).result(10) == [9]
        future = pool.run_tasks("square", [(3, True)], labels=["x"], capacities=[1])
        with pytest.raises(RuntimeError, match="not started as a stream"):
            future.result(10)
    finally:
        pool.close()


def test_cancel_stops_the_tasks_and_counts_what_it_discards(pool: WorkerPool) -> None:
    stream = pool.stream_tasks("forever", [(0.01,), (0.01,)], labels=["a", "b"], capacities=[1, 1])
    take(stream, 5)
    wait_until(lambda: stream.buffered > 0)
    stream.cancel()
    assert stream.get() is None
    assert stream.counts.discarded > 0
    assert stream.counts.taken == 5
    with pytest.raises(CancelledError):
        stream.result.result(5)
    # Both workers are free again: a new stream runs on them.
    assert len(list(count_stream(pool, n_tasks=2, n_units=3, unit_seconds=0.0))) == 6


# ---------------------------------------------------------------------------------------------------- controls


def test_immediate_controls_are_answered_while_a_task_runs(pool: WorkerPool) -> None:
    stream = pool.stream_tasks("forever", [(0.01,), (0.01,)], labels=["a", "b"], capacities=[1, 1])
    take(stream, 2)
    for worker_index in range(2):  # the tasks never end: only a call run between two of their steps is answered
        assert pool.call(worker_index, "whoami").result(10)[0] == worker_index
    stream.cancel()


def test_other_controls_wait_for_the_tasks_sent_before_them(pool: WorkerPool) -> None:
    stream = count_stream(pool, n_tasks=1, n_units=20, unit_seconds=0.01)
    worker = take(stream, 1)[0].worker_index
    barrier = pool.call(worker, "finished_tasks")
    received_when_answered: list[int] = []
    barrier.add_done_callback(lambda _: received_when_answered.append(stream.counts.received))
    assert barrier.result(30) == 1
    assert received_when_answered == [20]  # the task's every partial result came before the answer
    assert stream.result.result(10) == [list(range(20))]


def test_an_immediate_control_changes_a_running_task(pool: WorkerPool) -> None:
    stream = pool.stream_tasks("forever", [(0.01,)], labels=["a"], capacities=[1, 1])
    before = take(stream, 3)
    pool.call(before[0].worker_index, "set_tag", "new").result(10)
    received_at_answer = stream.counts.received
    after = take(stream, received_at_answer - len(before) + 3)  # all sent before the answer, and three more
    stream.cancel()
    tags = [item.value[1] for item in before + after]
    first_new = tags.index("new")
    assert first_new >= len(before)  # taken before the call was made
    assert all(tag is None for tag in tags[:first_new]) and all(tag == "new" for tag in tags[first_new:])
    assert first_new <= received_at_answer  # everything the worker sent after its answer has the new tag


# ------------------------------------------------------------------------------------------------------ credit


def test_the_buffer_bound_holds_across_workers_and_streams(backend_name: str) -> None:
    pool = counting_pool(backend_name, stream_capacity=3)
    try:
        first = count_stream(pool, n_tasks=2, n_units=50, unit_seconds=0.0)
        second = pool.stream_tasks("count", [(50, 0.0, -1)], labels=["c"], capacities=[2, 2])
        wait_until(lambda: first.buffered + second.buffered == 3)
        time.sleep(0.3)  # the workers are paused by back-pressure, not slow
        assert first.buffered + second.buffered == 3
        assert first.counts.received + second.counts.received == 3
        taken = take(first, first.buffered) + take(second, second.buffered)
        assert len(taken) == 3
        wait_until(lambda: first.buffered + second.buffered == 3)
        # The bound is shared: a consumer drains both streams (one left alone would hold the room).
        while not (first.ended and second.ended and first.buffered == second.buffered == 0):
            for stream in (first, second):
                with contextlib.suppress(queue.Empty):
                    if (item := stream.get(timeout=0.001)) is not None:
                        taken.append(item)
                assert first.buffered + second.buffered <= 3
        assert len(taken) == 150
        assert first.counts.taken == 100 and second.counts.taken == 50
        assert first.counts.dropped == second.counts.dropped == 0
    finally:
        pool.close()


def test_credit_goes_where_it_is_needed(backend_name: str) -> None:
    """Room freed by the consumer goes to the worker that used its credit, not to one that holds credit unused: a
    fast task runs to its end while a slow one still holds its share of the buffer."""
    pool = counting_pool(backend_name, stream_capacity=2)
    try:
        slow_and_fast = [(1, 600.0, -1), (40, 0.0, -1)]  # the slow task's only unit is due in ten minutes
        stream = pool.stream_tasks("count", slow_and_fast, labels=["slow", "fast"], capacities=[1, 1])
        fast = take(stream, 40)  # room for one result each: the fast task gets every room the consumer frees
        assert [item.task_index for item in fast] == [1] * 40
        assert [item.unit for item in fast] == list(range(40))
        assert len({item.worker_index for item in fast}) == 1
        stream.cancel()
    finally:
        pool.close()


def test_an_immediate_control_is_answered_while_its_worker_waits_for_buffer_room(backend_name: str) -> None:
    pool = counting_pool(backend_name, stream_capacity=1)
    try:
        stream = pool.stream_tasks("forever", [(0.001,), (0.001,)], labels=["a", "b"], capacities=[1, 1])
        wait_until(lambda: stream.buffered == 1)
        time.sleep(0.2)  # both workers hold a result for want of room
        for worker_index in range(2):
            assert pool.call(worker_index, "whoami").result(10)[0] == worker_index
        assert stream.buffered == 1 and stream.counts.received == 1  # the answers let no result through
        stream.cancel()
    finally:
        pool.close()


def test_a_put_timeout_drops_and_counts_what_finds_no_room(backend_name: str) -> None:
    pool = counting_pool(backend_name, stream_capacity=1, put_timeout=0.02)
    try:
        stream = count_stream(pool, n_tasks=2, n_units=10, unit_seconds=0.0)
        assert stream.result.result(30) is not None  # nobody consumed, yet the tasks ended
        assert stream.counts.received == 1
        assert stream.counts.dropped == 19
        assert stream.counts.avg_push_wait_seconds >= 0.02 * 19 / 20
        assert len(list(stream)) == 1
    finally:
        pool.close()


# ----------------------------------------------------------------------------------------------------- retries


def kill_worker(pool: WorkerPool, worker_index: int) -> None:
    """SIGKILL a worker process; cut a worker thread's link (a thread cannot be killed)."""
    handle = pool.handles[worker_index]
    if isinstance(handle, LocalWorker):
        assert handle.pid is not None
        os.kill(handle.pid, signal.SIGKILL)
    else:
        assert handle is not None
        handle.kill()


def test_a_stream_resumes_after_its_worker_dies_mid_stream(pool: WorkerPool) -> None:
    stream = count_stream(pool, n_tasks=2, n_units=30, unit_seconds=0.02)
    items = take(stream, 10)
    killed_task = items[-1].task_index
    kill_worker(pool, items[-1].worker_index)
    items += list(stream)
    per_task = {task: sorted(item.unit for item in items if item.task_index == task) for task in (0, 1)}
    assert per_task == {0: list(range(30)), 1: list(range(30))}  # nothing twice, nothing lost
    assert stream.counts.resumed == 1
    assert pool.restarts == 1
    finals = stream.result.result(5)
    assert finals[1 - killed_task] == list(range(30))
    # The resumed task reports only what it emitted itself: the units not delivered before its worker died, which
    # reached the stream last.
    resumed_units = finals[killed_task]
    delivered_before = 30 - len(resumed_units)
    assert 1 <= delivered_before < 30  # one delivered at least: the kill followed a unit of that worker
    units_of_killed_task = [item.unit for item in items if item.task_index == killed_task]
    assert units_of_killed_task[delivered_before:] == resumed_units == sorted(resumed_units)
    assert stream.counts.interrupted <= 1  # at most the unit on the dead worker's one slot


def test_a_replacement_dying_in_its_replays_leaves_the_next_one_its_own_replays_only(tmp_path: Path) -> None:
    """What was sent to a replacement that died (its replays, its progress board) is made anew for the next one,
    not sent again beside it: the next one would replay twice, and fail to open the board closed meanwhile."""
    marker = tmp_path / "die in configure"
    with contextlib.closing(WorkerPool([DiesInMarkedConfigure], backend=new_backend("processes"))) as pool:
        pool.call(0, "configure", str(marker), sticky=True).result(30)
        marker.touch()
        kill_worker(pool, 0)  # its replacement dies while it replays configure
        assert pool.call(0, "configured").result(30) == 1
        assert pool.restarts == 2
        assert not marker.exists()


def test_a_sticky_call_whose_worker_died_in_it_runs_once_on_the_replacement(tmp_path: Path) -> None:
    marker = tmp_path / "die in configure"
    marker.touch()
    with contextlib.closing(WorkerPool([DiesInMarkedConfigure], backend=new_backend("processes"))) as pool:
        pool.call(0, "configure", str(marker), sticky=True).result(30)  # the first worker dies in it
        assert pool.call(0, "configured").result(30) == 1  # not also replayed
        assert pool.restarts == 1


def test_a_resumed_stream_starts_from_the_resume_arguments_of_its_last_delivered_unit(pool: WorkerPool) -> None:
    payloads = [(30, 0.02, 0), (30, 0.02, 1000)]
    stream = pool.stream_tasks("running_sum", payloads, labels=["from 0", "from 1000"], capacities=[1, 1])
    items = take(stream, 10)
    kill_worker(pool, items[-1].worker_index)
    items += list(stream)
    assert stream.counts.resumed == 1
    for task, start in enumerate((0, 1000)):
        values = sorted(item.value for item in items if item.task_index == task)
        # Without its resume arguments, the resumed task would count its total from its start again.
        assert values == [(unit, start + unit * (unit + 1) // 2) for unit in range(30)]


def test_rerun_and_fail_policies(backend_name: str) -> None:
    pool = counting_pool(backend_name, n_workers=1, max_restarts=2)
    try:
        rerun = pool.stream_tasks("count", [(40, 0.02, -1)], labels=["whole"], capacities=[1], retry="rerun")
        before = [item.unit for item in take(rerun, 5)]
        kill_worker(pool, 0)
        after = [item.unit for item in rerun]
        assert before == list(range(5))
        assert after[-40:] == list(range(40))  # started again from scratch: what was delivered comes twice
        assert rerun.result.result(5) == [list(range(40))]
        failing = pool.stream_tasks("count", [(40, 0.02, -1)], labels=["fragile"], capacities=[1], retry="fail")
        take(failing, 2)
        kill_worker(pool, 0)
        with pytest.raises(WorkerDiedError, match="while running fragile; the job's retry policy is 'fail'"):
            list(failing)
        assert pool.restarts == 2
        assert pool.call(0, "whoami").result(20)[0] == 0
    finally:
        pool.close()


def test_past_the_restart_budget_the_stream_raises_naming_the_worker(backend_name: str) -> None:
    pool = counting_pool(backend_name, n_workers=1, max_restarts=0)
    try:
        stream = count_stream(pool, n_tasks=1, n_units=100, unit_seconds=0.02)
        take(stream, 2)
        kill_worker(pool, 0)
        with pytest.raises(WorkerDiedError, match=r"worker 0 .* died while running task 0"):
            list(stream)
        with pytest.raises(WorkerDiedError, match=r"unusable after an earlier failure: worker 0 .* died"):
            pool.call(0, "whoami")
    finally:
        pool.close()


def test_a_use_that_passed_its_check_as_the_pool_broke_fails_instead_of_waiting(
    backend_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = counting_pool(backend_name, n_workers=2, max_restarts=0)
    try:
        pool.call_all("whoami", [(), ()])
        kill_worker(pool, 0)
        wait_until(lambda: pool.failure is not None)
        monkeypatch.setattr(pool, "_check_usable", lambda: None)  # as if the check ran just before the death
        call = pool.call(0, "whoami")
        job = pool.run_tasks("count", [(1, 0.0, -1)], labels=["task 0"], capacities=[1, 1])
        for future in (call, job):
            with pytest.raises(WorkerDiedError, match=r"unusable after an earlier failure: worker 0 .* died"):
                future.result(timeout=20)
    finally:
        pool.close()


def test_a_cancelled_task_waiting_behind_a_control_never_starts(backend_name: str) -> None:
    with contextlib.closing(counting_pool(backend_name, n_workers=1)) as pool:
        first = pool.stream_tasks("count", [(5, 0.1, -1)], labels=["short"], capacities=[1])
        time.sleep(0.1)
        control = pool.call(0, "finished_tasks")  # not immediate: it waits for the task, and what comes after it too
        endless = pool.stream_tasks("forever", [(0.05,)], labels=["endless"], capacities=[1])
        time.sleep(0.1)
        endless.cancel()
        assert first.result.result(10) == [list(range(5))] and control.result(10) == 1
        assert pool.call(0, "finished_tasks").result(10) == 1  # the worker is free: the cancelled task never ran
        assert endless.counts.received == 0


def test_a_reply_that_cannot_be_pickled_fails_its_call_not_the_worker(pickling_backend_name: str) -> None:
    with contextlib.closing(counting_pool(pickling_backend_name, n_workers=1)) as pool:
        with pytest.raises(WorkerError, match=r"the worker's reply cannot be pickled .* cannot pickle '_thread\.lock'"):
            pool.call(0, "lock").result(30)
        assert pool.call(0, "whoami").result(30)[0] == 0 and pool.restarts == 0


def test_a_partial_result_that_cannot_be_pickled_fails_its_stream_and_keeps_the_credit(
    pickling_backend_name: str,
) -> None:
    with contextlib.closing(counting_pool(pickling_backend_name, n_workers=1, stream_capacity=1)) as pool:
        pool.call(0, "set_tag", "unpicklable").result(30)
        broken = count_stream(pool, n_tasks=1, n_units=3, unit_seconds=0.0)
        with pytest.raises(WorkerError, match="the worker's reply cannot be pickled"):
            broken.result.result(30)
        pool.call(0, "set_tag", None).result(30)
        assert [item.value for item in take(count_stream(pool, n_tasks=1, n_units=3, unit_seconds=0.0), 3)] == [
            (unit, None) for unit in range(3)
        ]


def test_a_timed_out_thread_does_not_mark_its_replacement_stuck() -> None:
    """A worker thread cannot be stopped: when the one that timed out wakes, its progress marks reach no board the
    replacement uses."""
    with contextlib.closing(WorkerPool([BlockingApp], backend=ThreadBackend(), unit_timeout=0.5)) as pool:
        with pytest.raises(WorkerTimeoutError):
            pool.run_tasks("block", [(2.0,)], labels=["blocked"], capacities=[1]).result(20)
        bystander = pool.run_tasks("wait", [(3.0,)], labels=["bystander"], capacities=[1], retry="fail")
        assert bystander.result(20) == ["wait"]
        assert pool.restarts == 0


def test_a_finished_stream_keeps_its_results_when_the_pool_closes(backend_name: str) -> None:
    for _ in range(5):
        pool = counting_pool(backend_name, n_workers=1)
        stream = pool.stream_tasks("count", [(5, 0.0, -1)], labels=["a"], capacities=[1])
        stream.result.result(10)
        pool.close()
        assert len(list(stream)) == 5


def test_invalid_job_arguments_are_refused(pool: WorkerPool) -> None:
    with pytest.raises(ValueError, match=r"capacities\[1\] must be at least 1, got 0"):
        pool.run_tasks("count", [(1, 0.0, -1)], labels=["x"], capacities=[1, 0])
    with pytest.raises(ValueError, match="retry must be one of"):
        pool.run_tasks("count", [(1, 0.0, -1)], labels=["x"], capacities=[1, 1], retry="again")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one label per payload"):
        pool.stream_tasks("count", [(1, 0.0, -1)], labels=[], capacities=[1, 1])
    with pytest.raises(ValueError, match="stream_capacity must be at least 1"):
        WorkerPool([CountingApp], backend=ThreadBackend(), stream_capacity=0)


def test_an_app_that_cannot_be_built_is_reported(backend_name: str) -> None:
    with pytest.raises(WorkerError, match="cannot build this app"):
        WorkerPool([BrokenApp], backend=new_backend(backend_name))


# ---------------------------------------------------------------------------------------------------- shutdown


def test_close_during_a_stream_ends_it_and_leaves_nothing_behind(backend_name: str) -> None:
    threads_before = set(threading.enumerate())
    pool = counting_pool(backend_name)
    stream = pool.stream_tasks("forever", [(0.01,), (0.01,)], labels=["a", "b"], capacities=[1, 1])
    take(stream, 3)
    consumer_error: list[BaseException] = []

    def consume() -> None:
        try:
            list(stream)
        except BaseException as exc:
            consumer_error.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    pool.close()
    consumer.join(10)
    assert not consumer.is_alive()
    assert len(consumer_error) == 1 and isinstance(consumer_error[0], PoolClosedError)
    with pytest.raises(PoolClosedError):
        pool.stream_tasks("forever", [(0.01,)], labels=["a"], capacities=[1, 1])
    wait_until(lambda: set(threading.enumerate()) <= threads_before, timeout=10)  # processes: see conftest


@pytest.mark.parametrize("thread_name", ["lit-sb3-pool-dispatcher", "lit-sb3-writer-1"])
def test_a_ctrl_c_as_a_pool_starts_a_thread_leaves_nothing_behind(
    thread_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C just after a thread of the pool started (``Thread.start`` raises once the thread runs): the
    dispatcher, or the writer of worker 1 whose handle the pool never received."""
    threads_before = set(threading.enumerate())
    start = threading.Thread.start

    def interrupted_start(thread: threading.Thread) -> None:
        start(thread)
        if thread.name.startswith(thread_name):
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    with pytest.raises(KeyboardInterrupt):
        counting_pool("processes")
    monkeypatch.undo()
    wait_until(lambda: set(threading.enumerate()) <= threads_before, timeout=10)  # processes: see conftest


def test_stream_get_times_out_with_queue_empty(pool: WorkerPool) -> None:
    stream = pool.stream_tasks("forever", [(5.0,)], labels=["slow"], capacities=[1, 1])
    with pytest.raises(queue.Empty):
        stream.get(timeout=0.05)
    stream.cancel()


def test_a_dead_workers_streams_wait_for_its_replacement_when_the_others_are_full(pool: WorkerPool) -> None:
    payloads = [(30, 0.02, -1)] * 4
    labels = [f"task {index}" for index in range(4)]
    stream = pool.stream_tasks("count", payloads, labels=labels, capacities=[2, 2])  # the workers are full
    items = take(stream, 12)
    victim = items[-1].worker_index
    kill_worker(pool, victim)
    items += list(stream)
    survivor = [item for item in items if item.worker_index == 1 - victim]
    last_unit_at = {item.task_index: position for position, item in enumerate(survivor) if item.unit == 29}
    first_unit_at: dict[int, int] = {}
    for position, item in enumerate(survivor):
        first_unit_at.setdefault(item.task_index, position)
    for position in range(len(survivor)):  # never more streams at once than its capacity, replacement or not
        assert sum(first_unit_at[task] <= position <= last_unit_at[task] for task in first_unit_at) <= 2
    tasks_of = {worker: {item.task_index for item in items if item.worker_index == worker} for worker in (0, 1)}
    assert tasks_of[0] | tasks_of[1] == {0, 1, 2, 3}
    per_task = {task: sorted(item.unit for item in items if item.task_index == task) for task in range(4)}
    assert per_task == {task: list(range(30)) for task in range(4)}
    assert pool.restarts == 1
