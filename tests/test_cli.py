"""The lit-sb3 command line: train, evaluate and bench, their outputs and every user error path."""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import torch as th
import tqdm
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

import lit_sb3
from lit_sb3 import ARS
from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.cli import main
from lit_sb3.cli.common import POPULATION_N_ENVS
from lit_sb3.cli.hyperparams import load_hyperparams, read_literal
from lit_sb3.cli.recording import EpisodeRecorder, TrainingRecorder
from lit_sb3.cli.train import Training

RL_ZOO_ARS = textwrap.dedent(
    """\
    # Tuned
    CartPole-v1:
      n_envs: 1
      n_timesteps: !!float 5e4
      policy: 'LinearPolicy'
      n_delta: 2

    # Tuned
    Pendulum-v1: &pendulum-params
      n_envs: 1
      n_timesteps: !!float 2e6
      policy: 'MlpPolicy'
      normalize: "dict(norm_obs=True, norm_reward=False)"
      learning_rate: !!float 0.018
      n_delta: 4
      n_top: 1
      delta_std: 0.1
      policy_kwargs: "dict(net_arch=[16])"
      zero_policy: False

    # Tuned
    MountainCarContinuous-v0:
      <<: *pendulum-params
      n_timesteps: !!float 5e5
      delta_std: 0.2

    HalfCheetah-v4:
      n_envs: 1
      policy: 'LinearPolicy'
      n_timesteps: !!float 1.25e7
      learning_rate: !!float 0.02
      delta_std: !!float 0.03
      n_delta: 32
      n_top: 4
      alive_bonus_offset: 0
      normalize: "dict(norm_obs=True, norm_reward=False)"
    """
)


#: rl-zoo's ppo.yml entry for CartPole-v1, on a tiny budget (n_steps, batch_size, n_epochs), with normalisation.
RL_ZOO_PPO = textwrap.dedent(
    """\
    CartPole-v1:
      n_envs: 8
      n_timesteps: !!float 1e5
      policy: 'MlpPolicy'
      n_steps: 32
      batch_size: 64
      gae_lambda: 0.8
      gamma: 0.98
      n_epochs: 1
      ent_coef: 0.0
      learning_rate: lin_0.001
      clip_range: lin_0.2
      normalize: true
    """
)

#: An rl-zoo style SAC entry (rl-zoo's spellings of action noise and of an episodic train_freq), small and fast.
SAC_ENTRY = textwrap.dedent(
    """\
    Pendulum-v1:
      learning_starts: 100
      batch_size: 32
      train_freq: [1, "episode"]
      gradient_steps: 4
      noise_type: 'normal'
      noise_std: 0.1
      policy_kwargs: "dict(net_arch=[16])"
    """
)


