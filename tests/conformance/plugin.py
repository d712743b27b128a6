"""
pytest plugin that runs Stable-Baselines3's and sb3-contrib's own test modules against lit_sb3's injected agents.

Every algorithm class the upstream modules name (their imports, module-level lists, the values they are
parametrised with) becomes ``get_injected_agent(cls)``, with workers on threads or processes (``--lit-sb3-workers``);
every model built during a test is shut down after it. Tests of :data:`upstream.EXCEPTIONS` are deselected. The
outcome of every test goes to the JSON file of ``--lit-sb3-report``.

Use: ``python -m pytest -p conformance.plugin --lit-sb3-distribution stable-baselines3 <its tests/test_run.py>``,
with ``tests/`` of lit_sb3 on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import pathlib
import weakref
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import sb3_contrib
import stable_baselines3
import torch
from stable_baselines3.common.base_class import BaseAlgorithm

from conformance.upstream import exception_reason
from lit_sb3.agents.async_agent import get_injected_agent

#: The algorithms of the upstream tests that get_injected_agent takes.
ALGORITHMS: tuple[type[BaseAlgorithm], ...] = (
    stable_baselines3.A2C,
    stable_baselines3.DDPG,
    stable_baselines3.DQN,
    stable_baselines3.PPO,
    stable_baselines3.SAC,
    stable_baselines3.TD3,
    sb3_contrib.CrossQ,
    sb3_contrib.QRDQN,
    sb3_contrib.TQC,
    sb3_contrib.TRPO,
)

_models: weakref.WeakSet[Any] = weakref.WeakSet()
_swaps: dict[type, type] = {}
_outcomes: dict[str, dict[str, Any]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lit_sb3 conformance")
    group.addoption("--lit-sb3-workers", choices=("threads", "processes"), default="threads")
    group.addoption("--lit-sb3-distribution", required=True, help="the upstream project, as EXCEPTIONS name it")
    group.addoption("--lit-sb3-report", default=None, help="JSON file for the outcome of every test")


def pytest_configure(config: pytest.Config) -> None:
    torch.set_num_threads(1)  # the workers and the trainer share the machine's cores
    use_mp = config.getoption("--lit-sb3-workers") == "processes"
    _swaps.update({algorithm: _harnessed(algorithm, use_mp) for algorithm in ALGORITHMS})


def _harnessed(algorithm: type[BaseAlgorithm], use_mp: bool) -> type:
    """:return: ``get_injected_agent(algorithm)`` with the harness's ``use_mp`` by default, its models recorded."""
    injected = get_injected_agent(algorithm)

    def __init__(self: Any, *args: Any, use_mp: bool = use_mp, **kwargs: Any) -> None:  # noqa: N807
        injected.__init__(self, *args, use_mp=use_mp, **kwargs)
        _models.add(self)

    return type(injected.__name__, (injected,), {"__init__": __init__, "__module__": __name__})


def _names_an_algorithm(value: Any) -> bool:
    if isinstance(value, type):
        return value in _swaps
    if isinstance(value, dict):
        return any(_names_an_algorithm(key) or _names_an_algorithm(element) for key, element in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return any(_names_an_algorithm(element) for element in value)
    return False


def _swapped(value: Any) -> Any:
    """:return: ``value`` with the algorithm classes swapped, also inside a list, tuple, set or dict (keys too)."""
    if not _names_an_algorithm(value):
        return value
    if isinstance(value, type):
        return _swaps[value]
    if isinstance(value, dict):
        return {_swapped(key): _swapped(element) for key, element in value.items()}
    return type(value)(_swapped(element) for element in value)


def _swap_module(module: ModuleType) -> None:
    for name, value in list(vars(module).items()):
        setattr(module, name, _swapped(value))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    distribution, mode = config.getoption("--lit-sb3-distribution"), config.getoption("--lit-sb3-workers")
    kept, left_out = [], []
    for item in items:
        reason = exception_reason(distribution, item.path.name, item.name, mode)
        (left_out if reason else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    for module in {item.module for item in kept if isinstance(item, pytest.Function) and item.module is not None}:
        _swap_module(module)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> None:
    for name, value in pyfuncitem.funcargs.items():
        pyfuncitem.funcargs[name] = _swapped(value)


@pytest.fixture(autouse=True)
def _shut_models_down() -> Iterator[None]:
    """Stop the collection workers of every model the test built (SB3's tests never call ``shutdown()``)."""
    yield
    for model in list(_models):
        model.shutdown()
    _models.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0, "message": ""})
    outcome["seconds"] += report.duration
    if report.failed and outcome["outcome"] != "failed":
        outcome["outcome"] = "failed" if report.when == "call" else "error"
        outcome["message"] = _last_line(report)
    elif report.skipped and outcome["outcome"] == "passed":
        outcome["outcome"] = "skipped"


def _last_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return str(crash.message).splitlines()[0] if crash is not None else str(report.longrepr).splitlines()[-1]


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--lit-sb3-report")
    if path:
        pathlib.Path(path).write_text(json.dumps(_outcomes, indent=1))
