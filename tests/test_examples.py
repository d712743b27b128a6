"""Every script in examples/ runs as a user runs it (a subprocess, tiny budget) and leaves sane outputs behind."""

from __future__ import annotations

import csv
import json
import pathlib
import re
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3 import ARS, CEM, CMAES, ES, PGPE

EXAMPLES_DIR = pathlib.Path(__file__).resolve().parent.parent / "examples"
#: Pendulum's reward is at least -(pi^2 + 0.1 * 8^2 + 0.001 * 2^2) per step, 200 steps an episode.
PENDULUM_WORST = -16.2736044 * 200

#: The tiny budget of each example.
ARGUMENTS = {
    "es_pendulum": ["--total-timesteps", "1500", "--pop-size", "6", "--n-eval-episodes", "1"],
    "cem_cartpole": ["--total-timesteps", "1500", "--pop-size", "8"],
    "cmaes_swimmer": ["--total-timesteps", "1", "--pop-size", "4"],
    "ars_halfcheetah": ["--total-timesteps", "1", "--n-delta", "2"],
    "pgpe_walker2d": ["--total-timesteps", "1", "--popsize", "4", "--num-interactions", "400", "--workers", "1"],
    "ask_tell_cmaes": ["--rounds", "15"],
    "async_ppo_cartpole": [
        *["--total-timesteps", "256", "--n-envs", "2", "--workers", "2", "--n-steps", "128", "--batch-size", "64"],
        *["--n-epochs", "1", "--eval-episodes", "2"],
    ],
    "engine_ppo_cartpole": [
        *["--total-env-steps", "1000", "--n-envs", "2", "--n-steps", "64", "--batch-size", "64", "--n-epochs", "1"],
        *["--eval-interval", "400", "--eval-episodes", "2", "--checkpoint-interval", "2"],
    ],
    "ray_ars_cartpole": ["--total-timesteps", "1500", "--n-delta", "4"],
    "experiment_control": [
        *["--train-timesteps", "1600", "--gravity", "6", "10", "14", "--mass", "0.5", "1.5"],
        *["--seeds", "0", "1", "--episodes", "1"],
    ],
}


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    output_dir: pathlib.Path


#: Examples run on their own, after the others: a Ray instance starting beside eight busy examples on two cores can
#: miss Ray's own start-up deadline.
RUN_ALONE = {"ray_ars_cartpole"}


def start(name: str, base: pathlib.Path) -> tuple[subprocess.Popen[bytes], pathlib.Path, pathlib.Path, pathlib.Path]:
    """Start an example as a user would, on its tiny budget: the process, its output folder, stdout and stderr."""
    output_dir = base / name
    stdout, stderr = (base / f"{name}.{stream}" for stream in ("out", "err"))
    command = [sys.executable, str(EXAMPLES_DIR / f"{name}.py"), *ARGUMENTS[name], "--output-dir", str(output_dir)]
    with stdout.open("w") as out, stderr.open("w") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, cwd=base), output_dir, stdout, stderr


def wait_for(started: dict[str, tuple], seconds: float) -> dict[str, Run]:
    """:return: The runs of the started examples, each killed if it is still running after ``seconds`` in all."""
    deadline = time.monotonic() + seconds
    results = {}
    try:
        for name, (process, output_dir, stdout, stderr) in started.items():
            returncode = process.wait(timeout=max(deadline - time.monotonic(), 1))
            results[name] = Run(returncode, stdout.read_text(), stderr.read_text(), output_dir)
    finally:
        for process, *_ in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The examples but those run alone, started at once (they mostly wait for their workers and imports)."""
    base = tmp_path_factory.mktemp("examples")
    return wait_for({name: start(name, base) for name in ARGUMENTS if name not in RUN_ALONE}, 240)


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The Ray example by itself."""
    return wait_for({"ray_ars_cartpole": start("ray_ars_cartpole", tmp_path_factory.mktemp("ray_example"))}, 240)


def test_every_example_is_tested() -> None:
    assert sorted(path.stem for path in EXAMPLES_DIR.glob("*.py")) == sorted(ARGUMENTS)


def finished(runs: dict[str, Run], name: str) -> Run:
    run = runs[name]
    assert run.returncode == 0, run.stderr
    return run


def progress(run: Run) -> list[dict[str, float]]:
    with (run.output_dir / "progress.csv").open() as stream:
        return [{key: float(value) for key, value in row.items() if value} for row in csv.DictReader(stream)]


