"""The pool's own tests (streams, immediate controls, credit, retries, deaths, shutdown), here on Ray actors. Each
pool starts actors that import the package (a few seconds each): the default run keeps the tests the collection of
episodes relies on most, the others are marked slow."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("ray", reason="the Ray backend's tests need Ray: pip install 'lit_sb3[ray]'")
from workers import test_pool
from workers.test_pool import pool  # noqa: F401 - the pool of the tests, built on the backend chosen below

IN_THE_DEFAULT_RUN = {
    "test_partial_results_arrive_before_their_task_ends",
    "test_an_immediate_control_changes_a_running_task",
    "test_a_stream_resumes_after_its_worker_dies_mid_stream",
    "test_a_reply_that_cannot_be_pickled_fails_its_call_not_the_worker",
}


@pytest.fixture
def backend_name() -> str:
    return "ray"


@pytest.fixture
def pickling_backend_name() -> str:
    return "ray"


def _on_ray(test: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        test(*args, **kwargs)

    return run if test.__name__ in IN_THE_DEFAULT_RUN else pytest.mark.slow(run)


for _name in dir(test_pool):
    if _name.startswith("test_"):
        globals()[_name] = _on_ray(getattr(test_pool, _name))
