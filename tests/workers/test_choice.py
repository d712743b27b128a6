"""Where workers run, as users spell it: every public spelling, its checks, defaults, fork server and backend."""

from __future__ import annotations

from typing import Any

import pytest

from lit_sb3.workers import choice as choice_module
from lit_sb3.workers.backend import Backend
from lit_sb3.workers.choice import BackendChoice
from lit_sb3.workers.local import LocalBackend
from lit_sb3.workers.threads import ThreadBackend

SPELLINGS = [(None, "processes"), ("local", "processes"), ("processes", "processes"), ("threads", "threads")]
SPELLINGS += [("ray", "ray")]


@pytest.mark.parametrize(("backend", "name"), SPELLINGS)
def test_every_name_users_pass_is_understood(backend: Any, name: str) -> None:
    assert BackendChoice.parse(backend).name == name


@pytest.mark.parametrize(
    ("use_mp", "backend", "name"), [(False, None, "threads"), (True, None, "processes"), (True, "ray", "ray")]
)
def test_the_seeds_use_mp_spelling_is_understood(use_mp: bool, backend: str | None, name: str) -> None:
    assert BackendChoice.from_use_mp(use_mp, backend).name == name


def test_a_backend_object_is_used_as_it_is_and_named_by_itself() -> None:
    backend = ThreadBackend()
    chosen = BackendChoice.parse(backend)
    assert chosen.name == "threads"
    assert chosen.build() is backend


#: Keywords of BackendChoice.parse that are refused, the error and its message.
BAD_PARSES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"backend": "spark"}, ValueError, r"backend must be one of \('processes', 'threads', 'ray', 'local'\)"),
    ({"backend": 3}, ValueError, "backend must be one of .* or a Backend object, got 3"),
    ({"backend": "threads", "ray_address": "auto"}, ValueError, "need backend='ray', but the workers are threads"),
    ({"worker_resources": {"num_cpus": 1}}, ValueError, "need backend='ray', but the workers are local processes"),
    ({"backend": "ray", "start_method": "spawn"}, ValueError, "start_method is for backend='local' only, but .* Ray"),
    ({"backend": ThreadBackend(), "start_method": "spawn"}, ValueError, "the workers are threads of this process"),
    ({"backend": "ray", "ray_address": 6379}, TypeError, "ray_address must be a str"),
    ({"backend": "ray", "worker_resources": {"num_gpus": -1}}, ValueError, r"\['num_gpus'\] must be a non-negative"),
    ({"backend": "ray", "worker_resources": ["num_cpus"]}, TypeError, "worker_resources must be a mapping"),
    ({"backend": "ray", "worker_resources": {"CPU": 1}}, ValueError, r"\['CPU'\]: give CPUs as 'num_cpus'"),
    ({"backend": "ray", "worker_resources": {"object_store_memory": 1}}, ValueError, "not an actor's resource"),
    ({"backend": "ray", "worker_resources": {"num_cpus": 1e-6}}, ValueError, r"1e-06, finer than Ray counts"),
]


@pytest.mark.parametrize(("keywords", "error", "message"), BAD_PARSES)
def test_choices_that_do_not_hold_together_are_refused(
    keywords: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        BackendChoice.parse(**keywords)


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        ({"use_mp": "yes"}, TypeError, "use_mp must be a bool"),
        ({"use_mp": False, "backend": "ray"}, ValueError, "pass use_mp=True"),
        ({"use_mp": True, "backend": "dask"}, ValueError, "backend must be None"),
        ({"use_mp": True, "backend": "processes"}, ValueError, "backend must be None"),
        ({"use_mp": True, "ray_address": "auto"}, ValueError, "need backend='ray'"),
        ({"use_mp": False, "worker_resources": {}}, ValueError, "need backend='ray'"),
    ],
)
def test_use_mp_choices_that_do_not_hold_together_are_refused(
    keywords: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        BackendChoice.from_use_mp(**keywords)


@pytest.mark.parametrize(("cores", "n_envs", "expected"), [(8, 3, 3), (8, 20, 7), (2, 8, 1), (1, 8, 1), (None, 4, 1)])
def test_default_workers_are_one_per_core_but_one_and_at_most_one_per_env(
    monkeypatch: pytest.MonkeyPatch, cores: int | None, n_envs: int, expected: int
) -> None:
    monkeypatch.setattr(choice_module.os, "cpu_count", lambda: cores)
    assert BackendChoice.parse("processes").default_workers(n_envs) == expected
    assert BackendChoice.parse("ray").default_workers(n_envs) == expected
    assert BackendChoice.parse("threads").default_workers(n_envs) == 1  # threads share the interpreter lock
    assert BackendChoice.parse(ThreadBackend()).default_workers(n_envs) == 1
    with pytest.raises(ValueError, match="n_envs must be at least 1"):
        BackendChoice.parse("processes").default_workers(0)


def test_prepare_starts_the_fork_server_only_for_forked_local_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[str, ...]] = []
    monkeypatch.setattr(choice_module, "start_fork_server", lambda preload: started.append(tuple(preload)))
    BackendChoice.parse("local").prepare(["some.module"])
    BackendChoice.parse("processes", start_method="forkserver").prepare(["other.module"])
    assert started == [("some.module",), ("other.module",)]
    BackendChoice.parse("processes", start_method="spawn").prepare(["x"])
    BackendChoice.parse("threads").prepare(["x"])
    BackendChoice.parse("ray").prepare(["x"])
    BackendChoice.parse(ThreadBackend()).prepare(["x"])
    assert len(started) == 2


@pytest.mark.parametrize(
    ("keywords", "backend_type", "name"),
    [
        ({"backend": "local", "start_method": "spawn"}, LocalBackend, "processes"),
        ({"backend": None}, LocalBackend, "processes"),
        ({"backend": "threads"}, ThreadBackend, "threads"),
    ],
)
def test_build_makes_a_new_backend_that_reports_its_name(
    keywords: dict[str, Any], backend_type: type[Backend], name: str
) -> None:
    chosen = BackendChoice.parse(**keywords)
    first, second = chosen.build(), chosen.build()
    try:
        assert type(first) is backend_type and first is not second
        assert first.name == chosen.name == name
        if isinstance(first, LocalBackend):
            assert first.start_method == (keywords.get("start_method") or "forkserver")
    finally:
        first.close()
        second.close()


def test_a_backend_must_say_its_name() -> None:
    class Unnamed(Backend):
        def start_worker(self, worker_index: int, app_factory: bytes) -> Any: ...
        def wait(self, handles: list, timeout: float | None) -> Any: ...
        def wake(self) -> None: ...
        def close(self) -> None: ...

    with pytest.raises(TypeError, match=r"abstract method.*name"):
        Unnamed()  # type: ignore[abstract]
