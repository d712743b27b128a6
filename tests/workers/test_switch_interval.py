"""Worker threads shorten the interpreter's switch interval while they run and put the caller's value back."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest
from sb3_contrib.ars.policies import LinearPolicy

from fixture_envs import scalar_vec_env
from lit_sb3 import AsyncEval
from lit_sb3.workers.threads import SWITCH_INTERVAL, WORKER_SWITCH_INTERVAL, SwitchInterval


@pytest.fixture
def callers_interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    try:
        yield 0.004
    finally:
        sys.setswitchinterval(before)


def test_the_last_release_puts_the_callers_interval_back(callers_interval: float) -> None:
    interval = SwitchInterval()
    interval.hold()
    interval.hold()
    assert sys.getswitchinterval() == pytest.approx(WORKER_SWITCH_INTERVAL)
    interval.release()
    assert sys.getswitchinterval() == pytest.approx(WORKER_SWITCH_INTERVAL) and interval.holders == 1
    interval.release()
    assert sys.getswitchinterval() == pytest.approx(callers_interval) and interval.holders == 0


def test_a_shorter_interval_of_the_caller_is_kept() -> None:
    before = sys.getswitchinterval()
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL / 2)
    try:
        interval = SwitchInterval()
        interval.hold()
        assert sys.getswitchinterval() == pytest.approx(WORKER_SWITCH_INTERVAL / 2)
        interval.release()
        assert sys.getswitchinterval() == pytest.approx(WORKER_SWITCH_INTERVAL / 2)
    finally:
        sys.setswitchinterval(before)


def test_each_running_worker_thread_holds_the_short_interval(scalar_policy: LinearPolicy) -> None:
    baseline = SWITCH_INTERVAL.holders  # worker threads of other tests may still be inside a step (and end)
    with AsyncEval([scalar_vec_env] * 2, scalar_policy, backend="threads") as evaluator:
        assert SWITCH_INTERVAL.holders >= 2
        assert sys.getswitchinterval() <= WORKER_SWITCH_INTERVAL
        evaluator.send_jobs(np.zeros((2, 2), np.float32), 2)
        assert len(evaluator.get_results()) == 2
    assert SWITCH_INTERVAL.holders <= baseline