def final_return(run: Run, env_id: str) -> float:
    match = re.search(rf"final policy on {env_id}: (-?[\d.]+) \+/- ([\d.]+) over \d+ episodes", run.stdout)
    assert match, run.stdout
    return float(match.group(1))


def test_es_pendulum(runs: dict[str, Run]) -> None:
    run = finished(runs, "es_pendulum")
    rows = progress(run)
    assert len(rows) >= 2 and rows[-1]["time/total_timesteps"] >= 1500
    assert all(PENDULUM_WORST <= row["rollout/ep_rew_mean"] <= 0 for row in rows)
    assert all(row["time/total_timesteps"] == 6 * 200 * (index + 1) for index, row in enumerate(rows))
    model = ES.load(run.output_dir / "model.zip")
    assert model.pop_size == 6 and model.policy_kwargs == {"net_arch": [32]}
    assert PENDULUM_WORST <= final_return(run, "Pendulum-v1") <= 0


def test_cem_cartpole(runs: dict[str, Run]) -> None:
    run = finished(runs, "cem_cartpole")
    rows = progress(run)
    assert rows and rows[-1]["time/total_timesteps"] >= 1500
    assert all(8 <= row["rollout/ep_rew_mean"] <= 500 for row in rows)
    assert CEM.load(run.output_dir / "model.zip").num_timesteps == rows[-1]["time/total_timesteps"]
    assert 8 <= final_return(run, "CartPole-v1") <= 500


def test_cmaes_swimmer(runs: dict[str, Run]) -> None:
    run = finished(runs, "cmaes_swimmer")
    [row] = progress(run)
    assert row["time/total_timesteps"] == 4 * 1000  # one round: 4 candidates, one 1000-step episode each
    model = CMAES.load(run.output_dir / "model.zip")
    assert model.n_params == 8 * 2  # a linear map without bias, as in the ARS paper
    assert np.isfinite(final_return(run, "Swimmer-v5"))


def test_ars_halfcheetah_keeps_its_observation_statistics(runs: dict[str, Run]) -> None:
    run = finished(runs, "ars_halfcheetah")
    [row] = progress(run)
    assert row["time/total_timesteps"] == 4 * 1000
    env = VecNormalize(make_vec_env("HalfCheetah-v5"), norm_reward=False)
    model = ARS.load(run.output_dir / "model.zip", env=env)
    assert model.n_delta == 2 and env.obs_rms.count >= 4000  # every candidate's observations, merged once
    assert np.all(env.obs_rms.var > 0)
    env.close()
    assert np.isfinite(final_return(run, "HalfCheetah-v5"))


def test_pgpe_walker2d_grows_its_round_to_the_interaction_budget(runs: dict[str, Run]) -> None:
    run = finished(runs, "pgpe_walker2d")
    [row] = progress(run)
    # Batches of 4 candidates until their episodes took 400 env steps: more than one batch while the walker falls.
    assert row["time/total_timesteps"] >= 400 and row["train/pop_size"] % 4 == 0 and row["train/pop_size"] >= 8
    env = VecNormalize(make_vec_env("Walker2d-v5"), norm_reward=False)
    model = PGPE.load(run.output_dir / "model.zip", env=env)
    assert model.n_params == (17 + 1) * 6  # a linear map with bias
    assert model.num_interactions == 400 and model.alive_bonus_offset == -1.0
    assert env.obs_rms.count >= row["time/total_timesteps"]  # every candidate's observations, merged once
    env.close()
    assert np.isfinite(final_return(run, "Walker2d-v5"))


def test_ask_tell_cmaes_approaches_the_known_optimum(runs: dict[str, Run]) -> None:
    run = finished(runs, "ask_tell_cmaes")
    with (run.output_dir / "history.csv").open() as stream:
        history = list(csv.DictReader(stream))
    assert [int(row["round"]) for row in history] == list(range(1, 16))
    mean_costs = [float(row["mean_cost"]) for row in history]
    assert mean_costs[-1] < 0.5 * mean_costs[0]
    costs = [float(value) for value in re.findall(r"cost (\d+\.\d+)$", run.stdout, flags=re.MULTILINE)]
    assert len(costs) == 2
    found, optimum = costs
    assert optimum <= found + 1e-3  # nothing beats the LQR gain


