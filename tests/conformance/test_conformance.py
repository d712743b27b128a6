"""
Stable-Baselines3's and sb3-contrib's own tests, run against the injected agents with worker threads and with worker
processes: each upstream file in one ``pytest`` subprocess through :mod:`conformance.plugin`.

The pairs of :data:`DEFAULT_RUN` (the fastest, by measured time) run by default; the others with
``-m conformance``. Every upstream test must pass, but those of :data:`conformance.upstream.EXCEPTIONS`.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from conformance.upstream import MODES, UPSTREAMS, Upstream, upstream_root

#: (distribution, file, mode) run by the default test run, both modes and every algorithm covered: with threads,
#: test_sde.py (gSDE; the user's own env objects) and test_run.py (every SB3 algorithm); with processes,
#: sb3-contrib's test_run.py (TRPO, TQC, QR-DQN, CrossQ). Subprocesses of 28-41 s, 45-88 s and 31-48 s on the two
#: shared cores (load 5 to 20), 146 s together at load 15; the others took 38-110 s each (test_save_load.py 4 min
#: with test_save_load_large_model's 2 GB model).
DEFAULT_RUN = {
    ("stable-baselines3", "test_sde.py", "threads"),
    ("stable-baselines3", "test_run.py", "threads"),
    ("sb3-contrib", "test_run.py", "processes"),
}
#: Seconds an upstream test may take (pytest-timeout in the subprocess: a guard against hangs; test_save_load.py saves
#: and loads a 2 GB model), and a whole file.
TEST_TIMEOUT, FILE_TIMEOUT = 600, 3600
#: Failures quoted in the assertion message.
QUOTED_FAILURES = 30

TESTS_FOLDER = pathlib.Path(__file__).resolve().parents[1]


def _cases() -> Iterator[Any]:
    for upstream in UPSTREAMS:
        for file_name in upstream.test_files:
            for mode in MODES:
                marks = [pytest.mark.timeout(FILE_TIMEOUT + 60)]
                if (upstream.distribution, file_name, mode) not in DEFAULT_RUN:
                    marks.append(pytest.mark.conformance)
                name = f"{upstream.distribution}-{file_name}-{mode}"
                yield pytest.param(upstream, file_name, mode, id=name, marks=marks)


def run_upstream_file(upstream: Upstream, file_name: str, mode: str, folder: pathlib.Path) -> dict[str, Any]:
    """
    Run one upstream test file against the injected agents in a ``pytest`` subprocess.

    :param upstream: The project whose tests run.
    :param file_name: The file of its ``tests/``.
    :param mode: ``"threads"`` or ``"processes"``: where the agents' workers run.
    :param folder: The subprocess's working folder (files the tests write land there).
    :return: The outcome of every upstream test that ran, by node id.
    """
    root = upstream_root(upstream)
    report = folder / "outcomes.json"
    python_path = [str(TESTS_FOLDER.parent), str(TESTS_FOLDER), os.environ.get("PYTHONPATH", "")]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "conformance.plugin",
        "-p",
        "no:cacheprovider",
        f"--lit-sb3-distribution={upstream.distribution}",
        f"--lit-sb3-workers={mode}",
        f"--lit-sb3-report={report}",
        f"--timeout={TEST_TIMEOUT}",
        "-c",
        str(root / "pyproject.toml"),
        "--rootdir",
        str(root),
        str(root / "tests" / file_name),
    ]
    completed = subprocess.run(
        command,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, python_path))},
        capture_output=True,
        text=True,
        timeout=FILE_TIMEOUT,
        check=False,
    )
    if not report.exists():
        raise AssertionError(
            f"the upstream run of {file_name} ended (exit {completed.returncode}) without reporting:\n"
            f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        )
    outcomes: dict[str, Any] = json.loads(report.read_text())
    return outcomes


@pytest.mark.parametrize(("upstream", "file_name", "mode"), list(_cases()))
def test_upstream_tests_pass_on_injected_agents(
    upstream: Upstream, file_name: str, mode: str, tmp_path: pathlib.Path
) -> None:
    outcomes = run_upstream_file(upstream, file_name, mode, tmp_path)
    failures = {node: outcome for node, outcome in outcomes.items() if outcome["outcome"] in ("failed", "error")}
    passed = sum(outcome["outcome"] == "passed" for outcome in outcomes.values())
    quoted = "\n".join(
        f"  {node.split('::', 1)[-1]}: {outcome['message'][:200]}"
        for node, outcome in list(failures.items())[:QUOTED_FAILURES]
    )
    assert passed > 0, f"no upstream test of {file_name} passed"
    assert not failures, f"{len(failures)} of {len(outcomes)} upstream tests of {file_name} failed ({mode}):\n{quoted}"
