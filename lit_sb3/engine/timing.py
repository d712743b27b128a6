"""Where the engine's threads spend their time, and the summary a run prints, returns and logs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stable_baselines3.common.logger import Logger


class ThreadClock:
    """Busy and idle seconds of one thread (idle: waiting for a signal, for data or for room)."""

    def __init__(self) -> None:
        self.busy_seconds = 0.0
        self.idle_seconds = 0.0
        self.iterations = 0

    @contextmanager
    def busy(self) -> Iterator[None]:
        """Time one iteration of the thread's work."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.busy_seconds += time.monotonic() - started
            self.iterations += 1

    @contextmanager
    def idle(self) -> Iterator[None]:
        """Time a wait."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.idle_seconds += time.monotonic() - started


def timing_summary(
    wall_seconds: float, clocks: dict[str, ThreadClock], env_steps: int, train_steps: int, profile: dict[str, Any]
) -> dict[str, Any]:
    """
    :param wall_seconds: Duration of the run.
    :param clocks: Each thread's clock, by thread name.
    :param env_steps: Environment steps trained on during the run.
    :param train_steps: Train steps during the run.
    :param profile: The collector's profile (``AsyncCollector.profile()``).
    :return: Time per phase and idle time of each thread, env steps/s, train steps/s, the policy lag (mean, p99, max,
        in train steps), what was dropped, the worker restarts with the episodes resumed on a replacement and
        those interrupted, and the steps the workers collected against those used
        (``wasted_fraction``: collected and never trained on, stale or still buffered at the end).
    """
    policy, buffer, worker = profile["policy"], profile["buffer"], profile["worker"]
    return {
        "wall_seconds": wall_seconds,
        "env_steps": env_steps,
        "train_steps": train_steps,
        "env_steps_per_second": env_steps / wall_seconds if wall_seconds > 0 else 0.0,
        "train_steps_per_second": train_steps / wall_seconds if wall_seconds > 0 else 0.0,
        "threads": {
            name: {
                "busy_seconds": clock.busy_seconds,
                "idle_seconds": clock.idle_seconds,
                "iterations": clock.iterations,
            }
            for name, clock in clocks.items()
        },
        "policy_lag": {"mean": policy["lag_mean"], "p99": policy["lag_p99"], "max": policy["lag_max"]},
        "max_policy_lag": policy["max_policy_lag"],
        "episodes_stale": buffer["episodes_stale"],
        "episodes_dropped": buffer["episodes_dropped"],
        "worker_restarts": worker["restarts"],
        "episodes_resumed": worker["episodes_resumed"],
        "episodes_interrupted": worker["episodes_interrupted"],
        "collected_steps": worker["collected_steps"],
        "wasted_fraction": worker["wasted_fraction"],
    }


def format_summary(title: str, summary: dict[str, Any]) -> str:
    """
    :param title: First line.
    :param summary: What :func:`timing_summary` returned.
    :return: The summary as a small table.
    """
    lag = summary["policy_lag"]
    lines = [
        f"{title}: {summary['wall_seconds']:.1f} s, "
        f"{summary['env_steps']} env steps ({summary['env_steps_per_second']:.0f}/s), "
        f"{summary['train_steps']} train steps ({summary['train_steps_per_second']:.2f}/s)",
        f"  {'thread':<12}{'busy s':>10}{'idle s':>10}{'iterations':>12}",
    ]
    for name, thread in summary["threads"].items():
        lines.append(
            f"  {name:<12}{thread['busy_seconds']:>10.2f}{thread['idle_seconds']:>10.2f}{thread['iterations']:>12}"
        )
    lines.append(
        f"  policy lag (train steps): mean {lag['mean']:.2f}, p99 {lag['p99']:.1f}, max {lag['max']} "
        f"(bound {summary['max_policy_lag']}); episodes stale {summary['episodes_stale']}, "
        f"dropped {summary['episodes_dropped']}; worker restarts {summary['worker_restarts']} "
        f"(episodes resumed {summary['episodes_resumed']}, interrupted {summary['episodes_interrupted']})"
    )
    lines.append(
        f"  steps collected {summary['collected_steps']}, wasted {summary['wasted_fraction']:.1%} "
        "(never trained on: stale, or buffered at the end)",
    )
    return "\n".join(lines)


def record_summary(logger: Logger, summary: dict[str, Any], step: int) -> None:
    """
    :param logger: The SB3 logger.
    :param summary: What :func:`timing_summary` returned.
    :param step: The step to dump it at.
    """
    for key in ("wall_seconds", "env_steps_per_second", "train_steps_per_second", "episodes_stale", "wasted_fraction"):
        logger.record(f"timing/{key}", summary[key])
    for key, value in summary["policy_lag"].items():
        logger.record(f"timing/policy_lag_{key}", value)
    for name, thread in summary["threads"].items():
        logger.record(f"timing/{name}_busy_seconds", thread["busy_seconds"])
        logger.record(f"timing/{name}_idle_seconds", thread["idle_seconds"])
    logger.dump(step)
