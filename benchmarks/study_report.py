"""The learning study's table and figures, from its records."""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
import textwrap
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
                "budget": budget_range(group),
                "steps_to_threshold": quartile_figures(steps),
                "wall_to_threshold": quartile_figures(times, digits=2),
                "cpu_to_threshold": quartile_figures(cpu, digits=2),
                "return_at_budget": round(statistics.median(fixed_returns)) if fixed_returns else None,
                "fixed_budget": f"{fixed / 1e6:g}M",
                "final_return": round(statistics.median(r["curve"][-1][2] for r in group)),
                "train_rate_alone": rate,
                "wall_at_rate": None if rate is None else quartile_figures([value / rate for value in steps], digits=2),
                "steps_at_least": statistics.median(steps_at_least),
                "wall_at_least": round(statistics.median(wall_at_least)),
            }
        )
    return table


def budget_range(group: list[dict[str, Any]]) -> str:
    """:return: The env-step budget of a configuration's runs, or its range where seeds ran with different ones."""
    low, high = (function(record["budget"] for record in group) / 1e6 for function in (min, max))
    return f"{high:g}M" if low == high else f"{low:g}M-{high:g}M"


def wall_and_cpu_rises(curve: list[list[float]]) -> list[tuple[float, float]]:
    """:return: The wall time and the CPU-seconds between each two consecutive points of a curve with CPU-seconds."""
    return [(after[1] - before[1], after[3] - before[3]) for before, after in itertools.pairwise(curve)]


