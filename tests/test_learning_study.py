"""The MuJoCo learning study's harness (``benchmarks/study_*.py``): its statistics, its corrections of the clocks,
its job queue and its checkpoints, on which the README's MuJoCo table rests."""

from __future__ import annotations

import json
import math
import os
import pathlib
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from lit_sb3 import ARS


@pytest.fixture(scope="module")
def report(benchmark_module: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_module("study_report")


@pytest.fixture(scope="module")
def study_queue(benchmark_module: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_module("study_queue")


@pytest.fixture(scope="module")
def study_run(benchmark_module: Callable[[str], ModuleType]) -> ModuleType:
    return benchmark_module("study_run")


def record(seed: int, curve: list[list[float]], steps: int | None = None, wall: float | None = None) -> dict[str, Any]:
    """:return: A Swimmer run of our ARS as the study logs it (CPU-seconds to the threshold taken from the curve)."""
    cpu = None if steps is None else next(point[3] for point in curve if point[0] >= steps)
    thresholds = {"steps_to_threshold": steps, "time_to_threshold": wall, "cpu_to_threshold": cpu}
    return {"task": "swimmer", "config": "ars", "seed": seed, "budget": 1_200_000, "curve": curve, **thresholds}


def test_runs_that_never_reached_the_threshold_count_as_infinitely_long(report: ModuleType) -> None:
    assert report.percentiles([400.0, 100.0, 300.0, 200.0, 500.0]) == (200.0, 300.0, 400.0)
    # The 75th percentile lies between a run that reached the threshold and one that did not.
    assert report.percentiles([100.0, 200.0, math.inf]) == (150.0, 200.0, math.inf)
    assert report.percentiles([math.inf, math.inf]) == (math.inf, math.inf, math.inf)
    assert report.quartile_figures([100.0, 200.0, math.inf]) == [200.0, 150.0, "n/r"]
    assert report.quartile_figures([]) is None


def test_the_return_at_a_budget_is_the_last_evaluation_before_it(report: ModuleType) -> None:
    curve = [[0, 0.0, 10.0], [400_000, 5.0, 200.0], [600_000, 8.0, 300.0]]
    assert report.return_at(curve, 500_000) == 200.0
    assert report.return_at(curve, 600_000) == 300.0
    assert report.return_at(curve, 700_000) is None  # the run stopped before it


def test_a_seed_run_again_with_a_larger_budget_counts_once_with_its_later_record(report: ModuleType) -> None:
    first = record(0, [[0, 0.0, 10.0, 0.0], [20_000, 1.0, 100.0, 2.0]])
    again = record(0, [[0, 0.0, 10.0, 0.0], [40_000, 2.0, 330.0, 4.0]], steps=40_000, wall=2.0)
    other = record(1, [[0, 0.0, 10.0, 0.0]])
    halfcheetah = {**other, "task": "halfcheetah"}
    groups = report.group_records([first, halfcheetah, other, again])
    assert list(groups) == [("halfcheetah", "ars"), ("swimmer", "ars")]  # the order of the study's tasks
    assert groups["swimmer", "ars"] == [again, other]


def test_a_paused_span_counts_as_its_cpu_seconds_at_the_runs_median_share(report: ModuleType) -> None:
    # 2 CPU-seconds a second, but 20 CPU-seconds in the 100 s between the third and the fourth evaluation.
    curve = [[0, 0.0, 0.0, 0.0], [1000, 10.0, 1.0, 20.0], [2000, 20.0, 2.0, 40.0], [3000, 120.0, 3.0, 60.0]]
    curve.append([4000, 130.0, 400.0, 80.0])
    fixed, removed = report.without_pauses(record(0, curve, steps=4000, wall=130.0))
    assert removed == pytest.approx(90.0)
    assert [point[1] for point in fixed["curve"]] == pytest.approx([0.0, 10.0, 20.0, 30.0, 40.0])
    assert fixed["time_to_threshold"] == pytest.approx(40.0)
    assert [point[3] for point in fixed["curve"]] == [point[3] for point in curve]  # CPU-seconds untouched
    steady = record(0, [[0, 0.0, 0.0, 0.0], [1000, 10.0, 1.0, 20.0], [2000, 20.0, 2.0, 40.0]])
    assert report.without_pauses(steady) == (steady, 0.0)


def test_cpu_seconds_counted_twice_are_replaced_by_the_runs_rate(report: ModuleType) -> None:
    # 480 CPU-seconds in 10 s on 2 cores: the descendant processes were counted again.
    curve = [[0, 0.0, 0.0, 0.0], [1000, 10.0, 1.0, 20.0], [2000, 20.0, 2.0, 520.0], [3000, 30.0, 400.0, 540.0]]
    logged = record(0, curve, steps=3000, wall=30.0)
    fixed, replaced = report.without_double_counts(logged, cpus=2)
    assert replaced == 1
    assert [point[3] for point in fixed["curve"]] == pytest.approx([0.0, 20.0, 40.0, 60.0])
    assert fixed["cpu_to_threshold"] == pytest.approx(60.0)
    assert report.without_double_counts(logged, cpus=64) == (logged, 0)  # as fast as 64 cores can


def test_the_table_gives_quartiles_over_seeds_and_bounds_where_seeds_did_not_reach(report: ModuleType) -> None:
    records = [
        record(0, [[0, 0.0, 0.0, 0.0], [100_000, 10.0, 330.0, 20.0], [500_000, 50.0, 340.0, 100.0]], 100_000, 10.0),
        record(1, [[0, 0.0, 0.0, 0.0], [200_000, 30.0, 330.0, 60.0], [500_000, 70.0, 350.0, 140.0]], 200_000, 30.0),
        record(2, [[0, 0.0, 0.0, 0.0], [500_000, 60.0, 100.0, 120.0], [1_200_000, 150.0, 200.0, 300.0]]),
    ]
    (row,) = report.study_table(records, {("swimmer", "ars"): 10_000.0}).rows
    assert row["configuration"] == "lit_sb3 ARS" and row["seeds"] == 3 and row["reached"] == "2/3"
    assert row["steps_to_threshold"] == [200_000, 150_000, "n/r"]
    assert row["wall_to_threshold"] == [30.0, 20.0, "n/r"]
    assert row["cpu_to_threshold"] == [60.0, 40.0, "n/r"]
    assert row["wall_at_rate"] == [20.0, 15.0, "n/r"]  # the env steps at 10,000 a second
    assert row["return_at_budget"] == 340 and row["final_return"] == 340  # the fixed budget is 500,000 steps
    assert row["steps_at_least"] == 200_000 and row["wall_at_least"] == 30
    assert row["budget"] == "1.2M"


def test_the_queue_runs_each_job_once_in_order_and_keeps_the_failed_ones(
    study_queue: ModuleType, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    script = tmp_path / "study.py"
    script.write_text(
        "import json, sys\n"
        f"with open({str(calls)!r}, 'a') as file:\n"
        "    file.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "sys.exit(3 if sys.argv[sys.argv.index('--seed') + 1] == '1' else 0)\n"
    )
    monkeypatch.setattr(study_queue, "STUDY_SCRIPT", script)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("swimmer ars 0\n# a comment\n\nswimmer ars 1 5000\nhopper cem 2\n")
    study_queue.queue(str(jobs), "runs.jsonl")
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [call[call.index("--seed") + 1] for call in ran] == ["0", "1", "2"]
    assert " ".join(ran[1]) == "run --task swimmer --config ars --seed 1 --out runs.jsonl --budget 5000"
    assert jobs.read_text() == "" and pathlib.Path(f"{jobs}.running").read_text() == ""
    (failed,) = pathlib.Path(f"{jobs}.failed").read_text().splitlines()
    assert failed.startswith("swimmer ars 1 5000  # exit code 3 at ")


def test_the_job_of_a_queue_that_was_killed_goes_back_to_the_head(
    study_queue: ModuleType, tmp_path: pathlib.Path
) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    jobs, running = tmp_path / "jobs.txt", tmp_path / "jobs.txt.running"
    jobs.write_text("swimmer ars 3\n")
    alive = f"{os.getpid()} hopper ars 1"
    running.write_text(f"{ended.pid} humanoid ars 0 30000000\n{alive}\n")
    study_queue.requeue_interrupted(str(jobs), str(running))
    assert jobs.read_text().splitlines() == ["humanoid ars 0 30000000", "swimmer ars 3"]
    assert running.read_text().splitlines() == [alive]


def test_the_curve_keeps_the_first_crossing_and_goes_on_after_a_resume(study_run: ModuleType) -> None:
    swimmer = study_run.TASKS["swimmer"]  # threshold 325, an evaluation every 20,000 steps, fixed budget 500,000
    curve = study_run.StudyCurve(swimmer)
    curve.start()
    assert not curve.add(0, lambda: 10.0) and not curve.due(19_999) and curve.due(20_000)
    time.sleep(0.05)
    assert not curve.add(20_000, lambda: 330.0)  # reached, but the fixed budget is not spent
    assert not curve.add(40_000, lambda: 300.0)
    state = json.loads(json.dumps(curve.state()))
    curve.fill(study_run.Record("swimmer", "ars", 0, 1_200_000))
    resumed = study_run.StudyCurve(swimmer)
    resumed.restore(state)
    resumed.start()
    assert resumed.elapsed()[0] >= state["elapsed"][0] >= 0.05  # the clock goes on from the checkpoint's
    assert resumed.add(500_000, lambda: 320.0)  # done: the threshold was reached before the checkpoint
    logged = study_run.Record("swimmer", "ars", 0, 1_200_000)
    resumed.fill(logged)
    assert [point[0] for point in logged.curve] == [0, 20_000, 40_000, 500_000]
    assert logged.steps_to_threshold == 20_000 and logged.resumes == 1
    assert logged.time_to_threshold == state["at_threshold"][1]


def test_a_run_of_ours_resumed_from_its_checkpoint_repeats_the_uninterrupted_run(
    study_run: ModuleType, tmp_path: pathlib.Path
) -> None:
    # Hopper: observations normalised, the alive bonus taken off, episodes of every length.
    whole = study_run.run("hopper", "ars", 0, 12_000, checkpoints=tmp_path / "whole")
    study_run.run("hopper", "ars", 0, 6_000, checkpoints=tmp_path / "parts")
    resumed = study_run.run("hopper", "ars", 0, 12_000, checkpoints=tmp_path / "parts")
    assert resumed.resumes == 1 and whole.resumes == 0
    assert resumed.curve[-1][0] == whole.curve[-1][0] >= 12_000
    assert resumed.curve[-1][2] == whole.curve[-1][2]  # the final policy's evaluation
    folders = [tmp_path / run / "hopper-ars-0" for run in ("whole", "parts")]
    parameters = [ARS.load(folder / "model.zip").policy.parameters_to_vector() for folder in folders]
    np.testing.assert_array_equal(*parameters)
    normalisations = [pickle.loads((folder / "vec_normalize.pkl").read_bytes()).obs_rms for folder in folders]
    assert normalisations[0].count == normalisations[1].count
    np.testing.assert_array_equal(normalisations[0].mean, normalisations[1].mean)
    np.testing.assert_array_equal(normalisations[0].var, normalisations[1].var)
