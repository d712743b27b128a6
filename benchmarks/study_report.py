"""The learning study's table and figures, from its records."""

from __future__ import annotations

import itertools
import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from learning import N_EVAL_EPISODES
from study_setup import LABELS, STUDY_PACKAGES, TASKS

from lit_sb3.cli.bench_results import (
    Column,
    LoadSampler,
    Table,
    new_result,
    save_result,
)


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """
    :return: The 25th, 50th and 75th percentiles (linear interpolation), runs that never reached the threshold
        counting as infinite: a percentile that interpolates towards one of them is infinite too.
    """
    array = np.asarray(values, dtype=np.float64)
    largest = float(array[np.isfinite(array)].max(initial=0.0))
    sentinel = 2.0 * largest + 1.0
    quartiles = np.percentile(np.where(np.isfinite(array), array, sentinel), [25, 50, 75])
    q25, q50, q75 = (np.inf if value > largest else float(value) for value in quartiles)
    return q25, q50, q75


def quartile_figures(values: list[float], digits: int = 0) -> list[float | str] | None:
    """:return: ``[median, 25th, 75th percentile]`` (rounded; "n/r" where infinite), None without values."""
    if not values:
        return None
    q25, q50, q75 = percentiles(values)
    return [round(value, digits) if np.isfinite(value) else "n/r" for value in (q50, q25, q75)]


def return_at(curve: list[list[float]], steps: int) -> float | None:
    """:return: The last evaluation at or before ``steps`` env steps, if the run got there."""
    if curve[-1][0] < steps and curve[-1][0] < 0.99 * steps:
        return None
    before = [point for point in curve if point[0] <= steps]
    return before[-1][2] if before else None


def read_records(runs_file: str) -> list[dict[str, Any]]:
    with open(runs_file) as file:
        return [json.loads(line) for line in file if line.strip()]


