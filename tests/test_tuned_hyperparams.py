"""The hyper-parameter files shipped with lit_sb3: every entry is a configuration the learning study ran, and
``lit-sb3 train`` uses it when no file is given."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from lit_sb3 import CMAES
from lit_sb3.cli import main
from lit_sb3.cli.hyperparams import TUNED_FOLDER, load_hyperparams, tuned_env_ids
from lit_sb3.cli.train import ALGORITHMS

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
#: The learning study's configuration behind each shipped entry, by (algorithm, environment id).
STUDY_CONFIGURATIONS = {
    ("ars", "HalfCheetah-v5"): "ars-update-every-3",
    ("ars", "Hopper-v5"): "ars",
    ("ars", "Ant-v5"): "ars",
    ("ars", "Humanoid-v5"): "ars",
    ("ars", "Swimmer-v5"): "ars-sample-std",
    ("cmaes", "HalfCheetah-v5"): "cmaes",
    ("cmaes", "Swimmer-v5"): "cmaes",
    ("snes", "HalfCheetah-v5"): "snes",
    ("snes", "Swimmer-v5"): "snes-stdev-1",
    ("xnes", "Swimmer-v5"): "xnes",
    ("xnes", "Hopper-v5"): "xnes-bias-stdev-0.05-no-alive-bonus",
    ("cem", "Swimmer-v5"): "cem",
    ("es", "HalfCheetah-v5"): "es",
    ("es", "Swimmer-v5"): "es",
    ("pgpe", "Walker2d-v5"): "pgpe-speed-3x",
}
STUDY_TASKS = {
    "HalfCheetah-v5": "halfcheetah",
    "Hopper-v5": "hopper",
    "Swimmer-v5": "swimmer",
    "Ant-v5": "ant",
    "Humanoid-v5": "humanoid",
    "Walker2d-v5": "walker2d",
}


@pytest.fixture(scope="module")
def study_setup(benchmark_module: Callable[[str], ModuleType]) -> ModuleType:
    """The study's tasks and configurations (``benchmarks/study_setup.py``)."""
    return benchmark_module("study_setup")


@pytest.fixture(scope="module")
def study_runs(benchmark_module: Callable[[str], ModuleType]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The MuJoCo study's records by (task, configuration)."""
    report = benchmark_module("study_report")
    return report.group_records(report.read_records(str(BENCHMARKS / "study_runs" / "runs.jsonl")))


def test_every_shipped_entry_is_named_here() -> None:
    shipped = {(path.stem, env_id) for path in TUNED_FOLDER.glob("*.yml") for env_id in tuned_env_ids(path.stem)}
    assert shipped == set(STUDY_CONFIGURATIONS)
    assert {path.stem for path in TUNED_FOLDER.glob("*.yml")} <= set(ALGORITHMS)


@pytest.mark.parametrize(("algo_name", "env_id"), sorted(STUDY_CONFIGURATIONS))
def test_a_shipped_entry_is_what_the_study_ran(
    algo_name: str,
    env_id: str,
    study_setup: ModuleType,
    study_runs: dict[tuple[str, str], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study = study_setup
    built: dict[str, Any] = {}

    def record(name: str) -> Any:
        return lambda policy, env, seed, **kwargs: built.update(name=name, policy=policy, kwargs=kwargs)

    for name in ("ARS", "CMAES", "SNES", "XNES", "CEM", "ES", "PGPE"):
        monkeypatch.setattr(study, name, record(name))
    configuration = study.CONFIGS[STUDY_CONFIGURATIONS[algo_name, env_id]]
    task = study.TASKS[STUDY_TASKS[env_id]]
    configuration.make_model(task, None, 0)
    entry = load_hyperparams(TUNED_FOLDER / f"{algo_name}.yml", env_id, ALGORITHMS[algo_name])
    assert built["name"] == ALGORITHMS[algo_name].__name__
    assert (entry.policy, entry.algo_kwargs) == (built["policy"], built["kwargs"])
    normalized = configuration.normalize if configuration.normalize is not None else task.task.normalize
    assert entry.normalize_kwargs == ({"norm_obs": True, "norm_reward": False} if normalized else None)
    # The task's budget, or a larger one a seed of the configuration was run on to in the MuJoCo study's records.
    ran = study_runs.get((STUDY_TASKS[env_id], STUDY_CONFIGURATIONS[algo_name, env_id]), [])
    assert entry.n_timesteps is not None
    assert entry.n_timesteps <= max([task.task.budget, *(record["budget"] for record in ran)])


def test_train_uses_the_tuned_entry_unless_told_not_to(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    for extra, expected in ((), (0.1, 32)), (("--no-tuned",), None):
        stem = tmp_path / f"cmaes{len(extra)}"
        arguments = ["train", "cmaes", "Swimmer-v5", "--total-timesteps", "2000", "--workers", "0"]
        status = main([*arguments, "--save", str(stem), "--no-progress-bar", *extra])
        out, err = capsys.readouterr()
        assert status in (0, None), err
        model = CMAES.load(stem.with_suffix(".zip"))
        if expected is None:
            assert (model.sigma0, model.pop_size) != (0.1, 32) and "the algorithm's defaults" in out
        else:
            assert (model.sigma0, model.pop_size) == expected and str(TUNED_FOLDER / "cmaes.yml") in out