def run(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "lit_sb3.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=cwd)


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``lit-sb3 ARGS`` in this process: exit status, standard output and standard error."""
    try:
        main(list(args))
        status = 0
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def evaluate_printed(out: str, episodes: int) -> list[float]:
    """:return: The returns ``lit-sb3 evaluate`` printed, one per episode."""
    return [float(line.split()[1]) for line in out.splitlines()[1 : episodes + 1]]


def evaluated_returns(policy: th.nn.Module, env: VecEnv, episodes: int, seed: int) -> list[float]:
    """:return: The deterministic returns of ``policy`` on ``env`` seeded as ``lit-sb3 evaluate`` seeds it."""
    env.seed(seed)
    returns, _ = evaluate_policy(policy, env, n_eval_episodes=episodes, return_episode_rewards=True)  # type: ignore[arg-type]
    env.close()
    return [round(float(value), 2) for value in returns]  # type: ignore[union-attr]


def read_rounds(path: pathlib.Path) -> list[dict[str, float]]:
    with path.open() as stream:
        return [{key: float(value) for key, value in row.items()} for row in csv.DictReader(stream)]


@pytest.fixture(scope="module")
def cartpole_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """An ARS model trained for two rounds on CartPole-v1 by ``lit-sb3 train``."""
    folder = tmp_path_factory.mktemp("cartpole_model")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SB3_LOGDIR", str(folder / "sb3_logs"))
        main(["train", "ars", "CartPole-v1", "--total-timesteps", "500", "--workers", "0", "--save", str(folder / "m")])
    yield folder / "m.zip"


# ------------------------------------------------------------------------------------------------------ help


@pytest.mark.parametrize("command", [[], ["train"], ["evaluate"], ["bench"]])
def test_help_shows_an_example(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    status, out, _ = call(capsys, *command, "--help")
    assert status == 0
    examples = out[out.index("examples:") :]
    assert f"lit-sb3 {command[0] if command else 'train'} " in examples


# ----------------------------------------------------------------------------------------------------- train


def test_train_writes_model_rounds_and_learning_curve(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    stem = tmp_path / "runs" / "ars"
    status, out, err = call(
        capsys,
        *["train", "ars", "CartPole-v1", "--total-timesteps", "3000", "--workers", "0", "--seed", "3"],
        *["--save", str(stem), "--tensorboard-log", str(tmp_path / "tb")],
    )
    assert status == 0, err
    model = ARS.load(stem.with_suffix(".zip"))
    rounds = read_rounds(stem.with_suffix(".csv"))
    assert len(rounds) >= 2 and [row["round"] for row in rounds] == list(range(1, len(rounds) + 1))
    steps = [row["env_steps"] for row in rounds]
    assert steps == sorted(steps) and steps[0] > 0 and steps[-1] == model.num_timesteps >= 3000
    for row in rounds:
        assert row["candidates"] == row["episodes"] == 2 * model.n_delta
        assert 8 <= row["worst_return"] <= row["mean_return"] <= row["best_return"] <= 500
        assert row["mean_episode_length"] == row["mean_return"]  # CartPole pays 1 a step
    import matplotlib.image

    image = matplotlib.image.imread(stem.with_suffix(".png"))
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300 and image.std() > 0
    assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    assert "CartPole-v1" in out and f"{model.num_timesteps:,}" in out and str(stem.with_suffix(".png")) in out


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_train_shows_a_live_progress_bar(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    # A bar redraws at most every 0.1 s: drawing every update makes what is drawn independent of the speed.
    monkeypatch.setattr(tqdm, "tqdm", functools.partial(tqdm.tqdm, mininterval=0))
    arguments = ["train", "es", "CartPole-v1", "--total-timesteps", "2000", "--seed", "0", "--workers", "0"]
    main([*arguments, "--save", str(tmp_path / "m")])
    updates = terminal.getvalue().split("\r")
    rounds = read_rounds(tmp_path / "m.csv")
    assert len(rounds) >= 2 and len(updates) >= len(rounds) + 1  # the empty bar, then one redraw per round
    last = updates[-1]
    steps = f"{rounds[-1]['env_steps'] / 1000:.2f}k"
    assert "100%|" in last and f"{steps}/{steps} env steps" in last, last
    assert re.search(r"[\d.]+k? steps/s", last), last
    assert re.search(r"best \d+\.\d, mean \d+\.\d", last), last
    assert f"best {rounds[-1]['best_return']:.1f}, mean {rounds[-1]['mean_return']:.1f}" in last


def test_train_without_matplotlib_keeps_model_and_rounds(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    status, out, err = call(capsys, *TRAIN, "--save", str(tmp_path / "m"))
    assert status == 0
    assert err == (
        "lit-sb3 train: no learning curve drawn: the learning curve needs matplotlib, which is not installed: "
        'pip install "lit_sb3[plot]"\n'
    )
    assert (tmp_path / "m.zip").is_file() and read_rounds(tmp_path / "m.csv")
    assert not (tmp_path / "m.png").exists() and "learning curve" not in out


def test_interrupted_training_is_saved(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_round = TrainingRecorder._on_rollout_end

    def interrupt_in_round_three(self: TrainingRecorder) -> None:
        record_round(self)
        if len(self.rounds) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(TrainingRecorder, "_on_rollout_end", interrupt_in_round_three)
    status, out, err = call(
        capsys,
        "train",
        "ars",
        "CartPole-v1",
        "--workers",
        "2",
        "--total-timesteps",
        "10000000",
        "--save",
        str(tmp_path / "m"),
    )
    rounds = read_rounds(tmp_path / "m.csv")
    assert status == 130 and len(rounds) == 3
    steps = int(rounds[-1]["env_steps"])
    assert err == f"lit-sb3 train: interrupted after {steps} env steps; saving\n"
    assert ARS.load(tmp_path / "m.zip").num_timesteps == steps
    assert "ARS (interrupted)" in out and (tmp_path / "m.png").is_file()


def test_save_refuses_a_folder_where_an_output_would_go(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    (tmp_path / "m.csv").mkdir()
    status, _, err = call(capsys, *TRAIN, "--save", str(tmp_path / "m"))
    assert (
        status == 1
        and err == f"lit-sb3 train: error: --save: '{tmp_path / 'm.csv'}' is a folder, where the csv file would go\n"
    )
    assert not (tmp_path / "m.zip").exists()


@pytest.mark.parametrize("presses", [1, 2], ids=["once-waits-and-saves", "twice-quits-unsaved"])
def test_ctrl_c_while_the_run_closes_waits_for_the_outputs_and_again_quits(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, presses: int
) -> None:
    close = Training.close

    def close_under_ctrl_c(self: Training) -> None:
        for _ in range(presses):
            os.kill(os.getpid(), signal.SIGINT)
        close(self)

    monkeypatch.setattr(Training, "close", close_under_ctrl_c)
    # Python's own handler, as in a terminal (a shell's background jobs, as CI's, ignore SIGINT, and so does the run).
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status, _, err = call(capsys, *TRAIN, "--save", str(tmp_path / "m"))
        handler_after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, outside)
    held = "lit-sb3 train: closing and saving first; Ctrl-C again quits without saving\n"
    assert status == 130
    if presses == 1:
        assert err == held
        assert ARS.load(tmp_path / "m.zip").num_timesteps >= 100 and read_rounds(tmp_path / "m.csv")
    else:
        assert err == held + "lit-sb3 train: interrupted\n"
        assert not (tmp_path / "m.zip").exists()
    assert handler_after is signal.default_int_handler


def test_train_results_do_not_depend_on_the_workers_or_sub_environments(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    runs = {
        "in_process": ["--workers", "0"],
        "default": ["--workers", "2"],
        "one_env": ["--workers", "2", "--n-envs", "1"],
    }
    outputs = {}
    for name, options in runs.items():
        status, outputs[name], err = call(
            capsys,
            *["train", "cem", "CartPole-v1", "--total-timesteps", "1500", "--seed", "1", "--n-eval-episodes", "2"],
            *options,
            *["--save", str(tmp_path / name)],
        )
        assert status == 0, err
    assert f"this process, {POPULATION_N_ENVS} sub-environments" in outputs["in_process"]
    assert f"2 local worker processes, {POPULATION_N_ENVS} sub-environments each" in outputs["default"]
    assert "2 local worker processes, 1 sub-environment each" in outputs["one_env"]
    columns = ["env_steps", "mean_return", "best_return", "worst_return", "mean_episode_length", "episodes"]
    rounds = {name: [[row[key] for key in columns] for row in read_rounds(tmp_path / f"{name}.csv")] for name in runs}
    assert rounds["in_process"] == rounds["default"] == rounds["one_env"]
    first_round = read_rounds(tmp_path / "default.csv")[0]
    assert first_round["episodes"] == 2 * first_round["candidates"]
    first, *others = (lit_sb3.CEM.load(tmp_path / f"{name}.zip").policy.parameters_to_vector() for name in runs)
    for other in others:
        np.testing.assert_array_equal(first, other)


PGPE_ENTRY = textwrap.dedent(
    """\
    CartPole-v1:
      policy: 'LinearPolicy'
      popsize: 8
      center_learning_rate: 0.05
      stdev_init: 0.2
      optimizer: clipup
      optimizer_config: "dict(max_speed=0.1, momentum=0.8)"
      num_interactions: 600
      popsize_max: 32
    """
)


@pytest.mark.parametrize("algo", ["pgpe", "snes", "xnes"])
def test_train_the_gaussian_searches_from_evotorch_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, algo: str
) -> None:
    (tmp_path / "entry.yml").write_text(PGPE_ENTRY if algo == "pgpe" else "popsize: 6\nnum_interactions: 300\n")
    for workers in ("0", "2"):
        status, _, err = call(
            capsys,
            *["train", algo, "CartPole-v1", "--hyperparams", str(tmp_path / "entry.yml"), "--total-timesteps", "1500"],
            *["--workers", workers, "--save", str(tmp_path / workers)],
        )
        assert status == 0, err
    in_process, on_workers = read_rounds(tmp_path / "0.csv"), read_rounds(tmp_path / "2.csv")
    for row in in_process + on_workers:
        del row["wall_time_s"]
    assert in_process == on_workers
    batch = 8 if algo == "pgpe" else 6
    assert all(row["candidates"] % batch == 0 for row in in_process)
    assert max(row["candidates"] for row in in_process) > batch  # the budget grew some rounds
    model = getattr(lit_sb3, algo.upper()).load(tmp_path / "0.zip")
    assert (model.pop_size, model.num_interactions) == ((8, 600) if algo == "pgpe" else (6, 300))
    if algo == "pgpe":
        assert model.optimizer_kwargs == {"max_speed": 0.1, "momentum": 0.8}


def test_train_takes_an_rl_zoo_entry(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    (tmp_path / "ars.yml").write_text(RL_ZOO_ARS)
    status, _, err = call(
        capsys,
        *["train", "ars", "Pendulum-v1", "--hyperparams", str(tmp_path / "ars.yml"), "--total-timesteps", "1000"],
        *["--workers", "2", "--save", str(tmp_path / "pendulum")],
    )
    assert status == 0, err
    env = VecNormalize(make_vec_env("Pendulum-v1"), norm_reward=False)
    model = ARS.load(tmp_path / "pendulum.zip", env=env)
    assert (model.n_delta, model.n_top, model.delta_std, model.learning_rate) == (4, 1, 0.1, 0.018)
    assert model.policy_kwargs == {"net_arch": [16]} and type(model.policy).__name__ == "MlpPolicy"
    assert model.num_timesteps == 1600  # one round (the budget overrides the file): 8 candidates x 200 steps
    assert env.obs_rms.count > 1600  # the observation statistics were saved with the model and restored
    env.close()


def test_rl_zoo_entries_are_read_unchanged(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ars.yml").write_text(RL_ZOO_ARS)
    cheetah = load_hyperparams(tmp_path / "ars.yml", "HalfCheetah-v4", ARS)
    assert cheetah.algo_kwargs == {
        "learning_rate": 0.02,
        "delta_std": 0.03,
        "n_delta": 32,
        "n_top": 4,
        "alive_bonus_offset": 0,
    }
    assert (cheetah.policy, cheetah.n_timesteps, cheetah.n_envs) == ("LinearPolicy", 12_500_000, 1)
    assert cheetah.normalize_kwargs == {"norm_obs": True, "norm_reward": False}
    merged = load_hyperparams(tmp_path / "ars.yml", "MountainCarContinuous-v0", ARS)
    assert merged.algo_kwargs["delta_std"] == 0.2 and merged.algo_kwargs["n_delta"] == 4
    assert merged.n_timesteps == 500_000 and merged.algo_kwargs["policy_kwargs"] == {"net_arch": [16]}
    (tmp_path / "entry.yml").write_text("n_delta: 3\nnormalize: true\nlearning_rate: lin_0.5\n")
    entry = load_hyperparams(tmp_path / "entry.yml", "CartPole-v1", ARS)
    assert entry.normalize_kwargs == {"norm_obs": True, "norm_reward": False}
    assert entry.algo_kwargs["learning_rate"](1.0) == 0.5 and entry.algo_kwargs["learning_rate"](0.5) == 0.25


def test_read_literal_reads_rl_zoo_values_and_runs_nothing() -> None:
    assert read_literal("dict(net_arch=[64, 64], activation_fn=nn.Tanh, bias=-1.5)") == {
        "net_arch": [64, 64],
        "activation_fn": th.nn.Tanh,
        "bias": -1.5,
    }
    assert read_literal("th.optim.SGD") is th.optim.SGD
    assert read_literal("{'a': (1, 2)}") == {"a": (1, 2)}
    for text in ["__import__('os').system('true')", "nn.Module.__subclasses__", "os.path", "dict(**x)", "[1, 2"]:
        with pytest.raises((ValueError, SyntaxError)):
            read_literal(text)


@pytest.mark.slow
def test_train_runs_rl_zoo_halfcheetah_entry(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ars.yml").write_text(RL_ZOO_ARS)
    result = run(
        *["train", "ars", "HalfCheetah-v4", "--hyperparams", "ars.yml", "--total-timesteps", "1", "--workers", "2"],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    rounds = read_rounds(tmp_path / "runs" / "ars_HalfCheetah-v4.csv")
    assert len(rounds) == 1 and rounds[0]["env_steps"] == 64_000 and rounds[0]["candidates"] == 64


def test_train_ppo_with_async_collection(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    (tmp_path / "ppo.yml").write_text(RL_ZOO_PPO)
    stem = tmp_path / "ppo"
    status, out, err = call(
        capsys,
        *["train", "ppo", "CartPole-v1", "--hyperparams", str(tmp_path / "ppo.yml"), "--n-envs", "2"],
        *["--workers", "2", "--total-timesteps", "200", "--save", str(stem)],
    )
    assert status == 0, err
    model = PPO.load(stem.with_suffix(".zip"))  # the plain class reads what the injected one saved
    assert type(get_injected_agent(PPO).load(stem.with_suffix(".zip"))).__name__ == "PPO"
    assert (model.n_envs, model.n_steps, model.n_epochs, model.gamma) == (2, 32, 1, 0.98)
    assert model.learning_rate(1.0) == 0.001 and model.clip_range(0.5) == 0.1  # rl-zoo's lin_ schedules
    assert model.use_mp and model.n_workers == 2
    episodes = read_rounds(stem.with_suffix(".csv"))
    assert [row["episode"] for row in episodes] == list(range(1, len(episodes) + 1))
    steps = [row["env_steps"] for row in episodes]
    assert model.num_timesteps == 256  # learn(200): four rollouts of n_steps * n_envs = 64 steps, as in SB3
    assert steps == sorted(steps) and steps[-1] <= model.num_timesteps
    assert all(row["episode_return"] == row["episode_length"] for row in episodes)  # raw rewards: 1 a step
    assert sum(row["episode_length"] for row in episodes) <= model.num_timesteps  # the last rollout cut an episode
    import matplotlib.image

    image = matplotlib.image.imread(stem.with_suffix(".png"))
    assert image.ndim == 3 and image.shape[0] > 200 and image.std() > 0
    assert "PPO (async collection)" in out and "2 worker processes" in out and f"{model.num_timesteps:,}" in out
    mean = np.mean([row["episode_return"] for row in episodes])
    assert f"mean return, last {len(episodes)} episodes  {mean:.2f}" in out

    # The normalisation statistics are saved beside the model, and evaluate uses them.
    statistics = stem.with_name("ppo.vecnormalize.pkl")
    normalized = VecNormalize.load(str(statistics), make_vec_env("CartPole-v1"))
    assert normalized.norm_reward and model.num_timesteps <= normalized.obs_rms.count
    status, out, err = call(capsys, "evaluate", str(stem.with_suffix(".zip")), "CartPole-v1", "--episodes", "2")
    assert status == 0, err
    normalized.training, normalized.norm_reward = False, False
    assert evaluate_printed(out, 2) == evaluated_returns(model.policy, normalized, 2, seed=0)
    # Statistics of other observations beside the model are named in one line.
    VecNormalize(make_vec_env("Pendulum-v1")).save(str(statistics))
    status, _, err = call(capsys, "evaluate", str(stem.with_suffix(".zip")), "CartPole-v1")
    assert status == 1 and err.count("\n") == 1, err
    assert f"{statistics} holds the statistics of other observations (spaces must have the same shape" in err


def test_train_sac_on_a_worker_thread(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sac.yml").write_text(SAC_ENTRY)
    stem = tmp_path / "sac"
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    status, out, err = call(
        capsys,
        *["train", "sac", "Pendulum-v1", "--hyperparams", str(tmp_path / "sac.yml"), "--workers", "0"],
        *["--total-timesteps", "400", "--seed", "2", "--save", str(stem), "--tensorboard-log", str(tmp_path / "tb")],
    )
    assert status == 0, err
    model = SAC.load(stem.with_suffix(".zip"))
    assert not model.use_mp and model.n_workers == 1 and model.num_timesteps == 400
    assert model.train_freq == TrainFreq(1, TrainFrequencyUnit.EPISODE) and model.gradient_steps == 4
    assert isinstance(model.action_noise, NormalActionNoise) and model.policy_kwargs["net_arch"] == [16]
    episodes = read_rounds(stem.with_suffix(".csv"))
    assert [row["env_steps"] for row in episodes] == [200, 400]  # Pendulum's episodes end at 200 steps
    assert all(row["episode_length"] == 200 and -16.3 * 200 <= row["episode_return"] <= 0 for row in episodes)
    assert "one worker thread of this process" in out and not stem.with_name("sac.vecnormalize.pkl").exists()
    bar = terminal.getvalue().split("\r")[-1]
    mean = np.mean([row["episode_return"] for row in episodes])
    assert "100%|" in bar and "400/400 env steps" in bar and re.search(r"[\d.]+[kM]? steps/s", bar), bar
    assert f"mean return {mean:.1f} (2 episodes)" in bar, bar
    monkeypatch.undo()
    assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    status, out, err = call(capsys, "evaluate", str(stem), "Pendulum-v1", "--episodes", "1", "--seed", "3")
    assert status == 0, err
    assert evaluate_printed(out, 1) == evaluated_returns(model.policy, make_vec_env("Pendulum-v1"), 1, seed=3)


def test_interrupted_gradient_training_stops_its_workers_and_is_saved(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_rollout = EpisodeRecorder._on_rollout_end
    rollouts = []
    threads = set(threading.enumerate())

    def interrupt_in_rollout_two(self: EpisodeRecorder) -> None:
        record_rollout(self)
        rollouts.append(self.model)
        if len(rollouts) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(EpisodeRecorder, "_on_rollout_end", interrupt_in_rollout_two)
    (tmp_path / "ppo.yml").write_text("n_steps: 32\nbatch_size: 32\nn_epochs: 1\n")
    status, out, err = call(
        capsys,
        *["train", "ppo", "CartPole-v1", "--hyperparams", str(tmp_path / "ppo.yml"), "--workers", "0"],
        *["--total-timesteps", "100000", "--save", str(tmp_path / "m"), "--no-progress-bar"],
    )
    episodes = read_rounds(tmp_path / "m.csv")
    assert status == 130 and err == "lit-sb3 train: interrupted after 64 env steps; saving\n"  # two rollouts
    assert PPO.load(tmp_path / "m.zip").num_timesteps == 64 >= int(episodes[-1]["env_steps"])
    assert set(threading.enumerate()) <= threads  # shut down: the worker thread (and its helpers) are gone
    assert "PPO (async collection) (interrupted)" in out and (tmp_path / "m.png").is_file()


def test_rl_zoo_entries_for_gradient_agents(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ppo.yml").write_text(RL_ZOO_PPO)
    ppo = load_hyperparams(tmp_path / "ppo.yml", "CartPole-v1", get_injected_agent(PPO), reward_normalization=True)
    assert (ppo.n_envs, ppo.n_timesteps, ppo.policy) == (8, 100_000, "MlpPolicy")
    # rl-zoo's normalize: true, its rewards discounted with the algorithm's gamma
    assert ppo.normalize_kwargs == {"norm_obs": True, "norm_reward": True, "gamma": 0.98}
    assert ppo.algo_kwargs["clip_range"](1.0) == 0.2 and ppo.algo_kwargs["learning_rate"](0.0) == 0.0
    settings = '  normalize: "dict(norm_obs=True)"\n  max_policy_lag: 2\n'
    settings += '  replay_buffer_kwargs: "dict(handle_timeout_termination=False)"\n'
    (tmp_path / "sac.yml").write_text(SAC_ENTRY + settings)
    sac = load_hyperparams(tmp_path / "sac.yml", "Pendulum-v1", get_injected_agent(SAC), reward_normalization=True)
    assert sac.action_noise == ("normal", 0.1) and sac.algo_kwargs["train_freq"] == (1, "episode")
    assert sac.algo_kwargs["max_policy_lag"] == 2  # the async keywords are hyper-parameters too
    assert sac.algo_kwargs["replay_buffer_kwargs"] == {"handle_timeout_termination": False}
    assert sac.normalize_kwargs == {"norm_obs": True, "norm_reward": True}


# -------------------------------------------------------------------------------------------------- evaluate


def test_evaluate_prints_the_returns_of_a_saved_model(
    capsys: pytest.CaptureFixture[str], cartpole_model: pathlib.Path
) -> None:
    status, out, err = call(capsys, "evaluate", str(cartpole_model), "CartPole-v1", "--episodes", "3")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["episode", "return", "length"]
    rows = [line.split() for line in lines[1:4]]
    assert [row[0] for row in rows] == ["0", "1", "2"]
    assert all(float(row[1]) == float(row[2]) and 8 <= float(row[2]) <= 500 for row in rows)
    mean = np.mean([float(row[1]) for row in rows])
    assert f"mean return {mean:.2f}" in out
    # Without ".zip", the suffix is appended as Stable-Baselines3's load appends it: m.v2 is m.v2.zip, not m.zip.
    shutil.copy(cartpole_model, cartpole_model.with_name("m.v2.zip"))
    status, out, err = call(capsys, "evaluate", str(cartpole_model.with_name("m.v2")), "CartPole-v1", "--episodes", "1")
    assert status == 0, err
    assert f"{cartpole_model.with_name('m.v2.zip')} on CartPole-v1" in out


def test_evaluate_normalises_with_the_saved_statistics(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    stem = tmp_path / "pendulum"
    status, _, err = call(
        capsys,
        *["train", "ars", "Pendulum-v1", "--normalize", "--total-timesteps", "6000", "--workers", "0"],
        *["--save", str(stem), "--policy", "MlpPolicy"],
    )
    assert status == 0, err
    status, out, err = call(capsys, "evaluate", str(stem) + ".zip", "Pendulum-v1", "--episodes", "2", "--seed", "5")
    assert status == 0, err
    printed = [float(line.split()[1]) for line in out.splitlines()[1:3]]

    def returns(normalised: bool) -> list[float]:
        env = make_vec_env("Pendulum-v1")
        if normalised:
            env = VecNormalize(env, training=False, norm_reward=False)
        model = ARS.load(stem.with_suffix(".zip"), env=env)
        env.seed(5)
        episode_returns, _ = evaluate_policy(model.policy, env, n_eval_episodes=2, return_episode_rewards=True)
        env.close()
        return [round(float(value), 2) for value in episode_returns]  # type: ignore[union-attr]

    assert printed == returns(normalised=True) != returns(normalised=False)


def test_evaluate_records_videos(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, cartpole_model: pathlib.Path
) -> None:
    videos = tmp_path / "videos"
    status, _, err = call(
        capsys, "evaluate", str(cartpole_model), "CartPole-v1", "--episodes", "2", "--render-video", str(videos)
    )
    assert status == 0, err
    files = sorted(videos.glob("*.mp4"))
    assert [path.name for path in files] == ["CartPole-v1-episode-0.mp4", "CartPole-v1-episode-1.mp4"]
    assert all(path.stat().st_size > 1000 for path in files)


def test_evaluate_keeps_the_random_population(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = call(
        capsys, "evaluate", "--random-population", "CartPole-v1", "--pop-size", "6", "--episodes", "2", "--top", "4"
    )
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["candidate", "mean", "return", "std", "mean", "length"]
    rows = [line.split() for line in lines[1:5]]
    returns = [float(row[1]) for row in rows]
    assert returns == sorted(returns, reverse=True) and all(1 <= value <= 500 for value in returns)
    assert "6 candidates x 2 episodes of CartPole-v1" in out
    assert f"on 2 workers of {POPULATION_N_ENVS} sub-environments" in out


# ----------------------------------------------------------------------------------------------------- bench


@pytest.mark.slow
def test_bench_prints_the_quick_table() -> None:
    result = run("bench", "--rounds", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("| case | ours steps/s | sb3-contrib steps/s") for line in lines)
    rows = [line for line in lines if line.startswith("| Pendulum-v1, n_envs=1, LinearPolicy")]
    assert len(rows) == 1 and float(rows[0].split("|")[2].replace(",", "")) > 0


@pytest.mark.slow
def test_bench_runs_from_a_wheel_in_a_fresh_venv(tmp_path: pathlib.Path) -> None:
    """``pip install "lit_sb3[bench]"`` from a wheel of the repository (no source checkout) gives a working bench."""
    root = pathlib.Path(__file__).resolve().parent.parent
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python, pip = venv / "bin" / "python", [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "torch==2.13.0"], check=True, env=env)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [str(python), "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(root)], check=True, env=env
    )
    [wheel] = wheels.glob("lit_sb3-*.whl")
    subprocess.run([*pip, f"{wheel}[bench]"], check=True, env=env)
    where = subprocess.run(
        [str(python), "-c", "import lit_sb3; print(lit_sb3.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in where and str(root) not in where
    result = subprocess.run(
        [str(venv / "bin" / "lit-sb3"), "bench", "--rounds", "1", "--results", "results"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("| case | ours steps/s | sb3-contrib steps/s") for line in result.stdout.splitlines())
    saved = json.loads((tmp_path / "results" / "asynceval_vs_sb3contrib.json").read_text())
    assert saved["command"] == "lit-sb3 bench --rounds 1 --results results"
    assert all(row["ours"] > 0 and row["sb3_contrib"] > 0 for row in saved["tables"]["throughput"]["rows"])


@pytest.mark.slow
def test_readme_quick_start_runs_in_a_fresh_venv(tmp_path: pathlib.Path) -> None:
    """The README's first command, as written, in a fresh venv and a copy of the repository."""
    root = pathlib.Path(__file__).resolve().parent.parent
    [command] = re.findall(
        r"^pip install torch==2\.13\.0 -e \"\.\[plot\]\" && lit-sb3 train .*$", (root / "README.md").read_text(), re.M
    )
    source = tmp_path / "lit_sb3"
    shutil.copytree(root, source, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "runs", "site"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env |= {"VIRTUAL_ENV": str(venv), "PATH": os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])}
    result = subprocess.run(
        ["bash", "-c", command], cwd=source, env=env, capture_output=True, text=True, timeout=1500, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    with (source / "runs" / "ars_cartpole.csv").open() as stream:
        rounds = list(csv.DictReader(stream))
    assert int(rounds[-1]["env_steps"]) >= 200_000
    assert all(1 <= float(row["mean_return"]) <= 500 for row in rounds)
    assert (source / "runs" / "ars_cartpole.zip").is_file() and (
        source / "runs" / "ars_cartpole.png"
    ).stat().st_size > 0


# ------------------------------------------------------------------------------------------------ user errors

BAD_FILES = {
    "bad.yml": "CartPole-v1:\n  n_delta: [1, 2\n",
    "unknown.yml": "CartPole-v1:\n  n_deltas: 4\n",
    "other_env.yml": "Pendulum-v1:\n  n_delta: 4\n",
    "wrapper.yml": "CartPole-v1:\n  env_wrapper: gymnasium.wrappers.TimeAwareObservation\n",
    "values.yml": "n_delta: 2\nn_top: 4\n",
    "unreadable.yml": 'policy_kwargs: "dict(net_arch=[16]"\n',
    "code.yml": "policy_kwargs: \"__import__('os').system('touch hacked')\"\n",
    "list.yml": "- n_delta\n",
    "ppo_unknown.yml": "n_steps: 8\nn_stepz: 8\n",
    "ppo_workers.yml": "n_steps: 8\nn_workers: 8\n",
    "ppo_buffer.yml": "max_episodes_in_buffer: 0\n",
    "td3_noise.yml": "noise_type: pink\nnoise_std: 0.1\n",
    "not_a_model.zip": "plain text",
    "typed.yml": "n_delta: '4'\n",
    "es_kwargs.yml": 'optimizer_kwargs: "dict(max_speed=0.1)"\n',
    "clip.yml": 'normalize: "dict(clip_obs=-1.0)"\n',
    "epsilon.yml": "normalize: {epsilon: .nan}\n",
    "norm_obs.yml": "normalize: {norm_obs: 'yes'}\n",
    "kwargs_alone.yml": 'normalize_kwargs: "dict(clip_obs=1.0)"\n',
    "negative_layer.yml": 'policy: MlpPolicy\npolicy_kwargs: "dict(net_arch=[-3])"\n',
}

TRAIN = ["train", "ars", "CartPole-v1", "--workers", "0", "--total-timesteps", "100"]
USER_ERRORS = [
    (
        ["train", "ppo2", "CartPole-v1"],
        "unknown algorithm 'ppo2' (choose from ars, cem, cmaes, es, pgpe, snes, xnes, or the gradient agents a2c, "
        "ddpg, dqn, ppo, qrdqn, sac, td3, tqc, trpo)",
    ),
    (["train", "ars", "NoSuchEnv-v0"], "unknown environment id 'NoSuchEnv-v0'"),
    (["train", "ars", "CartPole-v9"], "unknown environment id 'CartPole-v9'"),
    (["train", "ars", "no_such_module:Env-v0"], "needs the module 'no_such_module'"),
    ([*TRAIN, "--hyperparams", "missing.yml"], "hyper-parameter file 'missing.yml' does not exist"),
    ([*TRAIN, "--hyperparams", "bad.yml"], "bad YAML in bad.yml"),
    ([*TRAIN, "--hyperparams", "unknown.yml"], "unknown hyper-parameter 'n_deltas' for ARS (known: alive_bonus_off"),
    ([*TRAIN, "--hyperparams", "other_env.yml"], "other_env.yml has no entry for CartPole-v1 (it has Pendulum-v1)"),
    ([*TRAIN, "--hyperparams", "wrapper.yml"], "'env_wrapper' (an rl-zoo setting) is not supported"),
    ([*TRAIN, "--hyperparams", "values.yml"], "bad hyper-parameters for ARS: n_top=4 is larger than n_delta=2"),
    ([*TRAIN, "--hyperparams", "unreadable.yml"], "policy_kwargs: cannot read"),
    ([*TRAIN, "--hyperparams", "code.yml"], "policy_kwargs: cannot read"),
    ([*TRAIN, "--hyperparams", "list.yml"], "list.yml must hold a mapping"),
    ([*TRAIN, "--workers", "-1"], "--workers must be 0 (this process) or more"),
    ([*TRAIN, "--hyperparams", "clip.yml"], "clip.yml: normalize: clip_obs must be a positive number, got -1.0"),
    ([*TRAIN, "--hyperparams", "epsilon.yml"], "epsilon.yml: normalize: epsilon must be a positive number, got nan"),
    ([*TRAIN, "--hyperparams", "norm_obs.yml"], "norm_obs.yml: normalize: norm_obs must be true or false, got 'yes'"),
    ([*TRAIN, "--hyperparams", "kwargs_alone.yml"], "normalize_kwargs is given but normalize is not: add normalize"),
    ([*TRAIN, "--hyperparams", "negative_layer.yml"], "bad hyper-parameters for ARS: Trying to create tensor with"),
    (
        ["train", "ppo", "CartPole-v1", "--policy", "LinearPolicy"],
        "--policy must be MlpPolicy or CnnPolicy or MultiInputPolicy for PPO, got 'LinearPolicy'",
    ),
    # A value of the wrong type is named alone (the known hyper-parameters are listed for an unknown one).
    (
        [*TRAIN, "--hyperparams", "typed.yml"],
        "bad hyper-parameters for ARS: n_delta must be an int, got <class 'str'>\n",
    ),
    # A keyword of the optimiser's is named by its own error, and not listed among the algorithm's.
    (
        ["train", "es", "CartPole-v1", "--workers", "0", "--hyperparams", "es_kwargs.yml"],
        "max_speed=0.1): Adam.__init__() got an unexpected keyword argument 'max_speed'\n",
    ),
    ([*TRAIN, "--save", "bad.yml/model"], "--save: the outputs cannot go to 'bad.yml': 'bad.yml' is not a folder"),
    ([*TRAIN, "--save", "."], "--save takes the outputs' path without suffix (PATH of PATH.zip), not a folder: '.'"),
    (
        [*TRAIN, "--save", "out/"],
        "--save takes the outputs' path without suffix (PATH of PATH.zip), not a folder: 'out/'",
    ),
    (
        [*TRAIN, "--tensorboard-log", "bad.yml/tb"],
        "--tensorboard-log: the outputs cannot go to 'bad.yml/tb': 'bad.yml' is not a folder",
    ),
    (["bench", "--results", "bad.yml/results"], "--results: the outputs cannot go to 'bad.yml/results': 'bad.yml' is"),
    # A folder that cannot be created, whoever runs the tests (root may write to any folder os.access looks at).
    ([*TRAIN, "--save", "/proc/lit_sb3_runs/model"], "--save: the outputs cannot go to '/proc/lit_sb3_runs': [Errno"),
    ([*TRAIN, "--total-timesteps", "0"], "--total-timesteps must be at least 1"),
    ([*TRAIN, "--policy", "CnnPolicy"], "--policy must be LinearPolicy or MlpPolicy for ARS, got 'CnnPolicy'"),
    (["train", "sac", "CartPole-v1", "--workers", "0"], "SAC cannot train on CartPole-v1: The algorithm only"),
    (["train", "dqn", "Pendulum-v1", "--workers", "0"], "DQN cannot train on Pendulum-v1: The algorithm only"),
    (["train", "ppo", "CartPole-v1", "--n-eval-episodes", "2"], "--n-eval-episodes is for the population methods"),
    (["train", "ppo", "CartPole-v1", "--hyperparams", "ppo_unknown.yml"], "unknown hyper-parameter 'n_stepz' for"),
    (["train", "ppo", "CartPole-v1", "--hyperparams", "ppo_workers.yml"], "unknown hyper-parameter 'n_workers'"),
    (
        ["train", "ppo", "CartPole-v1", "--hyperparams", "ppo_buffer.yml"],
        "bad hyper-parameters for PPO: max_episodes_in_buffer",
    ),
    (
        ["train", "td3", "Pendulum-v1", "--hyperparams", "td3_noise.yml"],
        "noise_type must be one of normal, ornstein-uhlenbeck, got 'pink'",
    ),
    (["evaluate", "missing.zip", "CartPole-v1"], "model file 'missing.zip' does not exist"),
    (["evaluate", ".", "CartPole-v1"], "model file '.' is a folder"),
    (["evaluate", "not_a_model.zip", "CartPole-v1"], "not_a_model.zip is not a saved model"),
    (["evaluate", "not_a_model.zip"], "give the saved model and the environment"),
    (["evaluate", "not_a_model.zip", "NoSuchEnv-v0"], "unknown environment id 'NoSuchEnv-v0'"),
    (["evaluate", "not_a_model.zip", "CartPole-v1", "--pop-size", "3"], "--pop-size is for --random-population"),
    (["evaluate", "--random-population", "--pop-size", "0"], "--pop-size must be at least 1"),
    (["evaluate", "--random-population", "--sigma", "-1"], "--sigma must be a finite number of at least 0, got -1.0"),
    (["evaluate", "--random-population", "CartPole-v1", "Pendulum-v1"], "takes one ENV_ID and no model path"),
    (["bench", "--rounds", "0"], "--rounds must be at least 1"),
]


@pytest.mark.parametrize(("argv", "message"), USER_ERRORS, ids=[" ".join(argv) for argv, _ in USER_ERRORS])
def test_user_errors_are_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in BAD_FILES.items():
        (tmp_path / name).write_text(text)
    status, _, err = call(capsys, *argv)
    assert status == 1
    assert err.count("\n") == 1 and err.startswith(f"lit-sb3 {argv[0]}: error: "), err
    assert message in err
    assert not (tmp_path / "hacked").exists() and not (tmp_path / "runs").exists()


def expect_one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    status, _, err = call(capsys, *argv)
    assert status == 1 and err.count("\n") == 1 and message in err, err


def test_model_for_other_spaces_is_refused(capsys: pytest.CaptureFixture[str], cartpole_model: pathlib.Path) -> None:
    expect_one_line_error(
        capsys,
        ["evaluate", str(cartpole_model), "Pendulum-v1"],
        f"{cartpole_model} was trained for observation space Box(",
    )
    expect_one_line_error(
        capsys, ["evaluate", str(cartpole_model), "Acrobot-v1"], "was trained for observation space Box("
    )


@pytest.mark.filterwarnings("ignore:.*render_mode='rgb_array' that is not in the possible render_modes")
def test_video_needs_a_rendering_env_and_moviepy(
    capsys: pytest.CaptureFixture[str],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    cartpole_model: pathlib.Path,
) -> None:
    (tmp_path / "blind_envs.py").write_text(
        textwrap.dedent(
            """\
            import gymnasium as gym
            from gymnasium.envs.classic_control.cartpole import CartPoleEnv

            class BlindCartPole(CartPoleEnv):
                metadata = {"render_modes": [], "render_fps": 50}

            if "BlindCartPole-v0" not in gym.registry:
                gym.register("BlindCartPole-v0", entry_point=BlindCartPole, max_episode_steps=500)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    videos = str(tmp_path / "videos")
    expect_one_line_error(
        capsys,
        ["evaluate", str(cartpole_model), "blind_envs:BlindCartPole-v0", "--render-video", videos],
        "blind_envs:BlindCartPole-v0 does not render frames",
    )
    status, _, err = call(capsys, "evaluate", str(cartpole_model), "blind_envs:BlindCartPole-v0", "--episodes", "1")
    assert status == 0, err  # the env is fine without video
    monkeypatch.setitem(sys.modules, "moviepy", None)
    expect_one_line_error(
        capsys,
        ["evaluate", str(cartpole_model), "CartPole-v1", "--render-video", videos],
        '--render-video needs moviepy, which is not installed: pip install "lit_sb3[video]"',
    )
    assert not pathlib.Path(videos).exists()


def test_missing_optional_packages_are_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    expect_one_line_error(
        capsys, [*TRAIN, "--tensorboard-log", "tb"], "--tensorboard-log needs tensorboard, which is not installed"
    )
    monkeypatch.setitem(sys.modules, "sb3_contrib", None)
    expect_one_line_error(capsys, ["bench"], "lit-sb3 bench needs sb3_contrib, which is not installed")
    expect_one_line_error(
        capsys,
        ["train", "tqc", "Pendulum-v1"],
        "TQC needs sb3_contrib, which is not installed: pip install sb3-contrib",
    )


def test_errors_reach_the_terminal_as_one_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bad.yml").write_text(BAD_FILES["bad.yml"])
    result = run("train", "ars", "CartPole-v1", "--hyperparams", "bad.yml", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("lit-sb3 train: error: bad YAML in bad.yml") and result.stderr.count("\n") == 1


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = call(capsys, "train", "--workers", "two")
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("lit-sb3 train: error: argument --workers: invalid int value: 'two'")
    assert err.endswith("(see lit-sb3 train --help)\n")
    for command in (["train", "ars", "CartPole-v1"], ["evaluate", "model.zip", "CartPole-v1"]):
        status, _, err = call(capsys, *command, "--seed", "-1")
        assert status == 2 and err.count("\n") == 1
        assert err.startswith(f"lit-sb3 {command[0]}: error: argument --seed: must be in [0, 2**32 - 1], got -1")
    status, _, err = call(capsys, "fly")
    assert status == 2 and err.count("\n") == 1 and "invalid choice: 'fly'" in err