def without_pauses(record: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """
    Take out of a run's wall time the spans when it was stopped (paused with SIGSTOP while a benchmark ran alone on
    the machine, or starved): between two points of the curve where its processes used less than a quarter of the
    run's median CPU-seconds per wall second, the wall time becomes the CPU-seconds at that median.

    :param record: A run, as logged (with CPU-seconds in its curve).
    :return: The record with its wall times (curve and threshold) corrected, and the seconds taken out.
    """
    curve = record["curve"]
    if len(curve[0]) < 4 or len(curve) < 3:
        return record, 0.0
    rises = wall_and_cpu_rises(curve)
    share = statistics.median(cpu / wall for wall, cpu in rises if wall > 0)
    walls = [cpu / share if wall > 0 and cpu < 0.25 * share * wall else wall for wall, cpu in rises]
    removed = sum(wall for wall, _ in rises) - sum(walls)
    if removed <= 0:
        return record, 0.0
    corrected = [list(curve[0])]
    for point, wall in zip(curve[1:], walls, strict=True):
        corrected.append([point[0], corrected[-1][1] + wall, *point[2:]])
    fixed = {**record, "curve": corrected}
    if record.get("time_to_threshold") is not None:
        at = min(index for index, point in enumerate(curve) if point[0] >= record["steps_to_threshold"])
        fixed["time_to_threshold"] = record["time_to_threshold"] + corrected[at][1] - curve[at][1]
    return fixed, removed


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
    rises = wall_and_cpu_rises(curve)
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


def measured_rates(throughput_file: str | None) -> tuple[dict[tuple[str, str], list[float]], list[dict[str, Any]]]:
    """:return: The training rates measured alone by (task, configuration) (:func:`latest_measurements`), and those
    measurements."""
    measurements = latest_measurements(read_records(throughput_file) if throughput_file is not None else [])
    rates: dict[tuple[str, str], list[float]] = {}
    for measured in measurements:
        rates.setdefault((measured["task"], measured["config"]), []).append(measured["steps_per_second"])
    return rates, measurements


def corrected_records(runs_file: str, cpus: int) -> tuple[list[dict[str, Any]], list[int], list[float]]:
    """:return: The runs of ``runs_file`` without double-counted CPU-seconds (:func:`without_double_counts`) and
    pauses (:func:`without_pauses`), the count of each run's replaced CPU rises and the seconds of pauses taken out."""
    records, corrections, pauses = [], [], []
    for logged in read_records(runs_file):
        counted, doubled = without_double_counts(logged, cpus)
        record, paused = without_pauses(counted)
        records.append(record)
        corrections.append(doubled)
        pauses.append(paused)
    return records, corrections, pauses


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
    records, doubled, paused = corrected_records(runs_file, cpus)
    corrections = [count for count in doubled if count]
    rate_measures, measurements = measured_rates(throughput_file)
    rates = {key: statistics.median(values) for key, values in rate_measures.items()}
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
        counts = [len(values) for values in rate_measures.values()]
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
    if any(paused):
        summary += (
            f" {sum(seconds > 0 for seconds in paused)} runs were stopped or starved for {sum(paused) / 3600:.1f} "
            "hours in all (paused while a benchmark ran alone, or below a quarter of their median CPU share): those "
            "spans count as their CPU-seconds at the run's median share."
        )
    print(table.markdown(), f"\n{summary}", sep="\n")
    if results_folder is not None:
        load = LoadSampler()
        load.samples = [round(min(loads), 1), round(max(loads), 1)]
        result = new_result(name, {"learning_study": table}, load, conditions=summary, packages=STUDY_PACKAGES)
        print(f"\nwrote {save_result(result, results_folder)}")


def seeds_on_grid(group: list[dict[str, Any]], grid: np.ndarray) -> np.ndarray:
    """
    :return: Each seed's return at each grid point (its last evaluation at or before it), NaN past the last
        evaluation of a seed that ran out of budget (a seed that stopped at the threshold keeps its last return);
        one row per seed.
    """
    returns = np.full((len(group), len(grid)), np.nan)
    for row, record in enumerate(group):
        steps = np.array([point[0] for point in record["curve"]], dtype=np.float64)
        values = np.array([point[2] for point in record["curve"]], dtype=np.float64)
        index = np.searchsorted(steps, grid, side="right") - 1
        stopped_at_threshold = record["steps_to_threshold"] is not None
        inside = (index >= 0) & ((grid <= steps[-1]) | stopped_at_threshold)
        returns[row, inside] = values[index[inside]]
    return returns


def plot_configuration(axes: Any, group: list[dict[str, Any]], grid: np.ndarray, label: str) -> None:
    """Plot the median return over the seeds at each env step (line: those still running, and those that stopped at
    the threshold, at their last return), their interquartile range (dark band) and their range (light band)."""
    returns = seeds_on_grid(group, grid)
    present = np.isfinite(returns).any(axis=0)
    with np.errstate(all="ignore"):
        low, q25, median, q75, high = np.nanpercentile(returns[:, present], [0, 25, 50, 75, 100], axis=0)
    seeds = f"{len(group)} seed{'s' if len(group) > 1 else ''}"
    (line,) = axes.plot(grid[present], median, label=f"{label} ({seeds})")
    axes.fill_between(grid[present], q25, q75, color=line.get_color(), alpha=0.3, linewidth=0)
    axes.fill_between(grid[present], low, high, color=line.get_color(), alpha=0.1, linewidth=0)


#: The configurations' labels in the suite figure, where four share a panel: without versions, parentheses and how
#: the rivals run, cut to a line.
SHORT_LABELS = {
    name: textwrap.shorten(re.sub(r" [\d.]+(?= )| \([^)]*\)|, GymNE 2 actors|, rl-zoo's ars.yml.*", "", label), 60)
    for name, label in LABELS.items()
}


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


def figures(runs_file: str, folder: str, throughput_file: str | None = None) -> None:
    """
    Write one learning-curve figure per task (``TASK.png``, every configuration) and one of the suite
    (``suite.png``: per task, lit_sb3's choice, EvoTorch's best configuration and sb3-contrib's ARS, chosen as the
    README's table chooses them, with the rates measured alone in ``throughput_file``): per configuration, the
    median return over the seeds at each env step (see :func:`plot_configuration`), their interquartile range and
    their range.
    """
    import matplotlib
    from render_results import compared_configurations

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler

    Path(folder).mkdir(parents=True, exist_ok=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    records, _, _ = corrected_records(runs_file, os.cpu_count() or 1)
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
    rates = {key: statistics.median(values) for key, values in measured_rates(throughput_file)[0].items()}
    best = list(compared_configurations(study_table(records, rates).rows).values())
    figure, all_axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for axes, task_name in zip(all_axes.flat, by_task, strict=False):
        present = [index for index, family in enumerate(best) if task_name in family]
        shown = [config_names[best[index][task_name][0]["configuration"]] for index in present]
        axes.set_prop_cycle(color=[colours[index] for index in present])  # one colour per family in every panel
        plot_task(axes, task_name, {name: by_task[task_name][name] for name in shown}, SHORT_LABELS)
        axes.set_title(TASKS[task_name].task.env_id)
        axes.legend(fontsize="x-small", loc="lower right")
    for axes in all_axes.flat[len(by_task) :]:
        axes.set_axis_off()
    figure.suptitle("lit_sb3's choice, EvoTorch's best and sb3-contrib's ARS: median over seeds, IQR and range")
    figure.tight_layout()
    figure.savefig(Path(folder) / "suite.png", dpi=90)
    plt.close(figure)
    print(Path(folder) / "suite.png")