def test_experiment_control_grid(runs: dict[str, Run]) -> None:
    run = finished(runs, "experiment_control")
    with (run.output_dir / "grid.csv").open() as stream:
        rows = list(csv.reader(stream))
    assert rows[0] == ["gravity", "mass=0.5", "mass=1.5"]
    assert [float(row[0]) for row in rows[1:]] == [6.0, 10.0, 14.0]
    grid = np.array([[float(value) for value in row[1:]] for row in rows[1:]])
    assert grid.shape == (3, 2)
    assert np.all((grid >= PENDULUM_WORST) & (grid <= 0))
    assert len(np.unique(grid)) == grid.size  # the options reached the environment: every cell differs
    import matplotlib.image

    image = matplotlib.image.imread(run.output_dir / "heatmap.png")
    assert image.ndim == 3 and image.shape[0] > 200 and image.std() > 0
    table = run.stdout.splitlines()[2:5]
    assert [line.split()[0] for line in table] == ["6", "10", "14"] and all(len(line.split()) == 3 for line in table)
    assert (run.output_dir / "model.zip").is_file()


def test_async_ppo_cartpole_reports_its_workers(runs: dict[str, Run]) -> None:
    run = finished(runs, "async_ppo_cartpole")
    rows = progress(run)
    assert len(rows) >= 2 and rows[-1]["time/total_timesteps"] >= 256
    # A rollout is whole episodes of at least n_steps = 128 steps (the IndexableMultiEnv is one environment).
    steps = [row["time/total_timesteps"] for row in rows]
    assert all(later - earlier >= 128 for earlier, later in zip([0.0, *steps], steps, strict=False))
    assert all(8 <= row["rollout/ep_rew_mean"] <= 500 for row in rows)
    model = PPO.load(run.output_dir / "model.zip")
    assert model.num_timesteps == steps[-1] and model.n_steps == 128
    report_text = run.stdout[run.stdout.index("profiler report:\n") + len("profiler report:\n") :]
    report = json.loads(report_text[: report_text.index("\nfinal policy on")])
    assert report["transport"]["backend"] == "processes" and report["worker"]["workers"] == 2
    assert report["trainer"]["consumed_steps"] == report["trainer"]["num_timesteps"] == model.num_timesteps
    assert report["trainer"]["train_calls"] == len(rows)
    # Both workers played (one environment each), and together at least what the trainer consumed.
    assert all(count > 0 for count in report["worker"]["episodes"])
    assert sum(report["worker"]["steps"]) >= model.num_timesteps and report["worker"]["restarts"] == 0
    assert 8 <= final_return(run, "CartPole-v1") <= 500


def test_engine_ppo_cartpole_evaluates_and_checkpoints(runs: dict[str, Run]) -> None:
    run = finished(runs, "engine_ppo_cartpole")
    summary = json.loads((run.output_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 1000 and summary["worker_restarts"] == 0
    evaluations = json.loads((run.output_dir / "evaluations.json").read_text())
    assert len(evaluations) >= 2  # every 400 env steps of at least 1000
    assert [row["env_steps"] for row in evaluations] == sorted(row["env_steps"] for row in evaluations)
    assert all(8 <= row["mean_return"] <= 500 for row in evaluations)
    checkpoints = sorted(
        int(path.name.removeprefix("train_step_")) for path in (run.output_dir / "checkpoints").iterdir()
    )
    assert checkpoints and all(step % 2 == 0 for step in checkpoints)
    last = run.output_dir / "checkpoints" / f"train_step_{checkpoints[-1]}"
    counters = json.loads((last / "counters.json").read_text())
    assert counters["train_steps"] == checkpoints[-1] and counters["seed"] == 0
    assert PPO.load(last / "algorithm.zip").n_steps == 64
    model = PPO.load(run.output_dir / "model.zip")
    assert model.num_timesteps == summary["env_steps"]
    assert f"checkpoints: train_step_{checkpoints[0]}" in run.stdout


def test_ray_ars_cartpole_matches_local_processes(ray_run: dict[str, Run]) -> None:
    run = finished(ray_run, "ray_ars_cartpole")
    rows = progress(run)
    assert rows and rows[-1]["time/total_timesteps"] >= 1500
    assert ARS.load(run.output_dir / "model.zip").num_timesteps == rows[-1]["time/total_timesteps"]
    assert "Ray actors and local processes end with the same weights" in run.stdout
    assert 8 <= final_return(run, "CartPole-v1") <= 500