def group_records(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """:return: The records by (task, configuration), in the order of ``TASKS`` and ``LABELS``; of two records of
    the same seed, the later one (a run again with a larger budget)."""
    latest = {(record["task"], record["config"], record["seed"]): record for record in records}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in latest.values():
        groups.setdefault((record["task"], record["config"]), []).append(record)
    tasks, configs = list(TASKS), list(LABELS)
    return dict(sorted(groups.items(), key=lambda item: (tasks.index(item[0][0]), configs.index(item[0][1]))))


STUDY_COLUMNS = [
    Column("task", "task"),
    Column("configuration", "configuration"),
    Column("seeds", "seeds"),
    Column("reached", "reached"),
    Column("budget", "run budget"),
    Column("steps_to_threshold", "env steps to threshold: median (IQR)", ",.0f"),
    Column("wall_to_threshold", "wall time to threshold in the study (s): median (IQR)", ".0f"),
    Column("cpu_to_threshold", "CPU-seconds to threshold: median (IQR)", ".0f"),
    Column("return_at_budget", "return at fixed budget (median)", ".0f"),
    Column("fixed_budget", "fixed budget"),
    Column("final_return", "return at the end of the run (median)", ".0f"),
    Column("train_rate_alone", "train steps/s alone", ",.0f"),
    Column("wall_at_rate", "wall time to threshold at that rate (s): median (IQR)", ".0f"),
]


def study_table(records: list[dict[str, Any]], rates: dict[tuple[str, str], float]) -> Table:
    """
    :param records: The runs.
    :param rates: Training steps per second measured alone (the median of the measurements), by (task,
        configuration).
    :return: One row per (task, configuration): seeds that reached the threshold, the quartiles of their env steps,
        wall time and CPU-seconds to it (runs without a CPU measure left out of that column), the median return at
        the task's fixed budget and at the end of the runs, and the wall time the steps would take at the
        configuration's rate. Rows also hold, not shown, the medians over seeds of the env steps and the wall time
        in the study to the threshold or, where it was not reached, to the end of the run (``steps_at_least``,
        ``wall_at_least``: lower bounds of the medians to the threshold).
    """
    table = Table(STUDY_COLUMNS)
    for (task_name, config_name), group in group_records(records).items():
        fixed = TASKS[task_name].fixed_budget
        steps = [np.inf if r["steps_to_threshold"] is None else r["steps_to_threshold"] for r in group]
        times = [np.inf if r["time_to_threshold"] is None else r["time_to_threshold"] for r in group]
        cpu = [
            np.inf if r["cpu_to_threshold"] is None else r["cpu_to_threshold"] for r in group if "cpu_to_threshold" in r
        ]
        fixed_returns = [value for r in group if (value := return_at(r["curve"], fixed)) is not None]
        ends = [r["curve"][-1] for r in group]
        steps_at_least = [min(value, end[0]) for value, end in zip(steps, ends, strict=True)]
        wall_at_least = [min(value, end[1]) for value, end in zip(times, ends, strict=True)]
        rate = rates.get((task_name, config_name))
        table.rows.append(
            {
                "task": task_name,
                "configuration": LABELS[config_name],
                "seeds": len(group),
                "reached": f"{sum(r['steps_to_threshold'] is not None for r in group)}/{len(group)}",
                "budget": f"{max(r['budget'] for r in group) / 1e6:g}M",
                "steps_to_threshold": quartile_figures(steps),
                "wall_to_threshold": quartile_figures(times),
                "cpu_to_threshold": quartile_figures(cpu),
                "return_at_budget": round(statistics.median(fixed_returns)) if fixed_returns else None,
                "fixed_budget": f"{fixed / 1e6:g}M",
                "final_return": round(statistics.median(r["curve"][-1][2] for r in group)),
                "train_rate_alone": rate,
                "wall_at_rate": None if rate is None else quartile_figures([value / rate for value in steps]),
                "steps_at_least": statistics.median(steps_at_least),
                "wall_at_least": round(statistics.median(wall_at_least)),
            }
        )
    return table


def without_double_counts(record: dict[str, Any], cpus: int) -> tuple[dict[str, Any], int]:
    """
    Take out of a run's CPU-seconds what runs measured before :class:`study_run.ProcessTreeCpu` told processes apart
    by their start since boot counted twice: a step of the wall clock made every descendant process look new, and the
    clock jumped by their CPU-seconds so far. Where CPU-seconds rose between two points of the curve faster than
    ``cpus`` cores can (with 10% and 30 s to spare), the rise becomes the run's rate elsewhere times the wall time.

    :param record: A run, as logged.
    :param cpus: The cores of the machine the run ran on.
    :return: The record with its CPU-seconds (curve and threshold) corrected, and how many rises were replaced.
    """
    curve = record["curve"]
    if len(curve[0]) < 4:
        return record, 0
    rises = [(after[1] - before[1], after[3] - before[3]) for before, after in itertools.pairwise(curve)]
    doubled = [cpu > 1.1 * cpus * wall + 30.0 for wall, cpu in rises]
    if not any(doubled):
        return record, 0
    kept = [rise for rise, bad in zip(rises, doubled, strict=True) if not bad]
    kept_wall = sum(wall for wall, _ in kept)
    rate = sum(cpu for _, cpu in kept) / kept_wall if kept_wall > 0 else float(cpus)
    corrected = [list(curve[0])]
    for point, (wall, cpu), bad in zip(curve[1:], rises, doubled, strict=True):
        corrected.append([*point[:3], corrected[-1][3] + (rate * wall if bad else cpu)])
    fixed = {**record, "curve": corrected}
    if record.get("cpu_to_threshold") is not None:
        at = max(index for index, point in enumerate(curve) if point[0] <= record["steps_to_threshold"])
        fixed["cpu_to_threshold"] = record["cpu_to_threshold"] + corrected[at][3] - curve[at][3]
    return fixed, sum(doubled)


def latest_measurements(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:return: Of the ``throughput`` measurements of each (task, configuration), those made at the commit of its
    last one (the code measured before is not the code of the rate; records without a commit count as one)."""
    last_commit = {(measured["task"], measured["config"]): measured.get("commit") for measured in measurements}
    return [m for m in measurements if m.get("commit") == last_commit[m["task"], m["config"]]]


def report(runs_file: str, throughput_file: str | None, results_folder: str | None, name: str) -> None:
    """
    Print the table of every (task, configuration) in the log (see :func:`study_table`), CPU-seconds without double
    counts (:func:`without_double_counts`); with ``results_folder``, also write it as the result file ``name``.
    """
    cpus = os.cpu_count() or 1
    checked = [without_double_counts(record, cpus) for record in read_records(runs_file)]
    records = [record for record, _ in checked]
    corrections = [count for _, count in checked if count]
    measurements = latest_measurements(read_records(throughput_file) if throughput_file is not None else [])
    measured_rates: dict[tuple[str, str], list[float]] = {}
    for measured in measurements:
        measured_rates.setdefault((measured["task"], measured["config"]), []).append(measured["steps_per_second"])
    rates = {key: statistics.median(values) for key, values in measured_rates.items()}
    table = study_table(records, rates)
    loads = [value for r in records for value in (r["load_before"], r["load_after"])]
    latest = [record for group in group_records(records).values() for record in group]
    wall_hours, cpu_hours = (sum(record["curve"][-1][index] for record in latest) / 3600 for index in (1, 3))
    summary = (
        f"{len(records)} runs of {runs_file}, one at a time; load average {min(loads):.1f}-{max(loads):.1f} "
        f"(median {statistics.median(loads):.1f}) at the runs' starts and ends. The {len(latest)} runs in the table "
        f"trained for {wall_hours:.1f} hours of wall time and {cpu_hours:.1f} CPU-hours in all (start-up and "
        "evaluations of the centre left out). Median (interquartile range) over seeds; n/r: not reached within the "
        "budget, counted as infinitely long."
    )
    if measurements:
        counts = [len(values) for values in measured_rates.values()]
        runs = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
        rate_loads = [value for measured in measurements for value in (measured["load_before"], measured["load_after"])]
        summary += (
            " The last two columns: each configuration's training rate measured alone (the `throughput` command, seed "
            f"0, the median of {runs} runs at the commit of its last one; load average {min(rate_loads):.1f}-"
            f"{max(rate_loads):.1f}) and the wall time of the env steps to the threshold at that rate."
        )
    if corrections:
        summary += (
            f" The CPU-seconds of {len(corrections)} runs rose faster than {cpus} cores can between "
            f"{sum(corrections)} pairs of evaluations (a step of the wall clock counted their processes twice): "
            "those rises are replaced by each run's rate elsewhere."
        )
    print(table.markdown(), f"\n{summary}", sep="\n")
    if results_folder is not None:
        load = LoadSampler()
        load.samples = [round(min(loads), 1), round(max(loads), 1)]
        result = new_result(name, {"learning_study": table}, load, conditions=summary, packages=STUDY_PACKAGES)
        print(f"\nwrote {save_result(result, results_folder)}")


def seeds_on_grid(group: list[dict[str, Any]], grid: np.ndarray) -> np.ndarray:
    """
    :return: Each seed's return at each grid point (its last evaluation at or before it), NaN past the seed's
        last evaluation; one row per seed.
    """
    returns = np.full((len(group), len(grid)), np.nan)
    for row, record in enumerate(group):
        steps = np.array([point[0] for point in record["curve"]], dtype=np.float64)
        values = np.array([point[2] for point in record["curve"]], dtype=np.float64)
        index = np.searchsorted(steps, grid, side="right") - 1
        inside = (index >= 0) & (grid <= steps[-1])
        returns[row, inside] = values[index[inside]]
    return returns


def plot_configuration(axes: Any, group: list[dict[str, Any]], grid: np.ndarray, label: str) -> None:
    """Plot the median return over the seeds still running at each env step (line), their interquartile range
    (dark band) and their range (light band)."""
    returns = seeds_on_grid(group, grid)
    present = np.isfinite(returns).any(axis=0)
    with np.errstate(all="ignore"):
        low, q25, median, q75, high = np.nanpercentile(returns[:, present], [0, 25, 50, 75, 100], axis=0)
    seeds = f"{len(group)} seed{'s' if len(group) > 1 else ''}"
    (line,) = axes.plot(grid[present], median, label=f"{label} ({seeds})")
    axes.fill_between(grid[present], q25, q75, color=line.get_color(), alpha=0.3, linewidth=0)
    axes.fill_between(grid[present], low, high, color=line.get_color(), alpha=0.1, linewidth=0)


def plot_task(axes: Any, task_name: str, groups: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> None:
    """Plot the configurations ``groups`` of a task, with its threshold.

    :param labels: Each configuration's label in the legend.
    """
    task = TASKS[task_name].task
    largest = max(record["curve"][-1][0] for group in groups.values() for record in group)
    grid = np.linspace(0, largest, 400)
    for config_name, group in groups.items():
        plot_configuration(axes, group, grid, labels[config_name])
    axes.axhline(task.threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {task.threshold:g}")
    axes.set_xlabel("env steps")
    axes.grid(alpha=0.3)


def figures(runs_file: str, folder: str) -> None:
    """
    Write one learning-curve figure per task (``TASK.png``, every configuration) and one of the suite
    (``suite.png``: per task, lit_sb3's choice, EvoTorch's best configuration and sb3-contrib's ARS, ranked as
    ``render_results.py`` ranks them): per configuration, the median return over the seeds still running at each env
    step, their interquartile range and their range.
    """
    import matplotlib
    from render_results import RIVALS, families

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler

    Path(folder).mkdir(parents=True, exist_ok=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    records = read_records(runs_file)
    by_task: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (task_name, config_name), group in group_records(records).items():
        by_task.setdefault(task_name, {})[config_name] = group
    for task_name, configs in by_task.items():
        figure, axes = plt.subplots(figsize=(8, 5 + 0.2 * len(configs)))  # the legend goes below the curves
        axes.set_prop_cycle(cycler(linestyle=["-", "--", ":"]) * cycler(color=colours))  # past 10 colours, dashed
        plot_task(axes, task_name, configs, LABELS)
        axes.set_ylabel(f"mean return of the centre, {N_EVAL_EPISODES} episodes")
        axes.set_title(f"{TASKS[task_name].task.env_id}: median over seeds, IQR and range")
        axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12))
        figure.tight_layout()
        figure.savefig(Path(folder) / f"{task_name}.png", dpi=120)
        plt.close(figure)
        print(Path(folder) / f"{task_name}.png")
    config_names = {label: name for name, label in LABELS.items()}
    rows = study_table(records, {}).rows
    best = [families(rows, prefix) for prefix in ("lit_sb3", *(prefix for prefix, _ in RIVALS.values()))]
    figure, all_axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for axes, task_name in zip(all_axes.flat, by_task, strict=False):
        present = [index for index, family in enumerate(best) if task_name in family]
        shown = [config_names[best[index][task_name][0]["configuration"]] for index in present]
        axes.set_prop_cycle(color=[colours[index] for index in present])  # one colour per family in every panel
        plot_task(axes, task_name, {name: by_task[task_name][name] for name in shown}, LABELS)
        axes.set_title(TASKS[task_name].task.env_id)
        axes.legend(fontsize="x-small")
    for axes in all_axes.flat[len(by_task) :]:
        axes.set_axis_off()
    figure.suptitle("lit_sb3's choice, EvoTorch's best and sb3-contrib's ARS: median over seeds, IQR and range")
    figure.tight_layout()
    figure.savefig(Path(folder) / "suite.png", dpi=90)
    plt.close(figure)
    print(Path(folder) / "suite.png")
