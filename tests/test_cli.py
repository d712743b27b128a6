"""The lit-sb3 command line, run as users run it."""

from __future__ import annotations

import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "lit_sb3.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_evaluate_prints_a_results_table() -> None:
    result = run("evaluate", "--env", "CartPole-v1", "--pop-size", "6", "--episodes", "2", "--top", "4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["candidate", "mean", "return", "std", "mean", "length"]
    rows = [line.split() for line in lines[1:5]]
    returns = [float(row[1]) for row in rows]
    assert returns == sorted(returns, reverse=True) and all(1 <= value <= 500 for value in returns)
    assert "6 candidates x 2 episodes of CartPole-v1" in result.stdout


def test_evaluate_refuses_bad_arguments() -> None:
    result = run("evaluate", "--pop-size", "0")
    assert result.returncode != 0
    assert "--pop-size must be at least 1" in result.stderr
